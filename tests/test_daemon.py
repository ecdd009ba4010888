"""``tern serve``, ``tern status`` and ``tern events`` as real processes: the discovery
file, clean and unclean exits, one daemon per state directory."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.test_cli import ROOT, tern


def write_config(tmp_path: Path) -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp_path / "state"}"\n'
                    '[[agents]]\nname = "echo"\nkind = "echo"\n')
    return str(path)


def start_daemon(config: str, env_extra: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """``tern serve`` in a subprocess (no TERN_* variables but ``env_extra``); its URL."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--config", config],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env)
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if "serving on " in line:
            return process, line.split("serving on ", 1)[1].strip()
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"the daemon did not start: {line!r}")


@pytest.fixture
def daemon(tmp_path):
    config = write_config(tmp_path)
    process, url = start_daemon(config)
    yield config, process, url, tmp_path / "state" / "daemon.json"
    if process.poll() is None:
        process.kill()
        process.wait()


def test_serve_writes_discovery_and_exits_cleanly_on_sigterm(daemon):
    config, process, url, discovery = daemon
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert stat.S_IMODE(discovery.stat().st_mode) == 0o600
    assert f'"url": "{url}"' in discovery.read_text()
    status = tern("status", "--config", config)
    assert status.returncode == 0 and f"at {url} (pid {process.pid})" in status.stdout
    assert "agents: echo" in status.stdout
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0
    assert not discovery.exists()
    gone = tern("status", "--config", config)
    assert gone.returncode == 1 and "no tern daemon is running" in gone.stderr


def test_killed_daemon_leaves_a_stale_file_that_is_recognised(daemon):
    config, process, url, discovery = daemon
    process.kill()
    process.wait()
    assert discovery.exists()
    stale = tern("status", "--config", config)
    assert stale.returncode == 1 and f"pid {process.pid} is gone" in stale.stderr
    again, url2 = start_daemon(config)  # a stale file does not block a new daemon
    try:
        assert httpx.get(url2 + "/health").status_code == 200
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=15) == 0


def test_one_daemon_per_state_directory(daemon):
    config, process, url, discovery = daemon
    second = tern("serve", "--config", config)
    assert second.returncode == 2 and f"another tern daemon (pid {process.pid}" in second.stderr


def test_events_follows_the_daemon(daemon):
    config, process, url, discovery = daemon
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    follower = subprocess.Popen([sys.executable, "-m", "runtime", "events", "--json", "--config", config],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        first = follower.stdout.readline()
        assert '"type": "hello"' in first
        process.send_signal(signal.SIGTERM)
        assert follower.wait(timeout=15) == 0  # the daemon closed the socket: events ends cleanly
    finally:
        follower.kill()


def test_listen_errors_are_one_line(tmp_path):
    config = write_config(tmp_path)
    bad = tern("serve", "--config", config, "--listen", "nonsense")
    assert bad.returncode == 2 and "--listen" in bad.stderr and "Traceback" not in bad.stderr


@pytest.fixture
def model_url():
    """An OpenAI-compatible endpoint on loopback that answers 'noted N', N being how many
    messages the chat held (so a reply shows how much history the agent was given)."""
    from tests.chat_stub import serve_chat

    with serve_chat(lambda messages: {"role": "assistant", "content": f"noted {len(messages)}"}) as url:
        yield url


def test_sigkill_loses_no_committed_message(tmp_path, model_url):
    """A reply the API returned is on disk: kill -9 right after it, then read the store.
    (An llm agent: the kind that keeps its conversation.)"""
    import sqlite3

    config = write_config(tmp_path)
    with open(config, "a") as file:
        file.write(f'[[agents]]\nname = "bot"\nkind = "llm"\n[agents.model]\nbase_url = "{model_url}"\n'
                   'model = "m"\n')
    process, url = start_daemon(config)
    try:
        replies = []
        for i in range(20):
            response = httpx.post(url + "/api/agents/bot/message", json={"message": f"note {i}", "context_id": "ctx-1"})
            assert response.status_code == 200, response.text
            replies.append(response.json())
        assert replies[-1] == {"agent": "bot", "context_id": "ctx-1", "text": "noted 39"}
    finally:
        process.kill()
        process.wait()
    with sqlite3.connect(tmp_path / "state" / "conversations.sqlite3") as db:
        rows = db.execute("SELECT role, content FROM messages WHERE context_id = 'ctx-1' ORDER BY seq").fetchall()
    assert len(rows) == 40 and rows[-2:] == [("user", "note 19"), ("agent", "noted 39")]
    again = tern("run", "bot", "x", "--context", "ctx-1", "--config", config)  # a restarted tern reads all 40
    assert again.returncode == 0 and again.stdout == "noted 41\n", again.stderr
