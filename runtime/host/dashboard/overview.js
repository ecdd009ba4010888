// Overview: what the daemon runs and what it has done. The skeleton renders at once; each
// section fills when its call answers, and again every few seconds and on events. The
// charts and the recent runs come from the history the daemon keeps (/api/activity), so
// they start filled after a restart, not counting from page load.

import {RESYNC, api, isApprovalEvent, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, inZone, redraw, relative, row, stateBadge, svg, table, took, when} from "./dom.js";

const POLL_MS = 3000;
const MINUTES = 40;
const CHARTS = [["runs", "Agent runs"], ["model_calls", "Model calls"], ["tool_calls", "Tool calls"],
  ["errors", "Errors"]];
const LIVE = new Set(["tool.call", "agent.message", "model.call"]);

function chart(history, key, name) {
  const values = history ? history.series[key] : []; // per minute, oldest first; the last is still open
  const max = Math.max(1, ...values);
  const width = 200;
  const height = 48;
  const step = width / MINUTES;
  const bars = values.map((v, i) => {
    const tall = Math.max(v ? 1.5 : 0, (v / max) * (height - 2));
    const open = i === values.length - 1;
    return svg("rect", {x: ((MINUTES - values.length + i) * step).toFixed(1), y: (height - tall).toFixed(1),
      width: (step - 1).toFixed(1), height: tall.toFixed(1),
      class: `bar${key === "errors" && v ? " bad" : ""}${open ? " open" : ""}`});
  });
  const latest = values.length ? values[values.length - 1] : 0;
  const total = values.reduce((a, b) => a + b, 0);
  const tokens = key === "model_calls" && history ? history.series.tokens.reduce((a, b) => a + b, 0) : 0;
  return h("figure", {class: "chart"},
    svg("svg", {role: "img", "aria-label": name, viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none"},
      svg("title", {text: `${name}: ${total} in the last ${values.length} min, ${latest} this minute`}),
      svg("line", {x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis"}), bars),
    h("figcaption", null, h("strong", {text: name}), " ", h("span", {text: `${total} in ${values.length} min`}),
      h("span", {class: "more", text: ` · peak ${Math.max(0, ...values)}/min` +
        (tokens ? ` · ${tokens} tokens` : "")})));
}

function runLink(run, text) {
  return h("a", {href: `#/runs/${run.seq}`, text: text || when(run.ended)});
}

function asked(run) {
  return run.caller || "—";
}

function section(title, wide, ...body) {
  return h("section", {class: wide ? "wide" : null, "aria-labelledby": `h-${title.replace(/\W+/g, "-")}`},
    h("h2", {id: `h-${title.replace(/\W+/g, "-")}`, text: title}), ...body);
}

function mcpRow(server, onAction) {
  const actions = h("td", {class: "actions"},
    h("button", {type: "button", text: "Restart", "aria-label": `Restart ${server.name}`,
      onclick: (e) => onAction(e.target, "restart", server.name)}),
    server.state === "needs_auth" ? h("button", {type: "button", class: "primary", text: "Log in",
      "aria-label": `Log in to ${server.name}`, onclick: (e) => onAction(e.target, "login", server.name)}) : null);
  return row(h("th", {scope: "row", text: server.name}), stateBadge(server.state), String(server.tools ?? ""),
    h("td", {class: "wrap", text: [server.last_error, held(server)].filter(Boolean).join("; ") || "—"}),
    String(server.restarts ?? 0), actions);
}

/** Tools not as tern.lock pins them: held for approval (enforce) or offered anyway (warn). */
function held(server) {
  const tools = Object.entries(server.unlocked || {});
  if (!tools.length) return "";
  const verb = server.lock === "warn" ? "offered anyway" : "held for approval";
  return `${verb}: ${tools.map(([name, state]) => `${name} ${state}`).join(", ")}`;
}

export function render(main, {signal}) {
  const boxes = {
    agents: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    runs: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    mcp: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    peers: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    tasks: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    approvals: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    triggers: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    charts: h("div", {class: "charts"}),
  };
  const notice = h("div", {class: "notice"});
  const headline = h("p", {class: "lead"});
  main.append(headline, notice, h("div", {class: "grid"},
    section("Activity", true, boxes.charts),
    section("Recent runs", true, boxes.runs),
    section("Agents", true, boxes.agents),
    section("MCP servers", true, boxes.mcp),
    section("Approvals", false, boxes.approvals),
    section("Triggers", false, boxes.triggers),
    section("Tasks", false, boxes.tasks),
    section("External agents", false, boxes.peers)));
  let history = null; // the last /api/activity answer
  let status = null;
  const drawCharts = () => redraw(boxes.charts, history && history.series,
    () => CHARTS.map(([key, name]) => chart(history, key, name)));
  drawCharts();

  const busy = new Set(); // actions under way (the button stays enabled so it keeps the focus)
  const action = async (button, what, name) => {
    if (busy.has(`${what} ${name}`)) return;
    busy.add(`${what} ${name}`);
    button.setAttribute("aria-disabled", "true");
    fill(notice);
    try {
      const answer = await api(`/api/mcp/servers/${encodeURIComponent(name)}/${what}`, {method: "POST", signal});
      if (what === "login" && answer && /^https?:/i.test(answer.authorization_url || "")) {
        fill(notice, h("p", {role: "status"}, `Open this link to log in to ${name}: `,
          h("a", {href: answer.authorization_url, target: "_blank", rel: "noopener noreferrer",
            text: "authorize " + name})));
      } else {
        fill(notice, h("p", {role: "status", text: `${name}: ${what === "restart" ? "restarting" : "login started"}.`}));
      }
      refresh();
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, alertBox(exc.message));
    } finally {
      busy.delete(`${what} ${name}`);
      button.removeAttribute("aria-disabled");
    }
  };

  const drawAgents = () => {
    if (!status) return;
    const last = history ? history.last_runs : {};
    redraw(boxes.agents, [status.agents, status.budgets, last], () => table("Agents",
      ["Name", "Kind", "Description", "Last run", "Budget"], (status.agents || []).map((a) => {
        const budget = (status.budgets || {})[a.name];
        const used = budget && budget.requests ? `${budget.requests.used}/${budget.requests.limit} requests` : "—";
        const run = last[a.name];
        return row(h("th", {scope: "row"}, h("a", {href: `#/chat?agent=${encodeURIComponent(a.name)}`,
          text: a.name})), a.kind, h("td", {class: "wrap", text: a.description || "—"}),
        run ? h("td", {class: "nowrap"}, stateBadge(run.outcome), " ", runLink(run, relative(run.ended)))
          : h("td", {class: "muted", text: history ? "never" : "…"}), used);
      }), "No agents are configured.", true));
  };
  const drawRuns = () => redraw(boxes.runs, history.runs, () => [table("Recent runs",
    ["When", "Agent", "Asked by", "Outcome", "Took", "Model calls", "Tool calls", "Tokens"], history.runs.map((r) =>
      row(h("td", {class: "nowrap"}, runLink(r)), r.agent, h("td", {class: "wrap", text: asked(r)}),
        stateBadge(r.outcome || "ok"), took(r.ms), String(r.model_calls), String(r.tool_calls),
        r.tokens ? String(r.tokens) : "—")), "Nothing has run yet: send an agent a message in Chat.", true),
  history.runs.length ? h("p", null, h("a", {href: "#/runs", text: "All runs"})) : null]);
  const loadHistory = async () => {
    try {
      history = await api(`/api/activity?minutes=${MINUTES}&limit=10`, {signal});
      drawCharts();
      drawRuns();
      drawAgents();
    } catch (exc) {
      if (exc.name !== "AbortError") fill(boxes.runs, alertBox(exc.message));
    }
  };
  const show = (answer) => {
    status = answer;
    const up = Math.round(status.uptime_secs || 0);
    fill(headline, `tern ${status.version} · up ${up >= 3600 ? `${Math.floor(up / 3600)} h ` : ""}` +
      `${Math.floor((up % 3600) / 60)} min`, status.audit && !status.audit.ok
      ? h("span", {class: "bad-text", text: ` · audit log failing: ${status.audit.error}`}) : null);
    drawAgents();
    redraw(boxes.mcp, status.mcp_servers, () => table("MCP servers",
      ["Name", "State", "Tools", "Last error", "Restarts", "Actions"],
      (status.mcp_servers || []).map((s) => mcpRow(s, action)), "No MCP servers are configured.", true));
    redraw(boxes.peers, status.a2a_peers, () => table("External agents", ["Name", "State", "URL", "Error"],
      (status.a2a_peers || []).map((p) => row(h("th", {scope: "row", text: p.name}), stateBadge(p.state || "unknown"),
        h("td", {class: "wrap", text: p.url}), h("td", {class: "wrap", text: p.error || "—"}))),
      "No external A2A agents are configured.", true));
    const counts = status.tasks === null ? null : Object.entries(status.tasks || {});
    redraw(boxes.tasks, counts, () => counts === null
      ? h("p", {class: "muted", text: "A2A is off on this tern ([a2a] enabled = true serves tasks)."})
      : table("Tasks by state", ["State", "Tasks"], counts.map(([state, n]) =>
        row(h("td", null, h("a", {href: `#/tasks?state=${encodeURIComponent(state)}`}, stateBadge(state))),
          String(n))), "No A2A tasks yet.", true));
  };
  const showApprovals = (approvals) => {
    redraw(boxes.approvals, approvals.map((a) => a.id), () => [approvals.length
      ? h("ul", {class: "plain"}, approvals.slice(0, 5).map((a) => h("li", null, h("strong", {text: a.tool}),
        ` for ${a.agent || "the operator"}`)))
      : h("p", {class: "muted", text: "Nothing is waiting."}),
    h("p", null, h("a", {href: "#/approvals", text: approvals.length ? `Answer ${approvals.length} pending`
      : "Open the approvals queue"}))]);
  };

  const showTriggers = (triggers) => redraw(boxes.triggers, triggers, () => [table("Triggers",
    ["Name", "Agent", "Next run", "Last run"], triggers.map((t) => row(
      h("th", {scope: "row"}, h("a", {href: `#/triggers/${encodeURIComponent(t.name)}`, text: t.name})), t.agent,
      t.paused ? stateBadge("paused") : t.next_fire ? h("td", {class: "small", text: `${inZone(t.next_fire, t.timezone)}` +
        ` · ${relative(t.next_fire)}`}) : h("td", {class: "muted", text: t.kind === "schedule" ? "—" : "when called"}),
      t.last_run ? h("td", {class: "nowrap"}, stateBadge(t.last_run.outcome), " ", h("a", {text: relative(
        t.last_run.started_at), href: `#/runs?context=${encodeURIComponent(t.last_run.id)}`}))
        : h("td", {class: "muted", text: "never"}))), "No triggers are configured.", true),
  h("p", null, h("a", {href: "#/triggers", text: "Open the triggers"}))]);
  const load = async () => {
    // All asked at once; each section is drawn as soon as its answer is in.
    const approvals = api("/api/approvals?state=pending", {signal}).then((listed) => showApprovals(listed.approvals),
      (exc) => exc.name !== "AbortError" && fill(boxes.approvals, alertBox(exc.message)));
    const past = loadHistory();
    const triggers = api("/api/triggers", {signal}).then((listed) => showTriggers(listed.triggers),
      (exc) => exc.name !== "AbortError" && fill(boxes.triggers, alertBox(exc.message)));
    try {
      show(await api("/api/status", {signal}));
      if (notice.querySelector(".error.poll")) fill(notice);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, h("p", {role: "alert", class: "error poll", text: exc.message}));
    }
    await Promise.all([approvals, past, triggers]);
  };
  const refresh = debounce(load, 300);
  const timer = setInterval(() => document.hidden || load(), POLL_MS); // a hidden tab asks nothing
  signal.addEventListener("abort", () => clearInterval(timer));
  onEvent((event) => {
    const type = event.type || "";
    if (LIVE.has(type)) {
      debouncedHistory();
    } else if (type.startsWith("mcp.") || isApprovalEvent(event) || type === "a2a.task" || type.startsWith("config.") ||
      type.startsWith("trigger.") || type === RESYNC) {
      refresh();
    }
  }, signal);
  const debouncedHistory = debounce(loadHistory, 400); // the daemon writes its history in short batches
  load();
}
