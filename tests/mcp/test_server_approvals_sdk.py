"""The official Python SDK's ``Client`` asked to approve a tern tool call, against real
processes: ``tern mcp`` on stdio (in-process kernel), ``POST /mcp`` of ``tern serve``,
and ``tern mcp`` relaying to that daemon. The exposed agent ``writer`` writes a file
with ``file_write``, which the default policy asks about (a destructive tool), so every
call waits for a person. The client answers through its elicitation callback (the
handshake era's ``elicitation/create``, 2026-07-28's ``input_required`` retry), or has
no such callback and sees progress naming the approval, which the test then approves
from outside through the state directory's approvals file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import trio

from runtime.kernel.approvals import Approvals
from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, write_config, tern_serve

CLIENT = str(FIXTURES / "sdk_mcp_approval_client.py")
KEY = "sdk-approval-key-5678"
TIMEOUT = 8  # [governance] approval_timeout_secs: how long a call that nobody answers waits
EXTRA = f"""
[[agents]]
name = "writer"
kind = "tool"
tool = "file_write"

[governance]
approval_timeout_secs = {TIMEOUT}
"""
ERAS = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]
ANSWERS = "approve,decline,cancel,always"  # "always" last: from then on, nothing asks


def config_in(tmp: Path) -> Path:
    return write_config(tmp, EXTRA)


def run_client(sdk_python: str, mode: str, answers: str, *target: str, env: dict) -> dict:
    done = subprocess.run([sdk_python, CLIENT, mode, answers, *target], capture_output=True, text=True,
                          timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stdio_target(config: Path) -> list[str]:
    return ["--", sys.executable, "-m", "runtime", "--config", str(config), "mcp"]


def written(tmp: Path, name: str) -> str | None:
    path = tmp / "state" / "workspaces" / "writer" / name
    return path.read_text() if path.exists() else None


def check_answered(seen: dict, tmp: Path, version: str) -> None:
    """ANSWERS, in that order."""
    assert seen["version"] == version
    approve, decline, cancel, always = seen["calls"]
    for call in seen["calls"]:
        assert len(call["asked"]) == 1
        assert "Agent 'writer' wants to call the tool file_write" in call["asked"][0]
        assert "approval ap_" in call["asked"][0] and f'"path":"{call["answer"]}-' in call["asked"][0]
    assert not approve["is_error"] and written(tmp, "approve-0.txt") == "written after approve"
    assert not always["is_error"] and written(tmp, "always-3.txt") == "written after always"
    assert decline["is_error"] and "denied it" in decline["text"] and ": declined" in decline["text"]
    assert cancel["is_error"] and "denied it" in cancel["text"] and ": dismissed" in cancel["text"]
    assert written(tmp, "decline-1.txt") is None and written(tmp, "cancel-2.txt") is None
    approvals = Approvals(tmp / "state" / "approvals.sqlite3")
    try:
        decided = sorted(trio.run(approvals.list, None), key=lambda a: a.created)
        rules = trio.run(approvals.rules)
    finally:
        approvals.close()
    assert [(a.state, a.scope, a.reason, a.channel) for a in decided] == [
        ("approved", "once", "checked by the test", "mcp"), ("denied", "once", "declined", "mcp"),
        ("denied", "once", "dismissed", "mcp"), ("approved", "always", "checked by the test", "mcp")]
    assert [(r["tool"], r["decision"]) for r in rules] == [("file_write", "allow")]  # the "always" answer


def check_expired(seen: dict, tmp: Path, elapsed: float) -> None:
    (call,) = seen["calls"]
    assert call["is_error"] and "expired (nobody answered in time)" in call["text"], call
    assert written(tmp, "hang-0.txt") is None
    assert TIMEOUT <= elapsed < TIMEOUT + 60


def approve_from_outside(process: subprocess.Popen, tmp: Path) -> str:
    """Wait for the call's approval request to appear in the state directory's file, and
    approve it there (the waiting tern polls the file); its id."""
    approvals = Approvals(tmp / "state" / "approvals.sqlite3")
    try:
        deadline = time.monotonic() + 60
        while not (pending := trio.run(approvals.list, "pending")):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        trio.run(partial(approvals.decide, pending[0].id, True, by="the test", channel="test"))
        return pending[0].id
    finally:
        approvals.close()


def check_announced(process: subprocess.Popen, tmp: Path) -> None:
    approval_id = approve_from_outside(process, tmp)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    (call,) = json.loads(out.strip().splitlines()[-1])["calls"]
    assert not call["is_error"] and written(tmp, "none-0.txt") == "written after none"
    assert f"waiting for approval {approval_id}: run tern approve {approval_id}, or deny it" in call["progress"]


# --- tern mcp, in-process -------------------------------------------------------------------

@pytest.mark.parametrize("mode,version", [*ERAS, ("auto", "2026-07-28")])
def test_stdio_client_answers_the_elicitation(sdk_python, tmp_path, mode, version):
    seen = run_client(sdk_python, mode, ANSWERS, *stdio_target(config_in(tmp_path)),
                      env=tern_env(tmp_path))
    check_answered(seen, tmp_path, version)


def test_stdio_client_that_never_answers_gets_the_expiry(sdk_python, tmp_path):
    started = time.monotonic()
    seen = run_client(sdk_python, "legacy", "hang", *stdio_target(config_in(tmp_path)), env=tern_env(tmp_path))
    check_expired(seen, tmp_path, time.monotonic() - started)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_stdio_client_without_elicitation_sees_the_approval_named(sdk_python, tmp_path, mode):
    process = subprocess.Popen([sdk_python, CLIENT, mode, "none", *stdio_target(config_in(tmp_path))],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               env=tern_env(tmp_path))
    check_announced(process, tmp_path)


# --- tern serve: POST /mcp, and tern mcp relaying to it -------------------------------------------

@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    config = config_in(tmp)
    env = tern_env(tmp, TERN_API_KEY=KEY)
    with tern_serve(tmp, config, env) as url:
        yield config, env, url, tmp


def fresh(tmp: Path) -> None:
    """The daemon's tests share its workspace and approvals: start each from none."""
    for path in (tmp / "state" / "workspaces" / "writer").glob("*.txt"):
        path.unlink()
    approvals = Approvals(tmp / "state" / "approvals.sqlite3")
    approvals._sql.db.execute("DELETE FROM requests")
    trio.run(approvals.forget_rules)
    approvals.close()


def http_env() -> dict:
    return {**os.environ, "TERN_TEST_KEY": KEY}


@pytest.mark.parametrize("mode,version", ERAS)
def test_http_client_answers_the_elicitation(sdk_python, daemon, mode, version):
    config, env, url, tmp = daemon
    fresh(tmp)
    seen = run_client(sdk_python, mode, ANSWERS, url + "/mcp", env=http_env())
    check_answered(seen, tmp, version)


def test_http_client_that_never_answers_gets_the_expiry(sdk_python, daemon):
    config, env, url, tmp = daemon
    fresh(tmp)
    started = time.monotonic()
    seen = run_client(sdk_python, "legacy", "hang", url + "/mcp", env=http_env())
    check_expired(seen, tmp, time.monotonic() - started)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_http_client_without_elicitation_sees_the_approval_named(sdk_python, daemon, mode):
    config, env, url, tmp = daemon
    fresh(tmp)
    process = subprocess.Popen([sdk_python, CLIENT, mode, "none", url + "/mcp"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=http_env())
    check_announced(process, tmp)


@pytest.mark.parametrize("mode,version", ERAS)
def test_relayed_client_answers_the_elicitation(sdk_python, daemon, mode, version):
    """Through ``tern mcp`` relaying to the daemon: the daemon's elicitation/create comes
    out on stdout and the client's answer goes back to the daemon (handshake era); the
    input_required result and its retry are plain messages (2026-07-28)."""
    config, env, url, tmp = daemon
    fresh(tmp)
    seen = run_client(sdk_python, mode, ANSWERS, *stdio_target(config), env=env)
    check_answered(seen, tmp, version)
    audit = (tmp / "state" / "audit.jsonl").read_text()
    assert '"caller":"mcp:http:127.0.0.1"' in audit and "mcp:stdio" not in audit  # answered by the daemon
