"""The sandbox around ``shell_exec``'s program (``runtime.net.sandbox``: bubblewrap or
Landlock): what a pinned rule cannot pin (the files a program reads from the workspace:
``.git/config``, a Makefile) and what a program allowed by name may do with its
arguments (``setarch x bash``, ``cpp -wrapper``...) stays in a box: the system
directories and ``[tools] shell_sandbox_paths`` read and execute, the workspace
read-write, a private temporary directory, no network, no capabilities.

``[tools] shell_sandbox``: ``"auto"`` is bubblewrap when it works here, else Landlock;
``"bubblewrap"`` and ``"landlock"`` ask for one. Where the mode gives no sandbox the
config is refused at load (``load_problem``): shell_exec never runs a program
unsandboxed unless the operator says ``"off"``, and then only rules that pin every
argument to a literal value (``runtime.config.shell_policy``, checked at load and again
per call here).

Killing it: under bubblewrap, bwrap, the namespace's init and the program all stay in
the one process group tern kills (``runtime.net.process``); under Landlock the launcher
*becomes* the program (``execve``), in the same group. Two bwrap options are left out on
purpose:

- ``--die-with-parent`` is PR_SET_PDEATHSIG, tied to the *thread* that forked bwrap,
  and trio forks from worker threads that end after 10 idle seconds: every sandboxed
  program was killed at 10 s (seen with bwrap 0.8).
- ``--new-session`` moves the init into a session and group of its own, out of reach of
  the group kill (a timed-out program's background job lived on). What it guards
  against (TIOCSTI into the caller's terminal) is covered already: bwrap itself starts
  in a new session with no controlling terminal, and the program, not a session
  leader, cannot acquire one. Landlock's launcher runs in tern's new session too.
"""

from __future__ import annotations

import trio

from runtime.config import ToolsConfig
from runtime.errors import ToolRefused
from runtime.net.sandbox import Box, Wrapped, choose, wrap

__all__ = ["Sandbox", "load_problem", "NO_SANDBOX_HELP"]

NO_SANDBOX_HELP = ('install bubblewrap, or run on Linux 5.13+ with Landlock enabled; or set shell_sandbox = "off" '
                   "and pin every argument of each program to literal values in [[tools.shell_rules]]")


def load_problem(tools: ToolsConfig) -> str | None:
    """Why ``[tools]`` cannot run shell_exec on this host (its mode gives no sandbox), or None."""
    if not tools.shell_exec_enabled or not (tools.shell_allowlist or tools.shell_rules) or tools.shell_sandbox == "off":
        return None
    kind, reason = choose(tools.shell_sandbox)
    if kind is not None:
        return None
    return (f'tools.shell_sandbox: "{tools.shell_sandbox}" but this host gives no sandbox ({reason}); shell_exec '
            f"runs programs only inside one: {NO_SANDBOX_HELP}")


class Sandbox:
    """Wraps a program's argv per ``[tools] shell_sandbox``."""

    def __init__(self, mode: str, extra_paths: list[str]) -> None:
        self.mode = mode
        self.extra = tuple(extra_paths)

    async def wrap(self, argv: list[str], executable: str, *, workspace: str, cwd: str,
                   env: dict[str, str]) -> Wrapped:
        """What to spawn. Unchanged under ``"off"``; ``ToolRefused`` when no sandbox can run."""
        if self.mode == "off":
            return Wrapped(argv, executable, env)
        kind, reason = await trio.to_thread.run_sync(choose, self.mode)  # probed once per process
        if kind is None:
            raise ToolRefused(f'refused: [tools] shell_sandbox = "{self.mode}" but this host gives no sandbox '
                              f"({reason})")
        box = Box(read=self.extra, write=(workspace,) if workspace else (), network=False, own_home=True)
        try:
            return wrap(kind, box, argv, executable, cwd=cwd, env=env)
        except OSError as error:
            raise ToolRefused(f"refused: the {kind} sandbox cannot start: {error.strerror or error}") from None
