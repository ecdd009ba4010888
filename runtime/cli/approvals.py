"""``tern approvals``, ``tern approvals show ID``, ``tern approve ID``, ``tern deny ID``:
answer the tool calls that wait for a person, and the questions MCP servers ask
(``approve --set name=value`` or ``--answer JSON`` fills in the form; ``deny`` declines,
``deny --cancel`` cancels). Each line names the whole arguments' size and digest; ``show``
pages them whole (``$PAGER`` on a terminal, else plain), checked against that digest, and
``approve --digest`` binds the yes to it: refused if it names other arguments (without
it, the request the id names is approved as it is: its arguments never change, and the
line printed names the digest approved). Every text a model or a server wrote is printed
through ``log.clean``/``log.preview``: escaped, its padding counted.
With a daemon running on the state directory they go through its API (the decision
wakes its call at once and shows in ``tern events``); otherwise they work on the state
directory's approvals file directly, which answers a ``tern run`` on another terminal
alike (the waiting process sees the decision within a fraction of a second), or with
``[state] store = "postgres"`` on the shared database (the node whose call waits hears
of it at once). No kernel is booted either way. Persisted decisions (``--rules``,
``--forget-rules``) are always read and changed in the store."""

from __future__ import annotations

import argparse
from typing import Any

from runtime.cli.common import Commands, print_json
from runtime.errors import TernError, UsageError
from runtime.cli.remote import add_standalone


def add_commands(commands: Commands) -> None:
    listing = commands.add("approvals", cmd_approvals, "list tool calls waiting for approval (and past decisions)")
    listing.add_argument("--state", default="pending", choices=("pending", "approved", "denied", "expired", "all"),
                         help="which requests (default: pending)")
    listing.add_argument("what", nargs="?", choices=("rules", "show"),
                         help="rules: the persisted decisions, for whom and who made each (as --rules); "
                              "show ID: one request with its whole arguments, paged")
    listing.add_argument("id", nargs="?", help="with show: the approval id (ap_...)")
    listing.add_argument("--rules", action="store_true",
                         help="list the persisted decisions (approve --always / --always-args) instead")
    listing.add_argument("--forget-rules", action="store_true",
                         help="delete persisted decisions (all, or those of --agent / --tool)")
    listing.add_argument("--agent", default=None, help="with --forget-rules: only this agent's")
    listing.add_argument("--tool", default=None, help="with --forget-rules: only this tool's")
    listing.add_argument("--caller", default=None,
                         help="with --forget-rules: only the rules for this key ('everyone': those for every caller)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_standalone(listing)
    approve = commands.add("approve", cmd_approve, "approve a tool call that waits (see tern approvals)")
    approve.add_argument("id", help="the approval id (ap_...)")
    scope = approve.add_mutually_exclusive_group()
    scope.add_argument("--always", action="store_true", help="and every later call of this tool by this agent")
    scope.add_argument("--always-args", action="store_true",
                       help="and every later call of this tool by this agent with these exact arguments")
    approve.add_argument("--reason", default="", help="a note kept with the decision")
    approve.add_argument("--digest", default=None, metavar="SHA256",
                         help="approve only if the arguments are these (their sha256, as tern approvals shows it)")
    approve.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE", dest="sets",
                         help="a question's answer: one field's value (repeat for each field; a form's defaults "
                              "fill the rest)")
    approve.add_argument("--answer", default=None, metavar="JSON",
                         help="a question's answer as a JSON object of field values (--set adds to it)")
    add_standalone(approve)
    deny = commands.add("deny", cmd_deny, "deny a tool call that waits (the model gets a tool error)")
    deny.add_argument("id", help="the approval id (ap_...)")
    deny.add_argument("--always", action="store_true", help="and every later call of this tool by this agent")
    deny.add_argument("--reason", default="", help="why (the model reads it)")
    deny.add_argument("--cancel", action="store_true", help="a question: cancel it (dismissed) rather than decline")
    add_standalone(deny)


def on_approvals(args: argparse.Namespace, work: Any) -> Any:
    """``await work(approvals)`` on the configured store, with the state directory's
    audit log (decisions are audited)."""
    from pathlib import Path

    from runtime.cli.local_store import run_on_store
    from runtime.config import load_config
    from runtime.errors import UsageError
    from runtime.kernel.approvals import Approvals
    from runtime.kernel.audit import AuditLog

    config = load_config(getattr(args, "config", None)).config
    if not config.state.dir and config.state.store != "postgres":
        raise UsageError("no state directory is configured ([state] dir), so there are no approvals")
    state = Path(config.state.dir) if config.state.dir else None

    audit = AuditLog(state / "audit.jsonl") if state else None

    def make(db: Any) -> Approvals:
        return Approvals(state / "approvals.sqlite3" if state else None,
                         timeout_secs=config.governance.approval_timeout_secs,
                         max_pending_per_agent=config.governance.max_pending_per_agent, audit=audit, db=db)

    try:
        return run_on_store(config, make, work)
    finally:
        if audit is not None:
            audit.checkpoint()  # the decisions this process recorded, signed before it ends


def _through_daemon(args: argparse.Namespace) -> Any:
    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    return find_daemon(args, load_config(getattr(args, "config", None)).config)


def cmd_approvals(args: argparse.Namespace) -> int:
    if args.what == "show":
        if not args.id:
            raise UsageError("tern approvals show ID: which request (see tern approvals)")
        return _show(args)
    if args.id:
        raise UsageError(f"unexpected {args.id!r}: did you mean tern approvals show {args.id}?")
    args.rules = args.rules or args.what == "rules"
    daemon = None if args.rules or args.forget_rules else _through_daemon(args)
    if daemon is not None:
        from runtime.ports import Approval

        answer = daemon.call("GET", f"/api/approvals?state={args.state}")
        listed = [Approval(**item) for item in answer["approvals"]]
        return _print_approvals(args, listed)
    if args.forget_rules:
        caller = "" if args.caller == "everyone" else args.caller
        gone = on_approvals(args, lambda approvals: approvals.forget_rules(args.agent, args.tool, caller))
        print(f"forgot {gone} persisted decision{'s' if gone != 1 else ''}")
        return 0
    if args.rules:
        rules = on_approvals(args, lambda approvals: approvals.rules())
        if args.json:
            print_json({"rules": rules})
        elif not rules:
            print("no persisted decisions")
        for rule in [] if args.json else rules:
            who = f"agent '{rule['agent']}'" if rule["agent"] else "the operator"
            which = "these exact arguments" if rule["arguments"] else "any arguments"
            whose = "every caller" if rule["caller"] == "everyone" else f"the key {rule['caller']!r}'s runs"
            print(f"{rule['decision']:<5}  {rule['tool']} by {who}, {which}, for {whose} "
                  f"(made by {rule['made_by'] or '?'} via {rule['decided_by'] or '?'})")
        return 0
    return _print_approvals(args, on_approvals(args, lambda approvals: approvals.list(
        None if args.state == "all" else args.state)), where=_store_of(args))


def _store_of(args: argparse.Namespace) -> str:
    """Where an answer read with no daemon came from: a person whose daemon runs as
    another user (a system service) must not take "none" for the daemon's answer."""
    from runtime.config import load_config

    config = load_config(getattr(args, "config", None)).config
    if config.state.store == "postgres":
        return "the shared PostgreSQL store"
    return f"{config.state.dir}/approvals.sqlite3 (no daemon runs on this state directory; a daemon run as " \
           "another user, as the system service is, keeps its own: see docs/deploying.md)"


def _print_approvals(args: argparse.Namespace, listed: list[Any], where: str = "") -> int:
    from runtime.kernel.approvals import describe, remaining
    from runtime.log import clean

    if args.json:
        print_json({"approvals": listed})
        return 0
    if not listed:
        print(f"no {'' if args.state == 'all' else args.state + ' '}approval requests"
              f"{' in ' + where if where else ''}")
        return 0
    for approval in listed:
        if approval.state == "pending":
            status = f"pending, {remaining(approval)} s left"
        else:
            by = f" by {approval.decided_by}" if approval.decided_by else ""
            status = f"{approval.state}{by}{': ' + approval.reason if approval.reason else ''}"
        print(f"{approval.id}  {describe(approval, width=120)}  [{clean(status)}]")
        if approval.form is not None and approval.state == "pending":
            from runtime.cli.form_prompt import field_lines

            print("\n".join(field_lines(approval.form)))
        if approval.origin == "mcp-lock" and approval.state == "pending":  # tern.lock: old vs new definition
            from runtime.kernel.mcp_lock import diff_lines

            print("\n".join(diff_lines(approval)))
    if args.state == "pending":
        print("read one whole: tern approvals show ID")
        print("answer with: tern approve ID [--always | --always-args]   or   tern deny ID [--reason TEXT]")
        if any(approval.form is not None for approval in listed):
            print("a question: tern approve ID --set FIELD=VALUE ... [--answer JSON]   or   tern deny ID [--cancel]")
    return 0


def _decide(args: argparse.Namespace, approve: bool) -> int:
    from runtime.kernel.approvals import describe

    from runtime.cli.form_prompt import from_args

    scope = "always" if args.always else "args" if getattr(args, "always_args", False) else "once"
    cancel = getattr(args, "cancel", False)
    sets, answer_json = getattr(args, "sets", []), getattr(args, "answer", None)
    given = getattr(args, "digest", None)
    daemon = _through_daemon(args)
    if daemon is not None:
        from runtime.cli.remote import quote_path
        from runtime.ports import Approval

        path = f"/api/approvals/{quote_path(args.id)}"
        answer = from_args(Approval(**daemon.call("GET", path)).form, answer_json, sets) if sets or answer_json \
            else None
        body: dict[str, Any] = {"decision": "approve" if approve else "cancel" if cancel else "deny", "scope": scope,
                                "reason": args.reason}
        if approve and given:  # bound to the arguments the person names
            body["digest"] = given
        decided = Approval(**daemon.call("POST", path, {**body, **({"answer": answer} if answer is not None else {})}))
    else:
        async def decide(approvals: Any) -> Any:
            answer = from_args((await approvals.get(args.id)).form, answer_json, sets) if sets or answer_json \
                else None
            return await approvals.decide(args.id, approve, scope=scope, reason=args.reason, by=f"cli:{_user()}",
                                          channel="cli", answer=answer, cancel=cancel, digest=given)

        decided = on_approvals(args, decide)
    if decided.form is not None:
        verb = "answered" if approve else "cancelled" if cancel else "declined"
        print(f"{verb} {decided.id}: {describe(decided, width=120)}")
        return 0
    verb = "approved" if approve else "denied"
    extra = {"always": ", and from now on for this agent and tool",
             "args": ", and from now on for these exact arguments"}.get(scope, "")
    print(f"{verb} {decided.id}: {describe(decided, width=120)}{extra}")
    return 0


def _show(args: argparse.Namespace) -> int:
    """``tern approvals show ID``: the request, and its whole arguments checked against
    their digest, paged."""
    import json

    from runtime.kernel.approvals import args_digest, describe, whole

    daemon = _through_daemon(args)
    if daemon is not None:
        from runtime.cli.remote import quote_path
        from runtime.ports import Approval

        approval = Approval(**daemon.call("GET", f"/api/approvals/{quote_path(args.id)}"))
        arguments = daemon.call("GET", f"/api/approvals/{quote_path(args.id)}/arguments")
    else:
        approval = on_approvals(args, lambda approvals: approvals.get(args.id))
        arguments = approval.arguments
    if args.json:
        print_json({"approval": approval, "arguments": arguments})
        return 0
    if approval.form is None and args_digest(arguments) != approval.arguments_sha256:
        raise TernError(f"the arguments read for {approval.id} are not those its digest "
                        f"{approval.arguments_sha256} names: not shown")
    lines = [f"{approval.id}  {describe(approval, width=160)}", f"state: {approval.state}"]
    if approval.form is not None:
        from runtime.cli.form_prompt import field_lines

        lines += field_lines(approval.form)
        text = json.dumps(approval.form, ensure_ascii=False, indent=2)
    else:
        lines.append(f"arguments: {whole(approval)}; approve these exactly with: tern approve {approval.id} "
                     f"--digest {approval.arguments_sha256}")
        text = _pretty(arguments)
    page("\n".join(lines) + "\n\n" + text + "\n")
    return 0


def _pretty(arguments: Any) -> str:
    import json

    return json.dumps(arguments, ensure_ascii=False, indent=2, sort_keys=True)


def page(text: str, out: Any = None) -> None:
    """``text`` (``clean``ed, newlines kept) through ``$PAGER`` (``less`` if unset) when
    ``out`` (stdout) is a terminal, else written plain."""
    import os
    import shlex
    import shutil
    import subprocess
    import sys

    from runtime.log import clean

    out = out or sys.stdout
    text = clean(text, lines=True)
    command = shlex.split(os.environ.get("PAGER") or "less") if out.isatty() else []
    if command and command[0] not in ("cat", "") and shutil.which(command[0]):
        try:
            subprocess.run(command, input=text.encode(), check=False,
                           env={**os.environ, "LESS": os.environ.get("LESS", "FX")})  # no -R: escapes stay text
            return
        except OSError:
            pass
    out.write(text)
    out.flush()


def cmd_approve(args: argparse.Namespace) -> int:
    return _decide(args, True)


def cmd_deny(args: argparse.Namespace) -> int:
    return _decide(args, False)


_ANSWERS = {"y": (True, "once"), "yes": (True, "once"), "a": (True, "always"), "A": (True, "args"),
            "n": (False, "once"), "no": (False, "once"), "": (False, "once")}
_VIEW = ("v", "view")
_PROMPT = "approve? [y]es / [n]o / [a]lways for this tool / [A]lways with these arguments / [v]iew them whole: "
_HELP = ("tern: answer y (yes), n (no), a (always for this tool), A (always with these arguments), "
         "v (view the whole arguments)")


def _asked(approval: Any) -> str:
    """The prompt's line about a request: who calls what, its arguments in short (escaped,
    padding counted) and the size and digest of the whole ones a yes is bound to."""
    from runtime.kernel.approvals import describe, remaining

    return f"tern: {describe(approval)} — approval {approval.id}, {remaining(approval)} s to answer"


def _view(approval: Any) -> None:
    """The whole arguments, paged on the prompt's terminal (stderr)."""
    import sys

    from runtime.kernel.approvals import whole

    page(f"{approval.tool}: {whole(approval)}\n{_pretty(approval.arguments)}\n", sys.stderr)


def terminal_ask(approvals: Any, before: Any = None, *, no_wait: bool = False) -> Any:
    """The ``Ask`` of a command run by a person (``tern run``, ``chat``, ``call``): the
    request is shown on stderr, and on a terminal the answer is read inline. Elsewhere
    (stdin is a pipe, a script) it says how to answer from another shell and waits for
    the other channels. Another channel deciding first cancels the prompt. ``before()``
    runs first (ends the reply's line on stdout, so the question starts on its own)."""
    import sys

    import trio

    interactive = sys.stdin.isatty() and sys.stderr.isatty()

    async def ask(approval: Any) -> None:
        if before is not None:
            before()
        if no_wait:  # a script: fail now, the request named, rather than wait approval_timeout_secs
            print(_no_wait_line(approval), file=sys.stderr, flush=True)
            await approvals.decide(approval.id, False, reason=NO_WAIT_REASON, by=f"terminal:{_user()}",
                                   channel="terminal", cancel=approval.form is not None)
            return
        print(_asked(approval), file=sys.stderr, flush=True)
        if not interactive:
            print(f"tern: waiting for a person: tern approve {approval.id}  (or: tern deny {approval.id})",
                  file=sys.stderr, flush=True)
            return
        discard_typed_ahead()
        if approval.form is not None:
            while True:
                decision = await trio.to_thread.run_sync(_run_dialogue, approval.form, _read_line,
                                                         abandon_on_cancel=True)
                if decision is None:  # end of input: leave it to the other channels
                    return
                approve, answer, cancel = decision
                try:
                    await approvals.decide(approval.id, approve, answer=answer, cancel=cancel,
                                           by=f"terminal:{_user()}",
                                     channel="terminal")
                    return
                except UsageError as exc:  # the answer does not fit the form: ask again
                    print(f"tern: {exc}", file=sys.stderr, flush=True)
        while True:
            line = await trio.to_thread.run_sync(_read_line, _PROMPT, abandon_on_cancel=True)
            if line is None:  # end of input: leave it to the other channels
                return
            answer = line.strip()
            if answer in _VIEW:
                await trio.to_thread.run_sync(_view, approval, abandon_on_cancel=True)
                continue
            if answer in _ANSWERS:
                approve, scope = _ANSWERS[answer]
                await approvals.decide(approval.id, approve, scope=scope, by=f"terminal:{_user()}",
                                       channel="terminal", reason="" if approve else "denied at the terminal",
                                       digest=approval.arguments_sha256)
                return
            print(_HELP, file=sys.stderr, flush=True)

    return ask


def discard_typed_ahead() -> None:
    """Drop what was typed before the question showed (a chat line typed during the
    reply, a stray "y"): only a keystroke made after reading the question may answer
    it. sudo does the same before its password prompt."""
    import sys

    try:
        import termios
    except ImportError:  # Windows
        return
    try:
        termios.tcflush(sys.stdin.fileno(), termios.TCIFLUSH)
    except (termios.error, OSError, ValueError):  # stdin is not a terminal, or closed
        pass


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:  # no user name (a container with an unknown uid)
        return "?"


NO_WAIT_REASON = "its caller does not wait for a person (--no-wait)"


def _no_wait_line(approval: Any) -> str:
    return (f"tern: {approval.tool} needs a person's approval and this command does not wait (--no-wait): "
            f"request {approval.id} denied; allow it ahead with a [[governance.rules]] entry, or run without "
            "--no-wait and answer it")


def ask_through_daemon(daemon: Any, stream: Any, data: dict[str, Any], backlog: Any, *,
                       no_wait: bool = False) -> None:
    """A streamed run in the daemon waits for approval (its ``approval`` event): what
    ``terminal_ask`` does in-process, over the API. On a terminal the person answers
    inline and the answer goes to ``POST /api/approvals/{id}`` (channel "terminal");
    the prompt gives up as soon as the stream says another channel decided
    (``approval_done``). Other events that arrive meanwhile go to ``backlog``, in order."""
    import sys

    from runtime.cli.remote import isatty, quote_path
    from runtime.ports import Approval

    approval = Approval(**data)
    if no_wait:
        print(_no_wait_line(approval), file=sys.stderr, flush=True)
        try:
            daemon.call("POST", f"/api/approvals/{quote_path(approval.id)}",
                        {"decision": "cancel" if approval.form is not None else "deny", "reason": NO_WAIT_REASON,
                         "channel": "terminal"})
        except TernError as exc:  # decided elsewhere a moment before: the stream says how it ended
            print(f"tern: {exc}", file=sys.stderr, flush=True)
        return
    print(_asked(approval), file=sys.stderr, flush=True)
    if not isatty():
        print(f"tern: waiting for a person: tern approve {approval.id}  (or: tern deny {approval.id})",
              file=sys.stderr, flush=True)
        return
    discard_typed_ahead()
    read = _daemon_reader(stream, approval.id, backlog)

    def post(body: dict[str, Any]) -> bool:
        """False when the answer did not fit the form (asked again)."""
        try:
            daemon.call("POST", f"/api/approvals/{quote_path(approval.id)}", {**body, "channel": "terminal"})
        except UsageError as exc:
            print(f"tern: {exc}", file=sys.stderr, flush=True)
            return False
        except TernError as exc:  # decided elsewhere a moment before: the stream says how it ended
            print(f"tern: {exc}", file=sys.stderr, flush=True)
        return True

    if approval.form is not None:
        while True:
            decision = _run_dialogue(approval.form, read)
            if decision is None:
                return
            approve, answer, cancel = decision
            if post({"decision": "approve" if approve else "cancel" if cancel else "deny",
                     **({"answer": answer} if approve else {})}):
                return
    while True:
        line = read(_PROMPT, False)
        if line is None:  # answered elsewhere, or end of input: leave it to the other channels
            return
        answer = line.strip()
        if answer in _VIEW:
            _view(approval)
            continue
        if answer in _ANSWERS:
            approve, scope = _ANSWERS[answer]
            post({"decision": "approve" if approve else "deny", "scope": scope,
                  "reason": "" if approve else "denied at the terminal",
                  **({"digest": approval.arguments_sha256} if approve else {})})
            return
        print(_HELP, file=sys.stderr, flush=True)


def _daemon_reader(stream: Any, approval_id: str, backlog: Any) -> Any:
    """``read(prompt, secret)``: one line typed, or None once the run moved on (decided
    elsewhere, or the stream ended) or input ended."""
    import queue
    import select
    import sys

    def read(prompt: str, secret: bool) -> str | None:
        if secret:  # not echoed; the stream is looked at again after the line
            return _read_line(prompt, True)
        sys.stderr.write(prompt)
        sys.stderr.flush()
        while True:
            ready = select.select([sys.stdin], [], [], 0.1)[0]
            while True:  # did the run move on (decided elsewhere, or the stream ended)?
                try:
                    item = stream.events.get_nowait()
                except queue.Empty:
                    break
                if item[0] == "approval_done" and item[1].get("id") == approval_id:
                    print(f"\ntern: approval {approval_id} was answered elsewhere", file=sys.stderr, flush=True)
                    return None
                backlog.append(item)
                if item[0] in ("end", "lost", "error"):
                    print(file=sys.stderr)
                    return None
            if ready:
                line = sys.stdin.readline()
                return line if line else None

    return read


def _run_dialogue(form: dict[str, Any], read: Any) -> Any:
    """Drive ``form_prompt.dialogue`` with ``read(prompt, secret)``; its decision, or
    None when reading stopped."""
    import sys

    from runtime.cli.form_prompt import dialogue, field_lines

    print("\n".join(field_lines(form)), file=sys.stderr, flush=True)
    steps = dialogue(form)
    try:
        prompt, secret = next(steps)
        while True:
            line = read(prompt, secret)
            if line is None:
                return None
            prompt, secret = steps.send(line)
    except StopIteration as done:
        return done.value


def _read_line(prompt: str, secret: bool = False) -> str | None:
    """One line typed at the terminal (not echoed when ``secret``); None at end of input."""
    import sys

    if secret:
        import getpass

        try:
            return getpass.getpass(prompt, stream=sys.stderr)
        except EOFError:
            return None
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    return line if line else None
