"""runtime.net.process: a cleared environment, a session of its own, and one shutdown
that ends the whole process group, bounded, under cancellation too, leaving no zombie."""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import pytest
import trio

from runtime.net import process
from runtime.net.process import shutdown, spawn, subprocess_env
from tests.processes import alive, gone

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX process groups and signals")

PY = sys.executable
IGNORES_TERM = ("import signal, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "print('ready', flush=True)\n"
                "time.sleep(300)\n")
GRANDCHILD = "sleep 300 & echo $!; wait"


async def first_line(proc: trio.Process) -> str:
    data = b""
    with trio.fail_after(10):
        while not data.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, f"no line from the program (so far {data!r})"
            data += chunk
    return data.decode().strip()


def test_subprocess_env_keeps_only_the_allowed_names():
    source = {"PATH": "/bin", "HOME": "/h", "TMPDIR": "/t", "AWS_SECRET_ACCESS_KEY": "x", "GITHUB_TOKEN": "y"}
    assert subprocess_env(["GITHUB_TOKEN", "UNSET_NAME"], source) == {
        "PATH": "/bin", "HOME": "/h", "TMPDIR": "/t", "GITHUB_TOKEN": "y"}


async def test_the_child_sees_only_the_cleared_environment_in_a_session_of_its_own(monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET", "do-not-pass-me")
    proc = await spawn(
        [PY, "-c", "import json, os; print(json.dumps([dict(os.environ), os.getsid(0), os.getpgid(0)]))"],
        env=subprocess_env([]),
    )
    try:
        env, sid, pgid = json.loads(await first_line(proc))
    finally:
        code = await shutdown(proc, grace_secs=2)
    assert "TERN_TEST_SECRET" not in env and env["PATH"] == os.environ["PATH"]
    assert sid == pgid == proc.pid != os.getsid(0)
    assert code == 0


async def test_a_program_that_exits_on_eof_gets_its_grace():
    proc = await spawn([PY, "-c", "import sys; sys.stdin.read()"], env=subprocess_env([]))
    started = time.monotonic()
    assert await shutdown(proc, grace_secs=5) == 0  # closing stdin was enough: no signal
    assert time.monotonic() - started < 4


async def test_sigterm_after_the_grace():
    proc = await spawn(["sleep", "300"], env=subprocess_env([]))
    started = time.monotonic()
    assert await shutdown(proc, grace_secs=0.3) == -signal.SIGTERM
    assert 0.25 < time.monotonic() - started < 3


async def test_a_program_that_ignores_sigterm_ends_with_sigkill_within_the_bounds():
    proc = await spawn([PY, "-c", IGNORES_TERM], env=subprocess_env([]))
    assert await first_line(proc) == "ready"
    started = time.monotonic()
    assert await shutdown(proc, grace_secs=0.3) == -signal.SIGKILL
    assert 0.55 < time.monotonic() - started < 0.6 + process.KILL_WAIT_SECS
    assert not alive(proc.pid) and not os.path.exists(f"/proc/{proc.pid}")  # reaped, no zombie


async def test_no_grace_kills_at_once():
    proc = await spawn([PY, "-c", IGNORES_TERM], env=subprocess_env([]))
    assert await first_line(proc) == "ready"
    started = time.monotonic()
    assert await shutdown(proc, grace_secs=0) == -signal.SIGKILL
    assert time.monotonic() - started < 2


async def test_the_whole_group_dies_even_when_the_leader_exits_first():
    proc = await spawn(["sh", "-c", "sleep 300 >/dev/null 2>&1 & echo $!"], env=subprocess_env([]))
    grandchild = int(await first_line(proc))
    await proc.wait()
    assert alive(grandchild)
    assert await shutdown(proc, grace_secs=2) == 0
    assert await gone(grandchild)


async def test_shutdown_finishes_under_a_cancelled_caller_and_kills_grandchildren():
    proc = await spawn(["sh", "-c", GRANDCHILD], env=subprocess_env([]))
    grandchild = int(await first_line(proc))
    with trio.CancelScope() as scope:
        scope.cancel()
        code = await shutdown(proc, grace_secs=0.2)
    assert code == -signal.SIGTERM and proc.returncode == code  # sh dies of the SIGTERM
    assert await gone(grandchild)


async def test_a_process_sigkill_has_not_ended_yet_is_reaped_in_the_background(monkeypatch):
    monkeypatch.setattr(process, "KILL_WAIT_SECS", 0)  # as if SIGKILL took longer than the bound
    proc = await spawn(["sleep", "300"], env=subprocess_env([]))
    await shutdown(proc, grace_secs=0)
    with trio.fail_after(5):
        while os.path.exists(f"/proc/{proc.pid}"):  # a zombie of ours would stay listed
            await trio.sleep(0.02)
    assert proc.returncode == -signal.SIGKILL
