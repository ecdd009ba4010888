// Element helpers: every node is built with textContent (never innerHTML), so data
// from the daemon can never become markup, and nothing here needs an inline style.

const PROPS = new Set(["value", "checked", "disabled", "hidden", "selected", "open", "multiple", "required",
  "readOnly", "tabIndex"]);

/** h("button", {type: "button", class: "x", onclick: fn}, "text", node, [more]) */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  setProps(el, props);
  append(el, children);
  return el;
}

const SVG = "http://www.w3.org/2000/svg";
const drawn = new WeakMap(); // box -> the data redraw() last drew in it

export function svg(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  setProps(el, attrs);
  append(el, children);
  return el;
}

function setProps(el, props) {
  if (!props) return;
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false && !PROPS.has(key)) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (PROPS.has(key)) el[key] = value;
    else if (key === "text") el.textContent = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

/** Replace an element's children. */
export function fill(el, ...children) {
  drawn.delete(el); // whatever redraw() drew there is gone
  el.replaceChildren();
  return append(el, children);
}

function named(el) {
  return el.getAttribute("aria-label") || el.textContent;
}

/** Redraw a box from data, only when the data changed, keeping the keyboard focus on the
 * control of the same name (a poll must not throw a keyboard user back to the top). */
export function redraw(box, data, build) {
  const json = JSON.stringify(data);
  if (drawn.get(box) === json) return;
  const active = document.activeElement;
  const focused = active && box.contains(active) ? named(active) : null;
  fill(box, build());
  drawn.set(box, json);
  if (focused !== null) [...box.querySelectorAll("a, button")].find((el) => named(el) === focused)?.focus();
}

/** A table in its own scrolling box (the page never scrolls sideways at 375 px). ``quiet``:
 * the caption is for screen readers only (a section's heading already says it on screen). */
export function table(caption, headers, rows, empty = "None.", quiet = false) {
  const body = h("tbody", null, rows.length ? rows : h("tr", null, h("td", {colspan: headers.length, class: "muted"},
    empty)));
  return h("div", {class: "table-wrap"}, h("table", null, h("caption", {text: caption, class: quiet ? "sr-only" : null}),
    h("thead", null, h("tr", null, headers.map((name) => h("th", {scope: "col", text: name})))), body));
}

export function row(...cells) {
  return h("tr", null, cells.map((cell) => cell instanceof Node && (cell.tagName === "TD" || cell.tagName === "TH") ? cell : h("td", null, cell)));
}

/** An error as the server said it, announced to screen readers. */
export function alertBox(message) {
  return h("p", {role: "alert", class: "error", text: message});
}

export function pretty(value) {
  try {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

// Control and invisible format characters (bidi overrides and isolates, zero-width ones,
// the BOM, tags) a server or a model may hide or reorder text with: shown as \u escapes,
// as runtime/log.py's clean() does for the terminal.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]|\udb40[\udc01\udc20-\udc7f]/g;

/** Text a peer wrote, with its unsafe characters visible as escapes (newlines kept). */
export function visible(text) {
  return String(text).replace(UNSAFE, (c) => c.length > 1
    ? `\\u{${c.codePointAt(0).toString(16)}}` : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** One look at a long text (runtime/log.py's preview): escaped, long runs of blanks and of
 * one repeated unit counted, and the middle cut, never the ends. */
export function preview(text, limit = 400) {
  let shown = visible(text).replace(/\n/g, "\\n");
  if (shown.length <= limit) return shown;
  shown = shown.replace(/(?:[ \t]|\\[nrt]){16,}/g, (m) => ` [${m.length.toLocaleString()} blank characters] `)
    .replace(/([^]{1,8}?)\1{15,}/g, (m, unit) => m.length > 24
      ? `[${unit} x${Math.floor(m.length / unit.length).toLocaleString()}]` : m);
  if (shown.length <= limit) return shown;
  const head = Math.floor(limit * 2 / 3);
  const tail = limit - head;
  return `${shown.slice(0, head)} [... ${(shown.length - head - tail).toLocaleString()} characters not shown ...] `
    + shown.slice(-tail);
}

export function when(seconds) {
  if (!seconds) return "";
  const date = new Date(seconds * 1000);
  const today = new Date().toDateString() === date.toDateString();
  return today ? date.toLocaleTimeString() : date.toLocaleString();
}

/** A duration in ms as people say it: 840 ms, 3.2 s, 4 min 10 s. */
export function took(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

/** How far from now a time (Unix seconds) is: "in 4 min", "3 h ago". */
export function relative(seconds) {
  const diff = Math.round(seconds - Date.now() / 1000);
  const size = Math.abs(diff);
  const text = size < 60 ? `${size} s` : size < 3600 ? `${Math.floor(size / 60)} min`
    : size < 172800 ? `${Math.floor(size / 3600)} h ${Math.floor((size % 3600) / 60)} min` : `${Math.floor(size / 86400)} d`;
  return diff >= 0 ? `in ${text}` : `${text} ago`;
}

/** A time in a zone, with the zone's own abbreviation and name: "Mon, Nov 30, 07:00 AM GMT+1 (Europe/Berlin)". */
export function inZone(seconds, zone) {
  const date = new Date(seconds * 1000);
  try {
    const text = new Intl.DateTimeFormat(undefined, {weekday: "short", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", timeZone: zone || "UTC", timeZoneName: "short"}).format(date);
    return zone && zone !== "UTC" ? `${text} (${zone})` : text;
  } catch { // a zone this browser does not know: UTC, said so
    return `${date.toISOString().slice(0, 16).replace("T", " ")} UTC`;
  }
}

export function stateBadge(state) {
  const tone = {ready: "ok", completed: "ok", ok: "ok", approved: "ok", working: "busy", connecting: "busy",
    restarting: "busy", submitted: "busy", "input-required": "warn", needs_auth: "warn", pending: "warn",
    "auth-required": "warn", running: "busy", queued: "busy", skipped: "muted", timeout: "bad",
    paused: "warn", tool_error: "bad", cancelled: "muted", budget_exceeded: "warn", failed: "bad", error: "bad", denied: "bad", rejected: "bad", canceled: "muted",
    stopped: "muted", disabled: "muted", expired: "muted"}[state] || "muted";
  return h("span", {class: `badge ${tone}`, text: state});
}

/** Calls fn at most once per `ms` (trailing), for refreshes driven by bursts of events. */
export function debounce(fn, ms) {
  let timer = 0;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
