// Tools: every tool agents can call, with its schema; Try calls one through the pipeline
// (policy and approvals apply: an approval asked shows in the result with its buttons).

import {api, stream} from "./api.js";
import {approvalCard, settled} from "./approvals.js";
import {alertBox, append, fill, h, pretty} from "./dom.js";

function example(schema) {
  const out = {};
  for (const [name, spec] of Object.entries((schema && schema.properties) || {})) {
    if (!(schema.required || []).includes(name)) continue;
    out[name] = spec.default ?? {string: "", number: 0, integer: 0, boolean: false, array: [], object: {}}[spec.type] ?? null;
  }
  return out;
}

const IMAGE = /^image\/(png|jpeg|gif|webp)$/;

/** A non-text content item: an image shown (a data: URL; no SVG, which could script), others named. */
function media(item) {
  if (item.type === "image" && IMAGE.test(item.mimeType || "") && typeof item.data === "string" &&
    item.data.length < 4_000_000) {
    return h("img", {class: "content-image", alt: `image from the tool (${item.mimeType})`,
      src: `data:${item.mimeType};base64,${item.data}`});
  }
  return h("p", {class: "muted", text: `[${item.type} content${item.mimeType ? ` (${item.mimeType})` : ""}` +
    `${item.uri || item.resource?.uri ? `: ${item.uri || item.resource.uri}` : ""}]`});
}

function tryBox(tool, index) {
  const id = `args-${index}`;
  const args = h("textarea", {id, rows: "4", class: "mono", spellcheck: "false",
    value: JSON.stringify(example(tool.input_schema), null, 2)});
  const result = h("div", {role: "region", "aria-label": "Result", class: "result", "aria-live": "polite"});
  const call = h("button", {type: "submit", class: "primary", text: "Call"});
  const form = h("form", {onsubmit: async (e) => {
    e.preventDefault();
    let parsed;
    try {
      parsed = args.value.trim() ? JSON.parse(args.value) : {};
      if (typeof parsed !== "object" || Array.isArray(parsed) || parsed === null) throw new Error("not an object");
    } catch (exc) {
      fill(result, alertBox(`The arguments are not a JSON object: ${exc.message}`));
      return;
    }
    call.disabled = true;
    fill(result, h("p", {class: "muted", text: "Calling…"}));
    const cards = new Map();
    try {
      await stream(`/api/tools/${encodeURIComponent(tool.name)}/call`, {arguments: parsed}, (kind, data) => {
        if (kind === "approval") {
          result.querySelector("p.muted")?.remove();
          const card = approvalCard(data);
          cards.set(data.id, card);
          result.append(card);
        } else if (kind === "approval_done") {
          const card = cards.get(data.id);
          if (card) api(`/api/approvals/${encodeURIComponent(data.id)}`).then((a) => settled(card, a), () => {});
        } else if (kind === "result") {
          const content = (data.content || []).filter((c) => c.type && c.type !== "text");
          result.querySelector("p.muted")?.remove();
          append(result, [h("p", null, h("span", {class: `badge ${data.is_error ? "bad" : "ok"}`,
            text: data.is_error ? "tool error" : "ok"})),
          h("pre", {class: "code", text: data.text}),
          data.structured !== null && data.structured !== undefined
            ? h("details", null, h("summary", {text: "Structured content"}), h("pre", {class: "code",
              text: pretty(data.structured)})) : null,
          content.map(media)]);
        } else if (kind === "error") {
          result.querySelector("p.muted")?.remove();
          result.append(alertBox(data.message || pretty(data)));
        }
      });
    } catch (exc) {
      fill(result, alertBox(exc.message));
    } finally {
      call.disabled = false;
    }
  }},
  h("div", {class: "field"}, h("label", {for: id, text: "Arguments (JSON)"}), args),
  h("div", {class: "actions"}, call));
  return h("details", {class: "try"}, h("summary", {text: "Try"}), form, result);
}

export function render(main, {signal}) {
  const search = h("input", {id: "tool-filter", type: "search", autocomplete: "off", placeholder: "name or words"});
  const count = h("p", {class: "muted", text: "Loading…"});
  const box = h("div", {class: "stack"});
  main.append(h("div", {class: "toolbar"}, h("div", {class: "field inline"},
    h("label", {for: "tool-filter", text: "Filter"}), search), count), box);
  api("/api/tools", {signal}).then(({tools, collisions}) => {
    const items = tools.map((tool, i) => {
      const node = h("article", {class: "card tool", "aria-labelledby": `tool-${i}`},
        h("h2", {id: `tool-${i}`, class: "mono", text: tool.name}),
        h("p", {class: "muted small", text: tool.source === "mcp" ? `MCP server ${tool.server}` : tool.source}),
        h("p", {class: "desc", text: tool.description || "No description."}),
        h("pre", {class: "code schema", "aria-label": `Schema of ${tool.name}`, tabIndex: 0,
          text: pretty(tool.input_schema)}),
        tryBox(tool, i));
      node.dataset.search = `${tool.name} ${tool.description}`.toLowerCase();
      return node;
    });
    fill(box, items);
    const update = () => {
      const words = search.value.toLowerCase().split(/\s+/).filter(Boolean);
      let shown = 0;
      for (const item of items) {
        item.hidden = !words.every((w) => item.dataset.search.includes(w));
        shown += item.hidden ? 0 : 1;
      }
      count.textContent = `${shown} of ${tools.length} tools` + ((collisions || []).length
        ? ` · ${collisions.length} name collision(s) between MCP servers` : "");
    };
    search.addEventListener("input", update);
    update();
  }, (exc) => {
    if (exc.name !== "AbortError") fill(count, alertBox(exc.message));
  });
}
