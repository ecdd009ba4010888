// Runs: what agents did, from the history the daemon keeps (/api/activity/runs); one run
// (#/runs/SEQ, or #/runs?context=ID for a trigger's run) drawn as a timeline of its model
// and tool calls, placed by when each started and how long it took.

import {RESYNC, api, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, redraw, row, stateBadge, svg, table, took, when} from "./dom.js";

const WIDTH = 1000;

const count = (n, what) => `${n} ${what}${n === 1 ? "" : "s"}`;

function bar(start, length, total, cls) {
  const x = total > 0 ? Math.min(WIDTH - 2, (start / total) * WIDTH) : 0;
  const w = Math.max(2, total > 0 ? (length / total) * WIDTH : WIDTH);
  return svg("svg", {viewBox: `0 0 ${WIDTH} 10`, preserveAspectRatio: "none", "aria-hidden": "true"},
    svg("rect", {x: 0, y: 0, width: WIDTH, height: 10, class: "track"}),
    svg("rect", {x: x.toFixed(1), y: 1, width: Math.min(w, WIDTH - x).toFixed(1), height: 8, class: `span ${cls}`}));
}

function timeline(run) {
  const total = (run.ended - run.started) * 1000;
  const line = (kind, name, span, detail) => {
    const start = (span.started - run.started) * 1000;
    const length = (span.ended - span.started) * 1000;
    const bad = span.outcome && span.outcome !== "ok";
    return row(h("th", {scope: "row", class: "wrap"}, h("span", {class: "kind", text: kind}), name),
      h("td", {class: "nowrap", text: `+${took(Math.max(0, start))}`}), took(length),
      stateBadge(span.outcome || "ok"), h("td", {class: "wrap", text: detail}),
      h("td", {class: "bar-cell"}, bar(start, length, total, `${kind === "run" ? "run" : kind}${bad ? " bad" : ""}`)));
  };
  const rows = [line("run", run.agent, run, `asked by ${run.caller || "—"}`),
    ...run.spans.map((s) => s.kind === "model"
      ? line("model", s.name, s, s.tokens ? `${s.tokens} tokens` : "")
      : line("tool", s.name, s, s.error || (s.caller ? `called by ${s.caller}` : "")))];
  return h("div", {class: "timeline"}, table("Timeline", ["Call", "Started", "Took", "Outcome", "Detail", "When"],
    rows, "No calls.", false));
}

function view(main, seq, {signal}) {
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  main.append(h("p", null, h("a", {href: "#/runs", text: "← All runs"})), box);
  const load = async () => {
    try {
      const run = await api(`/api/activity/runs/${encodeURIComponent(seq)}`, {signal});
      redraw(box, run, () => [
        h("h2", null, `Run ${run.seq} of `, h("a", {href: `#/chat?agent=${encodeURIComponent(run.agent)}`,
          text: run.agent})),
        h("dl", {class: "facts"},
          h("dt", {text: "Outcome"}), h("dd", null, stateBadge(run.outcome || "ok")),
          h("dt", {text: "Asked by"}), h("dd", {text: run.caller || "—"}),
          h("dt", {text: "Started"}), h("dd", {text: when(run.started)}),
          h("dt", {text: "Took"}), h("dd", {text: took(run.ms)}),
          h("dt", {text: "Cost"}), h("dd", {text: `${count(run.model_calls, "model call")}, ` +
            `${count(run.tool_calls, "tool call")}${run.tokens ? `, ${count(run.tokens, "token")}` : ""}`}),
          h("dt", {text: "Conversation"}), h("dd", {class: "mono wrap", text: run.context_id || "—"})),
        run.source === "audit" ? h("p", {class: "muted", text: "Read from the audit log (it ran while no daemon " +
          "kept a history): its tool calls and model calls are not linked to it."}) : null,
        timeline(run)]);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  load();
}

function list(main, {signal, params}) {
  const agent = params.get("agent") || "";
  const context = params.get("context") || "";
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  main.append(h("p", {class: "lead", text: "Every agent run the daemon has kept, newest first: who asked, what " +
    "it cost. Open one to see its model and tool calls on a timeline."}), box);
  const load = async () => {
    const query = new URLSearchParams({limit: "100"});
    if (agent) query.set("agent", agent);
    if (context) query.set("context_id", context);
    try {
      const {runs} = await api(`/api/activity/runs?${query}`, {signal});
      if (context && runs.length === 1) { // a trigger's run: straight to its timeline
        location.replace(`#/runs/${runs[0].seq}`);
        return;
      }
      redraw(box, runs, () => table("Runs", ["Run", "When", "Agent", "Asked by", "Outcome", "Took", "Model calls",
        "Tool calls", "Tokens"], runs.map((r) => row(h("th", {scope: "row"}, h("a", {href: `#/runs/${r.seq}`,
        text: `Run ${r.seq}`})), h("td", {class: "nowrap", text: when(r.ended)}), r.agent,
      h("td", {class: "wrap", text: r.caller || "—"}), stateBadge(r.outcome || "ok"), took(r.ms),
      String(r.model_calls), String(r.tool_calls), r.tokens ? String(r.tokens) : "—")),
      context ? "That run is not in the history (it may still be running)." : "Nothing has run yet.", true));
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  const refresh = debounce(load, 500);
  onEvent((event) => (event.type === "agent.message" || event.type === RESYNC) && refresh(), signal);
  load();
}

export function render(main, ctx) {
  if (ctx.rest) view(main, ctx.rest, ctx);
  else list(main, ctx);
}
