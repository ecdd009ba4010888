"""``tern status`` against a real daemon whose audit log cannot be written: the failure
is named (with the path, for the operator), and /health says "degraded" without it."""

from __future__ import annotations

import httpx

from tests.test_cli import tern
from tests.test_daemon import start_daemon, write_config


def test_tern_status_names_a_failing_audit_log(tmp_path):
    config = write_config(tmp_path)
    audit = tmp_path / "state" / "audit.jsonl"
    audit.mkdir(parents=True)  # a directory where the file should be: even root cannot write it
    process, url = start_daemon(config)
    try:
        assert httpx.get(url + "/health", timeout=30).json()["status"] == "degraded"  # known at boot
        answer = httpx.post(url + "/api/agents/echo/message", json={"message": "hi"}, timeout=30)
        assert answer.status_code == 200 and answer.json()["text"] == "hi"  # the caller is served
        health = httpx.get(url + "/health", timeout=30)
        assert health.json() == {"status": "degraded", "failing": ["audit"]} and str(audit) not in health.text
        status = tern("status", "--config", config)
        assert status.returncode == 0
        assert f"audit log {audit}: FAILING" in status.stdout and "records lost" in status.stdout
        audit.rmdir()
        assert httpx.post(url + "/api/agents/echo/message", json={"message": "again"}, timeout=30).status_code == 200
        assert f"audit log {audit}: ok" in tern("status", "--config", config).stdout
        assert httpx.get(url + "/health", timeout=30).content == b'{"status":"ok"}'
    finally:
        process.kill()
        process.wait(timeout=10)
