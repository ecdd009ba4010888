// Overview: what the daemon runs and how busy it is. The skeleton renders at once; each
// section fills when /api/status answers, and again every few seconds and on events.

import {RESYNC, api, isApprovalEvent, onEvent} from "./api.js";
import {alertBox, debounce, fill, h, redraw, row, stateBadge, svg, table} from "./dom.js";

const POLL_MS = 3000;
const POINTS = 40;
const CHARTS = [["requests", "Requests"], ["tools", "Tool calls"], ["errors", "Errors"]];

// Kept across visits to the page, so the charts keep their history.
const series = {requests: [], tools: [], errors: []};
let last = null; // {at, counters}
let pending = {requests: 0, tools: 0, errors: 0}; // seen on the socket since the last poll

function push(values) {
  for (const key of Object.keys(series)) {
    series[key].push(values[key]);
    if (series[key].length > POINTS - 1) series[key].shift(); // the last slot is the open interval
  }
}

/** Close one interval: counter deltas when the daemon reports counters, else what the socket saw. */
function sample(counters) {
  const now = Date.now();
  if (counters && last && last.counters && now - last.at < POLL_MS * 3) {
    const d = (k) => Math.max(0, (counters[k] || 0) - (last.counters[k] || 0));
    push({requests: d("http_requests"), tools: d("tool_calls"), errors: d("http_errors") + d("tool_errors")});
  } else if (!counters && last) {
    push(pending);
  }
  last = {at: now, counters};
  pending = {requests: 0, tools: 0, errors: 0};
}

function chart(key, name) {
  const values = series[key]; // closed intervals, oldest first
  // The last slot is the interval still open: what the socket has seen so far (tool
  // calls and their errors; it cannot see HTTP requests), drawn lighter until it closes.
  const open = key === "requests" ? 0 : pending[key];
  const max = Math.max(1, open, ...values);
  const width = 200;
  const height = 48;
  const step = width / POINTS;
  const bar = (v, slot, cls) => {
    const tall = Math.max(v ? 1.5 : 0, (v / max) * (height - 2));
    return svg("rect", {x: (slot * step).toFixed(1), y: (height - tall).toFixed(1), width: (step - 1).toFixed(1),
      height: tall.toFixed(1), class: cls});
  };
  const bars = values.map((v, i) => bar(v, POINTS - 1 - values.length + i, key === "errors" && v ? "bar bad" : "bar"));
  if (open) bars.push(bar(open, POINTS - 1, "bar open"));
  const latest = values.length ? values[values.length - 1] : 0;
  const total = values.reduce((a, b) => a + b, 0);
  const seconds = POLL_MS / 1000;
  return h("figure", {class: "chart"},
    svg("svg", {role: "img", "aria-label": name, viewBox: `0 0 ${width} ${height}`, preserveAspectRatio: "none"},
      svg("title", {text: `${name}: ${latest} in the last ${seconds} s`}),
      svg("line", {x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis"}), bars),
    h("figcaption", null, h("strong", {text: name}), " ", h("span", {text: `${latest} per ${seconds} s`}),
      h("span", {class: "more", text: ` · ${total} in ${Math.round(values.length * seconds)} s · peak ` +
        `${Math.max(0, open, ...values)}`})));
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
    mcp: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    peers: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    tasks: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    approvals: h("div", null, h("p", {class: "muted", text: "Loading…"})),
    charts: h("div", {class: "charts"}),
  };
  const notice = h("div", {class: "notice"});
  const headline = h("p", {class: "lead"});
  main.append(headline, notice, h("div", {class: "grid"},
    section("Activity", true, boxes.charts),
    section("MCP servers", true, boxes.mcp),
    section("Agents", false, boxes.agents),
    section("Approvals", false, boxes.approvals),
    section("Tasks", false, boxes.tasks),
    section("External agents", false, boxes.peers)));
  const drawCharts = () => fill(boxes.charts, CHARTS.map(([key, name]) => chart(key, name)));
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

  const show = (status) => {
    const up = Math.round(status.uptime_secs || 0);
    fill(headline, `tern ${status.version} · up ${up >= 3600 ? `${Math.floor(up / 3600)} h ` : ""}` +
      `${Math.floor((up % 3600) / 60)} min`, status.audit && !status.audit.ok
      ? h("span", {class: "bad-text", text: ` · audit log failing: ${status.audit.error}`}) : null);
    redraw(boxes.agents, [status.agents, status.budgets], () => table("Agents", ["Name", "Kind", "Budget"],
      (status.agents || []).map((a) => {
        const budget = (status.budgets || {})[a.name];
        const used = budget && budget.requests ? `${budget.requests.used}/${budget.requests.limit} requests` : "—";
        return row(h("th", {scope: "row"}, h("a", {href: `#/chat?agent=${encodeURIComponent(a.name)}`,
          text: a.name})), a.kind, used);
      }), "No agents are configured."));
    redraw(boxes.mcp, status.mcp_servers, () => table("MCP servers",
      ["Name", "State", "Tools", "Last error", "Restarts", "Actions"],
      (status.mcp_servers || []).map((s) => mcpRow(s, action)), "No MCP servers are configured."));
    redraw(boxes.peers, status.a2a_peers, () => table("External agents", ["Name", "State", "URL", "Error"],
      (status.a2a_peers || []).map((p) => row(h("th", {scope: "row", text: p.name}), stateBadge(p.state || "unknown"),
        h("td", {class: "wrap", text: p.url}), h("td", {class: "wrap", text: p.error || "—"}))),
      "No external A2A agents are configured."));
    const counts = status.tasks === null ? null : Object.entries(status.tasks || {});
    redraw(boxes.tasks, counts, () => counts === null
      ? h("p", {class: "muted", text: "A2A is off on this tern ([a2a] enabled = true serves tasks)."})
      : table("Tasks by state", ["State", "Tasks"], counts.map(([state, n]) =>
        row(h("td", null, h("a", {href: `#/tasks?state=${encodeURIComponent(state)}`}, stateBadge(state))),
          String(n))), "No A2A tasks yet."));
  };
  const showApprovals = (approvals) => {
    redraw(boxes.approvals, approvals.map((a) => a.id), () => [approvals.length
      ? h("ul", {class: "plain"}, approvals.slice(0, 5).map((a) => h("li", null, h("strong", {text: a.tool}),
        ` for ${a.agent || "the operator"}`)))
      : h("p", {class: "muted", text: "Nothing is waiting."}),
    h("p", null, h("a", {href: "#/approvals", text: approvals.length ? `Answer ${approvals.length} pending`
      : "Open the approvals queue"}))]);
  };

  // tick: a timer's poll, which closes a chart interval; a refresh on an event only redraws.
  const load = async (tick) => {
    // Both asked at once; each section is drawn as soon as its answer is in.
    const approvals = api("/api/approvals?state=pending", {signal}).then((listed) => showApprovals(listed.approvals),
      (exc) => exc.name !== "AbortError" && fill(boxes.approvals, alertBox(exc.message)));
    try {
      const status = await api("/api/status", {signal});
      if (tick) {
        sample(status.counters || null);
        drawCharts();
      }
      show(status);
      if (notice.querySelector(".error.poll")) fill(notice);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, h("p", {role: "alert", class: "error poll", text: exc.message}));
    }
    await approvals;
  };
  const refresh = debounce(() => load(false), 300);
  const timer = setInterval(() => document.hidden || load(true), POLL_MS); // a hidden tab asks nothing
  signal.addEventListener("abort", () => clearInterval(timer));
  onEvent((event) => {
    const type = event.type || "";
    if (type === "tool.call") {
      pending.tools += 1;
      if (event.outcome && event.outcome !== "ok") pending.errors += 1;
      drawCharts();
    } else if (type.startsWith("mcp.") || isApprovalEvent(event) || type === "a2a.task" || type.startsWith("config.") ||
      type === RESYNC) {
      refresh();
    }
  }, signal);
  load(true);
}
