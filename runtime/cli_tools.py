"""CLI commands for people debugging their MCP config: ``tern tools``, ``tern call``,
``tern mcp servers`` and ``tern mcp import``.

Each boots the kernel from the config, waits until every server's first connection
attempt is over (bounded by the largest ``timeout_secs``), does its one thing, and
shuts everything down again (subprocesses included).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Awaitable, Callable, TypeVar

import msgspec

from runtime.config import load_config
from runtime.errors import UsageError

__all__ = ["cmd_tools", "cmd_call", "cmd_mcp_servers", "cmd_mcp_import", "cmd_status", "cmd_events", "cmd_audit_tail", "cmd_run", "cmd_chat"]

T = TypeVar("T")


def _with_kernel(args: argparse.Namespace, work: Callable[[Any], Awaitable[T]]) -> T:
    import trio

    from runtime.kernel.kernel import Kernel

    config = load_config(getattr(args, "config", None)).config

    async def main() -> T:
        kernel = Kernel(config)
        async with trio.open_nursery() as nursery:
            await nursery.start(kernel.run)
            await kernel.mcp.wait_settled()
            try:
                return await work(kernel)
            finally:
                nursery.cancel_scope.cancel()

    return trio.run(main)


def _print_json(data: Any) -> None:
    print(json.dumps(msgspec.to_builtins(data), indent=2, ensure_ascii=False))


def _status_line(status: Any) -> str:
    parts = [status.transport, status.state]
    if status.state == "ready":
        parts.append(f"{status.protocol_version}, {status.tool_count} tools")
    if status.restarts:
        parts.append(f"{status.restarts} restarts")
    line = ", ".join(parts)
    return f"{line}: {status.last_error}" if status.last_error and status.state != "ready" else line


def _all_ready(kernel: Any) -> bool:
    return all(s.state in ("ready", "disabled") for s in kernel.mcp.statuses())


def cmd_tools(args: argparse.Namespace) -> int:
    """Every tool with its server and the server's state; exit 1 if a server is not ready."""

    async def work(kernel: Any) -> int:
        tools = kernel.registry.tools()
        statuses = kernel.mcp.statuses()
        if args.json:
            _print_json({"tools": tools, "servers": statuses,
                         "collisions": [[n.name for n in group] for group in kernel.mcp.collisions]})
            return 0 if _all_ready(kernel) else 1
        width = max((len(t.name) for t in tools), default=10) + 2
        builtins = [t for t in tools if t.source == "builtin"]
        print(f"built-in ({len(builtins)} tools)")
        for tool in builtins:
            print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
        for status in statuses:
            print(f"MCP server '{status.name}' ({_status_line(status)})")
            for tool in tools:
                if tool.server == status.name:
                    print(f"  {tool.name:<{width}}{_first_line(tool.description)}")
        for group in kernel.mcp.collisions:
            print("collision: " + ", ".join(f"{n.server}/{n.tool} -> {n.name}" for n in group))
        return 0 if _all_ready(kernel) else 1

    return _with_kernel(args, work)


def _first_line(text: str, limit: int = 100) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def cmd_call(args: argparse.Namespace) -> int:
    """One call; the text result on stdout; exit 1 when the tool reports an error."""
    try:
        arguments = json.loads(args.args)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not valid JSON: {exc}") from None
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object, e.g. --args '{\"path\": \"notes.txt\"}'")

    async def work(kernel: Any) -> int:
        result = await kernel.call_tool(args.tool, arguments, timeout_secs=args.timeout, caller="cli")
        if args.json:
            _print_json(result)
        else:
            print(result.text)
        if result.is_error:
            print(f"tern: {args.tool} reported an error", file=sys.stderr)
        return 1 if result.is_error else 0

    return _with_kernel(args, work)


def cmd_mcp_servers(args: argparse.Namespace) -> int:
    from runtime.mcp.supervisor import servers_report

    async def work(kernel: Any) -> int:
        if args.json:
            _print_json(servers_report(kernel.config, kernel.mcp))
        else:
            statuses = kernel.mcp.statuses()
            if not statuses:
                print("no [[mcp_servers]] in the config")
            for status in statuses:
                print(f"{status.name}: {_status_line(status)}")
        return 0 if _all_ready(kernel) else 1

    return _with_kernel(args, work)


def cmd_mcp_import(args: argparse.Namespace) -> int:
    """Print the TOML on stdout (append it to config.toml); warnings go to stderr."""
    from runtime.mcp.importer import import_mcp_json

    if args.file == "-":
        text, label = sys.stdin.read(), "<stdin>"
    else:
        try:
            with open(args.file, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise UsageError(f"cannot read {args.file}: it is not UTF-8 text") from None
        label = args.file
    result = import_mcp_json(text, label)
    for warning in result.warnings:
        print(f"tern: warning: {warning}", file=sys.stderr)
    print(result.toml, end="" if result.toml.endswith("\n") else "\n")
    return 0


def _daemon(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, str]]:
    """The running daemon's discovery record and the headers to call it with."""
    from runtime.daemon import api_key, read_discovery
    from runtime.errors import TernError

    config = load_config(getattr(args, "config", None)).config
    record, why = read_discovery(config)
    if record is None:
        raise TernError(why)
    key = api_key(config)
    return record, ({"Authorization": f"Bearer {key}"} if key else {})


def cmd_status(args: argparse.Namespace) -> int:
    import trio

    from runtime.errors import TernError

    record, headers = _daemon(args)

    async def fetch() -> Any:
        import httpx

        from runtime.net.guard import AddressPolicy
        from runtime.net.http import make_client

        async with make_client(AddressPolicy(), timeout=5.0) as client:
            try:
                response = await client.get(record["url"] + "/api/status", headers=headers)
            except httpx.HTTPError as exc:
                raise TernError(f"the daemon (pid {record['pid']}) at {record['url']} does not answer: {exc}") from None
        if response.status_code != 200:
            raise TernError(f"the daemon at {record['url']} answered HTTP {response.status_code}: {response.text[:200]}")
        return response.json()

    status = trio.run(fetch)
    print(f"tern {status['version']} at {record['url']} (pid {record['pid']}), up {status['uptime_secs']:.0f} s")
    print(f"  agents: {', '.join(a['name'] for a in status['agents']) or 'none'}")
    for server in status["mcp_servers"]:
        error = f": {server['last_error']}" if server["last_error"] and server["state"] != "ready" else ""
        print(f"  MCP server {server['name']}: {server['state']}, {server['tools']} tools{error}")
    print(f"  A2A peers: {', '.join(p['name'] for p in status['a2a_peers']) or 'none'}")
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    """Until Ctrl-C (exit 130) or the daemon stops (exit 0)."""
    import trio

    from runtime.errors import TernError

    record, headers = _daemon(args)
    url = record["url"].replace("http", "ws", 1) + "/api/events"

    async def follow() -> None:
        from trio_websocket import ConnectionClosed, HandshakeError, open_websocket_url

        try:
            async with open_websocket_url(url, extra_headers=[(k.encode(), v.encode()) for k, v in headers.items()],
                                          connect_timeout=5) as socket:
                while True:
                    try:
                        message = await socket.get_message()
                    except ConnectionClosed:
                        return
                    print(message if args.json else _event_line(json.loads(message)), flush=True)
        except (HandshakeError, OSError) as exc:
            raise TernError(f"cannot follow events at {url}: {exc}") from None

    trio.run(follow)
    return 0


def _event_line(event: dict[str, Any]) -> str:
    import time

    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("time", time.time())))
    kind = event.get("type", "?")
    if kind == "mcp.server":
        error = f" ({event['last_error']})" if event.get("last_error") else ""
        return f"{stamp} MCP server {event.get('name')}: {event.get('state')}{error}"
    if kind == "tool.call":
        return f"{stamp} tool {event.get('tool')}: {event.get('outcome')} in {event.get('ms')} ms"
    rest = {k: v for k, v in event.items() if k not in ("type", "time")}
    return f"{stamp} {kind} {json.dumps(rest)}"


def cmd_audit_tail(args: argparse.Namespace) -> int:
    """The last N records of ``<state dir>/audit.jsonl``; with -f, new ones as they come
    (across rotation: a replaced file is reopened)."""
    import os
    import time
    from collections import deque
    from pathlib import Path

    path = Path(load_config(getattr(args, "config", None)).config.state.dir) / "audit.jsonl"
    if not path.exists() and not args.follow:
        raise UsageError(f"no audit log yet at {path}")
    handle = None
    inode = None
    if path.exists():
        handle = path.open("rb")
        inode = os.fstat(handle.fileno()).st_ino
        for line in deque(handle, maxlen=max(args.n, 0)):
            print(line.decode("utf-8", "replace").rstrip("\n"), flush=True)
    while args.follow:
        line = handle.readline() if handle is not None else b""
        if line:
            print(line.decode("utf-8", "replace").rstrip("\n"), flush=True)
            continue
        time.sleep(0.2)
        try:
            current = path.stat().st_ino
        except FileNotFoundError:
            continue
        if current != inode:  # rotated (or first created): read the new file from its start
            if handle is not None:
                for rest in handle:
                    print(rest.decode("utf-8", "replace").rstrip("\n"), flush=True)
                handle.close()
            handle, inode = path.open("rb"), current
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """One message to one agent; the reply streams to stdout as it comes (exit 1 if the
    agent cannot answer)."""
    from runtime.kernel.agents import AgentError

    message = sys.stdin.read() if args.message == "-" else args.message

    async def work(kernel: Any) -> int:
        streamed: list[str] = []

        def show(piece: str) -> None:
            streamed.append(piece)
            if not args.json:
                sys.stdout.write(piece)
                sys.stdout.flush()

        try:
            reply = await kernel.agents.send(args.agent, message, context_id=args.context, on_text=show)
        except AgentError as exc:
            print(f"tern: {exc}", file=sys.stderr)
            return 1
        if args.json:
            _print_json(reply)
        elif not streamed:
            print(reply.text)
        elif not streamed[-1].endswith("\n"):
            print()
        return 0

    return _with_kernel(args, work)


def cmd_chat(args: argparse.Namespace) -> int:
    """An interactive conversation: one context, replies streamed; Ctrl-D or /quit ends it."""
    import trio

    from runtime.kernel.agents import AgentError

    async def work(kernel: Any) -> int:
        kernel.agents.get(args.agent)  # an unknown agent fails before the first prompt
        context_id = args.context
        print(f"chatting with {args.agent} (Ctrl-D or /quit to end)", file=sys.stderr)
        while True:
            try:
                line = await trio.to_thread.run_sync(input, "> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            if line.strip() in ("/quit", "/exit"):
                return 0
            if not line.strip():
                continue
            streamed: list[str] = []

            def show(piece: str) -> None:
                streamed.append(piece)
                sys.stdout.write(piece)
                sys.stdout.flush()

            try:
                reply = await kernel.agents.send(args.agent, line, context_id=context_id, on_text=show)
            except AgentError as exc:
                print(f"tern: {exc}", file=sys.stderr)
                continue
            context_id = reply.context_id
            if not streamed:
                print(reply.text)
            elif not streamed[-1].endswith("\n"):
                print()

    return _with_kernel(args, work)
