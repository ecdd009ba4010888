// Approvals: the pending queue, live from approval events, and the card that answers one
// (also shown inline in Chat and in a tool's Try result).

import {RESYNC, api, download, isApprovalEvent, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, pretty, preview, visible, when} from "./dom.js";

const OPEN_BYTES = 16 * 1024; // arguments longer than this start folded: the preview and the download show them

const SCOPES = {once: "once", always: "always", args: "always with these arguments"};

/** "4:59 left", counting down every second until the request expires (then "expired"). */
function countdown(expires, signal) {
  const out = h("span", {class: "countdown"});
  const tick = () => {
    const left = Math.round(expires - Date.now() / 1000);
    if (!out.isConnected && out.dataset.drawn) return stop();
    out.dataset.drawn = "1";
    if (left <= 0) {
      out.textContent = "expired";
      return stop();
    }
    const h_ = Math.floor(left / 3600);
    const m = Math.floor((left % 3600) / 60);
    const s = String(left % 60).padStart(2, "0");
    out.textContent = `${h_ ? `${h_}:${String(m).padStart(2, "0")}` : m}:${s} left`;
    out.classList.toggle("soon", left < 60);
  };
  const timer = setInterval(tick, 1000);
  const stop = () => clearInterval(timer);
  signal?.addEventListener("abort", stop);
  tick();
  return out;
}

export function field(name, spec, required) {
  const id = `f-${Math.random().toString(36).slice(2)}`;
  const label = h("label", {for: id, text: `${spec.title || name}${required ? " (required)" : ""}`});
  const hint = spec.description ? h("span", {class: "hint", text: spec.description}) : null;
  let input;
  let read;
  const options = spec.enum ? spec.enum.map((value, i) => [value, (spec.enumNames || [])[i] ?? value])
    : spec.oneOf ? spec.oneOf.map((o) => [o.const, o.title ?? o.const]) : null;
  if (spec.type === "boolean") {
    input = h("input", {id, type: "checkbox", checked: spec.default === true});
    const node = h("div", {class: "field check"}, input, label, hint);
    node.read = () => input.checked;
    return node;
  }
  if (spec.type === "array") {
    const items = spec.items || {};
    const choices = items.enum ? items.enum.map((v) => [v, v]) : (items.anyOf || []).map((o) => [o.const, o.title ?? o.const]);
    const chosen = new Set(Array.isArray(spec.default) ? spec.default : []);
    input = h("select", {id, multiple: true}, choices.map(([v, t]) => h("option", {value: v, text: t,
      selected: chosen.has(v)})));
    read = () => {
      const picked = [...input.selectedOptions].map((o) => o.value);
      return picked.length || required ? picked : undefined;
    };
  } else if (options) {
    input = h("select", {id}, required ? null : h("option", {value: "", text: "(none)"}),
      options.map(([v, t]) => h("option", {value: v, text: t, selected: v === spec.default})));
    read = () => input.value === "" ? undefined : input.value;
  } else if (spec.type === "number" || spec.type === "integer") {
    input = h("input", {id, type: "number", step: spec.type === "integer" ? "1" : "any", min: spec.minimum,
      max: spec.maximum, value: spec.default ?? ""});
    read = () => input.value === "" ? undefined : Number(input.value);
  } else {
    const secret = /pass|secret|token|key|pin|otp|credential/i.test(name) || spec.format === "password";
    const type = secret ? "password" : {email: "email", uri: "url", date: "date"}[spec.format] || "text";
    input = h("input", {id, type, value: spec.default ?? "", autocomplete: "off", maxlength: spec.maxLength});
    read = () => input.value === "" ? undefined : input.value;
  }
  const node = h("div", {class: "field"}, label, input, hint);
  node.read = read;
  return node;
}

function formFields(form) {
  const schema = form.requestedSchema || {};
  const required = new Set(schema.required || []);
  return Object.entries(schema.properties || {}).map(([name, spec]) => {
    const node = field(name, spec || {}, required.has(name));
    node.fieldName = name;
    return node;
  });
}

/** A tern.lock request: each tool's change as the diff of its old and new definition. */
function lockDiffs(approval) {
  const tools = Array.isArray(approval.arguments?.tools) ? approval.arguments.tools : [];
  return h("div", null, ...tools.map((t) => h("details", {open: true},
    h("summary", {text: `${t.tool} (${t.state}): sha256 ${String(t.sha256).slice(0, 16)}…`}),
    h("pre", {class: "code", text: String(t.diff ?? "")}))));
}

/** One request with its buttons; onDecided(approval) after a decision is accepted. */
export function approvalCard(approval, {onDecided, signal} = {}) {
  const form = approval.form;
  const lock = approval.origin === "mcp-lock"; // tern.lock: new tool definitions, approved once
  const reasonId = `reason-${approval.id}`;
  const reason = h("input", {id: reasonId, type: "text", maxlength: "500", autocomplete: "off"});
  const result = h("div", {class: "result-line"});
  const fields = form && form.mode !== "url" ? formFields(form) : [];
  const buttons = [];
  const decide = async (decision, scope) => {
    const body = {decision, scope, reason: reason.value};
    if (!form && decision === "approve") body.digest = approval.arguments_sha256; // what this card showed
    if (form && decision === "approve" && form.mode !== "url") {
      body.answer = {};
      for (const node of fields) {
        const value = node.read();
        if (value !== undefined) body.answer[node.fieldName] = value;
      }
    }
    buttons.forEach((b) => (b.disabled = true));
    fill(result);
    try {
      const decided = await api(`/api/approvals/${encodeURIComponent(approval.id)}`, {method: "POST", body});
      settled(card, decided);
      card.querySelector(".verdict")?.focus(); // the pressed button is disabled now: focus goes to what happened
      onDecided?.(decided);
    } catch (exc) {
      buttons.forEach((b) => (b.disabled = false));
      fill(result, alertBox(exc.message));
    }
  };
  const button = (text, decision, scope, tone) => {
    const b = h("button", {type: "button", class: tone, text, onclick: () => decide(decision, scope)});
    buttons.push(b);
    return b;
  };
  const link = form && form.mode === "url" && /^https?:/i.test(form.url || "")
    ? h("p", null, h("a", {href: form.url, target: "_blank", rel: "noopener noreferrer", text: form.url})) : null;
  const card = h("article", {class: "card approval", "data-id": approval.id, "aria-label": `Approval for ${approval.tool}`},
    h("h3", null, approval.tool, h("span", {class: "muted", text: ` asked by ${approval.agent || "the operator"}`})),
    form?.message ? h("p", {class: "question", text: visible(form.message)}) : null,
    link,
    h("dl", {class: "facts"},
      h("dt", {text: "Caller"}), h("dd", {text: approval.caller || "—"}),
      h("dt", {text: "Asked"}), h("dd", {text: when(approval.created)}),
      h("dt", {text: "Expires"}), h("dd", null, when(approval.expires), " · ",
        approval.expires ? countdown(approval.expires, signal) : "")),
    lock ? lockDiffs(approval) : form ? null : argumentsView(approval),
    fields.length ? h("fieldset", null, h("legend", {text: "Answer"}), fields) : null,
    h("div", {class: "field"}, h("label", {for: reasonId, text: "Reason"}), reason),
    h("div", {class: "actions"},
      button("Approve once", "approve", "once", "primary"),
      form || lock ? null : button("Approve always", "approve", "always"),
      form || lock ? null : button("Always with these arguments", "approve", "args"),
      button("Deny", "deny", "once", "danger")),
    result);
  if (approval.state && approval.state !== "pending") settled(card, approval);
  return card;
}

/** The arguments: size and digest (what approving binds to), a preview no padding can
 * push the ends out of, the whole text (folded when long) and a download of the exact bytes. */
function argumentsView(approval) {
  const result = h("span", {class: "result-line"});
  const name = `${approval.id}-arguments.json`;
  const save = h("button", {type: "button", text: "Download", onclick: async () => {
    fill(result);
    try {
      await download(`/api/approvals/${encodeURIComponent(approval.id)}/arguments`, name);
    } catch (exc) {
      fill(result, alertBox(exc.message));
    }
  }});
  const bytes = approval.arguments_bytes ?? 0;
  return h("div", {class: "arguments"},
    h("p", {class: "wrap"}, h("strong", {text: "Arguments "}),
      h("span", {class: "muted", text: `${bytes.toLocaleString()} bytes, `}),
      h("code", {class: "digest", text: approval.arguments_sha256 || ""}), " ", save, result),
    h("p", {class: "code preview", text: preview(JSON.stringify(approval.arguments ?? {}))}),
    h("details", {open: bytes <= OPEN_BYTES}, h("summary", {text: "Whole arguments"}),
      h("pre", {class: "code", text: visible(pretty(approval.arguments))})));
}

/** Mark a card decided (by this page or by anyone else). */
export function settled(card, approval) {
  if (!card || card.classList.contains("done")) return;
  card.classList.add("done");
  card.querySelectorAll("button, input, select").forEach((el) => (el.disabled = true));
  const scope = approval.scope && approval.state === "approved" ? ` (${SCOPES[approval.scope] || approval.scope})` : "";
  const by = approval.decided_by ? ` by ${approval.decided_by}` : "";
  const line = card.querySelector(".result-line");
  fill(line, h("p", {class: `verdict ${approval.state}`, tabIndex: -1,
    text: `${cap(approval.state || "decided")}${scope}${by}`}));
}

function cap(text) {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

export function render(main, {signal}) {
  const status = h("p", {class: "muted", tabIndex: -1, text: "Loading…"});
  const list = h("div", {class: "stack", role: "list", "aria-label": "Pending approvals"});
  const recent = h("div");
  main.append(h("p", {class: "lead", text: "Tool calls waiting for a person. Decisions take effect at once."}),
    status, list, h("h2", {text: "Recently decided"}), recent);
  const load = async () => {
    try {
      const [{approvals: pending}, {approvals: all}] = await Promise.all([
        api("/api/approvals?state=pending", {signal}), api("/api/approvals?state=all", {signal})]);
      fill(status, pending.length ? `${pending.length} pending.` : "Nothing is waiting.");
      const keep = new Map([...list.children].map((item) => [item.dataset.id, item]));
      const focused = [...keep.values()].find((item) => item.contains(document.activeElement));
      fill(list, pending.map((a) => {
        const old = keep.get(a.id);
        return old && !old.querySelector(".done") ? old
          : h("div", {role: "listitem", "data-id": a.id}, approvalCard(a, {onDecided: () => refresh(), signal}));
      }));
      if (focused && !focused.isConnected) status.focus(); // the answered request left the list
      const decided = all.filter((a) => a.state !== "pending").slice(0, 10);
      fill(recent, decided.length ? h("ul", {class: "plain"}, decided.map((a) => h("li", null,
        h("span", {class: `verdict ${a.state}`, text: a.state}),
        a.state === "approved" && a.scope ? h("span", {class: "muted", text: ` (${SCOPES[a.scope] || a.scope})`}) : null,
        ` ${a.tool} for ${a.agent || "the operator"}`,
        a.decided_by ? h("span", {text: ` · by ${a.decided_by}`}) : null,
        a.reason ? h("span", {class: "muted", text: ` — ${a.reason}`}) : null,
        h("span", {class: "muted", text: ` · ${when(a.decided_at)}`})))) : h("p", {class: "muted", text: "None yet."}));
    } catch (exc) {
      if (exc.name !== "AbortError") fill(status, alertBox(exc.message));
    }
  };
  const refresh = debounce(load, 150);
  onEvent((event) => {
    if (event.type === RESYNC) refresh();
    if (!isApprovalEvent(event)) return;
    const a = event.approval;
    if (a && a.state !== "pending") {
      const item = list.querySelector(`[data-id="${CSS.escape(a.id)}"] .card`);
      settled(item, a);
    }
    refresh();
  }, signal);
  load();
}
