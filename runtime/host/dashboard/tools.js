// Tools: every tool agents can call, its arguments as a form made from its input schema;
// Call runs it through the pipeline (policy and approvals apply: an approval asked shows
// in the result with its buttons).

import {api, stream} from "./api.js";
import {approvalCard, field, settled} from "./approvals.js";
import {alertBox, append, fill, h, pretty} from "./dom.js";

const SIMPLE = new Set(["string", "number", "integer", "boolean"]);

function typeOf(spec) {
  const type = Array.isArray(spec.type) ? spec.type.find((t) => t !== "null") : spec.type;
  return type || (spec.enum ? "string" : "");
}

/** A JSON box for what a plain input cannot hold (objects, lists of objects, no type). */
function jsonField(name, spec, required, type) {
  const id = `j-${Math.random().toString(36).slice(2)}`;
  const input = h("textarea", {id, rows: "3", class: "mono", spellcheck: "false",
    value: spec.default !== undefined ? JSON.stringify(spec.default, null, 2) : ""});
  const node = h("div", {class: "field"}, h("label", {for: id, text: `${name}${required ? " (required)" : ""}`}),
    input, h("span", {class: "hint", text: `${spec.description ? `${spec.description} · ` : ""}` +
      `${type || "any value"}, as JSON`}));
  node.read = () => {
    if (!input.value.trim()) return undefined;
    try {
      return JSON.parse(input.value);
    } catch (exc) {
      throw new Error(`${name} is not valid JSON: ${exc.message}`);
    }
  };
  return node;
}

/** The form fields of a tool's input schema, one per property, each with its own read(). */
function schemaFields(schema) {
  const required = new Set((schema && schema.required) || []);
  return Object.entries((schema && schema.properties) || {}).map(([name, raw]) => {
    const spec = raw && typeof raw === "object" ? raw : {};
    const type = typeOf(spec);
    const items = spec.items || {};
    const simple = SIMPLE.has(type) || type === "array" && (items.enum || items.anyOf);
    const node = simple ? field(name, {...spec, type, title: name,
      description: [spec.description, type].filter(Boolean).join(" · ")}, required.has(name))
      : jsonField(name, spec, required.has(name), type);
    node.fieldName = name;
    return node;
  });
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

function tryBox(tool) {
  const fields = schemaFields(tool.input_schema);
  const result = h("div", {role: "region", "aria-label": "Result", class: "result", "aria-live": "polite"});
  const call = h("button", {type: "submit", class: "primary", text: "Call"});
  const form = h("form", {"aria-label": `Arguments of ${tool.name}`, onsubmit: async (e) => {
    e.preventDefault();
    const parsed = {};
    try {
      for (const node of fields) {
        const value = node.read();
        if (value !== undefined) parsed[node.fieldName] = value;
      }
    } catch (exc) {
      fill(result, alertBox(exc.message));
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
  fields.length ? h("fieldset", null, h("legend", {text: "Arguments"}), fields)
    : h("p", {class: "muted", text: "This tool takes no arguments."}),
  h("div", {class: "actions"}, call));
  return h("div", {class: "try"}, form, result);
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
        tryBox(tool),
        h("details", null, h("summary", {text: "Input schema (JSON)"}), h("pre", {class: "code schema",
          "aria-label": `Schema of ${tool.name}`, tabIndex: 0, text: pretty(tool.input_schema)})));
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
