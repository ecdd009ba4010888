"""Keys from the built pyz: ``tern keys add`` stores a hashed key, ``tern serve`` takes it;
each key sees only its own A2A tasks (another's id is "not found", as a made-up one is),
a scope it lacks is refused, and the admin key sees all; a client certificate is a key."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys

import httpx
import pytest

from runtime.host.keystore import KEYS_FILE
from tests.browser.support import Daemon
from tests.http.test_keys_mtls import REFUSED, SUBJECT, make_certificates

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


def test_a_client_certificate_is_its_key_from_the_pyz(pyz, tmp_path):
    """mTLS from the built pyz: a certificate from ``tls_client_ca`` with a key's
    ``tls_subject`` is that key (its scopes, no key sent); one from another CA is refused in
    the handshake, and the daemon goes on serving."""
    pki = make_certificates(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\napi_key = "admin-key-of-the-pyz-test"\n'
                      f'tls_cert = "{pki["server"][0]}"\ntls_key = "{pki["server"][1]}"\n'
                      f'tls_client_ca = "{pki["ca"]}"\n'
                      f'[[server.keys]]\nname = "ci-bot"\ntls_subject = "{SUBJECT}"\nscopes = ["tasks"]\n'
                      '[a2a]\nenabled = true\n[state]\ndir = "state"\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    daemon = Daemon(config, pyz)
    try:
        assert daemon.url.startswith("https://"), daemon.url

        def client_with(cert: str) -> httpx.Client:
            context = ssl.create_default_context(cafile=pki["ca"])
            context.load_cert_chain(*pki[cert])
            return httpx.Client(base_url=daemon.url, verify=context, timeout=30)

        with client_with("good") as bot:
            assert bot.get("/api/tasks").status_code == 200
            refused = bot.get("/metrics")
            assert refused.status_code == 403 and "'ci-bot'" in refused.text
        with client_with("untrusted") as rogue, pytest.raises(REFUSED):
            rogue.get("/api/tasks")
        with client_with("good") as bot:
            assert bot.get("/health").status_code == 200
    finally:
        daemon.stop()
