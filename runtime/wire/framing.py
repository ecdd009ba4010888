"""Message framing for stream transports (stdio, pipes), sans-IO.

Two framings carry JSON-RPC over a byte stream: newline-delimited JSON (what MCP's
stdio transport specifies) and LSP-style ``Content-Length`` headers (what some older
clients send). A decoder takes whatever bytes a read returned and hands back events:
:class:`Frame` for a message body, :class:`Oversized` for one larger than the limit,
:class:`Garbage` for bytes that fit no frame. Decoders never parse JSON and never
buffer without bound: an oversized message is counted and dropped as it arrives,
keeping only its head so the consumer can still answer it (see ``jsonrpc.sniff_id``).
After any of these the stream stays usable.
"""

from __future__ import annotations

import re
from typing import Literal
from collections.abc import Callable

import msgspec

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_HEADER_BYTES",
    "HEAD_BYTES",
    "Framing",
    "Frame",
    "Oversized",
    "Garbage",
    "FramingEvent",
    "NdjsonDecoder",
    "ContentLengthDecoder",
    "AutoDecoder",
    "detect_framing",
    "encode_ndjson",
    "encode_content_length",
    "encoder_for",
]

MAX_MESSAGE_BYTES = 10 * 1024 * 1024
HEAD_BYTES = 4096  # kept from an oversized message, enough to find its id
MAX_HEADER_BYTES = 8 * 1024
_DETECT_LIMIT_BYTES = 64

Framing = Literal["ndjson", "content-length"]


class Frame(msgspec.Struct, frozen=True):
    """One complete message body (without its line end or headers)."""

    body: bytes


class Oversized(msgspec.Struct, frozen=True):
    """A message larger than the limit was dropped; ``head`` is its first bytes."""

    size_bytes: int
    head: bytes


class Garbage(msgspec.Struct, frozen=True):
    """Bytes that were not a valid frame were skipped."""

    reason: str
    size_bytes: int


FramingEvent = Frame | Oversized | Garbage


class NdjsonDecoder:
    """Newline-delimited messages: one per line, LF or CRLF, blank lines skipped."""

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._max = max_message_bytes
        self._buf = bytearray()  # the current, incomplete line; holds no newline
        self._discarding = False  # inside an oversized line
        self._head = b""
        self._size = 0
        self._last_cr = False  # the last discarded byte was a CR

    @property
    def pending_bytes(self) -> int:
        """Bytes held in memory for the current incomplete message."""
        return len(self._buf) + len(self._head)

    def feed(self, data: bytes) -> list[FramingEvent]:
        """Take the bytes of one read; return the events they complete, in order."""
        events: list[FramingEvent] = []
        if type(data) is not bytes:
            data = bytes(data)
        if self._discarding:
            data = self._discard(data, events)
        if not data:
            return events
        buf: bytes | bytearray
        if self._buf:
            # Only the new bytes can hold the newline: the buffer was searched before.
            pos = len(self._buf)
            if data.find(b"\n") < 0:
                self._buf += data
                self._check_pending()
                return events
            buf = bytes(self._buf) + data
        else:
            pos = 0
            buf = data
        start = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            self._line(buf, start, nl, events)
            start = pos = nl + 1
        self._buf = bytearray(buf[start:]) if start < len(buf) else bytearray()
        self._check_pending()
        return events

    def feed_eof(self) -> list[FramingEvent]:
        """The stream ended: a last line without newline still counts."""
        events: list[FramingEvent] = []
        if self._discarding:
            self._discard(b"\n", events)
        elif self._buf:
            buf, self._buf = bytes(self._buf), bytearray()
            self._line(buf, 0, len(buf), events)
        return events

    def _line(self, buf: bytes, start: int, end: int, events: list[FramingEvent]) -> None:
        if end > start and buf[end - 1] == 0x0D:
            end -= 1
        size = end - start
        if size > self._max:
            events.append(Oversized(size, buf[start : min(end, start + HEAD_BYTES)]))
            return
        line = buf[start:end]
        if line and not line.isspace():
            events.append(Frame(line))

    def _check_pending(self) -> None:
        # One extra byte of slack for a CR that the line end will strip.
        if len(self._buf) > self._max + 1:
            self._discarding = True
            self._head = bytes(self._buf[:HEAD_BYTES])
            self._size = len(self._buf)
            self._last_cr = self._buf[-1] == 0x0D
            self._buf = bytearray()

    def _discard(self, data: bytes, events: list[FramingEvent]) -> bytes:
        """Drop bytes of the oversized line; return what follows its newline."""
        nl = data.find(b"\n")
        end = len(data) if nl < 0 else nl
        if len(self._head) < HEAD_BYTES:
            self._head += data[: min(end, HEAD_BYTES - len(self._head))]
        self._size += end
        if end:
            self._last_cr = data[end - 1] == 0x0D
        if nl < 0:
            return b""
        size = self._size - 1 if self._last_cr else self._size
        events.append(Oversized(size, self._head[:size]))
        self._discarding, self._head, self._size = False, b"", 0
        return data[nl + 1 :]


_HEADER_END = re.compile(rb"\n\r?\n")
_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
# A complete or partial header section: zero or more "name: value" lines, then maybe
# the start of another (or the CR of the blank line). Anything else is not a header.
_HEADER_PREFIX = re.compile(
    rb"(?:%s[ \t]*:[^\n]*\n)*(?:%s(?:[ \t]*:[^\n]*)?|\r)?" % (_TOKEN, _TOKEN)
)
_RESYNC = re.compile(rb"content-length:", re.IGNORECASE)
_SEPARATORS = re.compile(rb"[ \t\r\n]*")
_RESYNC_KEEP_BYTES = len(b"content-length:") - 1
_TRUNCATED = "stream ended inside a message"
_MAX_LENGTH_DIGITS = 18


class ContentLengthDecoder:
    """LSP-style frames: ``Content-Length: N`` (and other headers), a blank line, N bytes.

    Junk, or a header block without a usable ``Content-Length``, is skipped up to the
    next ``Content-Length:`` (any case) and reported as one :class:`Garbage` event per
    run of junk, when the run ends (or at end of stream).
    """

    def __init__(
        self,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_header_bytes: int = MAX_HEADER_BYTES,
    ) -> None:
        self._max = max_message_bytes
        self._max_header = max_header_bytes
        self._buf = bytearray()
        self._body_left = -1  # >= 0 while inside a body of that many more bytes
        self._draining = False  # that body is oversized: drop it as it arrives
        self._size = 0  # the length of the body being drained
        self._head = b""
        self._junk_reason = ""  # non-empty while skipping junk
        self._junk_bytes = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes held in memory for the current incomplete message."""
        return len(self._buf) + len(self._head)

    def feed(self, data: bytes) -> list[FramingEvent]:
        """Take the bytes of one read; return the events they complete, in order."""
        events: list[FramingEvent] = []
        buf = self._buf
        buf += data
        pos = 0
        while True:
            if self._body_left >= 0:
                new_pos = self._body(buf, pos, events)
            elif self._junk_reason:
                new_pos = self._resync(buf, pos, events)
            else:
                pos = _SEPARATORS.match(buf, pos).end()  # whitespace between frames
                new_pos = self._header(buf, pos) if pos < len(buf) else None
            if new_pos is None:
                break
            pos = new_pos
        del buf[:pos]
        return events

    def feed_eof(self) -> list[FramingEvent]:
        """The stream ended: report an unfinished message or junk as garbage."""
        events: list[FramingEvent] = []
        if self._junk_reason:
            events.append(Garbage(self._junk_reason, self._junk_bytes + len(self._buf)))
        elif self._draining:
            events.append(Garbage(_TRUNCATED, self._size - self._body_left))
        elif self._body_left >= 0 or self._buf.strip():
            events.append(Garbage(_TRUNCATED, len(self._buf)))
        self._buf = bytearray()
        self._body_left, self._draining, self._head = -1, False, b""
        self._junk_reason, self._junk_bytes = "", 0
        return events

    def _body(self, buf: bytearray, pos: int, events: list[FramingEvent]) -> int | None:
        left = self._body_left
        if not self._draining:
            if len(buf) - pos < left:
                return None  # wait for the rest of the body
            with memoryview(buf) as view:
                events.append(Frame(bytes(view[pos : pos + left])))
            self._body_left = -1
            return pos + left
        if pos == len(buf):
            return None
        end = min(pos + left, len(buf))
        if len(self._head) < HEAD_BYTES:
            self._head += buf[pos : min(end, pos + HEAD_BYTES - len(self._head))]
        self._body_left -= end - pos
        if self._body_left == 0:
            events.append(Oversized(self._size, self._head))
            self._body_left, self._draining, self._head = -1, False, b""
        return end

    def _header(self, buf: bytearray, pos: int) -> int | None:
        """Read the header block at ``pos``: return where its body starts, or None to wait."""
        limit = pos + self._max_header
        m = _HEADER_END.search(buf, pos, limit + 3)
        section = bytes(buf[pos : m.start() if m else limit + 1])
        if _HEADER_PREFIX.fullmatch(section) is None:
            return self._junk(pos, "bytes outside a Content-Length frame")
        if m is None:
            if len(buf) > limit:
                return self._junk(pos, "header block too long")
            return None
        length = None
        for line in section.split(b"\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() != b"content-length":
                continue
            value = value.strip()
            if not value.isdigit() or len(value) > _MAX_LENGTH_DIGITS:
                return self._bad_block(buf, pos, m.end(), "invalid Content-Length")
            if length is not None and int(value) != length:
                return self._bad_block(buf, pos, m.end(), "conflicting Content-Length headers")
            length = int(value)
        if length is None:
            return self._bad_block(buf, pos, m.end(), "header block without Content-Length")
        self._body_left = self._size = length
        self._draining = length > self._max
        return m.end()

    def _junk(self, pos: int, reason: str) -> int:
        # Look for the next "Content-Length:" after the first byte, so that a bad block
        # starting with one is not found again.
        self._junk_reason, self._junk_bytes = reason, 1
        return pos + 1

    def _bad_block(self, buf: bytearray, pos: int, end: int, reason: str) -> int:
        """Skip the complete but unusable header block ``buf[pos:end]``.

        A "Content-Length:" glued mid-line to junk (``123Content-Length: 5``) starts a
        real frame, so resume there; one at the start of a line belongs to this block.
        """
        for m in _RESYNC.finditer(buf, pos + 1, end):
            if buf[m.start() - 1] != 0x0A:
                end = m.start()
                break
        self._junk_reason, self._junk_bytes = reason, end - pos
        return end

    def _resync(self, buf: bytearray, pos: int, events: list[FramingEvent]) -> int | None:
        m = _RESYNC.search(buf, pos)
        if m is None:
            # Keep a tail that may be the start of a "Content-Length:" split by the read.
            end = max(pos, len(buf) - _RESYNC_KEEP_BYTES)
            self._junk_bytes += end - pos
            return end if end > pos else None
        events.append(Garbage(self._junk_reason, self._junk_bytes + m.start() - pos))
        self._junk_reason, self._junk_bytes = "", 0
        return m.start()


def detect_framing(prefix: bytes) -> Framing | None:
    """Which framing a stream uses, from its first bytes; None means "need more"."""
    rest = prefix.lstrip(b" \t\r\n")
    if not rest:
        return None
    low = rest[:15].lower()
    for header in (b"content-length:", b"content-type:"):
        if low.startswith(header):
            return "content-length"
        if header.startswith(low):
            return None
    return "ndjson"


class AutoDecoder:
    """Detects the framing from the first bytes, then decodes with the matching decoder.

    ``framing`` stays None until known, so a server can answer in the peer's framing.
    """

    def __init__(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._max = max_message_bytes
        self._prefix = b""
        self._decoder: NdjsonDecoder | ContentLengthDecoder | None = None
        self.framing: Framing | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes held in memory for the current incomplete message."""
        return self._decoder.pending_bytes if self._decoder else len(self._prefix)

    def feed(self, data: bytes) -> list[FramingEvent]:
        """Take the bytes of one read; return the events they complete, in order."""
        if self._decoder is not None:
            return self._decoder.feed(data)
        self._prefix += data
        framing = detect_framing(self._prefix)
        if framing is None:
            if len(self._prefix) < _DETECT_LIMIT_BYTES:
                return []
            framing = "ndjson"
        return self._start(framing).feed(self._take_prefix())

    def feed_eof(self) -> list[FramingEvent]:
        """The stream ended: flush what the decoder still holds."""
        if self._decoder is None:
            events = self._start("ndjson").feed(self._take_prefix())
            return events + self._decoder.feed_eof()  # type: ignore[union-attr]
        return self._decoder.feed_eof()

    def _start(self, framing: Framing) -> NdjsonDecoder | ContentLengthDecoder:
        self.framing = framing
        if framing == "ndjson":
            self._decoder = NdjsonDecoder(self._max)
        else:
            self._decoder = ContentLengthDecoder(self._max)
        return self._decoder

    def _take_prefix(self) -> bytes:
        prefix, self._prefix = self._prefix, b""
        return prefix


def encode_ndjson(body: bytes) -> bytes:
    """``body`` as one line; it must not contain a newline."""
    if b"\n" in body:
        raise ValueError("an NDJSON message cannot contain a newline byte")
    return body + b"\n"


def encode_content_length(body: bytes) -> bytes:
    """``body`` behind a ``Content-Length`` header."""
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def encoder_for(framing: Framing) -> Callable[[bytes], bytes]:
    """The frame encoder for a framing name, as reported by ``AutoDecoder.framing``."""
    if framing == "ndjson":
        return encode_ndjson
    if framing == "content-length":
        return encode_content_length
    raise ValueError(f"unknown framing {framing!r}")
