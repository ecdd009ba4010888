"""``tern status``, ``tern events`` and ``tern reload``: clients of the running daemon
(found through its discovery file, which must pass ``host/discovery.py``'s checks
before the key or the local token is sent anywhere)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from runtime.cli.common import Commands


def add_commands(commands: Commands) -> None:
    status = commands.add("status", cmd_status, "show the running daemon's state (from its discovery file)")
    status.add_argument("--json", action="store_true", help="print the daemon's /api/status answer (with its url "
                        "and pid) as JSON")
    events = commands.add("events", cmd_events, "print the running daemon's events as they happen")
    events.add_argument("--json", action="store_true", help="one JSON object per line (default: readable lines)")
    reload = commands.add("reload", cmd_reload, "make the running daemon re-read its config file and apply it "
                          "(SIGHUP); an invalid file is refused and the running config kept")
    reload.add_argument("--timeout", type=float, default=30.0, metavar="SECS",
                        help="how long to wait for the daemon's answer (default: 30)")


def _daemon(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str], Any]:
    """The running daemon's discovery record, the headers to call it with, the config."""
    from runtime.config import load_config
    from runtime.host.daemon import client_headers, read_discovery
    from runtime.errors import TernError

    from runtime.host.discovery import named_daemon

    config = load_config(getattr(args, "config", None)).config
    named = named_daemon(getattr(args, "url", None), config)
    if named is not None:
        return named[0], named[1], config
    record, why = read_discovery(config)
    if record is None:
        raise TernError(why)
    return record, client_headers(config), config


def cmd_status(args: argparse.Namespace) -> int:
    from runtime.cli.common import print_json
    from runtime.cli.remote import Daemon

    record, headers, config = _daemon(args)
    status = Daemon(record["url"], headers, int(record["pid"]), config).call("GET", "/api/status", timeout=5.0)
    if args.json:
        print_json({"url": record["url"], "pid": record["pid"], "config": record.get("config"), **status})
        return 0
    print(f"tern {status['version']} at {record['url']} (pid {record['pid']}), up {status['uptime_secs']:.0f} s")
    print(f"  config: {record.get('config', 'not said (a tern older than this one)')}")
    print(f"  agents: {', '.join(a['name'] for a in status['agents']) or 'none'}")
    for server in status["mcp_servers"]:
        error = f": {server['last_error']}" if server["last_error"] and server["state"] != "ready" else ""
        print(f"  MCP server {server['name']}: {server['state']}, {server['tools']} tools{error}")
    print(f"  A2A peers: {', '.join(p['name'] for p in status['a2a_peers']) or 'none'}")
    audit = status.get("audit")
    if audit:
        state = "ok" if audit["ok"] else f"FAILING ({audit['error']}; {audit['failures']} records lost)"
        print(f"  audit log {audit['path']}: {state}")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    """Until Ctrl-C (exit 130) or the daemon stops (exit 1, saying so: a script that
    follows events learns that it must start again, a person that nothing more will come)."""
    import trio

    from runtime.errors import TernError

    record, headers, config = _daemon(args)
    url = record["url"].replace("http", "ws", 1) + "/api/events"

    async def follow() -> None:
        from trio_websocket import ConnectionClosed, ConnectionRejected, HandshakeError, open_websocket_url

        try:
            async with open_websocket_url(
                url, extra_headers=[(k.encode(), v.encode()) for k, v in headers.items()], connect_timeout=5
            ) as socket:
                while True:
                    try:
                        message = await socket.get_message()
                    except ConnectionClosed:
                        raise TernError("the daemon closed the event stream (it stopped or restarted): no more "
                                        "events; run tern events again to follow the next one") from None
                    print(message if args.json else _event_line(json.loads(message)), flush=True)
        except ConnectionRejected as exc:  # 401 without the key, 403...: the daemon's sentence, not a tuple
            from runtime.cli.remote import Daemon

            daemon = Daemon(record["url"], headers, int(record["pid"]), config)
            raise daemon.error(exc.status_code, exc.body or b"") from None
        except (HandshakeError, OSError) as exc:
            raise TernError(f"cannot follow events at {url}: {exc}") from None

    trio.run(follow)
    return 0


def _event_line(event: dict[str, Any]) -> str:
    """One readable line per event; peer text in it is escaped (``log.clean``)."""
    import time

    from runtime.log import clean

    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("time", time.time())))
    kind = event.get("type", "?")
    if kind == "mcp.server":
        error = f" ({event['last_error']})" if event.get("last_error") else ""
        return clean(f"{stamp} MCP server {event.get('name')}: {event.get('state')}{error}")
    if kind == "tool.call":
        who = f" by {event['agent']}" if event.get("agent") else f" ({event['caller']})" if event.get("caller") else ""
        task = f" as MCP task {event['task']}" if event.get("task") else ""
        return clean(f"{stamp} tool {event.get('tool')}{who} {event.get('arguments', '')}: {event.get('outcome')} "
                     f"in {event.get('ms')} ms{task}")
    if kind == "mcp.task":
        by = " by tern" if event.get("by") else ""
        message = f": {event['message']}" if event.get("message") else ""
        return clean(f"{stamp} MCP task {event.get('task')} ({event.get('tool')}): {event.get('status')}{by}{message}")
    if kind == "agent.message":
        by = f" from {event['caller']}" if event.get("caller") else ""
        return clean(f"{stamp} agent {event.get('agent')} [{event.get('context_id')}]{by}: {event.get('outcome')} "
                     f"in {event.get('ms')} ms")
    if kind == "trigger.run":
        ended = f" {event.get('outcome')}" + (f": {event['error']}" if event.get("error") else "") \
            if event.get("state") == "ended" else ""
        return clean(f"{stamp} trigger {event.get('trigger')} run {event.get('run_id')} ({event.get('source')}): "
                     f"{event.get('state')}{ended}")
    if kind == "trigger.paused":
        return clean(f"{stamp} trigger {event.get('trigger')} PAUSED after {event.get('failures')} failed runs in a "
                     f"row: {event.get('error')} (tern triggers resume {event.get('trigger')})")
    if kind == "model.call":
        tokens = f", {event['tokens']} tokens" if "tokens" in event else ""
        return clean(f"{stamp} model {event.get('model')} for {event.get('agent')}: {event.get('outcome')} "
                     f"in {event.get('ms')} ms{tokens}")
    if kind == "a2a.task":
        return clean(f"{stamp} A2A task {event.get('task_id')} ({event.get('agent')}): {event.get('state')}")
    if kind in ("approval_requested", "approval_resolved") and isinstance(event.get("approval"), dict):
        approval = event["approval"]
        return clean(f"{stamp} approval {approval.get('id')} {approval.get('state')}: {approval.get('tool')} "
                     f"by {approval.get('agent') or 'the operator'}")
    rest = {k: v for k, v in event.items() if k not in ("type", "time")}
    return clean(f"{stamp} {kind} {json.dumps(rest)}")


RELOAD_EVENTS = ("config.reloaded", "config.reload_failed")


def cmd_reload(args: argparse.Namespace) -> int:
    """SIGHUP to the daemon, and its answer read from its event stream (subscribed
    before the signal, so the answer cannot be missed): what changed, what a reload
    cannot change, or why the file was refused (exit 2, the config error's code)."""
    import os
    import signal

    import trio

    from runtime.errors import ConfigError, TernError, UsageError

    if getattr(signal, "SIGHUP", None) is None:
        raise UsageError("tern reload signals the daemon with SIGHUP, which this platform does not have; "
                         "restart tern serve instead")
    try:
        record, headers, _ = _daemon(args)
    except ConfigError as exc:  # the file the daemon would read: it is not signalled at all
        raise ConfigError(f"{exc}; the daemon was not asked to reload and keeps its running config") from None
    url = record["url"].replace("http", "ws", 1) + "/api/events"

    async def reload() -> dict[str, Any]:
        from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

        try:
            with trio.fail_after(args.timeout):
                async with open_websocket_url(
                    url, extra_headers=[(k.encode(), v.encode()) for k, v in headers.items()], connect_timeout=5
                ) as socket:
                    await socket.get_message()  # hello: subscribed
                    os.kill(int(record["pid"]), signal.SIGHUP)
                    while True:
                        event = json.loads(await socket.get_message())
                        if event.get("type") in RELOAD_EVENTS:
                            return event
        except (HandshakeError, ConnectionClosed, OSError) as exc:
            raise TernError(f"cannot reload the daemon at {record['url']}: {exc}") from None
        except trio.TooSlowError:
            raise TernError(f"the daemon (pid {record['pid']}) did not say within {args.timeout:g} s whether it "
                            "reloaded; see its log") from None

    event = trio.run(reload)
    if event["type"] == "config.reload_failed":
        raise ConfigError(f"the daemon kept its running config: {event['error']}")
    changed = False
    for what, key in (("agents", "agents"), ("MCP servers", "mcp_servers")):
        for verb in ("added", "removed", "changed"):
            if event[key][verb]:
                changed = True
                print(f"{what} {verb}: {', '.join(event[key][verb])}")
    if event["mcp_servers"]["kept"]:
        print(f"MCP servers unchanged (connections kept): {', '.join(event['mcp_servers']['kept'])}")
    if not changed:
        print("reloaded: no agent or MCP server changed")
    if event["not_applied"]:
        print(f"tern: warning: a reload cannot change {', '.join(event['not_applied'])}: restart tern serve to "
              "apply them", file=sys.stderr)
    return 0
