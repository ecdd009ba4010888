// Tasks: the A2A tasks this tern runs, filtered by state; one task's status, history and
// artifacts, and cancel. Refreshed on a2a.task events.

import {RESYNC, api, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, pretty, redraw, row, stateBadge, table, when} from "./dom.js";

const STATES = ["", "submitted", "working", "input-required", "auth-required", "completed", "canceled", "failed",
  "rejected", "unknown"];
const TERMINAL = new Set(["completed", "canceled", "failed", "rejected"]);

function partText(part) {
  if (typeof part.text === "string") return part.text;
  if (part.data !== undefined) return pretty(part.data);
  const file = part.file || part;
  if (file.uri || file.url || file.name) return `[file ${file.name || ""} ${file.uri || file.url || ""}]`.trim();
  return pretty(part);
}

function parts(list) {
  return h("div", {class: "parts"}, (list || []).map((p) => h("div", {class: "text", text: partText(p)})));
}

function list(main, {signal, params}) {
  const filter = h("select", {id: "task-state"}, STATES.map((s) => h("option", {value: s, text: s || "any state",
    selected: s === (params.get("state") || "")})));
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  main.append(h("div", {class: "toolbar"}, h("div", {class: "field inline"},
    h("label", {for: "task-state", text: "State"}), filter)), box);
  const load = async () => {
    const query = new URLSearchParams({limit: "100"});
    if (filter.value) query.set("state", filter.value);
    try {
      const data = await api(`/api/tasks?${query}`, {signal});
      const tasks = Array.isArray(data) ? data : data.tasks || [];
      redraw(box, data, () => [table("Tasks", ["Task", "Agent", "State", "Status", "Updated", "Messages"], tasks.map((t) => row(
        h("th", {scope: "row", class: "mono"}, h("a", {href: `#/tasks/${encodeURIComponent(t.id)}`, text: t.id})),
        t.agent || "", stateBadge(t.state), h("td", {class: "wrap", text: t.status_text || ""}),
        when(t.timestamp || t.created), String(t.history ?? ""))), filter.value ? `No ${filter.value} tasks.`
        : "No tasks yet.", true), data.total > tasks.length ? h("p", {class: "muted",
        text: `The newest ${tasks.length} of ${data.total}.`}) : null]);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  filter.addEventListener("change", () => {
    history.replaceState(null, "", filter.value ? `#/tasks?state=${encodeURIComponent(filter.value)}` : "#/tasks");
    load();
  });
  const refresh = debounce(load, 300);
  onEvent((event) => (event.type === "a2a.task" || event.type === RESYNC) && refresh(), signal);
  load();
}

function view(main, id, {signal}) {
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  const notice = h("div");
  main.append(h("p", null, h("a", {href: "#/tasks", text: "← All tasks"})), notice, box);
  const load = async () => {
    try {
      const data = await api(`/api/tasks/${encodeURIComponent(id)}`, {signal});
      const task = data.task || data;
      const cancel = h("button", {type: "button", class: "danger", text: "Cancel task", disabled: TERMINAL.has(task.state),
        onclick: async () => {
          cancel.disabled = true;
          try {
            await api(`/api/tasks/${encodeURIComponent(id)}/cancel`, {method: "POST", signal});
            fill(notice, h("p", {role: "status", tabIndex: -1, text: "Canceled."}));
            notice.firstChild.focus(); // the button is disabled now
            load();
          } catch (exc) {
            cancel.disabled = false;
            if (exc.name !== "AbortError") fill(notice, alertBox(exc.message));
          }
        }});
      const status = task.status_message || (task.status && task.status.message);
      redraw(box, task, () => [
        h("h2", {class: "wrap"}, "Task ", h("code", {text: task.id})),
        h("dl", {class: "facts"},
          h("dt", {text: "State"}), h("dd", null, stateBadge(task.state || (task.status && task.status.state))),
          h("dt", {text: "Agent"}), h("dd", {text: task.agent || "—"}),
          h("dt", {text: "Context"}), h("dd", {class: "mono wrap", text: task.context_id || "—"}),
          h("dt", {text: "Created"}), h("dd", {text: when(task.created)}),
          h("dt", {text: "Updated"}), h("dd", {text: when(task.timestamp)})),
        status ? h("div", {class: "card"}, h("strong", {text: "Status: "}), parts(status.parts)) : null,
        h("div", {class: "actions"}, cancel),
        h("h2", {text: "History"}),
        (task.history || []).length ? h("div", {class: "log history"}, task.history.map((m) => h("div", {class: `msg ${m.role}`},
          h("div", {class: "who", text: m.role === "user" ? "Caller" : task.agent || "Agent"}), parts(m.parts))))
          : h("p", {class: "muted", text: "No messages."}),
        h("h2", {text: "Artifacts"}),
        (task.artifacts || []).length ? task.artifacts.map((a) => h("div", {class: "card"},
          h("h3", {text: a.name || a.artifact_id || "artifact"}), a.description ? h("p", {text: a.description}) : null,
          parts(a.parts))) : h("p", {class: "muted", text: "No artifacts."})]);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  const refresh = debounce(load, 300);
  onEvent((event) => (event.type === "a2a.task" && event.task_id === id || event.type === RESYNC) && refresh(), signal);
  load();
}

export function render(main, ctx) {
  if (ctx.rest) view(main, ctx.rest, ctx);
  else list(main, ctx);
}
