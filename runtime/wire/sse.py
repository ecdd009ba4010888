"""Server-Sent Events (text/event-stream), sans-IO: encode events, decode a stream.

MCP's Streamable HTTP and legacy HTTP+SSE transports and A2A streaming all answer
with event streams. The decoder follows the WHATWG parsing rules
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation)
so it reads any conforming server, and bounds each event so a peer cannot make it
buffer without limit.

Lines are split on bytes (CR and LF never occur inside a UTF-8 sequence) and each
complete line is decoded on its own, so a character split across reads decodes right
and sizes are counted in bytes.
"""

from __future__ import annotations

import re
import msgspec

from runtime.errors import ProtocolError

__all__ = [
    "MAX_EVENT_BYTES",
    "ServerSentEvent",
    "SseDecoder",
    "encode_event",
    "encode_comment",
]

MAX_EVENT_BYTES = 10 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_TEXT_LINE_END = re.compile(r"\r\n|\r|\n")


class ServerSentEvent(msgspec.Struct, frozen=True):
    """One dispatched event.

    ``id`` is the stream's last event id when the event was dispatched (ids persist
    across events), None while it is empty. ``retry`` is the reconnection time in
    milliseconds if this event's block set one.
    """

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_event(
    data: str,
    *,
    event: str | None = None,
    id: str | None = None,
    retry: int | None = None,
) -> bytes:
    """One event block; multi-line ``data`` becomes several ``data:`` lines."""
    lines = []
    if event is not None:
        if "\r" in event or "\n" in event:
            raise ValueError("an SSE event type cannot contain a line break")
        lines.append(f"event: {event}\n")
    if id is not None:
        if "\r" in id or "\n" in id or "\0" in id:
            raise ValueError("an SSE event id cannot contain a line break or NUL")
        lines.append(f"id: {id}\n")
    if retry is not None:
        if type(retry) is not int or retry < 0:
            raise ValueError("an SSE retry must be a non-negative integer")
        lines.append(f"retry: {retry}\n")
    if "\r" in data or "\n" in data:
        lines.extend(f"data: {line}\n" for line in _TEXT_LINE_END.split(data))
    else:
        lines.append(f"data: {data}\n")
    lines.append("\n")
    return "".join(lines).encode()


def encode_comment(text: str = "") -> bytes:
    """A comment block (``: text``), which clients ignore: a keep-alive."""
    if "\r" in text or "\n" in text:
        raise ValueError("an SSE comment cannot contain a line break")
    return f": {text}\n\n".encode()


class SseDecoder:
    """Incremental event-stream parser: ``feed(bytes) -> [ServerSentEvent]``.

    Raises ``ProtocolError`` when one event (its data so far plus the line being
    read) grows past ``max_event_bytes``; the stream cannot be trusted after that.
    An unfinished event at end of stream is dropped, as the spec says.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._started = False  # the BOM check is done
        self._after_cr = False  # the last chunk ended with CR: a leading LF is not a line
        self._partial: list[bytes] = []  # the line being read, in pieces
        self._partial_bytes = 0
        self._data: list[str] = []
        self._data_bytes = 0
        self._event = ""
        self._retry: int | None = None  # set in the current block
        self.last_event_id = ""
        self.retry: int | None = None

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Take the bytes of one read; return the events they complete, in order."""
        events: list[ServerSentEvent] = []
        if not self._started:
            data = self._strip_bom(data)
        if self._after_cr and data:
            self._after_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        pos = 0
        for m in _LINE_END.finditer(data):
            line = data[pos : m.start()]
            if self._partial:
                self._partial.append(line)
                line = b"".join(self._partial)
                self._partial.clear()
                self._partial_bytes = 0
            self._line(line, events)
            pos = m.end()
        if pos < len(data):
            self._partial.append(data[pos:])
            self._partial_bytes += len(data) - pos
            self._check_size()
        elif data[-1:] == b"\r":
            self._after_cr = True
        return events

    def _strip_bom(self, data: bytes) -> bytes:
        pending = b"".join(self._partial) + data
        if len(pending) < len(_BOM) and _BOM.startswith(pending):
            self._partial = [pending] if pending else []
            self._partial_bytes = len(pending)
            return b""  # could still be a BOM: wait
        self._started = True
        self._partial.clear()
        self._partial_bytes = 0
        return pending[3:] if pending.startswith(_BOM) else pending

    def _check_size(self) -> None:
        if self._data_bytes + self._partial_bytes > self._max:
            raise ProtocolError(
                f"a server-sent event is larger than {self._max} bytes; "
                "the stream was dropped"
            )

    def _line(self, line: bytes, events: list[ServerSentEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[:1] == b":":
            return  # comment
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value.decode("utf-8", "replace"))
            self._data_bytes += len(value) + 1
            self._check_size()
        elif field == b"event":
            self._event = value.decode("utf-8", "replace")
        elif field == b"id":
            if b"\0" not in value:
                self.last_event_id = value.decode("utf-8", "replace")
        elif field == b"retry":
            # At most 18 digits: a longer number is no sensible delay.
            if value.isdigit() and len(value) <= 18:
                self._retry = self.retry = int(value)

    def _dispatch(self, events: list[ServerSentEvent]) -> None:
        if self._data:
            events.append(
                ServerSentEvent(
                    "\n".join(self._data),
                    self._event or "message",
                    self.last_event_id or None,
                    self._retry,
                )
            )
        self._data = []
        self._data_bytes = 0
        self._event = ""
        self._retry = None
