"""Logging: always to stderr (stdout belongs to the protocol in ``tern mcp``).

Two formats: ``text`` for people, ``json`` (one object per line) for machines. Known
secret values are registered with ``register_secret`` and replaced by ``********`` in
every formatted record (by ``runtime.redact``, the tool pipeline's redactor too),
whatever the code that logged them, so a secret that slips into a message still never
reaches the log. The tool pipeline masks the same set in every tool result.

The set is tern's own secrets (API keys, expanded header values, configured secrets),
never a caller's (A2A push tokens are not registered): it is bounded to
``MAX_SECRETS`` values of ``MIN_SECRET_CHARS`` to ``MAX_SECRET_CHARS`` characters. A
shorter value would mask ordinary words (``ERROR``); a refused value is reported once,
without the value.

At debug level, ``log_wire`` records one line per protocol message in or out: direction,
method, id, size, duration. Never the content: payloads carry arguments and tokens.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from runtime.redact import Redactor

__all__ = ["setup_logging", "register_secret", "secrets_version", "registered_secrets", "log_wire", "get_logger",
           "LEVELS"]

LEVELS = ("debug", "info", "warning", "error")
_MASK = "********"
MIN_SECRET_CHARS = 8
MAX_SECRET_CHARS = 8192  # a large JWT in a header still fits
MAX_SECRETS = 256
_secrets: set[str] = set()
_version = 0  # bumped on every change of the set: users rebuild their matchers only then
_redactor = Redactor((), mask=_MASK, min_len=MIN_SECRET_CHARS)
_refused: set[str] = set()  # why values were refused, each reported once
_wire = logging.getLogger("tern.wire")


def get_logger(name: str) -> logging.Logger:
    """A logger under the ``tern`` namespace."""
    return logging.getLogger(f"tern.{name}")


def register_secret(value: str) -> bool:
    """Mask ``value`` in every log record and tool result from now on; False when it is
    refused: shorter than ``MIN_SECRET_CHARS`` (too common to mask without mangling
    ordinary text), longer than ``MAX_SECRET_CHARS``, or the set is full."""
    global _redactor, _version
    if not isinstance(value, str) or len(value) < MIN_SECRET_CHARS:
        return False
    if value in _secrets:
        return True
    why = ""
    if len(value) > MAX_SECRET_CHARS:
        why = f"a secret of {len(value)} characters is not masked in logs (at most {MAX_SECRET_CHARS})"
    elif len(_secrets) >= MAX_SECRETS:
        why = f"more than {MAX_SECRETS} secrets: the others are not masked in logs"
    if why:
        if why not in _refused and len(_refused) < 16:
            _refused.add(why)
            get_logger("log").warning(why)
        return False
    _secrets.add(value)
    _version += 1
    _redactor = Redactor(tuple(_secrets), mask=_MASK, min_len=MIN_SECRET_CHARS)
    return True


def secrets_version() -> int:
    """A number that changes whenever the registered set does."""
    return _version


def registered_secrets() -> tuple[str, ...]:
    """The registered values (for the tool pipeline's redactor)."""
    return tuple(_secrets)


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
