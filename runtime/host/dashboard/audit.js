// Audit: the last records, filtered by agent, tool and outcome, refreshed as calls happen,
// and the verdict of the hash-chain check.

import {RESYNC, api, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, redraw, row, stateBadge, table, when} from "./dom.js";

const LIVE = new Set(["tool.call", "agent.message", "approval_requested", "approval_resolved", "config.reloaded",
  RESYNC]);

function input(id, label, placeholder) {
  const el = h("input", {id, type: "text", placeholder, autocomplete: "off", spellcheck: "false"});
  return [el, h("div", {class: "field"}, h("label", {for: id, text: label}), el)];
}

function recordRow(line) {
  let r;
  try {
    r = JSON.parse(line);
  } catch {
    return row(h("td", {colspan: 7, class: "mono wrap", text: line}));
  }
  const detail = r.error || r.reason || (r.context_id ? `context ${r.context_id}` : "") || (r.caller ? `by ${r.caller}` : "");
  return row(h("td", {class: "nowrap", text: when(r.time)}), String(r.seq ?? ""), r.kind || "", r.agent || "", h("td", {class: "mono wrap", text: r.tool || ""}),
    r.outcome ? stateBadge(r.outcome) : "", r.ms !== undefined ? String(Math.round(r.ms)) : "",
    h("td", {class: "wrap", text: detail}));
}

export function render(main, {signal}) {
  const [agent, agentField] = input("audit-agent", "Agent", "glob, e.g. assist*");
  const [tool, toolField] = input("audit-tool", "Tool", "glob, e.g. file_*");
  const [outcome, outcomeField] = input("audit-outcome", "Outcome", "ok, denied, error…");
  const count = h("select", {id: "audit-n"}, ["20", "50", "100", "500"].map((n) => h("option", {value: n, text: n,
    selected: n === "50"})));
  const verdict = h("p", {role: "status", "aria-label": "Audit chain", class: "verdict-box", text: "Checking the chain…"});
  const verify = h("button", {type: "button", text: "Check chain"});
  const box = h("div", null, h("p", {class: "muted", text: "Loading…"}));
  const form = h("form", {class: "filters", onsubmit: (e) => {
    e.preventDefault();
    load();
  }}, agentField, toolField, outcomeField,
  h("div", {class: "field"}, h("label", {for: "audit-n", text: "Records"}), count),
  h("div", {class: "actions"}, h("button", {type: "submit", text: "Filter"})));
  main.append(h("div", {class: "chain"}, verdict, verify), form, box);

  const load = async () => {
    const query = new URLSearchParams({n: count.value});
    if (agent.value.trim()) query.set("agent", agent.value.trim());
    if (tool.value.trim()) query.set("tool", tool.value.trim());
    for (const o of outcome.value.split(/[\s,]+/).filter(Boolean)) query.append("outcome", o);
    try {
      const {records} = await api(`/api/audit?${query}`, {signal});
      redraw(box, records, () => table("Audit records", ["Time", "Seq", "Kind", "Agent", "Tool", "Outcome", "ms",
        "Detail"], records.slice().reverse().map(recordRow), "No records match."));
    } catch (exc) {
      if (exc.name !== "AbortError") fill(box, alertBox(exc.message));
    }
  };
  const check = async () => {
    verify.disabled = true;
    verdict.className = "verdict-box";
    verdict.textContent = "Checking the chain…";
    try {
      const report = await api("/api/audit/verify", {signal});
      verdict.textContent = report.summary;
      verdict.classList.add(report.ok ? "ok" : "bad");
    } catch (exc) {
      if (exc.name !== "AbortError") {
        verdict.textContent = exc.message;
        verdict.classList.add("bad");
      }
    } finally {
      verify.disabled = false;
    }
  };
  verify.addEventListener("click", check);
  for (const el of [agent, tool, outcome]) el.addEventListener("input", debounce(load, 400));
  count.addEventListener("change", load);
  const refresh = debounce(load, 250);
  onEvent((event) => LIVE.has(event.type) && refresh(), signal);
  load();
  check();
}
