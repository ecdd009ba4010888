"""The audit log: one JSON line per tool call and per agent message, in
``<state dir>/audit.jsonl``, rotated by size.

Each record is one ``os.write`` on an ``O_APPEND`` descriptor: a line is written whole
or not at all, even with two processes appending, and a crash loses nothing already
written. Arguments are never stored, only their SHA-256 digest: the log must not become
a second copy of every secret a tool was given.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["AuditLog", "digest"]

_encoder = msgspec.json.Encoder(order="sorted")
RECHECK_EVERY = 256  # records between reads of the file's real size


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

    def _open(self) -> int:
        if self._fd < 0:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._size, self._unchecked = os.fstat(self._fd).st_size, 0
        return self._fd

    def record(self, kind: str, **fields: Any) -> None:
        line = _encoder.encode({"time": round(time.time(), 6), "kind": kind, **fields}) + b"\n"
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

    def _rotate(self) -> None:
        """audit.jsonl -> .1 -> .2 ... (the oldest beyond ``backups`` is dropped)."""
        self.close()
        for index in range(self.backups, 0, -1):
            source = self.path if index == 1 else self.path.with_name(f"{self.path.name}.{index - 1}")
            if source.exists():
                os.replace(source, self.path.with_name(f"{self.path.name}.{index}"))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
