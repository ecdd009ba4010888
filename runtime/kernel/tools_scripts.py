"""Approved scripts (OpenPact's model): ``script_list``, ``script_run``, ``script_reload``.

Registered only when ``[scripts] dir`` is set. The operator (or whoever may write that
directory) puts executable files there; a model may run one by name, with arguments,
only while the SHA-256 of its bytes is pinned in ``[scripts] allow`` or was approved
with ``tern scripts approve NAME`` (``runtime.kernel.script_approvals``). A new script,
or one edited since its approval, answers with the seed's "pending approval" error,
its hash, and how to approve it.

A run (``runtime.kernel.script_files`` for the file side):

- the name is a file directly in the directory (``SCRIPT_NAME``), opened without
  following links; a symlink, FIFO, device or non-executable file is refused;
- its bytes are hashed while they are copied into a fresh 0700 directory under
  ``<state dir>/scripts-run``, the hash is checked, and that copy is executed, so what
  runs is exactly what was hashed (no window between check and exec); the copy is
  deleted afterwards. A script sees its own copy as ``$0`` (same file name), not the
  scripts directory;
- through ``runtime.net.process``: argv ``[NAME, *args]`` with no shell, a cleared
  environment, its own session, the caller's workspace as working directory (made if
  missing), stdin from /dev/null; after ``[scripts] timeout_secs`` (and when it exits,
  or the call is cancelled) its whole process group is killed at once. The pipeline's
  own timeout (``[tools] timeouts.script_run``, else ``timeout_secs``) applies too: the
  smaller one ends the call;
- stdout is kept up to ``[scripts] max_output_bytes`` (the rest read and dropped, with a
  note), stderr's last ``STDERR_TAIL_BYTES``.

Reply: stdout; a non-zero exit, a signal or the timeout is a tool error with the exit
code, the end of stderr, then stdout.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import tempfile
from typing import Any, NamedTuple

import trio

from runtime.config import Config
from runtime.errors import ToolRefused
from runtime.kernel.capture import Head, Tail
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.script_approvals import PENDING, Approval, Approvals, status
from runtime.kernel.script_files import (MAX_SCRIPTS, Listing, NoSuchScript, check_name, copy_verified, open_directory,
                                         scan, short, with_hint)
from runtime.net.process import exit_text, shutdown, signal_group, spawn, subprocess_env
from runtime.ports import Tool, ToolContext, ToolResult

__all__ = ["MAX_ARGS", "MAX_ARG_CHARS", "STDERR_TAIL_BYTES", "Scripts", "pending_text", "register"]

MAX_ARGS = 64
MAX_ARG_CHARS = 4096
STDERR_TAIL_BYTES = 8192  # of a failed script's stderr, shown before its stdout
RUN_DIR = "scripts-run"
_SPAWN_TRIES = 20  # ETXTBSY: another thread's fork may briefly hold the copy's write descriptor

_NO_ARGUMENTS = {"type": "object", "properties": {}, "additionalProperties": False}

SCRIPT_LIST = Tool(
    "script_list",
    "List the scripts in the operator's scripts directory: name, SHA-256 (short) and status: allowlisted or "
    "approved (script_run runs it) or pending (an administrator has not approved this content yet).",
    _NO_ARGUMENTS, annotations={"readOnlyHint": True})

SCRIPT_RUN = Tool(
    "script_run",
    "Run an approved script from the operator's scripts directory by name, with arguments passed verbatim "
    "(no shell), in your workspace. Only scripts whose exact content an administrator approved run; any other "
    "answers that it is pending approval. Returns the script's stdout; a failure is an error with its exit "
    "code and the end of its stderr.",
    {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 128,
                     "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
                     "description": "The script's name, as script_list shows it."},
            "args": {"type": "array", "maxItems": MAX_ARGS, "items": {"type": "string", "maxLength": MAX_ARG_CHARS},
                     "description": "Arguments passed to the script as they are."},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    annotations={"destructiveHint": True, "openWorldHint": True})

SCRIPT_RELOAD = Tool(
    "script_reload",
    "Read the scripts directory again (new, edited and deleted scripts) and list the scripts with their status.",
    _NO_ARGUMENTS, annotations={"readOnlyHint": True, "idempotentHint": True})


def pending_text(name: str, sha256: str, approval: Approval | None) -> str:
    """The seed's answer for a script that may not run, with what an administrator needs."""
    lines = [f"Error: Script '{name}' is pending approval. An administrator must review and approve this "
             "script before it can be executed.", f"sha256: {sha256}"]
    if approval is not None:
        lines.append(f"It changed since it was approved (the approved content had sha256 {short(approval.sha256)}).")
    lines.append(f"To approve it: tern scripts approve {name}")
    return "\n".join(lines)


def check_args(args: Any) -> list[str]:
    if args is None:
        return []
    if not isinstance(args, list):
        raise ToolRefused("args must be a list of strings")
    if len(args) > MAX_ARGS:
        raise ToolRefused(f"at most {MAX_ARGS} args, got {len(args)}")
    for index, arg in enumerate(args):
        if not isinstance(arg, str):
            raise ToolRefused(f"args[{index}] must be a string")
        if len(arg) > MAX_ARG_CHARS:
            raise ToolRefused(f"args[{index}] is longer than {MAX_ARG_CHARS} characters")
        if "\x00" in arg:
            raise ToolRefused(f"args[{index}] contains a NUL byte")
    return list(args)


class _Prepared(NamedTuple):
    private_dir: str
    path: str
    sha256: str
    status: str
    approval: Approval | None


class Scripts:
    """The scripts directory and who approved what, for the three tools."""

    def __init__(self, config: Config) -> None:
        self.dir = config.scripts.dir
        self.allow = {name: digest.lower() for name, digest in config.scripts.allow.items()}
        self.approvals = Approvals(config.state.dir)
        self.timeout_secs = config.scripts.timeout_secs
        self.max_output_bytes = config.scripts.max_output_bytes
        self.run_base = os.path.join(config.state.dir, RUN_DIR) if config.state.dir else ""
        self._cache: dict[tuple[Any, ...], str] = {}  # hashes for listings only (script_files.scan)

    # --- listing ---------------------------------------------------------------------

    def listing(self, *, reload: bool = False) -> tuple[Listing, dict[str, str], dict[str, Approval]]:
        """The directory now, each script's status, and the recorded approvals (blocking)."""
        fd = open_directory(self.dir)
        try:
            found, self._cache = scan(fd, None if reload else self._cache)
        finally:
            os.close(fd)
        approvals = self.approvals.all()
        statuses = {s.name: status(s.name, s.sha256, self.allow, approvals) for s in found.scripts}
        return found, statuses, approvals

    def _list_result(self, reload: bool) -> ToolResult:
        found, statuses, _ = self.listing(reload=reload)
        lines = [f"{s.name}  sha256:{short(s.sha256)}  {statuses[s.name]}" for s in found.scripts]
        if not lines:
            lines.append("no scripts in the scripts directory")
        if found.skipped:
            lines.append("not scripts: " + ", ".join(f"{name} ({why})" for name, why in found.skipped))
        if found.more:
            lines.append(f"[{found.more} more entries not listed: at most {MAX_SCRIPTS}]")
        structured = {"scripts": [{"name": s.name, "sha256": s.sha256, "status": statuses[s.name]}
                                  for s in found.scripts]}
        return ToolResult("\n".join(lines), structured=structured)

    async def script_list(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await _refusals_as_errors(trio.to_thread.run_sync(self._list_result, False))

    async def script_reload(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await _refusals_as_errors(trio.to_thread.run_sync(self._list_result, True))

    # --- running ---------------------------------------------------------------------

    def _prepare(self, name: str) -> _Prepared:
        """Copy the script to a private directory, hashing what is copied; its status."""
        fd = open_directory(self.dir)
        try:
            if self.run_base:
                os.makedirs(self.run_base, mode=0o700, exist_ok=True)
            private_dir = tempfile.mkdtemp(prefix="run-", dir=self.run_base or None)  # 0700, ours alone
            try:
                path, sha256 = copy_verified(fd, name, private_dir)
                approval = None if self.allow.get(name) == sha256 else self.approvals.get(name)
                state = status(name, sha256, self.allow, {name: approval} if approval else {})
            except BaseException:
                shutil.rmtree(private_dir, ignore_errors=True)
                raise
        except NoSuchScript as missing:
            raise with_hint(fd, name, missing) from None
        finally:
            os.close(fd)
        return _Prepared(private_dir, path, sha256, state, approval)

    async def script_run(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            name = check_name(arguments.get("name"))
            args = check_args(arguments.get("args"))
            workspace = _workspace(context)
            prepared = await trio.to_thread.run_sync(self._prepare, name)
        except ToolRefused as refused:
            return ToolResult(str(refused), is_error=True)
        except OSError as error:  # the state directory cannot take the copy (full disk...)
            return ToolResult(f"script '{arguments.get('name')}' cannot be prepared: "
                              f"{error.strerror or type(error).__name__}", is_error=True)
        try:
            if prepared.status == PENDING:
                return ToolResult(pending_text(name, prepared.sha256, prepared.approval), is_error=True)
            return await self._execute(name, prepared.path, args, workspace)
        finally:
            shutil.rmtree(prepared.private_dir, ignore_errors=True)

    async def _execute(self, name: str, path: str, args: list[str], workspace: str) -> ToolResult:
        try:
            process = await _spawn([name, *args], path, workspace)
        except OSError as error:
            return ToolResult(f"script '{name}' cannot start: {error.strerror or error}", is_error=True)
        out = Head(self.max_output_bytes, note="output cut at")
        err = Tail(min(self.max_output_bytes, STDERR_TAIL_BYTES))
        try:
            with trio.move_on_after(self.timeout_secs) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(out.drain, process.stdout)
                    nursery.start_soon(err.drain, process.stderr)
                    await process.wait()
                    signal_group(process, signal.SIGKILL)  # what it left behind would hold the pipes open
        finally:
            await shutdown(process, grace_secs=0)
        if not scope.cancelled_caught and process.returncode == 0:
            return ToolResult(out.text() or "(no output)")
        head = f"timed out after {self.timeout_secs:g} s; killed" if scope.cancelled_caught \
            else exit_text(process.returncode)
        return ToolResult(f"script '{name}' failed: {head}\n--- stderr ---\n{err.text()}\n--- stdout ---\n"
                          f"{out.text()}", is_error=True)


async def _refusals_as_errors(work: Any) -> ToolResult:
    try:
        return await work
    except ToolRefused as refused:
        return ToolResult(str(refused), is_error=True)


def _workspace(context: ToolContext) -> str:
    if not context.workspace:
        raise ToolRefused("this caller has no workspace to run scripts in")
    os.makedirs(context.workspace, mode=0o700, exist_ok=True)
    return os.path.realpath(context.workspace)


async def _spawn(argv: list[str], path: str, cwd: str) -> trio.Process:
    for attempt in range(_SPAWN_TRIES):
        try:
            return await spawn(argv, executable=path, cwd=cwd, env=subprocess_env([]), stdin=subprocess.DEVNULL)
        except OSError as error:
            if error.errno != errno.ETXTBSY or attempt == _SPAWN_TRIES - 1:
                raise
        await trio.sleep(0.05)
    raise AssertionError("unreachable")  # pragma: no cover


def register(registry: ToolRegistry, config: Config, **deps: Any) -> None:
    """Register the three tools when ``[scripts] dir`` is set; otherwise nothing."""
    if not config.scripts.dir:
        return
    scripts = Scripts(config)
    registry.register(SCRIPT_LIST, scripts.script_list)
    registry.register(SCRIPT_RUN, scripts.script_run)
    registry.register(SCRIPT_RELOAD, scripts.script_reload)
