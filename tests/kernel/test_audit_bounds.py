"""The audit log's bounds and failure handling, the log's secret set, and the pipeline's
catch-all, below the HTTP surface (tests/http/test_audit_trail.py drives them through it)."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from runtime import log as tern_log
from runtime.config import Config, SecurityConfig, StateConfig
from runtime.kernel.audit import MAX_FIELD_CHARS, AuditLog
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.registry import ToolRegistry
from runtime.ports import Tool, ToolResult

OBJECT = {"type": "object"}


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_long_field_is_cut_with_a_marker_and_the_record_kept(tmp_path):
    audit = AuditLog(tmp_path / "audit.jsonl")
    audit.record("agent_message", agent="echo", context_id="c" * 9_000_000, outcome="ok")
    (record,) = lines(tmp_path / "audit.jsonl")
    assert record["context_id"].startswith("c" * MAX_FIELD_CHARS) and record["outcome"] == "ok"
    assert record["context_id"].endswith("...[cut: 9000000 characters]")
    assert (tmp_path / "audit.jsonl").stat().st_size < 2 * MAX_FIELD_CHARS


def test_rotation_never_deletes_records_of_today(tmp_path, caplog):
    audit = AuditLog(tmp_path / "audit.jsonl", max_bytes=2000, backups=2)
    for i in range(100):
        audit.record("tool_call", tool="x", n=i)
    audit.close()
    kept = sorted(int(r["n"]) for path in tmp_path.glob("audit.jsonl*") for r in lines(path))
    assert kept == list(range(100))  # every record of today is still there
    assert len(list(tmp_path.glob("audit.jsonl*"))) > 3
    assert any("over its budget of 2" in r.getMessage() for r in caplog.records)
    # a day later, the next rotation deletes what is beyond the budget again
    yesterday = time.time() - 86400
    for path in tmp_path.glob("audit.jsonl.*"):
        os.utime(path, (yesterday, yesterday))
    rotated = (tmp_path / "audit.jsonl.1").stat().st_ino
    i = 100
    while (tmp_path / "audit.jsonl.1").stat().st_ino == rotated:  # up to the next rotation (whatever a record's size)
        audit.record("tool_call", tool="x", n=i)
        i += 1
    audit.record("tool_call", tool="x", n=i)  # and one in the new file
    audit.close()
    assert sorted(p.name for p in tmp_path.glob("audit.jsonl*")) == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]


def test_a_failing_audit_log_counts_logs_once_a_minute_and_recovers(tmp_path, caplog):
    path = tmp_path / "audit.jsonl"
    path.mkdir()
    audit = AuditLog(path)
    for _ in range(10):
        assert audit.record("tool_call", tool="x") is False  # never an exception
    assert audit.failing and audit.failures == 10 and audit.status()["ok"] is False
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    assert not audit.probe()
    path.rmdir()
    assert audit.probe() and audit.record("tool_call", tool="x") is True
    assert not audit.failing and audit.status() == {"ok": True, "path": str(path), "error": None, "failures": 0,
                                                    "failing_since": None}


def _pipeline(tmp_path, handler, **security) -> ToolPipeline:
    registry = ToolRegistry([])
    registry.register(Tool("boom", "raises", OBJECT), handler)
    config = Config(state=StateConfig(dir=str(tmp_path)), security=SecurityConfig(**security))
    return ToolPipeline(registry, config, audit=AuditLog(tmp_path / "audit.jsonl"))


async def test_an_unexpected_exception_is_a_tool_error_an_audit_record_and_a_logged_traceback(tmp_path, caplog):
    async def boom(arguments, context):
        raise KeyError("secret-argument-value")

    pipeline = _pipeline(tmp_path, boom)
    result = await pipeline.call("boom", {"password": "hunter2hunter2"})
    assert result.is_error and result.text == "internal error in boom: KeyError"
    (record,) = lines(tmp_path / "audit.jsonl")
    assert record["tool"] == "boom" and record["outcome"] == "error"
    (logged,) = [r for r in caplog.records if r.name == "tern.pipeline"]
    assert logged.levelno == logging.ERROR and logged.exc_info and "boom" in logged.getMessage()
    assert "hunter2" not in logged.getMessage()


async def test_registered_secrets_are_masked_in_tool_results_as_they_come(tmp_path):
    late = "registered-after-the-pipeline-7d1e"

    async def echo(arguments, context):
        return ToolResult(f"peer said {late}", structured={"echo": late})

    pipeline = _pipeline(tmp_path, echo)
    first = await pipeline.call("boom", {})
    assert late in first.text  # not a secret yet
    matcher = pipeline.redactor
    tern_log.register_secret(late)  # as expand_headers does when a peer connects
    second = await pipeline.call("boom", {})
    assert late not in second.text and second.structured == {"echo": "[redacted]"}
    third = await pipeline.call("boom", {})
    assert late not in third.text and pipeline.redactor is not matcher
    rebuilt = pipeline.redactor
    await pipeline.call("boom", {})
    assert pipeline.redactor is rebuilt  # rebuilt only when the set changes


@pytest.fixture
def fresh_secrets(monkeypatch):
    """An empty registry for this test only (the real one is process-wide)."""
    monkeypatch.setattr(tern_log, "_secrets", set())
    monkeypatch.setattr(tern_log, "_refused", set())
    monkeypatch.setattr(tern_log, "_redactor", tern_log.Redactor((), mask="********", min_len=8))


def test_the_secret_set_is_bounded_in_length_size_and_count(fresh_secrets):
    assert not tern_log.register_secret("ERROR") and not tern_log.register_secret("1234567")
    assert tern_log.register_secret("12345678")
    for i in range(80):  # 80 tokens of 5 MB: none is kept
        assert not tern_log.register_secret(f"{i:02d}" + "t" * (5 * 1024 * 1024))
    for i in range(1000):
        tern_log.register_secret(f"secret-value-{i:04d}")
    held = tern_log.registered_secrets()
    assert len(held) == tern_log.MAX_SECRETS
    assert sum(map(len, held)) <= tern_log.MAX_SECRETS * tern_log.MAX_SECRET_CHARS
