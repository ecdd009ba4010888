"""Whether a process is gone, for tests that check nothing outlives a call."""

from __future__ import annotations

import os

import trio


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (dead, waiting for its parent to reap it) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: os.kill said it exists
        return True


async def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` stops running within ``within`` seconds (killing is asynchronous)."""
    with trio.move_on_after(within):
        while alive(pid):
            await trio.sleep(0.02)
        return True
    return False


async def pid_in(path, within: float = 10.0) -> int:
    """The pid a test's program writes to ``path``, once it is there."""
    with trio.fail_after(within):
        while True:
            try:
                text = open(path).read()
            except FileNotFoundError:
                text = ""
            if text.endswith("\n"):
                return int(text)
            await trio.sleep(0.02)
