"""Keys from the built pyz: ``tern keys add`` stores a hashed key, ``tern serve`` takes it;
each key sees only its own A2A tasks (another's id is "not found", as a made-up one is),
a scope it lacks is refused, and the admin key sees all."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from runtime.host.keystore import KEYS_FILE
from tests.browser.support import Daemon

pytestmark = pytest.mark.slow


def pyz_tern(pyz, *args: str, config) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_") and k != "PYTHONPATH"}
    env["TERN_CACHE_DIR"] = str(config.parent / "cache")
    return subprocess.run([sys.executable, "-I", str(pyz), *args, "--config", str(config)], capture_output=True,
                          text=True, env=env, timeout=60, cwd=config.parent)


def send(client: httpx.Client, key: str, text: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "role": "ROLE_USER", "messageId": f"m-{text}", "parts": [{"text": text}]}}}
    answer = client.post("/a2a/echo", json=body, headers={"X-API-Key": key, "A2A-Version": "1.0"})
    assert answer.status_code == 200, answer.text
    return answer.json()["result"]["task"]


def get(client: httpx.Client, key: str, task_id: str) -> dict:
    body = {"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}}
    return client.post("/a2a/echo", json=body, headers={"X-API-Key": key, "A2A-Version": "1.0"}).json()


def test_stored_keys_scope_and_own_tasks_from_the_pyz(pyz, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[server]\nlisten = "127.0.0.1:0"\napi_key = "admin-key-of-the-pyz-test"\n'
                      '[a2a]\nenabled = true\n[state]\ndir = "state"\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    keys = {}
    for name in ("alice", "bob"):
        added = pyz_tern(pyz, "keys", "add", name, config=config)
        assert added.returncode == 0, added.stderr
        keys[name] = added.stdout.strip()
    assert keys["alice"] not in (tmp_path / "state" / KEYS_FILE).read_text()
    daemon = Daemon(config, pyz)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            task = send(client, keys["alice"], "hello")
            assert get(client, keys["alice"], task["id"])["result"]["id"] == task["id"]
            theirs, made_up = get(client, keys["bob"], task["id"]), get(client, keys["bob"], "no-such-task")
            assert theirs["error"]["code"] == made_up["error"]["code"] == -32001, (theirs, made_up)
            assert get(client, "admin-key-of-the-pyz-test", task["id"])["result"]["id"] == task["id"]
            metrics = client.get("/metrics", headers={"X-API-Key": keys["alice"]})
            assert metrics.status_code == 403 and "metrics" in metrics.text
            assert client.get("/metrics", headers={"X-API-Key": "admin-key-of-the-pyz-test"}).status_code == 200
            assert client.get("/api/status", headers={"X-API-Key": "not-a-key"}).status_code == 401
    finally:
        daemon.stop()
