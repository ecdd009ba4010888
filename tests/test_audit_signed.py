"""``tern audit verify --public-key`` as a real process, on a copy of a log written by the
real writer (and by real ``tern call`` processes), in a directory without tern's secret
keys: an intact copy passes; a cut head, a cut tail, a changed byte, an inserted record
(even with every hash after it recomputed) and a checkpoint signed by another key each
fail with one line naming what and where. ``tern audit key`` prints the public key."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.crypto import ed25519
from runtime.kernel.audit import AuditLog
from runtime.kernel.audit_checkpoints import encode
from tests.test_cli import tern

RECORDS = 45
EVERY = 10  # a checkpoint every 10 records (the shipped cadence is 1000 records or 60 s)


def written(tmp_path: Path, count: int = RECORDS, **limits) -> tuple[str, Path]:
    """A config whose state dir holds a log of ``count`` records over rotated files, with
    checkpoints every ``EVERY`` records and one at the end (as at shutdown)."""
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{state}"\n')
    log = AuditLog(state / "audit.jsonl", max_bytes=limits.pop("max_bytes", 2500), backups=100,
                   checkpoint_records=limits.pop("checkpoint_records", EVERY), **limits)
    for n in range(count):
        assert log.record("tool_call", agent="bench", tool="noop", outcome="ok", n=n)
    log.checkpoint()
    log.close()
    return str(config), state


def public_key(config: str) -> str:
    done = tern("audit", "key", "--config", config)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout.strip()


def copy(state: Path, to: Path) -> Path:
    """The log's files as an operator ships them elsewhere: no audit.key, no signing key."""
    to.mkdir()
    for path in state.iterdir():
        if path.name.startswith("audit.jsonl") or path.name == "audit.checkpoints":
            shutil.copy2(path, to / path.name)
    return to


def check(directory: Path, key: str) -> tuple[int, str]:
    done = tern("audit", "verify", "--dir", str(directory), "--public-key", key)
    assert done.stderr == "", done.stderr
    return done.returncode, done.stdout


def files(directory: Path) -> list[Path]:
    """The log's files, oldest first."""
    rotated = sorted(directory.glob("audit.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    return rotated + [directory / "audit.jsonl"]


def records(directory: Path) -> list[tuple[Path, int, dict]]:
    """(file, index in it, record) of every line, oldest first."""
    return [(path, i, json.loads(line)) for path in files(directory)
            for i, line in enumerate(path.read_bytes().splitlines())]


def edit(path: Path, change: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(change(path.read_bytes().splitlines(keepends=True))))


def last_checkpoint(directory: Path) -> dict:
    return json.loads((directory / "audit.checkpoints").read_bytes().splitlines()[-1])


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, str, Path]:
    """(state dir, public key, a copy of the log)."""
    config, state = written(tmp_path)
    return state, public_key(config), copy(state, tmp_path / "copy")


def test_the_key_is_made_once_private_printed_and_never_in_the_log(tmp_path):
    config, state = written(tmp_path, count=3)
    seed_file = state / "audit-signing.key"
    assert stat.S_IMODE(seed_file.stat().st_mode) == 0o600
    key = public_key(config)
    assert key == "ed25519:" + ed25519.public_key(seed_file.read_bytes()).hex()
    assert public_key(config) == key
    seed = seed_file.read_bytes()
    for path in state.iterdir():
        if path.name != "audit-signing.key":
            assert seed not in path.read_bytes() and seed.hex().encode() not in path.read_bytes()
    fresh = tmp_path / "fresh.toml"  # before any record: made on first use, so it can be noted at setup
    fresh.write_text(f'[state]\ndir = "{tmp_path / "fresh"}"\n')
    assert public_key(str(fresh)).startswith("ed25519:")
    assert stat.S_IMODE((tmp_path / "fresh" / "audit-signing.key").stat().st_mode) == 0o600


def test_a_copy_verifies_with_the_public_key_alone_given_or_in_a_file(signed, tmp_path):
    state, key, copied = signed
    assert len(files(copied)) >= 3  # rotated: the chain and the checkpoints run across files
    assert not (copied / "audit.key").exists() and not (copied / "audit-signing.key").exists()
    code, said = check(copied, key)
    assert code == 0, said
    assert said == f"{RECORDS} records in {len(files(copied))} files, chain intact from seq 1 to {RECORDS}, " \
                   f"signed up to seq {RECORDS}\n"
    (tmp_path / "tern.pub").write_text(key + "\n")
    assert check(copied, str(tmp_path / "tern.pub"))[0] == 0
    bare = key.removeprefix("ed25519:")
    assert check(copied, bare)[0] == 0
    local = tern("audit", "verify", "--config", str(tmp_path / "config.toml"))  # at home: both keys
    assert local.returncode == 0 and local.stdout.endswith(f"signed up to seq {RECORDS}\n")


def test_a_bad_public_key_is_one_line(signed):
    _, _, copied = signed
    done = tern("audit", "verify", "--dir", str(copied), "--public-key", "ed25519:abcd")
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "not an Ed25519 public key" in done.stderr


def test_another_key_verifies_nothing(signed):
    _, _, copied = signed
    other = "ed25519:" + ed25519.public_key(b"o" * 32).hex()
    code, said = check(copied, other)
    assert code == 1
    assert said.startswith("not intact: audit.checkpoints line 1 is a checkpoint not signed by this key")


@pytest.mark.parametrize("how", ["first lines cut", "oldest file emptied", "oldest file deleted"])
def test_a_cut_head_fails(signed, how):
    _, key, copied = signed
    oldest = files(copied)[0]
    if how == "first lines cut":
        edit(oldest, lambda lines: lines[2:])
        expected = f"not intact: {oldest.name} line 1 (seq 3) is where the log begins: the records seq 1 to 2 " \
                   "before it were removed"
    elif how == "oldest file emptied":
        oldest.write_bytes(b"")
        second = files(copied)[1]
        first_seq = json.loads(second.read_bytes().splitlines()[0])["seq"]
        expected = f"not intact: {second.name} line 1 (seq {first_seq}) is where the log begins: the records seq 1 " \
                   f"to {first_seq - 1} before it were removed ({oldest.name} is empty)"
    else:
        first_seq = json.loads(files(copied)[1].read_bytes().splitlines()[0])["seq"]
        oldest.unlink()
        expected = f"is where the log begins: the records seq 1 to {first_seq - 1} before it were removed"
    code, said = check(copied, key)
    assert code == 1 and said.count("\n") == 1, said
    assert said.startswith(expected) if expected.startswith("not") else expected in said, said


def test_a_missing_middle_file_fails(signed):
    _, key, copied = signed
    middle = files(copied)[1]
    middle.unlink()
    code, said = check(copied, key)
    assert code == 1 and "does not follow seq" in said and "before it were removed" in said, said


def test_a_tail_cut_below_the_last_checkpoint_fails(signed):
    _, key, copied = signed
    current = copied / "audit.jsonl"
    edit(current, lambda lines: lines[:-3])
    code, said = check(copied, key)
    assert code == 1 and said.count("\n") == 1
    lines = (copied / "audit.checkpoints").read_bytes().splitlines()
    assert said.startswith(f"not intact: audit.checkpoints line {len(lines)} (seq {RECORDS}) is a signed checkpoint "
                           f"of seq {RECORDS}, but the log is shorter: it ends at seq {RECORDS - 3}, so the records "
                           "after it were removed"), said


def test_a_tail_cut_where_an_earlier_checkpoint_says_more_existed_fails(tmp_path):
    """Records after the last checkpoint can go unseen (nothing signed them yet), but a
    cut that reaches below any checkpoint is caught by it, checkpoints file and all."""
    config, state = written(tmp_path, count=25)
    key = public_key(config)
    copied = copy(state, tmp_path / "copy")
    all_records = records(copied)
    by_seq = {record["seq"]: (path, index) for path, index, record in all_records}
    path, index = by_seq[21]  # seq 21 to 25 removed: the checkpoint at 25 goes too, the one at 20 stays
    edit(path, lambda lines: lines[:index])
    for later in files(copied)[files(copied).index(path) + 1:]:
        later.write_bytes(b"")
    edit(copied / "audit.checkpoints", lambda lines: [line for line in lines if json.loads(line)["seq"] <= 20])
    code, said = check(copied, key)  # the limit: a consistent cut just after a checkpoint cannot be seen
    assert code == 0 and said.rstrip().endswith("chain intact from seq 1 to 20, signed up to seq 20"), said
    path, index = by_seq[20]
    edit(path, lambda lines: lines[:index])  # seq 20 gone too: below the checkpoint that is left
    code, said = check(copied, key)
    assert code == 1 and "is a signed checkpoint of seq 20, but the log is shorter: it ends at seq 19" in said


def test_unsigned_records_after_the_last_checkpoint_are_said(tmp_path):
    config, state = written(tmp_path, count=25)
    log = AuditLog(state / "audit.jsonl", max_bytes=2500, checkpoint_records=EVERY)
    for n in range(3):
        log.record("tool_call", agent="late", n=n)  # no checkpoint yet: the process is still running
    log.close()
    copied = copy(state, tmp_path / "copy")
    code, said = check(copied, public_key(config))
    assert code == 0 and said.rstrip().endswith("signed up to seq 25 (3 records after it not yet signed)"), said


def test_a_changed_byte_fails(signed):
    _, key, copied = signed
    path, index, record = records(copied)[12]
    edit(path, lambda lines: lines[:index] + [lines[index].replace(b'"tool":"noop"', b'"tool":"nOop"')]
         + lines[index + 1:])
    code, said = check(copied, key)
    assert code == 1 and said.count("\n") == 1
    assert said.startswith(f"not intact: {path.name} line {index + 1} (seq {record['seq']}) was changed after it was "
                           "written"), said


def rehash(lines: list[bytes], previous: bytes) -> list[bytes]:
    """What a forger without tern's keys can do: recompute every hash (the HMAC cannot be)."""
    out = []
    for line in lines:
        head = line[:line.rindex(b',"hash":')]
        canonical = head + b"}"
        link = hashlib.sha256(previous + canonical).hexdigest().encode()
        out.append(head + b',"hash":"' + link + b'","chain":"' + b"0" * 64 + b'"}\n')
        previous = link
    return out


def forged_record(after: dict, previous: bytes) -> bytes:
    fake = {k: v for k, v in after.items() if k not in ("hash", "chain", "seq")}
    fake["tool"] = "file_write"  # a call that never happened
    canonical = b'{"seq":%d,' % (after["seq"] + 1) + json.dumps(fake, sort_keys=True, separators=(",", ":")
                                                                  ).encode()[1:]
    link = hashlib.sha256(previous + canonical).hexdigest().encode()
    return canonical[:-1] + b',"hash":"' + link + b'","chain":"' + b"0" * 64 + b'"}\n'


def test_an_inserted_record_fails(signed):
    _, key, copied = signed
    current = copied / "audit.jsonl"
    lines = current.read_bytes().splitlines(keepends=True)
    before = json.loads(lines[1])
    edit(current, lambda lines: lines[:2] + [forged_record(before, before["hash"].encode())] + lines[2:])
    code, said = check(copied, key)
    assert code == 1 and said.count("\n") == 1
    assert said.startswith(f"not intact: audit.jsonl line 3 (seq {before['seq'] + 1}) was inserted"), said


def test_an_inserted_record_with_every_later_hash_recomputed_fails_at_the_checkpoint(signed):
    _, key, copied = signed
    current = copied / "audit.jsonl"
    lines = current.read_bytes().splitlines(keepends=True)
    before = json.loads(lines[1])
    fake = forged_record(before, before["hash"].encode())
    renumbered = [line.replace(b'{"seq":%d,' % json.loads(line)["seq"], b'{"seq":%d,' % (json.loads(line)["seq"] + 1))
                  for line in lines[2:]]
    current.write_bytes(b"".join(lines[:2] + [fake] + rehash(renumbered, json.loads(fake)["hash"].encode())))
    code, said = check(copied, key)
    assert code == 1 and said.count("\n") == 1
    assert "is not the record the signed checkpoint at audit.checkpoints line" in said \
           or "is a signed checkpoint of seq" in said, said


def test_a_checkpoint_signed_by_another_key_fails(signed):
    """The forger rewrites the log after an insertion and signs checkpoints for it with a
    key of their own: the public key the verifier holds refuses them."""
    _, key, copied = signed
    current = copied / "audit.jsonl"
    lines = current.read_bytes().splitlines(keepends=True)
    before = json.loads(lines[1])
    fake = forged_record(before, before["hash"].encode())
    rest = rehash(lines[2:], json.loads(fake)["hash"].encode())
    current.write_bytes(b"".join(lines[:2] + [fake] + rest))
    head = json.loads(rest[-1])
    forged = encode(b"f" * 32, "checkpoint", head["seq"], head["hash"].encode(), time.time())
    with (copied / "audit.checkpoints").open("ab") as marks:
        marks.write(forged)
    number = len((copied / "audit.checkpoints").read_bytes().splitlines())
    code, said = check(copied, key)
    assert code == 1
    assert said.startswith(f"not intact: audit.checkpoints line {number} is a checkpoint not signed by this key"), said


def test_a_record_without_a_sequence_number_in_the_chain_fails(signed):
    _, key, copied = signed
    current = copied / "audit.jsonl"
    edit(current, lambda lines: lines[:2] + [b'{"kind":"tool_call","time":1.5,"tool":"x"}\n'] + lines[2:])
    code, said = check(copied, key)
    assert code == 1 and said.startswith("not intact: audit.jsonl line 3 is a record without a sequence number"), said


def test_without_any_checkpoint_the_public_key_vouches_for_nothing(signed):
    _, key, copied = signed
    (copied / "audit.checkpoints").unlink()
    code, said = check(copied, key)
    assert code == 1 and said.startswith("not intact: audit.checkpoints holds no checkpoint signed by this key"), said


def test_rotation_that_deletes_old_files_signs_where_the_log_now_begins(tmp_path):
    config, state = written(tmp_path, count=30)
    key = public_key(config)
    yesterday = time.time() - 86400
    for path in state.glob("audit.jsonl.*"):
        os.utime(path, (yesterday, yesterday))  # records of an earlier day: rotation may delete them now
    log = AuditLog(state / "audit.jsonl", max_bytes=2500, backups=2, checkpoint_records=EVERY)
    rotated = (state / "audit.jsonl.1").stat().st_ino
    n = 0
    while (state / "audit.jsonl.1").stat().st_ino == rotated:
        log.record("tool_call", agent="bench", n=n)
        n += 1
    log.checkpoint()
    log.close()
    first = records(state)[0][2]["seq"]
    assert first > 1  # the oldest records are gone, by design
    marks = [json.loads(line) for line in (state / "audit.checkpoints").read_bytes().splitlines()]
    assert marks[0]["kind"] == "start" and marks[0]["seq"] == first - 1
    assert all(mark["seq"] >= first - 1 for mark in marks)  # the checkpoints of deleted records are pruned
    copied = copy(state, tmp_path / "copy")
    code, said = check(copied, key)
    assert code == 0, said
    assert said.rstrip().endswith(f"the records before seq {first} were rotated away, as a signed checkpoint says")
    edit(files(copied)[0], lambda lines: lines[1:])  # and then one more record goes: a cut head
    code, said = check(copied, key)
    assert code == 1 and f"the record seq {first} before it was removed" in said, said


def test_checkpoints_stay_few_however_long_tern_runs(tmp_path):
    """Each hash chains every record before it, so only the last checkpoint (and the
    start mark) matter: past 32 KiB the file is compacted, and a check verifies a
    bounded number of signatures."""
    config, state = written(tmp_path, count=400, checkpoint_records=1, max_bytes=1 << 30)
    marks = (state / "audit.checkpoints").read_bytes().splitlines()
    assert (state / "audit.checkpoints").stat().st_size <= 33 << 10 and len(marks) < 200
    assert json.loads(marks[-1])["seq"] == 400
    code, said = check(copy(state, tmp_path / "copy"), public_key(config))
    assert code == 0 and said.rstrip().endswith("signed up to seq 400"), said


def test_tern_call_processes_sign_their_records_at_exit(tmp_path):
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{state}"\n')
    for _ in range(3):
        done = tern("call", "time_now", "--config", str(config))
        assert done.returncode == 0, done.stderr
    marks = [json.loads(line) for line in (state / "audit.checkpoints").read_bytes().splitlines()]
    tool_calls = [r for _, _, r in records(state) if r.get("kind") == "tool_call"]
    assert len(tool_calls) == 3 and marks[-1]["seq"] == records(state)[-1][2]["seq"]
    copied = copy(state, tmp_path / "copy")
    code, said = check(copied, public_key(str(config)))
    assert code == 0 and said.rstrip().endswith(f"signed up to seq {marks[-1]['seq']}"), said
