"""Storage faults against a real ``tern serve`` on 127.0.0.1:0: a full disk (a 4 MiB
tmpfs as the state directory, filled by a file) refuses only the writes that fail, with
a clear error (A2A tasks, conversations, memory over POST /mcp), while /health and reads
go on, and writes succeed again once the filler is gone; a corrupt SQLite file is moved
aside at open with a warning and a fresh one started (the A2A task store, conversations,
memory). Root is needed to mount the tmpfs."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.test_cli import ROOT, tern

V10 = {"A2A-Version": "1.0"}


class _FakeLLM(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint answering every chat completion with "noted"."""

    def do_POST(self):  # noqa: N802 (the stdlib's name)
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"},
                                        "finish_reason": "stop"}]}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def llm():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeLLM)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def write_config(tmp_path: Path, state: Path, llm_url: str) -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{state}"\n'
                    '[a2a]\nenabled = true\ndefault_agent = "echo"\npersist_tasks = true\n'
                    '[mcp_server]\ntools = ["memory_*"]\n'
                    '[[agents]]\nname = "echo"\nkind = "echo"\n'
                    f'[[agents]]\nname = "chat"\nkind = "llm"\n[agents.model]\nbase_url = "{llm_url}"\nmodel = "m"\n')
    return str(path)


class Daemon:
    """``tern serve`` with its stderr drained into ``lines`` (a full pipe would stall it)."""

    def __init__(self, config: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--config", config],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                        text=True, env=env)
        self.lines: list[str] = []
        self.url = ""
        started = threading.Event()

        def drain() -> None:
            for line in self.process.stderr:
                self.lines.append(line)
                if "serving on " in line:
                    self.url = line.split("serving on ", 1)[1].strip()
                    started.set()
            started.set()

        threading.Thread(target=drain, daemon=True).start()
        if not started.wait(30) or not self.url:
            self.stop()
            raise AssertionError(f"the daemon did not start: {''.join(self.lines)[-2000:]}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def send(client: httpx.Client, url: str, text: str) -> dict:
    message = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return client.post(url + "/a2a", headers=V10,
                       json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}).json()


def get_task(client: httpx.Client, url: str, task_id: str) -> dict:
    return client.post(url + "/a2a", headers=V10,
                       json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}).json()


def remember(client: httpx.Client, url: str, value: str) -> dict:
    """memory_store over POST /mcp (initialize, then the call in that session)."""
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    init = client.post(url + "/mcp", headers=accept,
                       json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    headers = {**accept, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-06-18"}
    client.post(url + "/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    called = client.post(url + "/mcp", headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                                              "params": {"name": "memory_store",
                                                                         "arguments": {"key": "k", "value": value}}})
    text = called.text
    return json.loads(text.split("data:", 1)[1] if text.startswith(("event:", "data:")) else text)["result"]


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path) -> Path:
    """A file taking every free byte of the file system."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as out:
        try:
            while True:
                out.write(chunk)
        except OSError:
            pass
        try:
            while True:
                out.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def test_a_full_disk_refuses_only_the_failing_writes_and_recovers(tmp_path, small_disk, llm):
    daemon = Daemon(write_config(tmp_path, small_disk / "state", llm))
    try:
        with httpx.Client(timeout=30) as client:
            before = send(client, daemon.url, "before")["result"]["task"]
            assert before["status"]["state"] == "TASK_STATE_COMPLETED"
            chat = client.post(daemon.url + "/api/agents/chat/message", json={"message": "hi"})
            assert chat.status_code == 200, chat.text
            assert not remember(client, daemon.url, "first")["isError"]
            filler = fill(small_disk)
            refused, answers = None, []
            for i in range(20):  # the first may be taken before its write fails; then new tasks are refused
                answer = send(client, daemon.url, f"{i}" + "w" * 100_000)
                answers.append(answer)
                if "error" in answer:
                    refused = answer["error"]
                    break
                time.sleep(0.2)
            assert refused is not None, answers[-1]
            # SQLite says "database or disk is full", or "disk I/O error" when the WAL cannot grow
            assert "cannot save tasks right now" in refused["message"], refused
            chat = client.post(daemon.url + "/api/agents/chat/message", json={"message": "x" * 200_000})
            assert chat.status_code == 503 and "the conversation was not saved" in chat.text, chat.text
            memory = remember(client, daemon.url, "m" * 90_000)
            assert memory["isError"] and "memory error" in memory["content"][0]["text"], memory
            assert client.get(daemon.url + "/health").json() == {"status": "ok"}
            assert get_task(client, daemon.url, before["id"])["result"]["id"] == before["id"]  # reads go on
            assert daemon.process.poll() is None
            filler.unlink()  # space returns
            deadline = time.monotonic() + 60
            while True:
                answer = send(client, daemon.url, "after")
                if "result" in answer:
                    break
                assert time.monotonic() < deadline, answer
                time.sleep(0.25)
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
            chat = client.post(daemon.url + "/api/agents/chat/message", json={"message": "again"})
            assert chat.status_code == 200, chat.text
            assert not remember(client, daemon.url, "m" * 90_000)["isError"]
            assert daemon.process.poll() is None
    finally:
        daemon.stop()
    log = "".join(daemon.lines)
    assert "internal error" not in log
    assert "cannot write" in log and "new tasks are accepted" in log


def test_corrupt_databases_are_moved_aside_at_boot(tmp_path, llm):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    for name in ("a2a_tasks.sqlite3", "conversations.sqlite3", "memory.sqlite3"):
        (state / name).write_bytes(b"this is not a database, just garbage " * 200)
    config = write_config(tmp_path, state, llm)
    daemon = Daemon(config)
    try:
        with httpx.Client(timeout=30) as client:
            assert client.get(daemon.url + "/health").json() == {"status": "ok"}
            sent = send(client, daemon.url, "fresh")["result"]["task"]
            assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
            chat = client.post(daemon.url + "/api/agents/chat/message", json={"message": "hi"})
            assert chat.status_code == 200, chat.text
    finally:
        daemon.stop()
    log = "".join(daemon.lines)
    for name in ("a2a_tasks.sqlite3", "conversations.sqlite3"):
        aside = list(state.glob(name + ".corrupt-*"))
        assert len(aside) == 1 and aside[0].read_bytes().startswith(b"this is not a database")
        assert f"{name} is not a usable database" in log and aside[0].name in log
    stored = tern("call", "memory_store", "--args", '{"key": "k", "value": "v"}', "--config", config)
    assert stored.returncode == 0, stored.stderr
    assert "moved aside" in stored.stderr and len(list(state.glob("memory.sqlite3.corrupt-*"))) == 1
    recalled = tern("call", "memory_recall", "--args", '{"key": "k"}', "--config", config)
    assert recalled.returncode == 0 and "v" in recalled.stdout


def test_a_task_store_that_cannot_be_opened_at_boot_does_not_stop_tern(tmp_path, llm):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "a2a_tasks.sqlite3").mkdir()  # in the way: SQLite cannot open it (neither corrupt nor full)
    daemon = Daemon(write_config(tmp_path, state, llm))
    try:
        with httpx.Client(timeout=30) as client:
            assert client.get(daemon.url + "/health").json() == {"status": "ok"}
            refused = send(client, daemon.url, "blocked")
            assert "cannot save tasks right now" in refused["error"]["message"], refused
            (state / "a2a_tasks.sqlite3").rmdir()  # the operator clears the way
            deadline = time.monotonic() + 60
            while "result" not in (answer := send(client, daemon.url, "after")):
                assert time.monotonic() < deadline, answer
                time.sleep(0.25)
            assert answer["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        daemon.stop()
    assert "cannot open" in "".join(daemon.lines)
