"""The audit log's hash chain below the CLI: the key file, several writers on one file
(descriptors of their own, as separate processes have), a record cut short, rotation by
another writer, and the lock's bounded wait. tests/test_audit_chain.py drives
``tern audit verify`` and ``tern audit tail`` as real processes."""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import stat
from pathlib import Path

import pytest

from runtime.kernel import audit as audit_module
from runtime.kernel.audit import AuditError, AuditLog, load_key, verify_log
from runtime.kernel.audit_chain import MAX_PROBLEMS, Line, Mac, Mark, parse, verify


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_record_carries_seq_a_keyless_hash_of_the_previous_and_its_own_bytes_and_an_hmac_of_it(tmp_path):
    log = AuditLog(tmp_path / "audit.jsonl")
    for i in range(3):
        assert log.record("tool_call", tool="noop", n=i)
    key = (tmp_path / "audit.key").read_bytes()
    previous = b""
    for number, raw in enumerate((tmp_path / "audit.jsonl").read_bytes().splitlines(), start=1):
        record = json.loads(raw)
        assert record["seq"] == number
        assert raw.endswith(b',"hash":"%s","chain":"%s"}' % (record["hash"].encode(), record["chain"].encode()))
        canonical = raw[:raw.rindex(b',"hash":')] + b"}"  # the line without its hash and chain value
        assert record["hash"] == hashlib.sha256(previous + canonical).hexdigest()
        assert record["chain"] == hmac.new(key, record["hash"].encode(), "sha256").hexdigest()
        previous = record["hash"].encode()
    assert Mac(key)(b"x" * 64, b"{}") == hmac.new(key, b"x" * 64 + b"{}", "sha256").hexdigest().encode()


def test_records_of_an_older_tern_chained_by_the_hmac_alone_still_verify_and_the_chain_goes_on(tmp_path):
    key = b"k" * 32
    (tmp_path / "audit.key").write_bytes(key)
    (tmp_path / "audit.key").chmod(0o600)
    previous, old = b"", []
    for seq in (1, 2):  # as tern wrote them before the hash: chain = HMAC(previous chain || canonical)
        canonical = b'{"seq":%d,"kind":"tool_call","time":1.5}' % seq
        previous = hmac.new(key, previous + canonical, "sha256").hexdigest().encode()
        old.append(canonical[:-1] + b',"chain":"' + previous + b'"}\n')
    (tmp_path / "audit.jsonl").write_bytes(b"".join(old))
    log = AuditLog(tmp_path / "audit.jsonl")
    assert log.record("tool_call", n=3)
    third = lines(tmp_path / "audit.jsonl")[2]
    assert third["seq"] == 3 and "hash" in third
    report = verify_log(tmp_path / "audit.jsonl")
    assert report.ok and report.records == 3, report.summary()


def test_the_key_is_made_once_private_and_kept(tmp_path):
    AuditLog(tmp_path / "audit.jsonl").record("tool_call")
    key = tmp_path / "audit.key"
    st = key.lstat()
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    first = key.read_bytes()
    AuditLog(tmp_path / "audit.jsonl").record("tool_call")  # another process: the same key
    assert key.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["audit-signing.key", "audit.jsonl", "audit.key"]  # no temp
    signing = (tmp_path / "audit-signing.key").lstat()
    assert stat.S_IMODE(signing.st_mode) == 0o600 and signing.st_size == 32
    assert verify_log(tmp_path / "audit.jsonl").ok


def _refused(tmp_path: Path, caplog, fragment: str) -> None:
    path = tmp_path / "audit.jsonl"
    before = path.read_bytes() if path.exists() else b""
    log = AuditLog(path)
    assert log.record("tool_call", tool="x") is False  # never an exception for the caller
    assert log.failing and fragment in log.status()["error"] and log.failures == 1
    assert (path.read_bytes() if path.exists() else b"") == before  # nothing written with that key
    (said,) = [r.getMessage() for r in caplog.records if r.name == "tern.audit" and r.levelno == logging.ERROR]
    assert "refusing the audit key" in said and fragment in said
    with pytest.raises(AuditError, match=re.escape(fragment)):
        verify_log(tmp_path / "audit.jsonl")


def test_a_symlinked_key_is_refused(tmp_path, caplog):
    elsewhere = tmp_path / "known-key"
    elsewhere.write_bytes(b"k" * 32)
    elsewhere.chmod(0o600)
    (tmp_path / "audit.key").symlink_to(elsewhere)
    _refused(tmp_path, caplog, "is a symbolic link")


def test_a_key_others_may_read_is_refused_until_it_is_private_again(tmp_path, caplog):
    log = AuditLog(tmp_path / "audit.jsonl")
    assert log.record("tool_call", n=1)
    log.close()
    (tmp_path / "audit.key").chmod(0o644)
    _refused(tmp_path, caplog, "other users may read it (mode 644)")
    (tmp_path / "audit.key").chmod(0o600)
    again = AuditLog(tmp_path / "audit.jsonl")
    assert again.record("tool_call", n=2) and not again.failing
    assert [r["seq"] for r in lines(tmp_path / "audit.jsonl")] == [1, 2]


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_another_users_key_is_refused(tmp_path, caplog):
    AuditLog(tmp_path / "audit.jsonl").record("tool_call")
    (tmp_path / "audit.jsonl").unlink()
    os.chown(tmp_path / "audit.key", 65534, 65534)
    _refused(tmp_path, caplog, "is owned by uid 65534")


def test_a_key_of_the_wrong_length_is_refused(tmp_path, caplog):
    fd = os.open(tmp_path / "audit.key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)  # as a crash between creating and writing would leave it
    _refused(tmp_path, caplog, "it holds 0 bytes, not 32")


def test_load_key_creates_nothing_when_asked_not_to(tmp_path):
    assert load_key(tmp_path / "audit.key", create=False) is None
    assert not (tmp_path / "audit.key").exists()


def test_writers_on_one_file_continue_each_others_chain(tmp_path):
    """Each AuditLog has its own descriptor, so flock and the file's size behave as
    between processes."""
    path = tmp_path / "audit.jsonl"
    daemon, cli = AuditLog(path), AuditLog(path)
    for i in range(20):
        assert (daemon if i % 3 else cli).record("tool_call", n=i)
    assert [r["seq"] for r in lines(path)] == list(range(1, 21))
    assert [r["n"] for r in lines(path)] == list(range(20))
    report = verify_log(path)
    assert report.ok and report.records == 20, report.summary()


def test_a_writer_follows_the_file_another_writer_rotated(tmp_path):
    path = tmp_path / "audit.jsonl"
    roomy, small = AuditLog(path, max_bytes=1 << 30), AuditLog(path, max_bytes=1500)
    roomy.record("tool_call", n=0)
    n = 1
    while not (tmp_path / "audit.jsonl.1").exists():
        small.record("tool_call", n=n)
        n += 1
    rotated = (tmp_path / "audit.jsonl.1").read_bytes()
    roomy.record("tool_call", n=n)  # its descriptor is audit.jsonl.1's now: it must not write there
    assert (tmp_path / "audit.jsonl.1").read_bytes() == rotated
    assert [r["n"] for r in lines(path)] == [n]
    report = verify_log(path)
    assert report.ok and report.records == n + 1 and report.files == ["audit.jsonl.1", "audit.jsonl"], \
        report.summary()


def test_a_record_cut_short_does_not_break_the_chain_of_the_next_writer(tmp_path):
    path = tmp_path / "audit.jsonl"
    first = AuditLog(path)
    for i in range(5):
        first.record("tool_call", n=i)
    first.close()
    path.write_bytes(path.read_bytes()[:-40])  # the writer of seq 5 stopped mid-record (power cut)
    after = AuditLog(path)
    for i in range(5, 8):
        assert after.record("tool_call", n=i)
    raw = path.read_bytes().splitlines()
    assert len(raw) == 8 and not raw[4].endswith(b"}")  # the cut line is left as it was, on a line of its own
    assert [json.loads(line)["seq"] for line in raw[5:]] == [5, 6, 7]  # seq 5 again: it was never written whole
    report = verify_log(path)
    assert not report.ok and report.problem_count == 1 and report.last_seq == 7
    (problem,) = report.problems
    assert problem.kind == "unreadable" and problem.line == 5 and "the chain continues past it from seq 4" in \
        problem.message


def test_a_writer_waits_for_the_lock_a_bounded_time_then_counts_the_record_lost(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_module, "LOCK_WAIT_SECS", 0.05)
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    assert log.record("tool_call", n=0)
    holder = os.open(path, os.O_RDONLY)  # a process stopped while it held the lock
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert log.record("tool_call", n=1) is False
        assert log.failing and "held the audit log's lock" in log.status()["error"]
    finally:
        os.close(holder)
    assert log.record("tool_call", n=2) and not log.failing
    assert [(r["seq"], r["n"]) for r in lines(path)] == [(1, 0), (2, 2)]


# --- the verifier, sans-IO --------------------------------------------------------------------

KEY = Mac(b"k" * 32)


def chain(count: int, first: int = 1, previous: bytes = b"") -> list[bytes]:
    lines = []
    for seq in range(first, first + count):
        line, previous = KEY.line(previous, seq, b'{"kind":"tool_call","n":%d}' % seq)
        lines.append(line[:-1])
    return lines


def walk(lines: list[bytes], *, rotated_files: int = 0, mac: Mac | None = KEY, **more):
    return verify([Line("audit.jsonl", i, data, True) for i, data in enumerate(lines, start=1)], mac,
                  rotated_files=rotated_files, **more)


def test_the_walk_goes_on_past_a_line_the_chain_goes_around_and_finds_what_comes_later():
    lines = chain(8)
    lines.insert(3, lines[3][:30])  # a write cut short, then the next writer's record on a line of its own
    lines[6] = lines[6].replace(b'"n":6', b'"n":60')
    report = walk(lines)
    assert [(p.kind, p.line, p.seq) for p in report.problems] == [("unreadable", 4, None), ("changed", 7, 6)]
    assert report.records == 8 and report.last_seq == 8 and not report.stopped


def test_a_new_chain_started_mid_log_is_named():
    lines = chain(5) + chain(3)
    report = walk(lines)
    assert [(p.kind, p.line) for p in report.problems] == [("restarted", 6)]


def test_an_unchained_record_after_the_chain_began_is_named_but_not_before_it():
    old = b'{"kind":"tool_call","time":1.0}'
    report = walk([old, old] + chain(3))
    assert report.ok and report.unchained == 2 and report.summary().endswith("2 older records unchained, before seq 1")
    report = walk(chain(3) + [old] + chain(2, first=4, previous=parse(chain(3)[-1]).link))
    assert [(p.kind, p.line) for p in report.problems] == [("unchained", 4)]


def test_the_log_may_begin_past_seq_1_only_where_a_signed_start_mark_says_so():
    whole = chain(9)
    later = whole[4:]  # seq 5 to 9
    report = walk(later, rotated_files=1)
    assert [(p.kind, p.line, p.seq) for p in report.problems] == [("removed", 1, 5)]
    assert "is where the log begins: the records seq 1 to 4 before it were removed" in report.summary()
    start = Mark("audit.checkpoints", 1, "start", 4, parse(whole[3]).link, 1.0)
    report = walk(later, rotated_files=1, marks=[start])
    assert report.ok and report.rotated_away and report.first_seq == 5
    assert "the records before seq 5 were rotated away, as a signed checkpoint says" in report.summary()
    report = walk(whole[5:], marks=[start])  # one more record gone than the mark allows
    assert [(p.kind, p.seq) for p in report.problems] == [("removed", 6)]
    changed = [later[0].replace(b'"n":5', b'"n":50')] + later[1:]
    assert [(p.kind, p.seq) for p in walk(changed, marks=[start]).problems] == [("changed", 5)]


def test_checkpoints_must_match_their_record_and_none_may_lie_past_the_end():
    lines = chain(6)
    mark = Mark("audit.checkpoints", 2, "checkpoint", 4, parse(lines[3]).link, 1.0)
    report = walk(lines, marks=[mark])
    assert report.ok and report.signed_seq == 4 and report.summary().endswith(
        "chain intact from seq 1 to 6, signed up to seq 4 (2 records after it not yet signed)")
    report = walk(lines[:3], marks=[mark])
    assert [(p.kind, p.file, p.line, p.seq) for p in report.problems] == [("cut", "audit.checkpoints", 2, 4)]
    wrong = mark._replace(link=parse(lines[2]).link)
    assert [(p.kind, p.seq) for p in walk(lines, marks=[wrong]).problems] == [("changed", 4)]
    assert [p.kind for p in walk(lines, mac=None, keyless=True).problems] == ["unsigned"]
    assert walk(lines, mac=None, keyless=True, marks=[mark]).ok


def test_without_the_key_nothing_chained_passes():
    report = walk(chain(2), mac=None)
    assert not report.ok and report.problems[0].kind == "no_key" and report.stopped
    assert walk(chain(2), mac=Mac(b"o" * 32)).problems[0].kind == "changed"  # another key: nothing verifies


def test_the_report_is_bounded():
    lines = chain(1) + [b"junk"] * 500
    report = walk(lines)
    assert report.problem_count == 500 and len(report.problems) == MAX_PROBLEMS
