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
