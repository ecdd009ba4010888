"""Logging: always to stderr (stdout belongs to the protocol in ``tern mcp``).

Two formats: ``text`` for people, ``json`` (one object per line) for machines. Known
secret values are registered with ``register_secret`` and replaced by ``********`` in
every formatted record (by ``runtime.redact``, the tool pipeline's redactor too),
whatever the code that logged them, so a secret that slips into a message still never
reaches the log.

At debug level, ``log_wire`` records one line per protocol message in or out: direction,
method, id, size, duration. Never the content: payloads carry arguments and tokens.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from runtime.redact import Redactor

__all__ = ["setup_logging", "register_secret", "log_wire", "get_logger", "LEVELS"]

LEVELS = ("debug", "info", "warning", "error")
_MASK = "********"
_MIN_SECRET_LEN = 4
_secrets: set[str] = set()
_redactor = Redactor((), mask=_MASK, min_len=_MIN_SECRET_LEN)
_wire = logging.getLogger("tern.wire")


def get_logger(name: str) -> logging.Logger:
    """A logger under the ``tern`` namespace."""
    return logging.getLogger(f"tern.{name}")


def register_secret(value: str) -> None:
    """Mask ``value`` in every log record from now on (values shorter than 4 are too
    common to mask without mangling ordinary text)."""
    global _redactor
    if value and len(value) >= _MIN_SECRET_LEN and value not in _secrets:
        _secrets.add(value)
        _redactor = Redactor(tuple(_secrets), mask=_MASK, min_len=_MIN_SECRET_LEN)


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        return _redactor.redact(super().format(record))


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus ``extra`` fields."""

    _standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        import json

        entry: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in self._standard and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _redactor.redact(json.dumps(entry, default=str, ensure_ascii=False))


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Send tern's logs to stderr at ``level`` in ``fmt`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    root = logging.getLogger("tern")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


def log_wire(direction: str, method: str | None, msg_id: Any, size_bytes: int,
             started: float | None = None, peer: str = "") -> None:
    """One debug line per protocol message: ``direction`` is "in" or "out"; ``started``
    is a ``time.perf_counter()`` value for messages that answer a request."""
    if not _wire.isEnabledFor(logging.DEBUG):
        return
    duration_ms = None if started is None else round((time.perf_counter() - started) * 1000, 3)
    _wire.debug(
        "%s %s %s id=%s size=%d%s", peer or "-", direction, method or "-", msg_id, size_bytes,
        "" if duration_ms is None else f" duration_ms={duration_ms}",
        extra={"direction": direction, "method": method, "id": msg_id, "size": size_bytes,
               "duration_ms": duration_ms, "peer": peer},
    )
