"""The audit log: one JSON line per tool call and per agent message, in
``<state dir>/audit.jsonl``, rotated by size, each record chained to the one before it.

Each record is one ``os.write`` on an ``O_APPEND`` descriptor: a line is written whole
or not at all, and a crash loses nothing already written. Arguments are never stored,
only their SHA-256 digest: the log must not become a second copy of every secret a tool
was given.

Tamper evidence (``runtime.kernel.audit_chain`` has the format and the verifier): every
record carries ``seq`` (1, 2, 3, ... across files and processes), ``hash``, a SHA-256
over the previous record's hash and this record, and ``chain``, an HMAC-SHA256 of the
hash keyed with ``<state dir>/audit.key`` (32 random bytes, 0600, made on first use).
Checkpoints (``runtime.kernel.audit_checkpoints``: seq, hash, time) are signed with the
Ed25519 seed in ``audit-signing.key`` (made the same way) and appended to
``audit.checkpoints``: every ``CHECKPOINT_EVERY_RECORDS`` records, by the first record
written ``CHECKPOINT_EVERY_SECS`` after the last checkpoint, and by ``checkpoint()``,
which the daemon calls each ``CHECKPOINT_EVERY_SECS`` while records are unsigned and
every process at its end. Rotation that deletes the oldest files first signs a ``start``
mark: the records up to there are gone by design, so a log that begins anywhere else has
lost its head. A key that is a symbolic link, another user's, or readable by others is
refused: the log is then failing (below) until it is fixed. ``tern audit verify`` names
the first record changed, removed, inserted or moved; docs/audit.md says what it
cannot see.

Several processes append to the same file (the daemon, ``tern call``, ``tern run``):
each record is written under ``flock``, and a process whose file is not the size it
left it at first reads the file's end to continue from the last complete record (or
from ``audit.jsonl.1``'s, for a file just rotated). A line cut short (a full disk, a
power cut) is left as it is: the next record starts a line of its own and chains from
the last complete record, and ``verify`` reports the cut line.

Bounds: every string field is cut at ``MAX_FIELD_CHARS`` with a visible marker (a
record is never dropped), so no caller can flush earlier records out with a few huge
ones. Rotation keeps ``backups`` files, and more while the oldest still holds records
of today (a warning says the log is over its budget): records of the current day are
never deleted.

A write that fails (full disk, a directory where the file should be, a refused key)
never fails the caller: it is counted, logged at most once a minute, and ``status()``
says so (``/health`` answers "degraded"); the next record tries again, so the log
recovers by itself. With ``[security] audit_required`` the pipeline refuses tool calls
meanwhile.
"""

from __future__ import annotations

import errno
import json
import hashlib
import os
import stat
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from runtime.crypto import ed25519
from runtime.errors import TernError
from runtime.kernel import audit_checkpoints as checkpoints
from runtime.kernel.audit_chain import (KEY_BYTES, Chained, Line, Mac, Mark, Problem, Report, last_chained, parse,
                                        verify)
from runtime.log import get_logger

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]
_flock = fcntl.flock if fcntl is not None else None
_LOCK_EX, _LOCK_UN = (fcntl.LOCK_EX, fcntl.LOCK_UN) if fcntl is not None else (0, 0)
_LOCK_EX_NB = _LOCK_EX | (fcntl.LOCK_NB if fcntl is not None else 0)

__all__ = ["AuditLog", "AuditError", "digest", "load_key", "log_files", "read_lines", "verify_log"]

_encoder = msgspec.json.Encoder(order="sorted")
log = get_logger("audit")
KEY_FILE = "audit.key"
SIGNING_KEY_FILE = "audit-signing.key"  # the Ed25519 seed that signs checkpoints
CHECKPOINTS_FILE = "audit.checkpoints"
CHECKPOINT_EVERY_RECORDS = 1000  # a checkpoint at least this often...
CHECKPOINT_EVERY_SECS = 60.0  # ...and within this long of a record (the daemon's timer, or the next record)
MAX_CHECKPOINT_BYTES = 64 << 20  # the most of audit.checkpoints a check reads
COMPACT_CHECKPOINTS_BYTES = 32 << 10  # past this, the next checkpoint replaces all but the start mark
MAX_FIELD_CHARS = 1024  # a string field longer than this is cut, with a marker
WARN_EVERY_SECS = 60.0  # at most one log line a minute about a failing audit log
LOCK_WAIT_SECS = 1.0  # the longest a record waits for another process's lock
MAX_TAIL_BYTES = 1 << 20  # how far back from a file's end a writer looks for the last record
MAX_LINE_BYTES = 1 << 20  # a longer line is read as a damaged one, never held whole
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def digest(arguments: Any) -> str:
    """``sha256:`` of the canonical JSON of the arguments (key order does not matter)."""
    try:
        data = _encoder.encode(arguments)
    except (TypeError, msgspec.EncodeError):
        data = repr(arguments).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


class AuditError(TernError):
    """The audit log cannot be used: its key may be known to someone else (a symbolic
    link, another user's file, readable by others, the wrong length), so records are
    neither written nor checked with it; or its files cannot be read for checking."""


class AuditLog:
    def __init__(self, path: str | Path, *, max_bytes: int = 10 * 1024 * 1024, backups: int = 3,
                 checkpoint_records: int = CHECKPOINT_EVERY_RECORDS,
                 checkpoint_secs: float = CHECKPOINT_EVERY_SECS) -> None:
        self.path = Path(path)
        self.key_path = self.path.with_name(KEY_FILE)
        self.signing_path = self.path.with_name(SIGNING_KEY_FILE)
        self.checkpoints_path = self.path.with_name(CHECKPOINTS_FILE)
        self.max_bytes = max_bytes
        self.backups = backups
        self.checkpoint_records = checkpoint_records
        self.checkpoint_secs = checkpoint_secs
        self._seed: bytes | None = None
        self._signed_seq = -1  # the last seq this process knows to be under a checkpoint (-1: not read yet)
        self._signed_at = time.monotonic()
        self._fd = -1
        self._size = -1  # the file's size as this process last left it (-1: unknown, read its end)
        self._mac: Mac | None = None
        self._seq = 0  # the last record's seq and chain value, and b"\n" if its line must be ended first
        self._chain = b""
        self._lead = b""
        self.failures = 0  # records that could not be written since the last that could
        self.error = ""  # why the last write failed ("" while writes succeed)
        self.failing_since = 0.0
        self._warned_at = -WARN_EVERY_SECS

    def _open(self) -> int:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            if self._mac is None:
                self._mac = Mac(load_key(self.key_path, create=True))
            if self._seed is None:
                self._seed = load_key(self.signing_path, create=True, what="audit signing key")
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _O_CLOEXEC, 0o600)
            self._size = -1
        return self._fd

    @property
    def failing(self) -> bool:
        return bool(self.error)

    def status(self) -> dict[str, Any]:
        """For the authenticated status API: ok, and why not (the path is the operator's to see)."""
        return {"ok": not self.error, "path": str(self.path), "error": self.error or None,
                "failures": self.failures, "failing_since": self.failing_since or None}

    def record(self, kind: str, **fields: Any) -> bool:
        """Append one record; False (never an exception) when it could not be written.
        ``seq`` and ``chain`` are the chain's own fields, not a caller's."""
        body = _encoder.encode({"time": round(time.time(), 6), "kind": kind, **fields})
        if len(body) > MAX_FIELD_CHARS:  # only then can a field be too long: no cost for the usual record
            for key, value in fields.items():
                if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
                    fields[key] = value[:MAX_FIELD_CHARS] + f"...[cut: {len(value)} characters]"
            body = _encoder.encode({"time": round(time.time(), 6), "kind": kind, **fields})
        try:
            self._append(body)
        except (OSError, AuditError) as exc:
            self._failed(exc)
            return False
        if self.error:
            log.warning("the audit log %s is writable again (%d records were lost)", self.path, self.failures)
            self.error, self.failures, self.failing_since = "", 0, 0.0
        return True

    def _append(self, body: bytes) -> None:
        """Lock, catch up with what other processes wrote, write one chained line, rotate
        if full, unlock. The file's size is asked for every record, under the lock (an
        ``lseek``, cheaper than ``fstat``): it is how another process's records are
        noticed, so two processes never chain from the same record."""
        fd = self._fd if self._fd >= 0 else self._open()
        if _flock is not None:
            try:
                _flock(fd, _LOCK_EX_NB)
            except BlockingIOError:
                _wait_for_lock(fd, _LOCK_EX)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            if size != self._size:
                fd, size = self._catch_up(fd)
            line, chain = self._mac.line(self._chain, self._seq + 1, body)  # type: ignore[union-attr]
            if self._lead:
                line = self._lead + line
            _write_all(fd, line)
            self._seq += 1
            self._chain, self._lead, self._size = chain, b"", size + len(line)
            if self._signed_seq < 0:  # this process's first record: where the checkpoints are
                self._signed_seq = self._known_mark()
            if self._seq - self._signed_seq >= self.checkpoint_records \
                    or time.monotonic() - self._signed_at >= self.checkpoint_secs:
                self._sign_quietly()
            if self._size >= self.max_bytes:
                self._rotate()  # still under the lock: nobody writes to the file while it moves
        finally:
            if self._fd >= 0 and _flock is not None:
                _flock(self._fd, _LOCK_UN)

    def _catch_up(self, fd: int) -> tuple[int, int]:
        """The file changed since this process last wrote (or was just opened): make sure
        it is still the one at ``path`` (another process may have rotated or removed it),
        then take the seq and chain to continue from its last complete record, or from
        the last of ``audit.jsonl.1`` if it is empty. Returns the descriptor (locked) and
        its size."""
        deadline = time.monotonic() + LOCK_WAIT_SECS
        while True:
            st = os.fstat(fd)
            try:
                named = os.stat(self.path)
            except FileNotFoundError:
                named = None
            if named is not None and named.st_ino == st.st_ino and named.st_dev == st.st_dev:
                break
            if time.monotonic() >= deadline:  # other processes kept rotating it, faster than we got in
                raise OSError(errno.EAGAIN, f"the audit log was rotated again and again by other processes for "
                                            f"{LOCK_WAIT_SECS:g} s")
            self.close()  # rotated or removed by another process: write to the file that is there now
            fd = self._open()
            _lock(fd)
        self._lead = b""
        if st.st_size:
            found, ended = _tail(fd, st.st_size)
            self._lead = b"" if ended else b"\n"  # a record cut short: ours goes on a line of its own
        else:
            found = None
            try:
                previous = os.open(self._rotated(1), os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
            except FileNotFoundError:
                pass
            else:
                try:
                    found, _ = _tail(previous, os.fstat(previous).st_size)
                finally:
                    os.close(previous)
        self._seq, self._chain = found if found is not None else (0, b"")  # none: a new chain, from seq 1
        return fd, st.st_size

    def checkpoint(self) -> bool:
        """Sign a checkpoint of the log's last record now, if any record is not under one
        yet (this process's or another's). False if it could not be written (logged), or
        there is no log yet (none is made for it)."""
        if self._fd < 0 and not log_files(self.path):
            return False
        try:
            fd = self._fd if self._fd >= 0 else self._open()
            _lock(fd)
        except (OSError, AuditError) as exc:
            self._failed(exc, lost=False)
            return False
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            if size != self._size:
                fd, self._size = self._catch_up(fd)
            return self._sign_quietly()
        except (OSError, AuditError) as exc:
            self._failed(exc, lost=False)
            return False
        finally:
            if self._fd >= 0 and _flock is not None:
                _flock(self._fd, _LOCK_UN)

    def _sign_quietly(self) -> bool:
        """``_sign``, with a failure logged (at most once a minute), never raised: the
        record it follows is written already."""
        try:
            self._sign()
        except OSError as exc:
            now = time.monotonic()
            self._signed_at = now  # not again with every record: at the next due time
            if now - self._warned_at >= WARN_EVERY_SECS:
                self._warned_at = now
                log.error("cannot write the audit checkpoint %s: %s", self.checkpoints_path,
                          exc.strerror or type(exc).__name__)
            return False
        return True

    def _sign(self) -> None:
        """Append a signed checkpoint of record ``_seq`` (the lock is held), unless the
        file's last checkpoint is of it already. The first checkpoint of a log an older
        tern began, whose first records were rotated away, is preceded by a ``start``
        mark taken on trust: its head cannot be proven any more, but from now on it can."""
        assert self._seed is not None
        last, ended, size = self._last_mark()
        if self._seq <= 0 or (last is not None and last >= self._seq):
            self._signed_seq, self._signed_at = max(self._seq, 0), time.monotonic()
            return
        mark = checkpoints.encode(self._seed, "checkpoint", self._seq, self._chain, time.time())
        if size > COMPACT_CHECKPOINTS_BYTES:
            self._compact(mark)
        else:
            lines = [] if ended else [b"\n"]
            if last is None:
                first = _first_record(self.path)
                if first is not None and first.hash is None and first.seq is not None and first.seq > 1:
                    lines.append(checkpoints.encode(self._seed, "start", first.seq - 1, None, time.time()))
            lines.append(mark)
            fd = os.open(self.checkpoints_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC,
                         0o600)
            try:
                _write_all(fd, b"".join(lines))
            finally:
                os.close(fd)
        self._signed_seq, self._signed_at = self._seq, time.monotonic()

    def _compact(self, mark: bytes) -> None:
        """Replace the checkpoints with the newest start mark and ``mark``: the hashes
        chain every record to the last checkpoint, so the ones before it add nothing,
        and a check verifies a bounded number of signatures however long tern runs."""
        with open(self.checkpoints_path, "rb") as handle:
            old = handle.read(MAX_CHECKPOINT_BYTES)
        starts = [line for line in old.split(b"\n") if checkpoints.kind_of(line) == "start"]
        newest = max(starts, key=lambda line: checkpoints.seq_of(line) or 0) + b"\n" if starts else b""
        self._replace_marks(newest + mark)

    def _known_mark(self) -> int:
        try:
            return self._last_mark()[0] or 0
        except OSError:
            return 0

    def _last_mark(self) -> tuple[int | None, bool, int]:
        """The seq of the checkpoints file's last complete line (None: no line), whether
        the file ends with a newline (or is empty), and its size."""
        try:
            fd = os.open(self.checkpoints_path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
        except FileNotFoundError:
            return None, True, 0
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, min(size, 4096), max(0, size - 4096))
        finally:
            os.close(fd)
        lines = data.split(b"\n")
        ended = lines.pop() == b""
        for line in reversed(lines):
            seq = checkpoints.seq_of(line)
            if seq is not None:
                return seq, ended, size
        return None, ended, size

    def _start_mark(self, deleted: list[Path]) -> None:
        """The files ``deleted`` (newest first) are about to go: sign a ``start`` mark of
        their last record, so the log may begin after it, and keep only the marks from
        there on (the lock is held)."""
        found = None
        for path in deleted:
            try:
                fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                found, _ = _tail(fd, os.fstat(fd).st_size)
            finally:
                os.close(fd)
            if found is not None:
                break
        if found is None or self._seed is None:
            return
        seq, link = found
        try:
            old = self.checkpoints_path.read_bytes()
        except FileNotFoundError:
            old = b""
        kept = [line + b"\n" for line in old.split(b"\n") if (checkpoints.seq_of(line) or 0) > seq]
        self._replace_marks(checkpoints.encode(self._seed, "start", seq, link, time.time()) + b"".join(kept))

    def _replace_marks(self, data: bytes) -> None:
        """``audit.checkpoints`` becomes ``data``, whole (written aside, then renamed)."""
        temp = self.checkpoints_path.with_name(f".{CHECKPOINTS_FILE}.{os.getpid()}.{os.urandom(4).hex()}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, self.checkpoints_path)
        finally:
            temp.unlink(missing_ok=True)

    def _failed(self, exc: OSError | AuditError, *, lost: bool = True) -> None:
        self.close()  # reopened by the next record: the path may be fixed by then
        now = time.monotonic()
        if not self.error:
            self.failing_since = round(time.time(), 3)
        self.error = str(exc) if isinstance(exc, AuditError) else exc.strerror or type(exc).__name__
        self.failures += lost
        if now - self._warned_at >= WARN_EVERY_SECS:
            self._warned_at = now
            log.error("cannot write the audit log %s: %s (%d records lost so far)", self.path, self.error,
                      self.failures)

    def probe(self) -> bool:
        """Whether the log can be written now (opens it and reads its key if it is closed);
        clears a failure when it can. For ``audit_required``: a refused call must learn of
        a recovery; and at boot, so a bad key shows at once."""
        try:
            self._open()
        except (OSError, AuditError) as exc:
            self._failed(exc, lost=False)
            return False
        return True

    def _rotated(self, index: int) -> Path:
        return self.path if index == 0 else self.path.with_name(f"{self.path.name}.{index}")

    def _rotate(self) -> None:
        """audit.jsonl -> .1 -> .2 ...: the oldest beyond ``backups`` is deleted, unless
        it holds records of today (its last write was today): then it is kept, and the
        log is over its budget (a warning says so). Called with the lock held; the file
        is closed (and the lock let go) once it has moved, so the next record, of any
        process, starts the new file from the last record of this one."""
        rotated = self._rotated
        last = 0  # the highest rotated file there is
        while rotated(last + 1).exists():
            last += 1
        keep = self.backups - 1  # files 0..keep move up one; the ones after it go, unless of today
        today = time.localtime().tm_yday, time.localtime().tm_year
        while keep < last and _day(rotated(keep + 1)) == today:
            keep += 1
        try:
            if last > keep:
                self._start_mark([rotated(index) for index in range(keep + 1, last + 1)])
            for index in range(last, keep, -1):
                rotated(index).unlink(missing_ok=True)
            for index in range(keep, -1, -1):
                if rotated(index).exists():
                    os.replace(rotated(index), rotated(index + 1))
        finally:
            self.close()
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


def _lock(fd: int, kind: int = 2) -> None:
    """``flock`` ``fd`` (exclusive by default), waiting at most ``LOCK_WAIT_SECS``."""
    if fcntl is None:  # no flock (Windows): one writer at a time is the operator's to ensure
        return
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except BlockingIOError:
        _wait_for_lock(fd, kind)


def _wait_for_lock(fd: int, kind: int) -> None:
    """Another process holds the lock: try again, backing off, until ``LOCK_WAIT_SECS``
    have passed. A writer holds it for microseconds; the wait blocks the event loop, so
    it is short and bounded: a process stopped while holding it costs a lost record (and
    a degraded /health), not a hung daemon."""
    assert fcntl is not None
    deadline = time.monotonic() + LOCK_WAIT_SECS
    pause = 0.0001
    while True:
        time.sleep(pause)
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise OSError(errno.ETIMEDOUT, f"another process held the audit log's lock for over "
                                               f"{LOCK_WAIT_SECS:g} s") from None
            pause = min(pause * 2, 0.001)


def _write_all(fd: int, line: bytes) -> None:
    written = os.write(fd, line)
    while written < len(line):  # cut short (the disk filled up mid-line): the rest, or the error
        more = os.write(fd, line[written:])
        if not more:
            raise OSError(errno.ENOSPC, "No space left on device")
        written += more


def _tail(fd: int, size: int) -> tuple[tuple[int, bytes] | None, bool]:
    """The last complete chained record's seq and chain in the file ``fd`` of ``size``
    bytes, and whether the file ends with a newline. Reads 4 KiB from the end, more only
    if no complete record is in it (at most ``MAX_TAIL_BYTES``)."""
    window = 4096
    while True:
        start = max(0, size - window)
        data = os.pread(fd, size - start, start)
        found = last_chained(data, whole=start == 0)
        if found is not None or start == 0 or window >= MAX_TAIL_BYTES:
            return found, data.endswith(b"\n")
        window *= 8


def load_key(path: Path, *, create: bool, what: str = "audit key") -> bytes | None:
    """The audit key (or, as ``what`` says, the signing key's seed): 32 random bytes,
    made on first use (``create``) with ``O_EXCL`` and mode 0600 beside the log, then
    only read. None if there is none and ``create`` is
    false. Raises ``AuditError`` for a key that may be known to someone else: a
    symbolic link, another user's file, one that others may read, the wrong length.
    ``what`` names the key in those sentences (the approval links' key is kept the same way)."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK)
    except FileNotFoundError:
        if not create:
            return None
        _make_key(path, what)
        fd = os.open(path, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK)
    except OSError:
        if os.path.islink(path):
            raise AuditError(f"refusing the {what} {path}: it is a symbolic link, so someone else may know "
                                "the key it points to; remove it, and tern makes a new one") from None
        raise
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AuditError(f"refusing the {what} {path}: it is not a regular file; remove it, and tern makes "
                                "a new one")
        if os.name == "posix" and st.st_uid != os.geteuid():
            raise AuditError(f"refusing the {what} {path}: it is owned by uid {st.st_uid}, not by this user "
                                f"(uid {os.geteuid()}), who may know it; remove it, and tern makes a new one")
        if os.name == "posix" and st.st_mode & 0o077:
            raise AuditError(f"refusing the {what} {path}: other users may read it (mode "
                                f"{stat.S_IMODE(st.st_mode):o}); if none did, run chmod 600 {path}, else remove "
                                "it and tern makes a new one")
        key = handle.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise AuditError(f"refusing the {what} {path}: it holds {len(key)} bytes, not {KEY_BYTES}; remove it, "
                            "and tern makes a new one")
    return key


def _make_key(path: Path, what: str = "audit key") -> None:
    """A new key, written whole to a private temporary file and then linked into place,
    so no process ever reads half a key; if another process linked its key first, that
    one is the key."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, os.urandom(KEY_BYTES))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.link(temp, path)
        log.info("made a new %s %s", what, path)  # the path only: a key is never logged
    except FileExistsError:
        pass
    finally:
        temp.unlink(missing_ok=True)


# --- Reading the log back -----------------------------------------------------------------


def log_files(path: Path) -> list[Path]:
    """The log's files, oldest first: ``audit.jsonl.N`` ... ``.1``, then ``audit.jsonl``
    (those that exist)."""
    rotated = []
    for candidate in path.parent.glob(path.name + ".*"):
        suffix = candidate.name[len(path.name) + 1:]
        if suffix.isdigit() and suffix == str(int(suffix)):
            rotated.append((int(suffix), candidate))
    files = [candidate for _, candidate in sorted(rotated, reverse=True)]
    return files + [path] if path.exists() else files


def read_lines(handle: BinaryIO, name: str, limit: int = -1) -> Iterator[Line]:
    """The lines of an open file (at most ``limit`` bytes of it), each cut at
    ``MAX_LINE_BYTES``: an endless line cannot take the reader's memory."""
    number = 0
    remaining = limit if limit >= 0 else 1 << 62
    while remaining > 0:
        data = handle.readline(min(MAX_LINE_BYTES + 1, remaining))
        if not data:
            return
        remaining -= len(data)
        number += 1
        if len(data) > MAX_LINE_BYTES and not data.endswith(b"\n"):  # far too long: pass over the rest of it
            while remaining > 0:
                rest = handle.readline(min(MAX_LINE_BYTES, remaining))
                remaining -= len(rest)
                if not rest or rest.endswith(b"\n"):
                    data = data[:MAX_LINE_BYTES] + rest[-1:]
                    break
        terminated = data.endswith(b"\n")
        yield Line(name, number, data[:-1] if terminated else data, terminated)


class RecordFilter:
    """Which records ``tern audit tail --agent/--tool/--outcome`` (and ``GET /api/audit``)
    let through: agent and tool globs, a set of outcomes; everything without them."""

    def __init__(self, agent: str | None = None, tool: str | None = None, outcomes: Any = ()) -> None:
        self.agent, self.tool, self.outcomes = agent, tool, set(outcomes or ())
        self.active = bool(self.agent or self.tool or self.outcomes)

    def __call__(self, line: bytes) -> bool:
        if not self.active:
            return True
        from fnmatch import fnmatchcase

        record = parse_record(line)
        if record is None:
            return False
        for glob, value in ((self.agent, record.get("agent")), (self.tool, record.get("tool"))):
            if glob and not (isinstance(value, str) and fnmatchcase(value, glob)):
                return False
        return not self.outcomes or record.get("outcome") in self.outcomes


def parse_record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def last_records(path: Path, wanted: int, keep: Any, current: BinaryIO | None = None) -> deque[bytes]:
    """The last ``wanted`` whole lines of the log that ``keep`` lets through, newest last:
    the current file's (read from ``current``, an open handle at its start, left just
    after its last whole line so a follower can go on from there; or opened here), then
    the rotated files', newest first, until there are enough."""
    last: deque[bytes] = deque(maxlen=max(wanted, 0))
    handle = current if current is not None else (path.open("rb") if path.exists() else None)
    try:
        if handle is not None:
            for line in handle:
                if not line.endswith(b"\n"):  # a record still being written: a follower reads it whole
                    handle.seek(-len(line), os.SEEK_CUR)
                elif keep(line):
                    last.append(line)
    finally:
        if current is None and handle is not None:
            handle.close()
    for file in reversed([file for file in log_files(path) if file != path]):
        if len(last) >= wanted:
            break
        with file.open("rb") as older:
            found = deque((line for line in older if keep(line)), maxlen=wanted - len(last))
        last.extendleft(reversed(found))
    return last


def verify_log(path: Path, public: bytes | None = None) -> Report:
    """Check the chain through every file of the log at ``path``, oldest first, and the
    signed checkpoints beside it. With ``public`` (a copy checked elsewhere), only the
    hashes and that key's signatures count: no key in the directory is read. Without it,
    the HMAC with ``audit.key`` and the signatures with ``audit-signing.key``'s public
    half. The files are opened together under a shared lock on the current file, so no
    rotation moves them mid-walk, no half-written record is read, and no checkpoint is
    read of a record past the files' ends; records added meanwhile are left for the next
    check. Raises ``AuditError`` for a key it must not trust, or files it cannot open."""
    opened: list[tuple[str, BinaryIO, int]] = []
    try:
        key = None
        if public is None:
            key = load_key(path.with_name(KEY_FILE), create=False)
            seed = load_key(path.with_name(SIGNING_KEY_FILE), create=False, what="audit signing key")
            signer = ed25519.public_key(seed) if seed is not None else None
        else:
            signer = public
        opened = _open_files(path)
        marks_file = path.with_name(CHECKPOINTS_FILE).name
        logs = [entry for entry in opened if entry[0] != marks_file]
        marks, mark_problems = _read_marks([entry for entry in opened if entry[0] == marks_file], signer,
                                           marks_file)
        lines = (line for name, handle, limit in logs for line in read_lines(handle, name, limit))
        rotated = sum(1 for name, _, _ in logs if name != path.name)
        return verify(lines, Mac(key) if key is not None else None, rotated_files=rotated, marks=marks,
                      keyless=public is not None, mark_problems=mark_problems, note=_gaps(path, logs),
                      marks_file=marks_file)
    except OSError as exc:
        raise AuditError(f"cannot read the audit log {exc.filename or path}: {exc.strerror or exc}") from None
    finally:
        for _, handle, _ in opened:
            handle.close()


def _read_marks(opened: list[tuple[str, BinaryIO, int]], signer: bytes | None,
                name: str) -> tuple[list[Mark], list[Problem]]:
    """The checkpoints whose signature ``signer`` verifies, and what is wrong with the rest."""
    if not opened:
        return [], []
    _, handle, limit = opened[0]
    if signer is None:
        return [], [Problem(name, 0, None, "no_key", f"{name} cannot be checked: there is no audit signing key "
                                                     f"({SIGNING_KEY_FILE} is missing); check it with --public-key")]
    if limit < 0 or limit > MAX_CHECKPOINT_BYTES:
        limit = MAX_CHECKPOINT_BYTES
    return checkpoints.read(read_lines(handle, name, limit), signer)


def _gaps(path: Path, logs: list[tuple[str, BinaryIO, int]]) -> str:
    """Rotated files that are empty, or missing below the oldest there is, as words for
    a log whose beginning is gone."""
    said = []
    numbers = []
    for name, handle, _ in logs:
        suffix = name[len(path.name) + 1:]
        if suffix.isdigit():
            numbers.append(int(suffix))
            if os.fstat(handle.fileno()).st_size == 0:
                said.append(f"{name} is empty")
    missing = sorted(set(range(1, max(numbers, default=0))) - set(numbers))
    said += [f"{path.name}.{n} is missing" for n in missing]
    return "; ".join(said)


def _first_record(path: Path) -> Chained | None:
    """The first chained record of the log (oldest file first; from each file's first
    MiB), or None."""
    for file in log_files(path):
        try:
            with open(file, "rb") as handle:
                data = handle.read(MAX_TAIL_BYTES)
        except OSError:
            continue
        for line in data.split(b"\n")[:-1]:
            parsed = parse(line)
            if type(parsed) is Chained and parsed.seq is not None:
                return parsed
    return None


def _open_files(path: Path) -> list[tuple[str, BinaryIO, int]]:
    """Every file of the log, opened (name, file, bytes to read: -1 for all)."""
    for _ in range(100):  # a rotation between opening and locking: rare, and each try is short
        try:
            current: BinaryIO | None = open(path, "rb")  # noqa: SIM115 - closed by the caller
        except FileNotFoundError:
            current = None
        if current is not None:
            _lock(current.fileno(), fcntl.LOCK_SH if fcntl is not None else 0)
            st = os.fstat(current.fileno())
            try:
                named = os.stat(path)
            except FileNotFoundError:
                named = None
            if named is None or (named.st_ino, named.st_dev) != (st.st_ino, st.st_dev):
                current.close()  # rotated while we waited: open the new one
                continue
        try:
            opened: list[tuple[str, BinaryIO, int]] = []
            for file in log_files(path)[:-1] if current is not None else log_files(path):
                try:
                    opened.append((file.name, open(file, "rb"), -1))  # noqa: SIM115
                except FileNotFoundError:
                    continue
            if current is not None:
                opened.append((path.name, current, os.fstat(current.fileno()).st_size))
            try:
                marks = open(path.with_name(CHECKPOINTS_FILE), "rb")  # noqa: SIM115
            except FileNotFoundError:
                pass
            else:
                opened.append((CHECKPOINTS_FILE, marks, os.fstat(marks.fileno()).st_size))
            return opened
        finally:
            if current is not None and fcntl is not None:
                fcntl.flock(current.fileno(), fcntl.LOCK_UN)
    raise OSError(errno.EAGAIN, f"the audit log {path} was rotated again and again while being opened")
