// Chat: send an agent a message and watch the reply stream in, with each tool call and
// any approval it asks for inline. The transcript and the running reply outlive a visit
// to another page (module state), so leaving Chat never cuts a reply short.

import {api, stream} from "./api.js";
import {approvalCard, settled} from "./approvals.js";
import {alertBox, fill, h, pretty, redraw, stateBadge, when} from "./dom.js";

const state = {
  agent: "",
  contextId: null,
  running: null, // AbortController of the reply being streamed
  log: h("div", {class: "log", role: "log", "aria-label": "Conversation", "aria-live": "polite"}),
  refreshList: null,
  setBusy: null,
};

function message(role, who, text) {
  const body = h("div", {class: "text", text});
  const item = h("div", {class: `msg ${role}`}, h("div", {class: "who", text: who}), body);
  state.log.append(item);
  scroll();
  return {item, body};
}

// Follow the newest text unless the person scrolled up to read.
let follow = true;
state.log.addEventListener("scroll", () => {
  follow = state.log.scrollHeight - state.log.scrollTop - state.log.clientHeight < 40;
});

function scroll(force) {
  if (force) follow = true;
  if (follow) state.log.scrollTop = state.log.scrollHeight;
}

function toolItem(event) {
  const outcome = h("span", null, stateBadge("running"));
  const args = event.arguments !== undefined && Object.keys(event.arguments || {}).length
    ? h("details", null, h("summary", {text: "Arguments"}), h("pre", {class: "code", text: pretty(event.arguments)}))
    : null;
  const item = h("div", {class: "tool-call", "data-tool": event.tool, "data-phase": "start"},
    h("span", {class: "tool-label", text: "Tool "}), h("code", {text: event.tool}), " ", outcome, args);
  return {item, outcome};
}

async function send(text) {
  const agent = state.agent;
  if (!agent || !text.trim() || state.running) return;
  message("user", "You", text);
  scroll(true);
  const reply = message("agent", agent, "");
  reply.item.classList.add("streaming");
  reply.item.setAttribute("aria-busy", "true"); // read out once complete, not piece by piece
  const calls = [];
  const cards = new Map();
  let streamed = "";
  const running = new AbortController();
  state.running = running;
  state.setBusy?.(true);
  const onEvent = (kind, data) => {
    if (kind === "text") {
      streamed += data.text ?? "";
      reply.body.textContent = streamed;
    } else if (kind === "tool" && data.phase === "start") {
      const call = toolItem(data);
      calls.push(call);
      reply.item.insertBefore(call.item, reply.body);
    } else if (kind === "tool") {
      let call = calls.find((c) => c.item.dataset.tool === data.tool && c.item.dataset.phase === "start");
      if (!call) {
        call = toolItem(data);
        reply.item.insertBefore(call.item, reply.body);
      }
      call.item.dataset.phase = "end";
      call.item.dataset.outcome = data.outcome;
      fill(call.outcome, stateBadge(data.outcome), h("span", {class: "muted", text: ` ${Math.round(data.ms ?? 0)} ms`}),
        data.error ? h("span", {class: "tool-error", text: ` ${data.error}`}) : null);
    } else if (kind === "approval") {
      const card = approvalCard(data);
      cards.set(data.id, card);
      reply.item.insertBefore(card, reply.body);
    } else if (kind === "approval_done") {
      const card = cards.get(data.id);
      if (card && !card.classList.contains("done")) {
        api(`/api/approvals/${encodeURIComponent(data.id)}`).then((a) => settled(card, a), () => settled(card, {}));
      }
    } else if (kind === "reply") {
      state.contextId = data.context_id || state.contextId;
      if (data.text !== undefined && data.text !== streamed) reply.body.textContent = data.text;
    } else if (kind === "error") {
      reply.item.append(alertBox(data.message || pretty(data)));
    }
    scroll();
  };
  try {
    await stream(`/api/agents/${encodeURIComponent(agent)}/stream`,
      {message: text, ...(state.contextId ? {context_id: state.contextId} : {})}, onEvent, running.signal);
  } catch (exc) {
    reply.item.append(alertBox(exc.name === "AbortError" ? "Stopped." : exc.message));
  } finally {
    reply.item.classList.remove("streaming");
    reply.item.removeAttribute("aria-busy");
    if (!reply.body.textContent) reply.body.classList.add("empty");
    state.running = null;
    state.setBusy?.(false);
    state.refreshList?.();
    scroll();
  }
}

async function resume(id, select) {
  if (state.running) return;
  try {
    const conversation = await api(`/api/conversations/${encodeURIComponent(id)}`);
    state.log.replaceChildren();
    state.contextId = conversation.context_id;
    for (const m of conversation.messages) message(m.role === "user" ? "user" : "agent", m.role === "user" ? "You"
      : m.agent, m.content);
    scroll(true);
    const agent = [...conversation.messages].reverse().find((m) => m.agent)?.agent;
    if (agent && [...select.options].some((o) => o.value === agent)) {
      select.value = agent;
      state.agent = agent;
    }
  } catch (exc) {
    state.log.append(alertBox(exc.message));
  }
}

export function render(main, {signal, params}) {
  const select = h("select", {id: "chat-agent", name: "agent"});
  const input = h("textarea", {id: "chat-message", name: "message", rows: "3", required: true,
    placeholder: "Write a message; Enter sends, Shift+Enter adds a line"});
  const sendButton = h("button", {type: "submit", class: "primary", text: "Send"});
  const stop = h("button", {type: "button", text: "Stop", hidden: true, onclick: () => state.running?.abort()});
  const fresh = h("button", {type: "button", text: "New conversation", onclick: () => {
    if (state.running) return;
    state.contextId = null;
    state.log.replaceChildren();
    input.focus();
  }});
  const status = h("div");
  const list = h("ul", {class: "conversations plain", "aria-label": "Conversations"});
  const form = h("form", {class: "composer", onsubmit: (e) => {
    e.preventDefault();
    const text = input.value;
    if (!text.trim() || state.running) return;
    input.value = "";
    send(text);
  }},
  h("div", {class: "field"}, h("label", {for: "chat-message", text: "Message"}), input),
  h("div", {class: "actions"}, sendButton, stop));
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  select.addEventListener("change", () => {
    if (select.value !== state.agent) {
      state.agent = select.value;
      state.contextId = null; // a conversation belongs to one agent
    }
  });
  state.setBusy = (busy) => {
    sendButton.disabled = busy;
    stop.hidden = !busy;
  };
  state.setBusy(!!state.running);
  main.append(h("div", {class: "chat"},
    h("div", {class: "chat-main"}, h("div", {class: "toolbar"}, h("div", {class: "field inline"},
      h("label", {for: "chat-agent", text: "Agent"}), select), fresh), status, state.log, form),
    h("aside", {class: "chat-side", "aria-labelledby": "conv-h"}, h("h2", {id: "conv-h", text: "Conversations"}),
      list)));
  scroll(true);

  state.refreshList = async () => {
    try {
      const {conversations} = await api("/api/conversations", {signal});
      redraw(list, conversations, () => conversations.length ? conversations.slice(0, 50).map((c) => h("li", null,
        h("button", {type: "button", class: "link", onclick: () => resume(c.context_id, select)},
          h("span", {class: "preview", text: c.preview || c.context_id}),
          h("span", {class: "muted", text: `${c.agent} · ${c.messages} messages · ${when(c.last)}`}))))
        : h("li", {class: "muted", text: "No saved conversations (agents that remember keep theirs here)."}));
    } catch (exc) {
      if (exc.name !== "AbortError") fill(list, h("li", null, alertBox(exc.message)));
    }
  };
  signal.addEventListener("abort", () => {
    state.refreshList = null;
    state.setBusy = null;
  });

  api("/api/agents", {signal}).then(({agents}) => {
    fill(select, agents.map((a) => h("option", {value: a.name, text: `${a.name} (${a.kind})`})));
    const wanted = params.get("agent") || state.agent;
    if (wanted && agents.some((a) => a.name === wanted)) select.value = wanted;
    if (state.agent !== select.value) state.contextId = null;
    state.agent = select.value;
    if (!agents.length) fill(status, h("p", {class: "muted", text: "No agents are configured."}));
  }, (exc) => {
    if (exc.name !== "AbortError") fill(status, alertBox(exc.message));
  });
  state.refreshList();
}
