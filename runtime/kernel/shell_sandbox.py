"""bubblewrap around ``shell_exec``'s program: what a pinned rule cannot pin (the files a
program reads from the workspace: ``.git/config``, a Makefile) runs in a box.

Inside: the system directories (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``) and
``[tools] shell_sandbox_paths`` read-only, the program's own directory read-only, the
workspace read-write, a private ``/tmp`` (tmpfs), a minimal ``/dev`` and ``/proc``; no
network (a namespace of its own with only a loopback of its own), its own PID, IPC and
UTS namespaces, no capabilities. Not visible: home directories, tern's state directory
(other agents' workspaces, the audit log), ``/var``, ``/run``.

``[tools] shell_sandbox``: ``"auto"`` uses bwrap when it is on PATH and a probe run
works (the answer is kept per bwrap path for the life of the process), else runs the
program unsandboxed and warns once; ``"bubblewrap"`` refuses the call with the reason
when bwrap is missing or fails; ``"off"`` never uses it.

Killing it: bwrap, the namespace's init (PID 1 there) and the program all stay in the
one process group tern kills (``runtime.net.process``), and when that init dies the
kernel kills everything else in the namespace, so nothing outlives the call. Hence two
options bwrap offers are left out on purpose:

- ``--die-with-parent`` is PR_SET_PDEATHSIG, tied to the *thread* that forked bwrap,
  and trio forks from worker threads that end after 10 idle seconds: every sandboxed
  program was killed at 10 s (seen with bwrap 0.8).
- ``--new-session`` moves the init into a session and group of its own, out of reach of
  the group kill (a timed-out program's background job lived on). What it guards
  against (TIOCSTI into the caller's terminal) is covered already: bwrap itself starts
  in a new session with no controlling terminal, and the program, not a session
  leader, cannot acquire one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import trio

from runtime.errors import ToolRefused
from runtime.log import get_logger
from runtime.net.process import shutdown, spawn

__all__ = ["SYSTEM_DIRS", "PROBE_TIMEOUT_SECS", "Sandbox", "bwrap_args"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PROBE_TIMEOUT_SECS = 10.0
_REASON_CAP = 2000  # bytes of bwrap's stderr kept for the reason

log = get_logger("tern.shell")
_probes: dict[str, str | None] = {}  # bwrap path -> None (works) or why not
_warned: set[str] = set()


def _under(path: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([root, path]) == root for root in roots)


def bwrap_args(*, workspace: str, cwd: str, program_dirs: list[str], extra: list[str]) -> list[str]:
    """bwrap's options (before ``--``) for a program run in ``cwd`` inside ``workspace``."""
    args = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    bound: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
            bound.append(directory)
    for directory in [os.path.realpath(d) for d in extra] + program_dirs:
        if not _under(directory, bound):
            args += ["--ro-bind-try", directory, directory]
            bound.append(directory)
    if workspace:
        args += ["--bind", workspace, workspace]
    return args + ["--chdir", cwd]


class Sandbox:
    """Wraps a program's argv in bwrap, per ``[tools] shell_sandbox``."""

    def __init__(self, mode: str, extra_paths: list[str]) -> None:
        self.mode = mode
        self.extra = list(extra_paths)

    async def wrap(self, argv: list[str], executable: str, *, workspace: str, cwd: str,
                   env: dict[str, str]) -> tuple[list[str], str, dict[str, str]]:
        """The argv, executable and environment to spawn. Unchanged when the sandbox is
        off (or unavailable under ``"auto"``); ``ToolRefused`` when it is required and
        cannot run."""
        if self.mode == "off":
            return argv, executable, env
        bwrap, reason = await self._bwrap(env)
        if bwrap is None:
            if self.mode == "bubblewrap":
                raise ToolRefused(f'refused: [tools] shell_sandbox = "bubblewrap" but {reason}')
            if reason not in _warned:
                _warned.add(reason)
                log.warning("shell_exec runs unsandboxed: %s (set [tools] shell_sandbox = \"off\" to say so, "
                            "or \"bubblewrap\" to refuse instead)", reason)
            return argv, executable, env
        dirs = sorted({os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))})
        args = bwrap_args(workspace=workspace, cwd=cwd, program_dirs=dirs, extra=self.extra)
        inner = dict(env)
        for name in ("TMPDIR", "TMP", "TEMP"):
            if name in inner:
                inner[name] = "/tmp"  # the real one is not visible inside
        return [bwrap, *args, "--", executable, *argv[1:]], bwrap, inner

    async def _bwrap(self, env: dict[str, str]) -> tuple[str | None, str]:
        path = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if os.path.isabs(d))
        bwrap = shutil.which("bwrap", path=path)
        if bwrap is None:
            return None, "bwrap (bubblewrap) is not on PATH"
        if bwrap not in _probes:
            _probes[bwrap] = await _probe(bwrap, env, self.extra)
        reason = _probes[bwrap]
        return (bwrap, "") if reason is None else (None, reason)


async def _probe(bwrap: str, env: dict[str, str], extra: list[str]) -> str | None:
    """None when ``bwrap`` can build the sandbox here (user namespaces allowed...), else why not."""
    args = bwrap_args(workspace="", cwd="/", program_dirs=[os.path.dirname(os.path.realpath(bwrap))], extra=extra)
    try:
        process = await spawn([bwrap, *args, "--", bwrap, "--version"], env=env, stdin=subprocess.DEVNULL)
    except OSError as error:
        return f"{bwrap} cannot start: {error.strerror or error}"
    err = bytearray()
    try:
        with trio.move_on_after(PROBE_TIMEOUT_SECS) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, process.stdout, bytearray())
                nursery.start_soon(_drain, process.stderr, err)
                await process.wait()
    finally:
        await shutdown(process, grace_secs=0)
    if scope.cancelled_caught:
        return f"{bwrap} did not answer within {PROBE_TIMEOUT_SECS:g} s"
    if process.returncode != 0:
        said = err.decode("utf-8", errors="replace").strip().splitlines()
        return f"{bwrap} cannot build the sandbox here (exit code {process.returncode}: {said[0] if said else '-'})"
    return None


async def _drain(stream: Any, into: bytearray) -> None:
    while chunk := await stream.receive_some(65536):
        if len(into) < _REASON_CAP:
            into += chunk[:_REASON_CAP - len(into)]
