"""``tern audit verify`` as a real process, on logs written by real writers: every kind
of tampering is found and the record named, the chain runs on across rotated files and
through two processes appending at once, and a refused or missing key is said."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime.kernel.audit import AuditLog
from tests.test_cli import ROOT, tern

WRITER = """
import sys, time
from pathlib import Path
from runtime.kernel.audit import AuditLog
path, name, other, count, max_bytes = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
log = AuditLog(path, max_bytes=max_bytes, backups=1000)
for n in range(count):
    assert log.record("tool_call", agent=name, tool="noop", outcome="ok", n=n), log.status()
    if n == 9:  # meet the other writer, so the rest is written by both at once
        (path.parent / name).touch()
        deadline = time.monotonic() + 30
        while not (path.parent / other).exists():
            assert time.monotonic() < deadline, "the other writer never came"
            time.sleep(0.001)
"""


def setup(tmp_path: Path, count: int = 10, **limits) -> tuple[str, Path]:
    """A config whose state dir holds ``count`` records; (config path, state dir)."""
    state = tmp_path / "state"
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{state}"\n')
    log = AuditLog(state / "audit.jsonl", **limits)
    for n in range(count):
        assert log.record("tool_call", agent="bench", tool="noop", outcome="ok", n=n)
    log.checkpoint()  # as every process does at its end
    log.close()
    return str(config), state


def verify(config: str, *extra: str) -> subprocess.CompletedProcess:
    return tern("audit", "verify", "--config", config, *extra)


def edit(path: Path, change: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(change(path.read_bytes().splitlines(keepends=True))))


def flip_a_byte(lines: list[bytes]) -> list[bytes]:
    lines[4] = lines[4].replace(b'"tool":"noop"', b'"tool":"nOop"')
    return lines


def forge(lines: list[bytes]) -> list[bytes]:
    fake = json.loads(lines[4])
    fake["tool"] = "file_write"  # a call that never happened, with a made-up chain value
    fake["chain"] = "0" * 64
    return lines[:4] + [json.dumps(fake, separators=(",", ":")).encode() + b"\n"] + lines[4:]


TAMPERING = {
    "a flipped byte": (flip_a_byte, "audit.jsonl line 5 (seq 5) was changed after it was written"),
    "a deleted line": (lambda lines: lines[:4] + lines[5:],
                       "audit.jsonl line 5 (seq 6) does not follow seq 4: the record seq 5 before it was removed"),
    "two lines swapped": (lambda lines: lines[:4] + [lines[5], lines[4]] + lines[6:],
                          "audit.jsonl line 5 (seq 6) is out of order: seq 6 comes before seq 5"),
    "a record cut mid-line": (lambda lines: lines[:-1] + [lines[-1][:60]],
                              "audit.jsonl line 10 is a record cut off before its end"),
    "a forged line": (forge, "audit.jsonl line 5 (seq 5) was inserted: tern did not write it"),
    "a copied line": (lambda lines: lines[:6] + [lines[2]] + lines[6:],
                      "audit.jsonl line 7 (seq 3) is a copy of the record seq 3 (audit.jsonl line 3)"),
}


def test_an_intact_log_verifies(tmp_path):
    config, _ = setup(tmp_path)
    done = verify(config)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "10 records in 1 file, chain intact from seq 1 to 10, signed up to seq 10\n"
    assert done.stderr == ""


@pytest.mark.parametrize("change", TAMPERING, ids=list(TAMPERING))
def test_tampering_is_found_and_the_record_named(tmp_path, change):
    config, state = setup(tmp_path)
    how, said = TAMPERING[change]
    edit(state / "audit.jsonl", how)
    done = verify(config)
    assert done.returncode == 1 and done.stderr == ""
    first = done.stdout.splitlines()[0]
    assert first.startswith("not intact: " + said), done.stdout


def test_verify_json_names_file_line_seq_and_kind(tmp_path):
    config, state = setup(tmp_path)
    edit(state / "audit.jsonl", lambda lines: lines[:4] + lines[5:])
    done = verify(config, "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["summary"].startswith("not intact: audit.jsonl line 5")
    problem = report["problems"][0]
    assert (problem["file"], problem["line"], problem["seq"], problem["kind"]) == ("audit.jsonl", 5, 6, "removed")


def test_the_chain_runs_on_across_rotated_files(tmp_path):
    config, state = setup(tmp_path, count=60, max_bytes=2000)
    names = sorted(p.name for p in state.glob("audit.jsonl*"))
    assert len(names) >= 4  # rotated at least three times; today's files are all kept
    done = verify(config)
    assert done.returncode == 0
    assert done.stdout == f"60 records in {len(names)} files, chain intact from seq 1 to 60, signed up to seq 60\n"
    first_of_current = json.loads((state / "audit.jsonl").read_text().splitlines()[0])
    assert first_of_current["seq"] > 1  # it chains from the last record of audit.jsonl.1
    edit(state / "audit.jsonl.1", lambda lines: lines[:-1])  # the newest record of the rotated file
    done = verify(config)
    assert done.returncode == 1
    assert f"audit.jsonl line 1 (seq {first_of_current['seq']}) does not follow seq" in done.stdout


def test_records_from_before_the_chain_are_said_not_failed(tmp_path):
    config, state = setup(tmp_path)
    older = b'{"kind":"tool_call","time":1.5,"tool":"x"}\n' * 3  # written by a tern before the chain
    (state / "audit.jsonl").write_bytes(older + (state / "audit.jsonl").read_bytes())
    done = verify(config)
    assert done.returncode == 0
    assert done.stdout == ("10 records in 1 file, chain intact from seq 1 to 10, signed up to seq 10; 3 older records "
                           "unchained, before seq 1\n")


def test_a_missing_or_refused_key_is_said(tmp_path):
    config, state = setup(tmp_path)
    (state / "audit.key").chmod(0o640)
    done = verify(config)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("tern: refusing the audit key ") and "chmod 600" in done.stderr
    (state / "audit.key").unlink()
    done = verify(config)
    assert done.returncode == 1
    assert "no audit key to check it with" in done.stdout


@pytest.mark.parametrize("max_bytes", [1 << 30, 6000], ids=["one file", "rotating"])
def test_two_processes_appending_at_once_leave_a_log_that_verifies(tmp_path, max_bytes):
    config, state = setup(tmp_path, count=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(state / "audit.jsonl"), name, other, "500",
                                 str(max_bytes)], env=env) for name, other in (("daemon", "cli"), ("cli", "daemon"))]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    (state / "daemon").unlink()
    (state / "cli").unlink()
    done = verify(config)
    assert done.returncode == 0, done.stdout
    files = sorted(state.glob("audit.jsonl*"))
    assert done.stdout.startswith(f"1000 records in {len(files)} file")
    assert done.stdout.rstrip().endswith("chain intact from seq 1 to 1000, signed up to seq 1000")
    order = sorted((r["seq"], r["agent"], r["n"]) for f in files for r in map(json.loads, f.read_text().splitlines()))
    by_writer = {name: [n for _, agent, n in order if agent == name] for name in ("daemon", "cli")}
    assert by_writer == {"daemon": list(range(500)), "cli": list(range(500))}  # each in its own order, none lost
    switches = sum(a[1] != b[1] for a, b in zip(order, order[1:]))
    assert switches >= 2  # they took turns (the first ten each, then the rest at once)
