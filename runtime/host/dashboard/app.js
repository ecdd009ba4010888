// The dashboard's shell: hash routes, the connection indicator, sign-in and sign-out.
// Each page module exports render(main, {signal, params, rest}); the signal aborts when
// the page is left, which drops its fetches, timers and event handlers.

import {api, getKey, onLive, onUnauthorized, setKey, watchNetwork} from "./api.js";
import {alertBox, fill, h} from "./dom.js";
import * as overview from "./overview.js";

// The overview loads with the shell (it is the first page most visits see); the others
// load when first opened, and in the background once the first page is drawn.
const PAGES = {
  overview: ["Overview", async () => overview],
  chat: ["Chat", () => import("./chat.js")],
  approvals: ["Approvals", () => import("./approvals.js")],
  runs: ["Runs", () => import("./runs.js")],
  triggers: ["Triggers", () => import("./triggers.js")],
  tasks: ["Tasks", () => import("./tasks.js")],
  audit: ["Audit", () => import("./audit.js")],
  tools: ["Tools", () => import("./tools.js")],
  config: ["Config", () => import("./config.js")],
};

const main = document.getElementById("main");
const signOut = document.getElementById("sign-out");
const connection = document.getElementById("connection");
let current = null; // AbortController of the page on screen
let signingIn = false;
let first = true;

function route() {
  const hash = location.hash;
  if (hash && !hash.startsWith("#/")) return null; // an in-page link (the skip link)
  const [path, query = ""] = hash.slice(2).split("?");
  const [name, ...rest] = path.split("/");
  const page = PAGES[name] ? name : "overview";
  return {page, rest: PAGES[name] ? rest.map(decodeURIComponent).join("/") : "", params: new URLSearchParams(query)};
}

async function show() {
  const where = route();
  if (!where) return;
  current?.abort();
  const mine = new AbortController();
  current = mine;
  const [title, load] = PAGES[where.page];
  for (const link of document.querySelectorAll("nav a[data-page]")) {
    if (link.dataset.page === where.page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  document.title = `${title} · tern`;
  const heading = h("h1", {tabIndex: -1, text: title});
  fill(main, heading);
  signOut.hidden = !getKey();
  try {
    const module = await load();
    if (current !== mine) return; // left while it loaded
    module.render(main, {signal: mine.signal, params: where.params, rest: where.rest});
  } catch (exc) { // a module that did not load (tern stopped?) or a bug: said on the page
    main.append(alertBox(`This page failed to draw: ${exc.message}`));
  }
  if (!first) heading.focus({preventScroll: true});
  first = false;
}

function signIn(error) {
  if (signingIn) return;
  current?.abort();
  current = new AbortController();
  signOut.hidden = true;
  for (const link of document.querySelectorAll("nav a[data-page]")) link.removeAttribute("aria-current");
  document.title = "Sign in · tern";
  const key = h("input", {id: "api-key", type: "password", autocomplete: "current-password", required: true,
    spellcheck: "false"});
  const message = h("div");
  const button = h("button", {type: "submit", class: "primary", text: "Sign in"});
  const hint = h("div", {class: "hint-box", role: "note", "aria-label": "Where the key is"});
  const form = h("form", {class: "card sign-in", "aria-label": "Sign in", onsubmit: async (e) => {
    e.preventDefault();
    const typed = key.value.trim();
    if (!/^[\x20-\x7e]+$/.test(typed)) { // a header carries nothing else: say so rather than fail to send
      fill(message, alertBox("An API key is printable ASCII; this one cannot be sent in a header."));
      return;
    }
    signingIn = true;
    button.disabled = true;
    fill(message);
    setKey(typed);
    try {
      await api("/api/status");
      signingIn = false;
      show();
    } catch (exc) {
      if (exc.status === 401) setKey("");
      fill(message, alertBox(exc.status === 401 ? `That key was refused: ${exc.message}` : exc.message));
      key.select();
    } finally {
      signingIn = false;
      button.disabled = false;
    }
  }},
  h("p", {text: "This tern asks for its API key. It is kept in this tab only (session storage) and sent as a header."}),
  hint,
  h("div", {class: "field"}, h("label", {for: "api-key", text: "API key"}), key),
  message, h("div", {class: "actions"}, button));
  fill(main, h("h1", {text: "Sign in"}), form);
  // Where a key can be found: the local token's file (said only to a browser on tern's own
  // machine, the only place it works), or the variable tern's own clients read the key from.
  fetch("/api/sign-in", {cache: "no-store", signal: current.signal}).then((r) => r.ok ? r.json() : null).then((said) => {
    if (!said) return;
    fill(hint, said.local_token_path ? [
      h("p", null, "On the machine tern runs on, its ", h("strong", {text: "local token"}), " works as a key. It is " +
        "in the file ", h("code", {text: said.local_token_path}), ": print it with"),
      h("pre", {class: "code", text: `cat ${said.local_token_path}`}),
      h("p", {text: "copy the line it prints and paste it below."})]
      : said.key_hint ? h("p", {class: "muted", text: `This daemon's API key: ${said.key_hint}.`}) : null);
  }, () => {});
  if (getKey() && error) fill(message, alertBox(`The saved key was refused: ${error.message}`));
  key.focus();
}

onUnauthorized((error) => signIn(error));
signOut.addEventListener("click", () => {
  setKey("");
  show();
});
document.getElementById("skip").addEventListener("click", (e) => {
  e.preventDefault();
  (main.querySelector("h1") || main).focus();
});
onLive((up) => {
  connection.textContent = up ? "Live" : "Offline";
  connection.classList.toggle("up", up);
});
addEventListener("hashchange", show);
show(); // the page's first successful call opens the events socket
watchNetwork();
setTimeout(() => Object.values(PAGES).forEach(([, load]) => load().catch(() => {})), 1500);
