"""The audit log: one JSON line per tool call and per agent message, in
``<state dir>/audit.jsonl``, rotated by size.

Each record is one ``os.write`` on an ``O_APPEND`` descriptor: a line is written whole
or not at all, even with two processes appending, and a crash loses nothing already
written. Arguments are never stored, only their SHA-256 digest: the log must not become
a second copy of every secret a tool was given.

Bounds: every string field is cut at ``MAX_FIELD_CHARS`` with a visible marker (a
record is never dropped), so no caller can flush earlier records out with a few huge
ones. Rotation keeps ``backups`` files, and more while the oldest still holds records
of today (a warning says the log is over its budget): records of the current day are
never deleted.

A write that fails (full disk, a directory where the file should be) never fails the
caller: it is counted, logged at most once a minute, and ``status()`` says so (``/health``
answers "degraded"); the next record tries again, so the log recovers by itself.
With ``[security] audit_required`` the pipeline refuses tool calls meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from runtime.log import get_logger

__all__ = ["AuditLog", "digest"]

_encoder = msgspec.json.Encoder(order="sorted")
log = get_logger("audit")
RECHECK_EVERY = 256  # records between reads of the file's real size
MAX_FIELD_CHARS = 1024  # a string field longer than this is cut, with a marker
WARN_EVERY_SECS = 60.0  # at most one log line a minute about a failing audit log


def digest(arguments: Any) -> str:
    """``sha256:`` of the canonical JSON of the arguments (key order does not matter)."""
    try:
        data = _encoder.encode(arguments)
    except (TypeError, msgspec.EncodeError):
        data = repr(arguments).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


class AuditLog:
    def __init__(self, path: str | Path, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 3) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._fd = -1
        self._size = 0  # the file's size as we last saw it, plus what we wrote since
        self._unchecked = 0  # records written since the size was read from the file
        self.failures = 0  # records that could not be written since the last that could
        self.error = ""  # why the last write failed ("" while writes succeed)
        self.failing_since = 0.0
        self._warned_at = -WARN_EVERY_SECS

    def _open(self) -> int:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size, self._unchecked = os.fstat(self._fd).st_size, 0
        return self._fd

    @property
    def failing(self) -> bool:
        return bool(self.error)

    def status(self) -> dict[str, Any]:
        """For the authenticated status API: ok, and why not (the path is the operator's to see)."""
        return {"ok": not self.error, "path": str(self.path), "error": self.error or None,
                "failures": self.failures, "failing_since": self.failing_since or None}

    def record(self, kind: str, **fields: Any) -> bool:
        """Append one record; False (never an exception) when it could not be written."""
        line = _encoder.encode({"time": round(time.time(), 6), "kind": kind, **fields}) + b"\n"
        if len(line) > MAX_FIELD_CHARS:  # only then can a field be too long: no cost for the usual record
            for key, value in fields.items():
                if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
                    fields[key] = value[:MAX_FIELD_CHARS] + f"...[cut: {len(value)} characters]"
            line = _encoder.encode({"time": round(time.time(), 6), "kind": kind, **fields}) + b"\n"
        try:
            self._write(line)
        except OSError as exc:
            self._failed(exc)
            return False
        if self.error:
            log.warning("the audit log %s is writable again (%d records were lost)", self.path, self.failures)
            self.error, self.failures, self.failing_since = "", 0, 0.0
        return True

    def _write(self, line: bytes) -> None:
        fd = self._open()
        os.write(fd, line)
        self._size += len(line)
        self._unchecked += 1
        # The size is counted, not read for every record (an fstat a record was a third of
        # its cost); it is re-read now and then, as another tern may append to the file too.
        if self._size >= self.max_bytes or self._unchecked >= RECHECK_EVERY:
            self._size, self._unchecked = os.fstat(fd).st_size, 0
            if self._size >= self.max_bytes:
                self._rotate()

    def _failed(self, exc: OSError, *, lost: bool = True) -> None:
        self.close()  # reopened by the next record: the path may be fixed by then
        now = time.monotonic()
        if not self.error:
            self.failing_since = round(time.time(), 3)
        self.error = exc.strerror or type(exc).__name__
        self.failures += lost
        if now - self._warned_at >= WARN_EVERY_SECS:
            self._warned_at = now
            log.error("cannot write the audit log %s: %s (%d records lost so far)", self.path, self.error,
                      self.failures)

    def probe(self) -> bool:
        """Whether the log can be written now (opens it if it is closed); clears a
        failure when it can. For ``audit_required``: a refused call must learn of a recovery."""
        try:
            self._open()
        except OSError as exc:
            self._failed(exc, lost=False)
            return False
        return True

    def _rotate(self) -> None:
        """audit.jsonl -> .1 -> .2 ...: the oldest beyond ``backups`` is deleted, unless
        it holds records of today (its last write was today): then it is kept, and the
        log is over its budget (a warning says so)."""
        self.close()
        name = self.path.name

        def rotated(index: int) -> Path:
            return self.path if index == 0 else self.path.with_name(f"{name}.{index}")

        last = 0  # the highest rotated file there is
        while rotated(last + 1).exists():
            last += 1
        keep = self.backups - 1  # files 0..keep move up one; the ones after it go, unless of today
        today = time.localtime().tm_yday, time.localtime().tm_year
        while keep < last and _day(rotated(keep + 1)) == today:
            keep += 1
        for index in range(last, keep, -1):
            rotated(index).unlink(missing_ok=True)
        for index in range(keep, -1, -1):
            if rotated(index).exists():
                os.replace(rotated(index), rotated(index + 1))
        if keep + 1 > self.backups:
            log.warning("the audit log keeps %d rotated files, over its budget of %d: older ones still hold "
                        "records of today, which are never deleted", keep + 1, self.backups)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _day(path: Path) -> tuple[int, int] | None:
    """The local day of ``path``'s last write (None if it is gone)."""
    try:
        moment = time.localtime(path.stat().st_mtime)
    except OSError:
        return None
    return moment.tm_yday, moment.tm_year
