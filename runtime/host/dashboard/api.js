// The daemon's API from the page: JSON calls, SSE streams read from fetch (POST bodies),
// and the events WebSocket with reconnect. The API key lives in sessionStorage only and
// travels as a header (a WebSocket subprotocol for the socket): never in a URL or cookie.

const KEY = "tern.key";
const MAX_LINE = 4 * 1024 * 1024; // an SSE line longer than this ends the stream

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function getKey() {
  try {
    return sessionStorage.getItem(KEY) || "";
  } catch {
    return "";
  }
}

export function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
  halt(); // the next call that succeeds opens the socket with the new key
}

let unauthorized = () => {};
/** What to do when the daemon answers 401 (app.js shows the sign-in form). */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

function headers(extra) {
  const out = {Accept: "application/json", ...extra};
  const key = getKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

function messageOf(data, response) {
  const error = data && data.error;
  if (typeof error === "string") return error;
  if (error && typeof error.message === "string") return error.message;
  return `${response.status} ${response.statusText || "error"}`;
}

async function send(path, init) {
  try {
    return await fetch(path, {cache: "no-store", ...init});
  } catch (exc) {
    if (exc.name === "AbortError") throw exc;
    throw new ApiError(0, "tern did not answer (is it still running?)");
  }
}

async function fail(response) {
  let data = null;
  try {
    data = await response.json();
  } catch {
    // not JSON: the status line says enough
  }
  const error = new ApiError(response.status, messageOf(data, response));
  if (response.status === 401) {
    halt(); // the socket would be refused too: it waits for a key that works
    unauthorized(error);
  }
  return error;
}

/** A JSON call; throws ApiError with the server's own message. */
export async function api(path, {method = "GET", body, signal} = {}) {
  const init = {method, signal, headers: headers(body === undefined ? {} : {"Content-Type": "application/json"})};
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await send(path, init);
  if (!response.ok) throw await fail(response);
  if (halted) connect(); // this key works: the socket can open
  return response.status === 204 ? null : response.json();
}

/** GET a file with the key and hand it to the browser as a download named `filename`. */
export async function download(path, filename) {
  const response = await send(path, {headers: headers({Accept: "application/json"})});
  if (!response.ok) throw await fail(response);
  const url = URL.createObjectURL(await response.blob());
  const link = Object.assign(document.createElement("a"), {href: url, download: filename});
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** POST a JSON body and read the answer as server-sent events: onEvent(kind, data). */
export async function stream(path, body, onEvent, signal) {
  const response = await send(path, {method: "POST", signal, body: JSON.stringify(body),
    headers: headers({"Content-Type": "application/json", Accept: "text/event-stream"})});
  if (!response.ok) throw await fail(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let kind = "message";
  let data = [];
  const line = (text) => {
    if (text === "") {
      if (data.length) {
        let value = data.join("\n");
        try {
          value = JSON.parse(value);
        } catch {
          // a plain-text event: handed on as it is
        }
        onEvent(kind, value);
      }
      kind = "message";
      data = [];
    } else if (!text.startsWith(":")) {
      const colon = text.indexOf(":");
      const field = colon < 0 ? text : text.slice(0, colon);
      let value = colon < 0 ? "" : text.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") kind = value || "message";
      else if (field === "data") data.push(value);
    }
  };
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n")) >= 0) {
        line(buffer.slice(0, end).replace(/\r$/, ""));
        buffer = buffer.slice(end + 1);
      }
      if (buffer.length > MAX_LINE) throw new ApiError(0, "the stream sent a line too long to read");
    }
    if (buffer) line(buffer.replace(/\r$/, ""));
    line("");
  } finally {
    reader.releaseLock();
  }
}

// The events WebSocket: one for the page, reconnecting with backoff.

const listeners = new Set();
const stateListeners = new Set();
let socket = null;
let retry = 0;
let timer = 0;
let greeted = false; // the first hello: nothing was missed before it
let halted = true; // no socket until a call succeeds, so a page that must sign in first makes no doomed attempts
let live = false;

/** The event a page gets when it may have missed some: it reads its data again. */
export const RESYNC = "resync";

/** approval_requested, approval_resolved (and any approval.* kind to come). */
export function isApprovalEvent(event) {
  return /^approval[._]/.test(event.type || "");
}

/** Call fn(event) for every event until the signal aborts. */
export function onEvent(fn, signal) {
  listeners.add(fn);
  signal?.addEventListener("abort", () => listeners.delete(fn));
}

export function onLive(fn) {
  stateListeners.add(fn);
  fn(live);
}

function setLive(value) {
  if (value === live) return;
  live = value;
  for (const fn of stateListeners) fn(value);
}

function base64url(text) {
  let binary = "";
  for (const byte of new TextEncoder().encode(text)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function dispatch(event) {
  for (const fn of [...listeners]) {
    try {
      fn(event);
    } catch (exc) {
      console.warn("an event handler failed", exc);
    }
  }
}

function connect() {
  clearTimeout(timer);
  halted = false;
  const url = new URL("/api/events", location.href);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const key = getKey();
  const ws = new WebSocket(url.href, key ? ["tern.events", `tern.key.${base64url(key)}`] : ["tern.events"]);
  socket = ws;
  ws.addEventListener("message", (message) => {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return;
    }
    if (event.type === "hello") {
      retry = 0;
      setLive(true);
      // A hello after the first: events went by while the socket was down.
      if (greeted) dispatch({type: RESYNC});
      greeted = true;
      return;
    }
    dispatch(event);
    if (event.dropped_before) dispatch({type: RESYNC}); // the daemon's queue for us was full: some were lost
  });
  ws.addEventListener("open", () => setLive(true));
  ws.addEventListener("close", () => {
    if (socket !== ws) return; // replaced on purpose
    socket = null;
    setLive(false);
    const delay = Math.min(30000, 500 * 2 ** retry) * (0.75 + Math.random() / 2);
    retry = Math.min(retry + 1, 6);
    timer = setTimeout(connect, delay);
  });
}

/** Close the socket and keep it closed until connect(). */
function halt() {
  clearTimeout(timer);
  halted = true;
  const old = socket;
  socket = null;
  retry = 0;
  old?.close();
  setLive(false);
}

/** Reconnect at once when the tab comes back or the network returns, not after the backoff. */
export function watchNetwork() {
  const again = () => {
    if (!socket && !halted) connect();
  };
  addEventListener("online", again);
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible") again();
  });
}
