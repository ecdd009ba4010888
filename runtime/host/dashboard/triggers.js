// Triggers: each [[triggers]] entry with its next run (in its own time zone), its last
// run, Fire (a run now) and Resume (a paused one); #/triggers/NAME lists its last runs,
// each linked to its timeline. Refreshed on trigger.* events.

import {RESYNC, api, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, inZone, redraw, relative, row, stateBadge, table, took} from "./dom.js";

function when_(trigger) {
  if (trigger.kind === "schedule") return `${trigger.schedule} · ${trigger.timezone || "UTC"}`;
  if (trigger.kind === "webhook") return `POST ${trigger.path}`;
  return `files in ${trigger.path}`;
}

function next(trigger) {
  if (trigger.paused) return h("td", null, stateBadge("paused"), h("div", {class: "small wrap",
    text: trigger.paused_reason || ""}));
  if (!trigger.next_fire) return h("td", {class: "muted", text: trigger.kind === "schedule" ? "—" : "when called"});
  return h("td", null, h("time", {datetime: new Date(trigger.next_fire * 1000).toISOString(),
    text: inZone(trigger.next_fire, trigger.timezone)}), h("div", {class: "small muted",
    text: relative(trigger.next_fire)}));
}

function lastRun(run, zone) {
  if (!run) return h("td", {class: "muted", text: "never"});
  return h("td", null, stateBadge(run.outcome), " ", h("a", {href: `#/runs?context=${encodeURIComponent(run.id)}`,
    text: inZone(run.started_at, zone)}), run.error ? h("div", {class: "small wrap bad-text", text: run.error}) : null);
}

export function render(main, {signal, rest}) {
  const notice = h("div", {class: "notice"});
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  const runsBox = h("div");
  main.append(h("p", {class: "lead", text: "Agents that run unattended: on a schedule, on a signed webhook, " +
    "when files change (docs/triggers.md)."}), notice, box, runsBox);
  const act = async (button, what, name) => {
    button.setAttribute("aria-disabled", "true");
    fill(notice);
    try {
      const answer = await api(`/api/triggers/${encodeURIComponent(name)}/${what}`, {method: "POST", signal});
      fill(notice, h("p", {role: "status"}, what === "fire"
        ? [`${name}: run `, h("a", {href: `#/runs?context=${encodeURIComponent(answer.run_id)}`,
          text: answer.run_id}), " started."] : `${name} resumed.`));
      refresh();
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, alertBox(exc.message));
    } finally {
      button.removeAttribute("aria-disabled");
    }
  };
  let zones = new Map(); // each trigger's zone: its runs are shown in it, as its next fire is
  const load = async () => {
    try {
      const {triggers} = await api("/api/triggers", {signal});
      zones = new Map(triggers.map((t) => [t.name, t.timezone]));
      redraw(box, triggers, () => table("Triggers", ["Name", "Agent", "When", "Next run", "Last run", "Failures",
        "Actions"], triggers.map((t) => row(
        h("th", {scope: "row"}, h("a", {href: `#/triggers/${encodeURIComponent(t.name)}`, text: t.name}),
          h("div", {class: "small muted", text: t.kind})),
        t.agent, h("td", {class: "wrap", text: when_(t)}), next(t), lastRun(t.last_run, t.timezone),
        `${t.failures}/${t.max_failures}`,
        h("td", {class: "actions"},
          h("button", {type: "button", text: "Fire", "aria-label": `Fire ${t.name}`, disabled: t.paused,
            onclick: (e) => act(e.target, "fire", t.name)}),
          t.paused ? h("button", {type: "button", class: "primary", text: "Resume", "aria-label": `Resume ${t.name}`,
            onclick: (e) => act(e.target, "resume", t.name)}) : null))),
      "No triggers are configured ([[triggers]] in the config: docs/triggers.md).", true));
      if (rest) await loadRuns(rest);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  const loadRuns = async (name) => {
    const {runs} = await api(`/api/triggers/${encodeURIComponent(name)}/runs?limit=20`, {signal});
    redraw(runsBox, runs, () => [h("h2", {text: `Last runs of ${name}`}), table(`Runs of ${name}`,
      ["Started", "Source", "Outcome", "Took", "Reply or error", "Timeline"], runs.map((r) => row(
        h("td", {class: "nowrap", text: inZone(r.started_at, zones.get(name))}), r.source, stateBadge(r.outcome),
        r.ended_at ? took((r.ended_at - r.started_at) * 1000) : "…",
        h("td", {class: "wrap", text: (r.error || r.sink_error || r.reply || "").slice(0, 300)}),
        h("td", null, h("a", {href: `#/runs?context=${encodeURIComponent(r.id)}`, text: "Timeline",
          "aria-label": `Timeline of ${r.id}`})))), "No runs yet.", true)]);
  };
  const refresh = debounce(load, 300);
  const timer = setInterval(() => document.hidden || load(), 15000); // "in 4 min" stays true
  signal.addEventListener("abort", () => clearInterval(timer));
  onEvent((event) => (/^trigger\./.test(event.type || "") || event.type === RESYNC) && refresh(), signal);
  load();
}
