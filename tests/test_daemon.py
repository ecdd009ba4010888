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
        assert follower.wait(timeout=15) == 1  # the daemon closed the socket: events ends, and says so
        assert "the daemon closed the event stream" in follower.stderr.read()
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


FAKE = ROOT / "tests" / "fixtures" / "fake_mcp_server.py"


def fake_server(name: str, *args: str, extra: str = "") -> str:
    quoted = ", ".join(f'"{a}"' for a in (str(FAKE), *args))
    return (f'[[mcp_servers]]\nname = "{name}"\n{extra}'
            f'transport = {{ type = "stdio", command = "{sys.executable}", args = [{quoted}] }}\n')


def servers(url: str) -> dict[str, dict]:
    return {s["name"]: s for s in httpx.get(url + "/api/mcp/servers", timeout=10).json()["connected"]}


def wait_for(check, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_reload_applies_a_changed_config_and_keeps_unchanged_servers(tmp_path):
    config = write_config(tmp_path)
    base = Path(config).read_text()
    Path(config).write_text(base + fake_server("keep") + fake_server("drop"))
    process, url = start_daemon(config)
    try:
        wait_for(lambda: {s["state"] for s in servers(url).values()} == {"ready"})
        pid = servers(url)["keep"]["pid"]
        dropped = servers(url)["drop"]["pid"]
        # SIGHUP: an agent and a server added, one server removed, [server] listen changed
        Path(config).write_text(base.replace('listen = "127.0.0.1:0"', 'listen = "127.0.0.1:1"')
                                + '[[agents]]\nname = "second"\nkind = "echo"\n'
                                + fake_server("keep") + fake_server("new"))
        process.send_signal(signal.SIGHUP)
        wait_for(lambda: [s for s in servers(url)] == ["keep", "new"] and servers(url)["new"]["state"] == "ready")
        assert servers(url)["keep"]["pid"] == pid and servers(url)["keep"]["state"] == "ready"  # the same process
        assert [a["name"] for a in httpx.get(url + "/api/agents").json()["agents"]] == ["echo", "second"]
        reply = httpx.post(url + "/api/agents/second/message", json={"message": "hi"}).json()
        assert reply["text"] == "hi"
        wait_for(lambda: not os.path.exists(f"/proc/{dropped}"))  # the removed server's process is gone
        # an invalid file is refused with its one line; the running config stays
        Path(config).write_text(base + "[[agents]]\nname = 'x'\nkind = 'echo'\nbogus = 1\n")
        process.send_signal(signal.SIGHUP)  # the daemon refuses it (its log says so, below)
        refused = tern("reload", "--config", config)  # tern reload reads the same file first
        assert refused.returncode == 2, refused.stderr
        [line] = refused.stderr.splitlines()
        assert line.startswith(f"tern: {config}: agents[1].bogus: unknown key") and line.endswith(
            "; the daemon was not asked to reload and keeps its running config")
        time.sleep(0.5)
        assert [a["name"] for a in httpx.get(url + "/api/agents").json()["agents"]] == ["echo", "second"]
        # tern reload: the agent removed again, one server's settings changed
        Path(config).write_text(base.replace('listen = "127.0.0.1:0"', 'listen = "127.0.0.1:1"') + fake_server("keep")
                                + fake_server("new", extra="timeout_secs = 7\n"))
        done = tern("reload", "--config", config)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == ["agents removed: second", "MCP servers changed: new",
                                            "MCP servers unchanged (connections kept): keep"]
        assert "a reload cannot change [server] listen: restart tern serve to apply them" in done.stderr
        assert [a["name"] for a in httpx.get(url + "/api/agents").json()["agents"]] == ["echo"]
        wait_for(lambda: servers(url)["new"]["state"] == "ready")
        assert servers(url)["keep"]["pid"] == pid
        assert httpx.get(url + "/health").status_code == 200  # still on the port it started on
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
    log = process.stderr.read()
    assert "reload refused, the running config is kept: " in log and "agents[1].bogus: unknown key" in log
    assert "MCP servers added: new; MCP servers removed: drop" in log


def test_a_failed_server_is_revived_by_the_route_and_the_command(tmp_path):
    flag = tmp_path / "broken"
    flag.write_text("")
    wrapper = tmp_path / "phoenix.py"
    wrapper.write_text(f"import os, sys, runpy\nif os.path.exists({str(flag)!r}):\n"
                       "    print('cannot start: the flag file is there', file=sys.stderr)\n    sys.exit(4)\n"
                       f"sys.argv = [{str(FAKE)!r}]\nrunpy.run_path({str(FAKE)!r}, run_name='__main__')\n")
    config = write_config(tmp_path)
    with open(config, "a") as file:
        file.write(f'[[mcp_servers]]\nname = "phoenix"\nmax_restarts = 0\n'
                   f'transport = {{ type = "stdio", command = "{sys.executable}", args = ["{wrapper}"] }}\n')
    process, url = start_daemon(config)
    try:
        failed = wait_for(lambda: servers(url)["phoenix"]["state"] == "failed" and servers(url)["phoenix"])
        assert failed["last_error"].endswith("process exited with code 4; stderr: cannot start: the flag file is there")
        flag.unlink()
        response = httpx.post(url + "/api/mcp/servers/phoenix/restart")
        assert response.status_code == 200 and response.json()["name"] == "phoenix"
        ready = wait_for(lambda: servers(url)["phoenix"]["state"] == "ready" and servers(url)["phoenix"])
        flag.write_text("")
        os.kill(ready["pid"], signal.SIGKILL)  # it dies, and cannot come back while the flag is there
        wait_for(lambda: servers(url)["phoenix"]["state"] == "failed")
        flag.unlink()
        done = tern("mcp", "restart", "phoenix", "--config", config)
        assert done.returncode == 0 and done.stdout == "phoenix: ready\n", done.stderr
        missing = httpx.post(url + "/api/mcp/servers/nope/restart")
        assert missing.status_code == 404 and "no MCP server named 'nope'" in missing.json()["error"]["message"]
        done = tern("mcp", "restart", "nope", "--config", config)
        assert done.returncode == 1 and "no MCP server named 'nope' (servers: phoenix)" in done.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
