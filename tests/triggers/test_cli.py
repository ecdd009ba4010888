"""``tern triggers`` without a daemon: one line saying where triggers run, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize("args", [["triggers"], ["triggers", "runs", "tick", "--json"], ["triggers", "fire", "tick"],
                                  ["triggers", "resume", "tick"]])
def test_without_a_daemon_each_subcommand_says_where_triggers_run(tmp_path, args):
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "echo"\nkind = "echo"\n'
                      '[[triggers]]\nname = "tick"\nagent = "echo"\nkind = "schedule"\nevery = "1h"\nmessage = "x"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-m", "runtime", *args, "--config", str(config)], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "tern: no tern daemon runs on this state directory: triggers run in `tern serve`; " \
                          "start it first\n"


def test_tern_events_names_trigger_runs_and_pauses_in_one_escaped_line():
    from runtime.cli.daemon import _event_line

    lines = [_event_line({"time": 0, **event}) for event in (
        {"type": "trigger.run", "trigger": "ci", "run_id": "run_1", "source": "webhook", "state": "started"},
        {"type": "trigger.run", "trigger": "ci", "run_id": "run_1", "source": "webhook", "state": "ended",
         "outcome": "failed", "error": "boom\n\x1b[31mforged"},
        {"type": "trigger.paused", "trigger": "ci", "failures": 5, "error": "boom"},
        {"type": "agent.message", "agent": "bot", "context_id": "run_1", "caller": "trigger:ci", "outcome": "ok",
         "ms": 3})]
    assert lines[0].endswith("trigger ci run run_1 (webhook): started")
    assert "trigger ci run run_1 (webhook): ended failed: boom" in lines[1]
    assert "\n" not in lines[1] and "\x1b" not in lines[1]
    assert lines[2].endswith("trigger ci PAUSED after 5 failed runs in a row: boom (tern triggers resume ci)")
    assert lines[3].endswith("agent bot [run_1] from trigger:ci: ok in 3 ms")
