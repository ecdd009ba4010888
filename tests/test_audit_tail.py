"""``tern audit tail`` as a real process: local times with their offset, the kind, agent,
tool, outcome and error text of each record, filters, records of rotated files, and a
quiet end when its reader goes away (``| head -1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from runtime.kernel.audit import AuditLog
from tests.test_audit_chain import setup
from tests.test_cli import ROOT, tern


def test_tail_shows_local_times_kind_agent_tool_outcome_and_error_text(tmp_path):
    config, state = setup(tmp_path, count=0)
    log = AuditLog(state / "audit.jsonl")
    log.record("tool_call", agent="mailer", caller="", tool="file_write", outcome="denied", ms=0.25,
               error="agent 'mailer' may not call file_write\x1b[2J")
    log.record("agent_message", agent="echo", context_id="c1", outcome="ok", ms=1.5)
    log.record("tool_call", agent="mailer", tool="mcp_github_search", outcome="ok", ms=3)
    log.close()
    times = [json.loads(line)["time"] for line in (state / "audit.jsonl").read_text().splitlines()]
    zone = timezone(timedelta(hours=5, minutes=30))  # TZ=XYZ-5:30 below: an offset that is not zero
    when = [datetime.fromtimestamp(t, zone).isoformat(timespec="milliseconds") for t in times]
    done = tern("audit", "tail", "--config", config, env_extra={"TZ": "XYZ-5:30"})
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.splitlines() == [
        f"{when[0]} #1 tool_call agent=mailer tool=file_write outcome=denied 0.25 ms: "
        "agent 'mailer' may not call file_write\\x1b[2J",
        f"{when[1]} #2 agent_message agent=echo outcome=ok 1.5 ms",
        f"{when[2]} #3 tool_call agent=mailer tool=mcp_github_search outcome=ok 3 ms",
    ]
    assert when[0].endswith("+05:30")
    filtered = tern("audit", "tail", "--config", config, "--agent", "mail*", "--tool", "mcp_*", "--json")
    assert [json.loads(line)["seq"] for line in filtered.stdout.splitlines()] == [3]
    denied = tern("audit", "tail", "--config", config, "--outcome", "denied", "--outcome", "tool_error")
    assert [line.split()[1] for line in denied.stdout.splitlines()] == ["#1"]


def test_tail_reads_back_into_rotated_files(tmp_path):
    config, state = setup(tmp_path, count=60, max_bytes=2000)
    done = tern("audit", "tail", "-n", "45", "--json", "--config", config)
    assert [json.loads(line)["n"] for line in done.stdout.splitlines()] == list(range(15, 60))


def test_tail_into_a_pipe_that_closes_ends_quietly(tmp_path):
    config, _ = setup(tmp_path, count=3000)  # far more than a pipe holds
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    tail = subprocess.Popen([sys.executable, "-m", "runtime", "audit", "tail", "-n", "3000", "--config", config],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert b"tool_call" in tail.stdout.readline()  # as `| head -1` does: one line, then gone
    tail.stdout.close()
    assert tail.wait(timeout=60) == 0
    assert tail.stderr.read() == b""
