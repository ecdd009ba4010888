// Config: the running configuration with secrets masked, and Reload, which re-reads the
// file the daemon started with (an invalid file leaves the running config as it was).

import {RESYNC, api, onEvent} from "./api.js";
import {alertBox, fill, h, pretty} from "./dom.js";

function value(v) {
  return JSON.stringify(v);
}

/** The config as TOML-like text: the file's own shape, easier to read than nested JSON. */
function asToml(config) {
  const lines = [];
  const keys = (table) => {
    for (const [k, v] of Object.entries(table)) {
      if (!isTable(v) && !isTableList(v)) lines.push(`${k} = ${value(v)}`);
    }
  };
  const isTable = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
  const isTableList = (v) => Array.isArray(v) && v.length > 0 && v.every(isTable);
  const walk = (table, path) => {
    for (const [k, v] of Object.entries(table)) {
      const name = path ? `${path}.${k}` : k;
      if (isTable(v)) {
        lines.push("", `[${name}]`);
        keys(v);
        walk(v, name);
      } else if (isTableList(v)) {
        for (const item of v) {
          lines.push("", `[[${name}]]`);
          keys(item);
          walk(item, name);
        }
      }
    }
  };
  keys(config);
  walk(config, "");
  return lines.join("\n").trim();
}

export function render(main, {signal}) {
  const path = h("p", {class: "muted"});
  const pre = h("pre", {class: "code config", tabIndex: 0, text: "Loading…"});
  const notice = h("div");
  const reload = h("button", {type: "button", class: "primary", text: "Reload"});
  main.append(h("div", {class: "toolbar"}, path, reload), notice, pre);

  const load = async () => {
    try {
      const data = await api("/api/config", {signal});
      path.textContent = data.path ? `From ${data.path}` : "Built-in configuration";
      pre.textContent = asToml(data.config);
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, alertBox(exc.message));
    }
  };
  const changed = (data) => {
    const changes = data.changes || [];
    const skipped = data.not_applied || [];
    fill(notice, h("div", {role: "status", class: "ok-box"},
      h("p", {text: changes.length ? `Reloaded: ${changes.length} change(s) applied.` : "Reloaded: nothing changed."}),
      changes.length ? h("ul", null, changes.map((c) => h("li", {text: typeof c === "string" ? c : pretty(c)}))) : null,
      skipped.length ? h("p", {text: "Needs a restart to apply:"}) : null,
      skipped.length ? h("ul", null, skipped.map((c) => h("li", {text: typeof c === "string" ? c : pretty(c)}))) : null));
  };
  reload.addEventListener("click", async () => {
    reload.disabled = true;
    fill(notice);
    try {
      changed(await api("/api/config/reload", {method: "POST", signal}));
      load();
    } catch (exc) {
      if (exc.name !== "AbortError") fill(notice, alertBox(exc.message));
    } finally {
      reload.disabled = false;
    }
  });
  onEvent((event) => {
    if (event.type === "config.reloaded" || event.type === RESYNC) load();
    else if (event.type === "config.reload_failed" && !reload.disabled) fill(notice, alertBox(event.error));
  }, signal);
  load();
}
