"""``shell_exec``: run one allowed program, directly, in the caller's workspace.

Off by default: ``register`` registers nothing unless ``[tools] shell_exec_enabled =
true`` AND ``[tools] shell_allowlist`` or ``shell_rules`` allows something (an enabled
tool that can run nothing would only waste the model's calls).

Never a shell: ``argv`` is executed as given (no ``sh -c``, no globbing, no variable
expansion; ``sh`` itself runs only if the operator pins it in a rule). A call is allowed
by (``runtime.config.shell_policy`` says which programs and how rules match):

- a ``[[tools.shell_rules]]`` entry: its program, and the whole argv matching its
  argument globs (nothing left free unless the rule's ``rest`` says so); stdin only if
  the rule says ``stdin = true``; or
- a ``shell_allowlist`` entry, with any arguments, unless the program can run other
  programs through its arguments (``find -exec``, ``git -c alias.x=!cmd``, ``tar
  --checkpoint-action``, shells, interpreters, ``env``...): checked on the name given,
  the entry and the basename of the program's real path (``awk`` -> ``mawk``), refused
  with the reason and how to pin it.

The program is:

- a bare name, looked up on the absolute directories of PATH only (a relative PATH
  entry such as ``.`` could pick a file from the workspace); or
- an absolute path listed verbatim (``"/opt/x/bin/tool"``); or
- an absolute path whose basename is listed and whose directory is one of PATH's
  directories (``"/bin/echo"`` for ``"echo"``), so ``/workspace/echo`` is not ``echo``.

Refused: relative paths with a slash (``./x``, ``bin/x``), any ``..`` or ``.``
component, NUL bytes. The resolved file is passed as the executable, ``argv``
unchanged (under bwrap, argv[0] is the resolved path).

It runs in a sandbox per ``[tools] shell_sandbox`` (``runtime.kernel.shell_sandbox``:
bubblewrap or Landlock; system read-only, workspace writable, no network). Only with
``"off"`` does a call run unsandboxed, and then only through a rule whose every argument
is a literal value (``is_literal``): the config is refused at load otherwise, and the
call is refused here too. The environment is cleared
(``runtime.net.process.subprocess_env([])``: PATH, HOME and the temp-dir variables
only). The working directory is the workspace, or ``cwd`` inside it (realpath and
commonpath, so ``..`` and symlinks out are refused). The timeout is ``min(timeout_secs,
[tools] timeouts.shell_exec or timeout_secs)``; the program runs in its own session and
its whole process group is killed at once on timeout, on cancellation and when it exits
(leftover children would otherwise hold the pipes open; ``runtime.net.process.shutdown``
with no grace). stdout is kept up to 1 MiB, stderr up to 64 KiB; beyond that output is
read and discarded, so the program does not block on a full pipe, and the result says
how much was cut.

Result: ``exit code N\\n--- stdout ---\\n...\\n--- stderr ---\\n...``, a tool error when
N != 0 or on timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

import trio

from runtime.config import Config, ShellRule
from runtime.config.shell_policy import is_literal, rule_matches, rule_text, why_refused
from runtime.errors import ConfigError, ToolRefused
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.capture import Head
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.shell_sandbox import Sandbox, load_problem
from runtime.net.sandbox import Wrapped
from runtime.net.process import exit_text, shutdown, signal_group, spawn, subprocess_env

__all__ = ["STDOUT_CAP", "STDERR_CAP", "shell_exec_tool", "resolve_program", "allow_call", "make_shell_exec",
           "register"]

STDOUT_CAP = 1024 * 1024
STDERR_CAP = 64 * 1024
MAX_STDIN_CHARS = 1024 * 1024


def shell_exec_tool(allowlist: list[str], rules: list[ShellRule] | None = None) -> Tool:
    allowed = ", ".join(sorted(set(allowlist))) or "none"
    pinned = "; ".join(rule_text(rule) for rule in rules or [])
    return Tool(
        "shell_exec",
        "Run one program directly (no shell: no pipes, globs, redirection or $VARIABLES) in "
        f"your workspace and return its exit code, stdout and stderr. Allowed programs: {allowed}."
        + (f" Allowed commands (arguments pinned; globs per argument): {pinned}." if pinned else ""),
        {
            "type": "object",
            "properties": {
                "argv": {"type": "array", "minItems": 1, "maxItems": 1000,
                         "items": {"type": "string", "maxLength": 100_000},
                         "description": "The program and its arguments, passed verbatim."},
                "stdin": {"type": "string", "maxLength": MAX_STDIN_CHARS,
                          "description": "Text to send to the program's standard input."},
                "cwd": {"type": "string", "minLength": 1,
                        "description": "Working directory, relative to (and inside) the workspace."},
                "timeout_secs": {"type": "number", "exclusiveMinimum": 0,
                                 "description": "Kill the program after this many seconds (capped)."},
            },
            "required": ["argv"],
            "additionalProperties": False,
        },
    )


def _path_dirs(env: dict[str, str]) -> list[str]:
    return [d for d in env.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def resolve_program(program: str, allowlist: list[str], env: dict[str, str]) -> str:
    """The absolute path to execute for ``argv[0]``, or ``ToolRefused``."""
    if not program or "\x00" in program:
        raise ToolRefused("refused: argv[0] must be a program name")
    slash = "/" in program or (os.altsep is not None and os.altsep in program) or os.sep in program
    if not slash:
        if program not in allowlist:
            raise ToolRefused(f"refused: {program!r} is not an allowed program "
                              f"(allowed: {', '.join(sorted(set(allowlist)))})")
        for directory in _path_dirs(env):
            candidate = os.path.join(directory, program)
            if _executable(candidate):
                return candidate
        raise ToolRefused(f"{program!r} is allowed but was not found on PATH")
    if not os.path.isabs(program):
        raise ToolRefused(f"refused: {program!r}: give a bare program name or an absolute path")
    parts = program.replace("\\", "/").split("/")
    if any(part in ("..", ".") for part in parts) or os.path.normpath(program) != program:
        raise ToolRefused(f"refused: {program!r}: '..' and '.' components are not allowed")
    if program not in allowlist:
        name = os.path.basename(program)
        if name not in allowlist:
            raise ToolRefused(f"refused: {program!r} is not an allowed program "
                              f"(allowed: {', '.join(sorted(set(allowlist)))})")
        here = os.path.realpath(os.path.dirname(program))
        if here not in {os.path.realpath(d) for d in _path_dirs(env)}:
            raise ToolRefused(f"refused: {program!r}: {name!r} is allowed by name only from a PATH directory")
    if not _executable(program):
        raise ToolRefused(f"{program!r} is not an executable file")
    return program


def allow_call(argv: list[str], allowlist: list[str], rules: list[ShellRule], env: dict[str, str],
               *, stdin: bool = False, literal_only: bool = False) -> str:
    """The executable for ``argv`` if a rule or the allowlist allows the whole call, else
    ``ToolRefused`` saying why (and how to allow it, when the operator can).
    ``literal_only`` (no sandbox): only a rule that pins every argument to a literal value."""
    if literal_only:
        rules = [rule for rule in rules if is_literal(rule)]
        allowlist = []
    if any("\x00" in arg for arg in argv):
        raise ToolRefused("refused: an argument contains a NUL byte")
    pinned_for_program: list[ShellRule] = []
    for rule in rules:
        try:
            executable = resolve_program(argv[0], [rule.program], env)
        except ToolRefused:
            continue
        pinned_for_program.append(rule)
        if rule_matches(rule, argv[1:]) and (rule.stdin or not stdin):
            return executable
    try:
        executable = resolve_program(argv[0], allowlist, env)
    except ToolRefused:
        if not pinned_for_program:
            raise
        executable = ""
    if executable:
        entry = argv[0] if argv[0] in allowlist else os.path.basename(argv[0])
        reason = why_refused(entry, real_name=os.path.basename(os.path.realpath(executable)))
        if reason is None:
            return executable
        if not pinned_for_program:
            raise ToolRefused(f"refused: {reason}")
    forms = "; ".join(rule_text(rule) + (" (with stdin)" if rule.stdin else "") for rule in pinned_for_program)
    if stdin and any(rule_matches(rule, argv[1:]) for rule in pinned_for_program):
        raise ToolRefused(f"refused: {argv[0]!r} takes no stdin here (allowed: {forms})")
    raise ToolRefused(f"refused: these arguments to {argv[0]!r} are not allowed (allowed: {forms})")


def _workdir(context: ToolContext, cwd: str | None) -> str:
    if not context.workspace:
        raise ToolRefused("refused: this caller has no workspace to run programs in")
    os.makedirs(context.workspace, mode=0o700, exist_ok=True)
    workspace = os.path.realpath(context.workspace)
    if cwd is None:
        return workspace
    if "\x00" in cwd:
        raise ToolRefused("refused: cwd contains a NUL byte")
    target = os.path.realpath(os.path.join(workspace, cwd))
    if os.path.commonpath([workspace, target]) != workspace:
        raise ToolRefused(f"refused: cwd {cwd!r} escapes the workspace")
    if not os.path.isdir(target):
        raise ToolRefused(f"cwd {cwd!r} is not a directory in the workspace")
    return target


async def _feed(stream: Any, data: bytes) -> None:
    try:
        await stream.send_all(data)
        await stream.aclose()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass  # the program exited or closed its stdin without reading it all


def make_shell_exec(config: Config) -> Any:
    allowlist = list(config.tools.shell_allowlist)
    rules = list(config.tools.shell_rules)
    sandbox = Sandbox(config.tools.shell_sandbox, list(config.tools.shell_sandbox_paths))
    cap_secs = config.tools.timeouts.get("shell_exec", config.tools.timeout_secs)

    async def shell_exec(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        argv = list(arguments["argv"])
        env = subprocess_env([])
        timeout = min(float(arguments.get("timeout_secs") or cap_secs), cap_secs)
        stdin = arguments.get("stdin")
        try:
            executable = allow_call(argv, allowlist, rules, env, stdin=stdin is not None,
                                    literal_only=sandbox.mode == "off")
            cwd = _workdir(context, arguments.get("cwd"))
            workspace = os.path.realpath(context.workspace)
            boxed = await sandbox.wrap(argv, executable, workspace=workspace, cwd=cwd, env=env)
        except ToolRefused as refused:
            return ToolResult(f"shell_exec: {refused}", is_error=True)
        try:
            return await _run(boxed, argv[0], cwd, stdin, timeout)
        finally:
            boxed.cleanup()

    return shell_exec


async def _run(boxed: Wrapped, name: str, cwd: str, stdin: str | None, timeout: float) -> ToolResult:
    """Run what ``Sandbox.wrap`` gave and say how it ended."""
    try:
        process = await spawn(boxed.argv, executable=boxed.executable, cwd=cwd, env=boxed.env,
                              stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
    except OSError as error:
        return ToolResult(f"shell_exec: cannot start {name!r}: {error.strerror or error}", is_error=True)
    out, err = Head(STDOUT_CAP), Head(STDERR_CAP)
    try:
        with trio.move_on_after(timeout) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(out.drain, process.stdout)
                nursery.start_soon(err.drain, process.stderr)
                if stdin is not None:
                    nursery.start_soon(_feed, process.stdin, stdin.encode("utf-8", errors="replace"))
                await process.wait()
                signal_group(process, signal.SIGKILL)  # children left behind would hold the pipes open
    finally:
        await shutdown(process, grace_secs=0)
    if scope.cancelled_caught:
        head = f"timed out after {timeout:g} s; killed"
    else:
        head = exit_text(process.returncode)
    text = f"{head}\n--- stdout ---\n{out.text()}\n--- stderr ---\n{err.text()}"
    return ToolResult(text, is_error=scope.cancelled_caught or process.returncode != 0)


def register(registry: ToolRegistry, config: Config, **deps: Any) -> None:
    """Register ``shell_exec`` if ``[tools] shell_exec_enabled`` and the allowlist or the
    rules allow something; otherwise register nothing. ``ConfigError`` when the mode
    gives no sandbox on this host. ``deps`` is unused (same signature as the others)."""
    tools = config.tools
    if not tools.shell_exec_enabled or not (tools.shell_allowlist or tools.shell_rules):
        return
    problem = load_problem(tools)
    if problem:
        raise ConfigError(problem)
    registry.register(shell_exec_tool(tools.shell_allowlist, tools.shell_rules), make_shell_exec(config))
