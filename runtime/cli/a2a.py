"""``tern a2a``: talk to any A2A agent from the command line.

``discover`` reads the card (name, dialect, endpoint, skills); ``send`` sends one
message and prints the reply (``--stream`` prints it as it comes); ``get`` and
``cancel`` act on a task by id. The agent's URL is what its card is found under
(``http://host:port``, an agent's own URL, or the card's URL itself).

No daemon and no kernel: the config is read only for ``[security]`` (which addresses
tern may connect to) and ``[a2a] discovery_timeout_secs``. Credentials are never taken
from the config: pass them with ``--header 'Authorization: Bearer ...'``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TypeVar
from collections.abc import Awaitable, Callable

from runtime.cli.common import Commands, needs_subcommand
from runtime.errors import UsageError

__all__ = ["cmd_a2a_discover", "cmd_a2a_send", "cmd_a2a_get", "cmd_a2a_cancel"]

T = TypeVar("T")
SEND_TIMEOUT = 300.0
FAILED = ("failed", "rejected", "canceled")


def add_commands(commands: Commands) -> None:
    a2a = commands.add("a2a", needs_subcommand, "talk to an A2A agent: read its card, send it a message, get or "
                                                "cancel a task (any dialect: 0.1, 0.3, 1.0)")
    sub = commands.group(a2a, "a2a_command")
    discover = sub.add("discover", cmd_a2a_discover, "read an agent's card: name, dialect, endpoint, skills")
    send = sub.add("send", cmd_a2a_send, "send an agent one message and print its reply")
    get = sub.add("get", cmd_a2a_get, "show a task: its state and reply")
    cancel = sub.add("cancel", cmd_a2a_cancel, "cancel a task")
    for parser in (discover, send, get, cancel):
        parser.add_argument("url", metavar="URL", help="where the agent's card is: http://host:port, the agent's "
                                                       "URL, or the card's URL")
        if parser is send:
            parser.add_argument("message", help="the message ('-' reads it from stdin)")
        elif parser is not discover:
            parser.add_argument("task_id", metavar="TASK_ID", help="the task's id")
        parser.add_argument("--header", action="append", metavar="'NAME: VALUE'",
                            help="send this header with every request, e.g. 'Authorization: Bearer ...' "
                                 "(repeatable)")
        parser.add_argument("--dialect", choices=("0.1", "0.3", "1.0"), help="speak this A2A version "
                                                                             "(default: what the card says)")
        parser.add_argument("--timeout", type=float, metavar="SECS",
                            help="how long to wait (default: [a2a] discovery_timeout_secs, 30 s; a send 300 s)")
        parser.add_argument("--json", action="store_true", help="print JSON")
    send.add_argument("--stream", action="store_true", help="print the task's events as they come")
    send.add_argument("--context", metavar="ID", help="continue this conversation (contextId)")
    send.add_argument("--task", metavar="ID", help="answer this task (one that waits for input)")


def _headers(values: Any) -> dict[str, str]:
    from runtime.log import register_secret

    headers: dict[str, str] = {}
    for value in values or []:
        name, colon, content = value.partition(":")
        name, content = name.strip(), content.strip()
        if not colon or not name or any(c in name for c in " \t\r\n") or any(c in content for c in "\r\n"):
            raise UsageError(f"--header expects 'Name: value', got {value!r}")
        headers[name] = content
        register_secret(content)
    return headers


def _with_agent(args: argparse.Namespace, work: Callable[[Any, Any], Awaitable[T]], *,
                default_timeout: float | None = None) -> T:
    """Discover ``args.url`` and run ``work(client, agent)`` under trio."""
    import trio

    from runtime.a2a.client.client import A2aClient, A2aClientError
    from runtime.config import load_config
    from runtime.net.guard import AddressPolicy

    config = load_config(getattr(args, "config", None)).config
    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be a positive number of seconds")
    request_timeout = args.timeout or config.a2a.discovery_timeout_secs
    url = args.url if "://" in args.url else "http://" + args.url  # host:port, as curl takes it
    headers = _headers(args.header)

    async def main() -> T:
        from runtime.host.traces import traces

        try:
            async with traces(config):
                return await talk()
        except A2aClientError as exc:
            if exc.http_status in (401, 403) and not args.header:  # say how, here: credentials come only from --header
                raise A2aClientError(f"{exc} (tern a2a takes credentials only from --header, e.g. --header "
                                     "'Authorization: Bearer KEY')") from None
            raise

    async def talk() -> T:
        async with A2aClient(policy=AddressPolicy.from_security(config.security), timeout=request_timeout,
                             send_timeout=args.timeout or default_timeout or SEND_TIMEOUT,
                             headers=headers) as client:
            agent = await client.discover(url, dialect=args.dialect)
            return await work(client, agent)

    return trio.run(main)


def _print_json(data: Any) -> None:
    import msgspec

    print(json.dumps(msgspec.to_builtins(data), indent=2, ensure_ascii=False))


def _task_json(result: Any, dialect: str) -> dict[str, Any]:
    import msgspec

    from runtime.a2a.client.client import reply_text
    from runtime.a2a.model import Message

    data = msgspec.to_builtins(result)
    for key in ("agent", "dialect", "created", "timestamp"):  # timestamp: when tern parsed it
        data.pop(key, None)
    return {"kind": "message" if isinstance(result, Message) else "task", "dialect": dialect,
            "text": reply_text(result), **data}


def cmd_a2a_discover(args: argparse.Namespace) -> int:
    async def work(client: Any, agent: Any) -> int:
        if args.json:
            _print_json({"name": agent.name, "dialect": agent.dialect, "endpoint": agent.url,
                         "card_url": agent.card_url, "description": agent.description,
                         "streaming": agent.streaming, "skills": agent.skills, "card": agent.card})
            return 0
        print(f"name:      {agent.name}")
        if agent.description:
            print(f"about:     {agent.description}")
        print(f"dialect:   A2A {agent.dialect}")
        print(f"endpoint:  {agent.url}" + (f" (tenant {agent.tenant})" if agent.tenant else ""))
        print(f"card:      {agent.card_url}")
        print(f"streaming: {'yes' if agent.streaming else 'no'}")
        print(f"skills ({len(agent.skills)}):")
        for skill in agent.skills:
            label = str(skill.get("name") or skill.get("id") or "?")
            about = str(skill.get("description") or "").strip().splitlines()
            tags = skill.get("tags") if isinstance(skill.get("tags"), list) else []
            print(f"  {label}" + (f": {about[0]}" if about else "") + (f" [{', '.join(map(str, tags))}]" if tags
                                                                         else ""))
        return 0

    return _with_agent(args, work)


def _message_text(args: argparse.Namespace) -> str:
    text = sys.stdin.read() if args.message == "-" else args.message
    if not text.strip():
        raise UsageError("the message is empty")
    return text


def _finish(task: Any, text: str) -> int:
    """Exit status and notes for a task as it ended up."""
    from runtime.a2a.client.client import A2aClientError

    if task.state in FAILED:
        raise A2aClientError(f"task {task.id} {task.state}" + (f": {text.strip()}" if text.strip() else ""))
    if task.state in ("input-required", "auth-required"):
        print(f"tern: task {task.id} is {task.state}: answer with --task {task.id}", file=sys.stderr)
    elif task.state not in ("completed",):
        print(f"tern: task {task.id} is still {task.state}; see 'tern a2a get URL {task.id}'", file=sys.stderr)
    return 0


def cmd_a2a_send(args: argparse.Namespace) -> int:
    text = _message_text(args)

    async def work(client: Any, agent: Any) -> int:
        from runtime.a2a.client.client import reply_text
        from runtime.a2a.model import Message

        if args.stream:
            return await _stream(client, agent, text, args)
        result = await client.send(agent, text, context_id=args.context, task_id=args.task)
        reply = reply_text(result)
        failed = not isinstance(result, Message) and result.state in FAILED
        if args.json:
            _print_json(_task_json(result, agent.dialect))
        elif reply and not failed:  # a failed task's text is the error line _finish prints: once
            print(reply, end="" if reply.endswith("\n") else "\n")
        return 0 if isinstance(result, Message) else _finish(result, "" if args.json else reply)

    return _with_agent(args, work, default_timeout=SEND_TIMEOUT)


async def _stream(client: Any, agent: Any, text: str, args: argparse.Namespace) -> int:
    from contextlib import aclosing

    import msgspec

    from runtime.a2a.client.client import A2aClientError
    from runtime.a2a.model import ArtifactEvent, Message, StatusEvent, Task, text_of

    task: Any = None
    state, status_text, open_line = "", "", False
    async with aclosing(client.stream(agent, text, context_id=args.context, task_id=args.task)) as events:
        async for event in events:
            if args.json:
                kind = {Task: "task", Message: "message", StatusEvent: "status", ArtifactEvent: "artifact"}[type(event)]
                data = msgspec.to_builtins(event)
                for key in ("agent", "dialect", "created", "timestamp"):  # timestamp: when tern parsed it
                    data.pop(key, None)
                print(json.dumps({"event": kind, **data}, ensure_ascii=False), flush=True)
            if isinstance(event, Message):
                if not args.json:
                    print(text_of(event.parts), flush=True)
                return 0
            if isinstance(event, Task):
                task, state = event, event.state
                if not args.json:
                    print(f"[task {event.id}] {event.state}", file=sys.stderr, flush=True)
            elif isinstance(event, StatusEvent):
                state = event.state
                status_text = text_of(event.message.parts) if event.message is not None else ""
                if not args.json:
                    if open_line:
                        print(flush=True)
                        open_line = False
                    print(f"[task {event.task_id}] {event.state}", file=sys.stderr, flush=True)
                    if status_text and state not in FAILED:
                        print(status_text, flush=True)
                if task is None:
                    task = Task(id=event.task_id, context_id=event.context_id, agent="")
            elif isinstance(event, ArtifactEvent) and not args.json:
                chunk = text_of(event.artifact.parts)
                sys.stdout.write(chunk)
                open_line = not event.last_chunk or not chunk.endswith("\n")
                if event.last_chunk and open_line:
                    sys.stdout.write("\n")
                    open_line = False
                sys.stdout.flush()
    if task is None:
        raise A2aClientError(f"{agent.name}: the stream ended without a task or a message")
    task.state = state
    if state not in ("completed", "input-required", "auth-required", *FAILED):
        raise A2aClientError(f"{agent.name}: the stream ended while task {task.id} was {state or 'unknown'}; "
                             f"see 'tern a2a get URL {task.id}'")
    return _finish(task, status_text)


def cmd_a2a_get(args: argparse.Namespace) -> int:
    async def work(client: Any, agent: Any) -> int:
        from runtime.a2a.client.client import reply_text

        task = await client.get(agent, args.task_id)
        if args.json:
            _print_json(_task_json(task, agent.dialect))
            return 0
        print(f"task {task.id}: {task.state}" + (f" (context {task.context_id})" if task.context_id else ""))
        reply = reply_text(task)
        if reply:
            print(reply, end="" if reply.endswith("\n") else "\n")
        return 0

    return _with_agent(args, work)


def cmd_a2a_cancel(args: argparse.Namespace) -> int:
    async def work(client: Any, agent: Any) -> int:
        task = await client.cancel(agent, args.task_id)
        if args.json:
            _print_json(_task_json(task, agent.dialect))
        else:
            print(f"task {task.id}: {task.state}")
        return 0

    return _with_agent(args, work)
