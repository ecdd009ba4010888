"""Subprocesses, started and stopped one way, because they run someone else's code (MCP
stdio servers, command agents, ``shell_exec``):

- a cleared environment: PATH, HOME and the temp-dir variables (plus the Windows profile
  variables) and only the names a caller adds;
- its own session, so one process group holds the program and everything it starts,
  and a signal to the group reaches its children too;
- one shutdown for every ending (done, timed out, cancelled): close stdin, wait, SIGTERM
  the group, wait, SIGKILL the group, reap. Shielded and bounded, and it always kills
  what is left of the group, so no grandchild outlives the call and no zombie is left.

A long-lived child (an MCP stdio server) is also watched with ``watch_exit``: when it
exits, its group is killed at once, so a grandchild cannot keep its pipes open and
make a dead server look alive.

No PR_SET_PDEATHSIG: Linux ties it to the *thread* that forked, and trio forks from
worker threads that end after 10 idle seconds, which killed long-lived children. A
child learns of tern's death from EOF on its stdin.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any
from collections.abc import Sequence

import trio

__all__ = ["BASE_ENV_NAMES", "KILL_WAIT_SECS", "subprocess_env", "spawn", "signal_group", "shutdown", "watch_exit",
           "exit_text"]

BASE_ENV_NAMES = ("PATH", "HOME", "TMP", "TEMP", "TMPDIR")
WINDOWS_ENV_NAMES = ("APPDATA", "LOCALAPPDATA", "USERPROFILE", "SystemRoot", "HOMEDRIVE", "HOMEPATH")
KILL_WAIT_SECS = 5.0  # after SIGKILL; a process still there then is reaped in the background


def subprocess_env(names: list[str], source: dict[str, str] | None = None) -> dict[str, str]:
    """A cleared environment: the base names plus ``names``, where they are set."""
    source = dict(os.environ) if source is None else source
    wanted = list(BASE_ENV_NAMES) + (list(WINDOWS_ENV_NAMES) if sys.platform == "win32" else []) + list(names)
    return {name: source[name] for name in wanted if name in source}


async def spawn(argv: Sequence[str], *, env: dict[str, str], cwd: str | None = None,
                executable: str | None = None, stdin: int = subprocess.PIPE) -> trio.Process:
    """Spawn ``argv`` in a new session with piped stdout and stderr; OSError if it cannot
    start. Whoever starts a process owes it a ``shutdown``."""
    options: dict[str, Any] = {"start_new_session": True} if os.name == "posix" else {}
    return await trio.lowlevel.open_process(list(argv), executable=executable, cwd=cwd, env=env, stdin=stdin,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **options)


def signal_group(process: trio.Process, sig: int) -> None:
    """Send ``sig`` to the process's whole group (on Windows, to the process alone)."""
    try:
        if os.name == "posix":
            os.killpg(process.pid, sig)
        elif sig == signal.SIGTERM:  # pragma: no cover
            process.terminate()
        else:  # pragma: no cover
            process.kill()
    except OSError:  # the group is gone already
        pass


async def watch_exit(process: trio.Process) -> int:
    """Wait for ``process`` to exit, then SIGKILL what is left of its group (children it
    left behind, which may hold its stdout open); return its exit code."""
    code = await process.wait()
    signal_group(process, signal.SIGKILL)
    return code


async def shutdown(process: trio.Process, *, grace_secs: float) -> int | None:
    """End ``process`` and its group; return its exit code.

    Close stdin and wait up to ``grace_secs`` for it to exit; then SIGTERM the group and
    wait ``grace_secs`` again (both skipped when ``grace_secs`` is 0: killed at once);
    then SIGKILL the group, which also ends children the program left behind, and wait
    up to ``KILL_WAIT_SECS``; then close its pipes. Shielded, so a cancelled caller still
    gets it done. None only if even SIGKILL did not end it in time; it is then reaped in
    the background."""
    with trio.CancelScope(shield=True):
        await _close(process.stdin)
        if not await _exited(process, grace_secs) and grace_secs > 0:
            signal_group(process, signal.SIGTERM)
            await _exited(process, grace_secs)
        signal_group(process, signal.SIGKILL)
        if not await _exited(process, KILL_WAIT_SECS):
            trio.lowlevel.spawn_system_task(process.wait, name=f"reap pid {process.pid}")
        await _close(process.stdout)
        await _close(process.stderr)
    return process.returncode


async def _exited(process: trio.Process, secs: float) -> bool:
    if process.poll() is None and secs > 0:
        with trio.move_on_after(secs):
            await process.wait()
    return process.poll() is not None


async def _close(stream: Any) -> None:
    if stream is not None:
        try:
            await stream.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


def exit_text(code: int | None) -> str:
    """How a program ended, for a person: ``exit code 3``, ``exit code -9 (signal SIGKILL)``."""
    if code is not None and code < 0:
        try:
            return f"exit code {code} (signal {signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit code {code}"
