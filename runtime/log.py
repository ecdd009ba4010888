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

Peer text (an MCP server's stderr and log messages, an A2A agent's error, an HTTP
error body) reaches log messages all the time, so the formatters make *every* record's
message one line of plain text (``clean``): control characters (C0 but tab, DEL, C1,
U+2028/U+2029) and invisible format characters (bidi embeddings, overrides and isolates
U+202A-202E/U+2066-2069, zero-width ones, the BOM, tag characters) become visible
escapes (``\\n``, ``\\x1b``, ``\\u202e``), so no peer can colour the terminal, rewrite
a line, reorder what a person reads or forge a log line, and no call site can forget
to. The CLI prints every text a peer or a model supplied through ``clean`` too (one
line, or ``lines=True`` for a page), and ``preview`` for a one-line look at a long one.
Text that peers can send at will is also rate-limited by its caller with a ``LogBudget``.

At debug level, ``log_wire`` records one line per protocol message in or out: direction,
method, id, size, duration. Never the content: payloads carry arguments and tokens.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any

from runtime.redact import Redactor

__all__ = ["setup_logging", "register_secret", "secrets_version", "registered_secrets", "log_wire", "get_logger",
           "LEVELS", "clean", "shorten", "preview", "LogBudget", "set_trace_source"]

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
_trace_source: Any = None  # runtime.tracing.trace_id while traces are on: records get a trace_id field


#: Invisible format characters (Unicode Cf) a peer could use to hide or reorder text:
#: soft hyphen, Arabic/Syriac marks, zero-width ones, bidi marks, embeddings, overrides and
#: isolates, invisible operators, the BOM, interlinear annotations, tag characters.
_FORMAT = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064"
           "\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0001\U000e0020-\U000e007f")
_UNSAFE = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]")
_UNSAFE_LINES = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029{_FORMAT}]")  # keeps \n
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f\u2028\u2029{_FORMAT}]")  # json.dumps escapes C0 itself
#: A run of blanks (spaces, tabs, and the escapes JSON writes for newlines and returns) long
#: enough to push what follows out of sight, or any short unit repeated as long.
_BLANKS = re.compile(r"(?:[ \t]|\\[nrt]){16,}")
_REPEATS = re.compile(r"(.{1,8}?)\1{15,}", re.DOTALL)
_NAMED = {"\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def clean(text: str, *, lines: bool = False) -> str:
    """``text`` as one line of plain text, fit for a terminal: control and invisible format
    characters (tab kept) as escapes; ``lines``: newlines kept (a page)."""
    unsafe = _UNSAFE_LINES if lines else _UNSAFE
    return text if unsafe.search(text) is None else unsafe.sub(_escape, text)


def preview(text: str, limit: int) -> str:
    """``text`` (``clean``ed) in at most about ``limit`` characters for one line a person
    reads: long runs of blanks and of one repeated unit are counted, not shown, and what
    is still too long loses its middle, never its end, saying how much went. So padding
    cannot push the part that matters out of sight (where that part is at either end)."""
    text = clean(text)
    if len(text) <= limit:
        return text
    text = _BLANKS.sub(lambda m: f" [{len(m.group()):,} blank characters] ", text)
    text = _REPEATS.sub(lambda m: f"[{m.group(1)} x{len(m.group()) // len(m.group(1)):,}]"
                        if len(m.group()) > 24 else m.group(), text)
    if len(text) <= limit:
        return text
    head = max(1, limit * 2 // 3)
    tail = max(1, limit - head)
    return f"{text[:head]} [... {len(text) - head - tail:,} characters not shown ...] {text[-tail:]}"


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how many were cut."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


class LogBudget:
    """A token bucket for log lines a peer can cause at will (``per_sec``, ``burst``),
    counting what it drops so the caller can log one summary per ``summary_secs``
    instead. Sans-IO: the caller passes the time."""

    __slots__ = ("per_sec", "burst", "summary_secs", "_tokens", "_last", "_dropped", "_summarised")

    def __init__(self, per_sec: float = 20.0, burst: int = 100, summary_secs: float = 1.0) -> None:
        self.per_sec, self.burst, self.summary_secs = per_sec, burst, summary_secs
        self._tokens = float(burst)
        self._last: float | None = None
        self._dropped = 0
        self._summarised = float("-inf")

    def admit(self, now: float) -> bool:
        """Whether one more line may be logged now (if not, it is counted as dropped)."""
        if self._last is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.per_sec)
        self._last = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self._dropped += 1
        return False

    def dropped(self, now: float, *, final: bool = False) -> int:
        """How many were dropped since the last summary, when a summary is due (at most
        one per ``summary_secs``, or any left over when ``final``); else 0."""
        if not self._dropped or (not final and now - self._summarised < self.summary_secs):
            return 0
        count, self._dropped, self._summarised = self._dropped, 0, now
        return count


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


def set_trace_source(source: Any) -> None:
    """``source()`` gives the current trace id (or ""); None stops adding it."""
    global _trace_source
    _trace_source = source


class _TraceFilter(logging.Filter):
    """Adds ``trace_id`` to a record logged while a span is current (traces on only)."""

    def filter(self, record: logging.LogRecord) -> bool:
        source = _trace_source
        if source is not None and not hasattr(record, "trace_id"):
            trace_id = source()
            if trace_id:
                record.trace_id = trace_id
        return True


class _TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = clean(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        # A traceback is many lines, and its exception's text may be a peer's: escape all
        # but the newlines, and indent every line so none can pass for a record of its own.
        lines = super().formatException(ei).split("\n")
        return "\n".join("    " + clean(line) for line in lines)

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        trace_id = getattr(record, "trace_id", None)
        if trace_id:
            head, newline, rest = text.partition("\n")  # after the message, before any traceback
            text = f"{head} trace_id={trace_id}{newline}{rest}"
        return _redactor.redact(text)


class _JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, plus ``extra`` fields."""

    _standard = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        import json

        entry: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": clean(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in self._standard and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        line = json.dumps(entry, default=str, ensure_ascii=False)
        if _JSON_UNSAFE.search(line) is not None:  # C1 and line separators, in peer-given extras too
            line = _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)
        return _redactor.redact(line)


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Send tern's logs to stderr at ``level`` in ``fmt`` (``text`` or ``json``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if fmt == "json" else _TextFormatter())
    handler.addFilter(_TraceFilter())
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
