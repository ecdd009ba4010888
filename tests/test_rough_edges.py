"""Daily-use rough edges, each against real tern processes: errors said once, 401s and
404s that say what to set, key variables that are not set, commands that are not
installed, tool globs that match nothing, and the default ``files`` agent given a
sentence instead of a path."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from collections.abc import Iterator

import httpx

from tests.test_cli import ROOT, tern
from tests.test_daemon import start_daemon

KEY = "rough-edges-key-0123456789"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


@contextmanager
def daemon(tmp_path: Path, body: str, env_extra: dict[str, str] | None = None) -> Iterator[tuple[str, str]]:
    """``tern serve`` on ``body`` (plus a loopback listener and a private state dir): (config path, URL)."""
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\n{body}\n[state]\ndir = "{tmp_path / "state"}"\n')
    process, url = start_daemon(str(path), env_extra)
    try:
        yield str(path), url
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


FAILING = """
[a2a]
enabled = true
default_agent = "fail"
[[agents]]
name = "fail"
kind = "command"
command = ["sh", "-c", "echo boom-once >&2; exit 3"]
"""


def test_serving_on_is_said_once(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp_path / "state"}"\n')
    for level in ("warning", "info"):
        process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--config", str(path),
                                    "--log-level", level], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True, env=_env())
        lines: list[str] = []
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any("serving on " in line for line in lines):
                line = process.stderr.readline()
                if not line:
                    break
                lines.append(line)
            url = next(line for line in lines if "serving on " in line).split("serving on ", 1)[1].strip()
            assert httpx.get(url + "/health", timeout=10).status_code == 200  # the line ends with the URL
        finally:
            process.send_signal(signal.SIGTERM)
            rest = process.communicate(timeout=15)[1]
        assert sum("serving on" in line for line in lines + rest.splitlines()) == 1, (level, lines, rest)


def test_a2a_send_says_a_failed_task_once(tmp_path):
    with daemon(tmp_path, FAILING) as (config, url):
        for extra in ([], ["--stream"]):
            done = tern("a2a", "send", url, "hi", "--config", config, *extra)
            assert done.returncode == 1, done
            said = done.stdout + done.stderr
            assert said.count("boom-once") == 1, (extra, said)
            assert "tern: task" in done.stderr and "failed" in done.stderr


def test_a2a_send_to_a_keyed_tern_says_how_to_pass_the_key(tmp_path):
    body = 'api_key_env = "TERN_API_KEY"\n' + FAILING
    with daemon(tmp_path, body, {"TERN_API_KEY": KEY}) as (config, url):
        done = tern("a2a", "send", url, "hi")
        assert done.returncode == 1 and "HTTP 401" in done.stderr
        assert "--header 'Authorization: Bearer KEY'" in done.stderr and KEY not in done.stderr, done.stderr
        keyed = tern("a2a", "send", url, "hi", "--header", f"Authorization: Bearer {KEY}")
        assert keyed.returncode == 1 and "boom-once" in keyed.stderr and "--header" not in keyed.stderr


def _mcp_tools(url: str, headers: dict[str, str]) -> list[dict]:
    with httpx.Client(base_url=url, headers={**headers, "Accept": "application/json, text/event-stream"},
                      timeout=10) as client:
        init = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        session = {"Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
        client.post("/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = client.post("/mcp", headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        text = listed.text
        if listed.headers["content-type"].startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        return json.loads(text)["result"]["tools"]


def test_http_401_and_404_say_what_to_set(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\napi_key_env = "TERN_API_KEY"\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n'
                    '[[agents]]\nname = "lister"\nkind = "echo"\ndescription = "Lists things"\n'
                    '[[agents]]\nname = "asker"\nkind = "echo"\ndescription = "Asks: why?"\n')
    process, url = start_daemon(str(path), {"TERN_API_KEY": KEY})
    try:
        missing = httpx.get(url + "/api/status", timeout=10)
        assert missing.status_code == 401 and "$TERN_API_KEY" in missing.json()["error"]["message"]
        wrong = httpx.get(url + "/api/status", headers={"Authorization": "Bearer not-the-key-at-all"}, timeout=10)
        assert wrong.status_code == 401 and "$TERN_API_KEY" in wrong.json()["error"]["message"]
        assert KEY not in missing.text + wrong.text

        unset = tern("status", "--config", str(path))
        assert unset.returncode == 1 and "set TERN_API_KEY to the daemon's key" in unset.stderr, unset.stderr
        bad = tern("status", "--config", str(path), env_extra={"TERN_API_KEY": "x" * 20})
        assert bad.returncode == 1 and "TERN_API_KEY does not hold the daemon's key" in bad.stderr, bad.stderr
        assert tern("status", "--config", str(path), env_extra={"TERN_API_KEY": KEY}).returncode == 0
        events = tern("events", "--config", str(path))
        assert events.returncode == 1 and "set TERN_API_KEY to the daemon's key" in events.stderr, events.stderr

        for where in ("/a2a", "/a2a/lister", "/.well-known/agent-card.json"):
            off = httpx.get(url + where, timeout=10)
            assert off.status_code == 404 and "[a2a] enabled = true" in off.json()["error"]["message"], where
        other = httpx.get(url + "/nothing-here", timeout=10)
        assert other.status_code == 404 and "a2a" not in other.text
        discover = tern("a2a", "discover", url)  # the A2A client passes the server's words on, once
        assert discover.returncode == 1 and discover.stderr.count("set [a2a] enabled = true") == 1, discover.stderr

        # exposed agents' descriptions end as sentences before tern's own sentence follows
        tools = {t["name"]: t["description"] for t in _mcp_tools(url, {"Authorization": f"Bearer {KEY}"})}
        assert tools["tern_agent_lister"].startswith("Lists things. Send it a message;")
        assert tools["tern_agent_asker"].startswith("Asks: why? Send it a message;")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def test_a_keyless_daemon_s_401_says_why_to_its_client(tmp_path):
    """A daemon without a key that cannot tell who a client is (TERN_PEER_UID=off) wants
    the local token; a client that has TERN_API_KEY set sends that instead, and is told."""
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\napi_key_env = "TERN_API_KEY"\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n')
    process, url = start_daemon(str(path), {"TERN_PEER_UID": "off"})
    try:
        body = httpx.get(url + "/api/status", timeout=10).json()["error"]["message"]
        assert 'api_key_env = "TERN_API_KEY"' in body and "local-token" in body
        assert tern("status", "--config", str(path)).returncode == 0  # the local token
        keyed = tern("status", "--config", str(path), env_extra={"TERN_API_KEY": "y" * 20})
        assert keyed.returncode == 1
        assert "the daemon has no API key" in keyed.stderr and "unset TERN_API_KEY" in keyed.stderr, keyed.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


@contextmanager
def model_wanting(key: str) -> Iterator[str]:
    """An OpenAI-compatible endpoint that answers 401 unless sent ``Bearer {key}``."""

    class Chat(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Authorization") == f"Bearer {key}":
                status, body = 200, {"choices": [{"message": {"role": "assistant", "content": "hello"}}]}
            else:
                status, body = 401, {"error": {"message": "Incorrect API key provided"}}
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()


def test_an_unset_key_variable_is_named_at_check_boot_and_401(tmp_path):
    with model_wanting("sk-the-right-one") as base_url:
        path = tmp_path / "config.toml"
        path.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "hosted"\nkind = "llm"\n'
                        f'[agents.model]\nbase_url = "{base_url}"\nmodel = "m"\napi_key_env = "ROUGH_EDGES_KEY"\n')
        check = tern("config", "check", str(path))
        assert check.returncode == 0
        assert ('warning: agents[0].model.api_key_env: "ROUGH_EDGES_KEY" is not set, so no key is sent'
                in check.stderr), check.stderr
        run = tern("run", "hosted", "hi", "--config", str(path))
        assert run.returncode != 0
        assert '"ROUGH_EDGES_KEY" is not set' in run.stderr  # the warning at boot
        assert "HTTP 401 (no key was sent: ROUGH_EDGES_KEY, which agents.model.api_key_env names, is not set)" \
            in run.stderr, run.stderr
        wrong = tern("run", "hosted", "hi", "--config", str(path), env_extra={"ROUGH_EDGES_KEY": "sk-wrong-one-xyz"})
        assert "the key in ROUGH_EDGES_KEY was sent and refused" in wrong.stderr, wrong.stderr
        assert "sk-wrong-one-xyz" not in wrong.stderr
        right = tern("run", "hosted", "hi", "--config", str(path), env_extra={"ROUGH_EDGES_KEY": "sk-the-right-one"})
        assert right.returncode == 0 and "hello" in right.stdout and "is not set" not in right.stderr


def test_config_check_warns_of_missing_programs_and_empty_globs(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(
        '[mcp_server]\ntools = ["time_now", "no_such_tool_*"]\n'
        '[[mcp_servers]]\nname = "later"\n[mcp_servers.transport]\ntype = "stdio"\ncommand = "tern-not-installed-x"\n'
        '[[mcp_servers]]\nname = "off"\nenabled = false\n[mcp_servers.transport]\ntype = "stdio"\n'
        'command = "also-not-installed"\n'
        '[[mcp_servers]]\nname = "here"\n[mcp_servers.transport]\ntype = "stdio"\ncommand = "sh"\n'
        '[[agents]]\nname = "cmd"\nkind = "command"\ncommand = ["./bin/missing-tool", "x"]\n'
        '[[agents]]\nname = "a"\nkind = "echo"\ntools = ["file_*", "mcp_later_*", "mcp_*", "fiel_read"]\n')
    done = tern("config", "check", str(path))
    assert done.returncode == 0, done.stderr  # warnings, not errors: a server may be installed later
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        'warning: mcp_servers[0].transport.command: "tern-not-installed-x" is not on PATH '
        "(MCP server later will fail to start until it is installed)",
        'warning: agents[0].command: "./bin/missing-tool" is not on PATH (agent cmd will fail until it is installed)',
        "warning: agents[1].tools: 'fiel_read' matches no tool (a typo? `tern tools` lists them)",
        "warning: mcp_server.tools: 'no_such_tool_*' matches no tool (a typo? `tern tools` lists them)",
    ], done.stderr


def test_the_default_files_agent_takes_a_sentence_or_a_path(tmp_path):
    workspace = tmp_path / "ws"
    (workspace / "notes").mkdir(parents=True)
    (workspace / "todo.txt").write_text("x")
    (workspace / "notes" / "monday.md").write_text("y")
    default = (ROOT / "config.toml").read_text()
    files = default[default.index('[[agents]]\nname = "files"'):].split("\n\n")[0]
    body = files + f'\nworkspace = "{workspace}"\n'
    with daemon(tmp_path, body) as (config, url):
        client = httpx.Client(base_url=url, timeout=30)
        sentence = client.post("/api/agents/files/message", json={"message": "list my files"})
        assert sentence.status_code == 200, sentence.text
        text = sentence.json()["text"]
        assert text.startswith('("list my files" is not a path here (list my files: no such directory)')
        assert text.splitlines()[1:] == ["notes/", "todo.txt"]
        path = client.post("/api/agents/files/message", json={"message": "notes"})
        assert path.json()["text"] == "notes/monday.md"
        outside = client.post("/api/agents/files/message", json={"message": "/etc"})
        assert "escapes the workspace" in outside.json()["text"] and "passwd" not in outside.json()["text"]
    run = tern("run", "files", "list my files", "--config", config)
    assert run.returncode == 0 and "todo.txt" in run.stdout and "no such directory" in run.stdout, run


def test_description_sentences_in_process():
    """The same rule in-process, for the edge cases: a trailing quote after a period."""
    from runtime.mcp.server.exposure import _sentence

    assert _sentence("Lists files") == "Lists files."
    assert _sentence("  Done.  ") == "Done."
    assert _sentence('Says "hi."') == 'Says "hi."'
    assert _sentence("") == ""
