"""``tern serve``: the kernel and the HTTP server in one process, until a signal.

SIGINT or SIGTERM starts a graceful shutdown (stop accepting, finish requests within
``shutdown_grace_secs``, close MCP servers); a second signal cancels at once. A
discovery file (``daemon.json`` in the state directory, mode 0600: pid, URL, start
time) tells ``tern status`` and ``tern events`` where the daemon is; it is removed on
a clean exit and recognised as stale when its pid is gone. Clients check it before they
trust it (``discovery.py``).

SIGHUP (``tern reload``) re-reads the config file the daemon was started with and
applies it (``Node.reload``; what cannot change in a running process is kept and
named); a file that does not load is refused with its one-line error, logged and
published as a ``config.reload_failed`` event, and the running config stays.

With no API key the daemon serves only its own OS user: a loopback peer's socket must
belong to this uid (``net/peer.py``), or the request must carry the local token
(``local-token`` in the state directory, 0600), which tern's own clients send. So the
state directory must be ours and not group- or world-writable, or the daemon refuses
to start.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import trio

from runtime import __version__
from runtime.config import Config, parse_listen
from runtime.config.checks import key_warning
from runtime.errors import ConfigError, UsageError
from runtime.log import get_logger, register_secret

from runtime.host.discovery import (DISCOVERY_FILE, api_key, client_headers, config_label, discovery_path,
                                    ensure_local_token, write_operator_token,
                                    read_record, trusted_daemon, unsafe_owner_or_mode)

__all__ = ["serve", "api_key", "key_hint", "unauthorized_hint", "read_discovery", "discovery_path", "client_headers",
           "DISCOVERY_FILE"]

log = get_logger("daemon")




def key_hint(config: Config) -> str:
    """Where tern's own clients take this daemon's key from, for a 401's body: the
    variable's name (never its value), or the config key."""
    if config.server.api_key_env:
        return f"tern's own clients send ${config.server.api_key_env}: set it to this daemon's key"
    if config.server.api_key:
        return "tern's own clients send [server] api_key from their config file"
    return ""


def unauthorized_hint(config: Config, said: str = "") -> str:
    """What a person should set when the daemon answered one of tern's own clients with
    a 401 (``said``: its body), judged from the client's side of the same config."""
    name = config.server.api_key_env
    if "no API key configured" in said:  # a keyless daemon: it wants its own user, or the local token
        sent = f"; unset {name}, so tern sends the local token instead of a key" if name and os.environ.get(name) \
            else ""
        return f"the daemon has no API key and serves only the OS user that runs it: run this as that user{sent}"
    if name and not os.environ.get(name):
        return f"set {name} to the daemon's key ([server] api_key_env names it; it is not set here)"
    if name:
        return f"{name} does not hold the daemon's key: set it to the key the daemon was started with"
    if config.server.api_key:
        return "this config's [server] api_key is not the daemon's key"
    return ('the daemon has a key and this config names none: set [server] api_key_env = "TERN_API_KEY" '
            "and TERN_API_KEY to the daemon's key")


def read_discovery(config: Config) -> tuple[dict[str, Any] | None, str]:
    """(the daemon's record, "") if a client may send it a key, else (None, why not)."""
    return trusted_daemon(config)




def _check_state_dir(config: Config) -> Path:
    state = Path(config.state.dir)
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    why = unsafe_owner_or_mode(os.stat(state), f"the state directory {state}")
    if why:
        raise UsageError(f"{why}: other users could plant the discovery file or read the local token; "
                         "fix its owner and mode (chmod go-w) or set [state] dir")
    return state


def _write_discovery(config: Config, url: str, config_path: Path | None = None) -> Path:
    path = discovery_path(config)
    record, why = read_record(config)
    if record is not None and record.get("pid") != os.getpid():
        raise UsageError(f"another tern daemon (pid {record['pid']}, {record.get('url')}) uses the state "
                         f"directory {path.parent}; stop it or set [state] dir")
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"pid": os.getpid(), "url": url, "started": time.time(), "version": __version__,
                   "config": config_label(config_path)}, handle)
    os.replace(temp, path)
    return path


def _ssl_context(config: Config) -> ssl.SSLContext | None:
    server = config.server
    if not (server.tls_cert or server.tls_key):
        return None
    if not (server.tls_cert and server.tls_key):
        raise ConfigError("[server] tls_cert and tls_key go together: set both or neither")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(server.tls_cert, server.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"[server] tls_cert/tls_key: cannot load them: {exc}") from None
    if server.tls_client_ca:  # mTLS: a certificate signed by this CA names a key (tls_subject)
        try:
            context.load_verify_locations(server.tls_client_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"[server] tls_client_ca: cannot load it: {exc}") from None
        context.verify_mode = ssl.CERT_REQUIRED if server.tls_client_required else ssl.CERT_OPTIONAL
    return context


def key_table(config: Config, running: Config | None = None) -> Any:
    """Every key the daemon accepts: ``api_key`` (the ``running`` config's at a reload: it
    changes at restart, as the rest of ``[server]``), ``[[server.keys]]`` and the stored
    ``tern keys`` (read at boot and on reload; a ``key_env`` that is not set is a ConfigError)."""
    from runtime.config.keys import KeyTable
    from runtime.host.keystore import read_keys

    return KeyTable.build(api_key(running or config), config.server.keys, read_keys(running or config))


def _url(host: str, port: int, tls: bool) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


RELOAD_SIGNAL = getattr(signal, "SIGHUP", None)  # not on Windows


def reload_config(node: Any, path: Path | None) -> dict[str, Any]:
    """Re-read the daemon's config file and apply it: ``{changes, not_applied}``. A file
    that does not load raises ConfigError with its one-line error, and the running config
    stays (SIGHUP and ``POST /api/config/reload`` both come here)."""
    from runtime.config import BUNDLED_LABEL, bundled_config_text, load_config, parse_config

    try:
        config = load_config(str(path)).config if path is not None else \
            parse_config(bundled_config_text(), BUNDLED_LABEL, None)
        keys = key_table(config, running=node.config) if node.access is not None else None
    except ConfigError as exc:
        log.error("reload refused, the running config is kept: %s", exc)
        node.kernel.events.publish("config.reload_failed", {"error": str(exc)})
        raise
    try:
        report = node.reload(config)
        if keys is not None:  # [[server.keys]] and the stored keys apply now; the rest of [server] at restart
            node.access.keys = keys
            report["not_applied"] = [name for name in report["not_applied"] if name != "[server] keys"]
    except Exception as exc:  # a bug in applying it must not take the daemon down with it
        log.error("reload failed part way: %s: %s; restart tern serve to be sure of its config",
                  type(exc).__name__, exc, exc_info=True)
        error = f"internal error while applying it: {type(exc).__name__}"
        node.kernel.events.publish("config.reload_failed", {"error": error})
        raise ConfigError(f"{error}; restart tern serve to be sure of its config") from None
    changes = [f"{what} {verb}: {', '.join(names)}"
               for what, key in (("agents", "agents"), ("MCP servers", "mcp_servers"))
               for verb, names in report[key].items() if names and verb != "kept"]
    log.warning("reloaded %s: %s", path or BUNDLED_LABEL, "; ".join(changes) or "nothing changed")
    if report["not_applied"]:
        log.warning("a reload cannot change %s: restart tern serve to apply them", ", ".join(report["not_applied"]))
    return {"changes": changes, "not_applied": report["not_applied"]}


async def _signals(server: Any, cancel: trio.CancelScope, reload: Any = None) -> None:
    wanted = [signal.SIGINT, signal.SIGTERM] + ([RELOAD_SIGNAL] if RELOAD_SIGNAL is not None and reload else [])
    with trio.open_signal_receiver(*wanted) as signals:
        async for signum in signals:
            if signum == RELOAD_SIGNAL:
                try:
                    reload()
                except ConfigError:
                    pass  # logged and published; the running config stays
            elif not server._terminating.is_set():
                log.warning("%s: shutting down (again to stop at once)", signal.Signals(signum).name)
                server.shutdown()
            else:
                cancel.cancel()


async def serve(config: Config, listen: str | None = None, *, config_path: Path | None = None,
                task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Run the daemon until a signal (or cancellation); ``task_status`` gets the URL.
    ``config_path``: the file ``config`` came from (None: the bundled default), re-read
    on SIGHUP."""
    from runtime.httpd.access import Access, is_loopback
    from runtime.host.api import build_router
    from runtime.httpd.metrics import Metrics
    from runtime.wire.ratelimit import RateLimiter
    from runtime.httpd.server import HttpServer
    from runtime.host.node import Node
    from runtime.host.traces import traces

    try:
        host, port = parse_listen(listen or config.server.listen)
    except ValueError as exc:
        raise UsageError(f"--listen: {exc}") from None
    key = api_key(config)
    weak = key_warning(key)
    if weak:
        log.warning("SECURITY: %s", weak)
    _check_state_dir(config)
    local_token = operator_token = ""
    if not key:
        local_token = ensure_local_token(config)
        register_secret(local_token)
    if config.server.operator_group:
        operator_token = write_operator_token(config)
        register_secret(operator_token)
    loopback = host == "localhost" or is_loopback(host)
    if not key and config.server.allow_unauthenticated_remote and not loopback:
        log.warning("SECURITY: listening on %s with no API key and allow_unauthenticated_remote = true: "
                    "ANYONE who can reach this port can use every agent and tool", host)
    elif not key and not loopback:
        log.warning("listening on %s with no API key: remote clients will be refused (403); "
                    "set [server] api_key_env to serve them", host)
    tls = _ssl_context(config)
    from runtime.mcp.client.lock import lock_path

    node = Node(config, lock_path=lock_path(config_path))
    node.config_path = config_path
    node.reload_from_file = lambda: reload_config(node, config_path)
    kernel = node.kernel
    if kernel.pipeline.audit is not None:  # an unwritable audit log shows at once (/health, log), not at a call
        kernel.pipeline.audit.probe()
    metrics = Metrics()
    kernel.tool_observers.append(metrics.observe_tool_call)
    metrics.add_gauge_source("tern_mcp_server_up", "1 when the MCP server is ready, per state", ("server", "state"),
                             lambda: [((s.name, s.state), 1.0 if s.state == "ready" else 0.0)
                                      for s in kernel.mcp.statuses()])
    approvals = kernel.approvals
    metrics.add_gauge_source("tern_approvals_pending", "Tool calls waiting for a person's approval", (),
                             lambda: [((), float(approvals.pending_count()))])
    count_approval = metrics.add_counter("tern_approvals_total", "Approval requests and their ends, by outcome "
                                         "(requested, approved, denied, expired, refused)", ("outcome",))
    approvals.observers.append(count_approval)
    agents = kernel.agents  # configured agents and three budget names: bounded labels (a reload swaps budgets)
    metrics.add_counter_source("tern_budget_exceeded_total", "Work an agent's budget refused, per agent and budget",
                               ("agent", "budget"), lambda: agents.budgets.exceeded_samples())
    metrics.add_gauge_source("tern_budget_used", "An agent's use of a budget now: messages in the last minute, "
                             "model tokens in the last hour", ("agent", "budget"),
                             lambda: agents.budgets.used_samples())
    metrics.add_gauge_source("tern_budget_limit", "An agent's configured budget", ("agent", "budget"),
                             lambda: agents.budgets.limit_samples())
    if node.triggers is not None:
        node.triggers.observers.append(metrics.add_counter("tern_trigger_runs_total", "Trigger runs by how they "
                                                           "ended (ok, failed, timeout, skipped)",
                                                           ("trigger", "outcome")))
    access = Access(key, allow_unauthenticated_remote=config.server.allow_unauthenticated_remote,
                    loopback_listener=loopback, allowed_hosts=config.server.allowed_hosts,
                    cors_origins=config.server.cors_origins, local_token=local_token, operator_token=operator_token,
                    key_hint=key_hint(config), keys=key_table(config))
    node.access = access  # a reload swaps its keys
    node.kernel.callers = lambda name: access.keys.by_name(name)  # a trigger's run_as: the keys as they are now
    limiter = RateLimiter(config.server.rate_limit_per_sec, config.server.rate_limit_burst)
    if node.a2a is not None:
        engine = node.a2a.engine
        metrics.add_gauge_source("tern_a2a_tasks", "A2A tasks in the store, per state", ("state",),
                                 lambda: [((state,), float(n)) for state, n in engine.counts().items()])
    server = HttpServer(config.server, build_router(node, metrics=metrics, secured=access.has_key), access,
                        limiter=limiter,
                        metrics=metrics, ssl_context=tls)
    discovery: Path | None = None
    try:
        async with traces(config) as exporter, trio.open_nursery() as nursery:
            if exporter is not None:
                metrics.add_counter_source("tern_telemetry_spans_total", "Trace spans exported, and dropped "
                                           "(queue full, or their batch refused or lost)", ("outcome",),
                                           exporter.samples)
                metrics.add_counter_source("tern_telemetry_export_failures_total", "Span export requests that "
                                           "failed (timeout, refused, collector down)", (),
                                           lambda: [((), float(exporter.failed))])
            await nursery.start(node.run)
            try:
                bound = await nursery.start(server.serve, host, port)
            except OSError as exc:
                raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
            url = _url(host, bound[0][1], tls is not None)
            node.http_bound = (host, bound[0][1])
            discovery = _write_discovery(config, url, config_path)
            nursery.start_soon(_signals, server, nursery.cancel_scope, node.reload_from_file)
            if log.isEnabledFor(logging.INFO):  # one line either way: the log's, or a plain one
                log.info("tern %s (pid %d) serving on %s", __version__, os.getpid(), url)
            else:
                print(f"tern: serving on {url}", file=sys.stderr, flush=True)
            task_status.started(url)
            await server.wait_stopped()
            nursery.cancel_scope.cancel()
    finally:
        if discovery is not None:
            try:
                discovery.unlink()
            except OSError:
                pass
