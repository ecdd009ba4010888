"""The server's h11 fast path writes exactly the bytes h11 itself would."""

import h11
import pytest

from runtime.httpd.server import _H11, _head

REQUESTS = [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    b"GET / HTTP/1.0\r\n\r\n",
    b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
]
RESPONSES = [
    (200, [(b"content-type", b"application/json"), (b"content-length", b"2")]),
    (404, [(b"date", b"Sun, 22 Nov 2026 05:00:00 GMT"), (b"content-length", b"0")]),
    (204, [(b"content-length", b"0")]),
    (200, [(b"content-type", b"text/event-stream")]),  # no length: chunked or close-delimited
    (200, [(b"content-length", b"2"), (b"connection", b"close")]),
]


@pytest.mark.parametrize("raw", REQUESTS)
@pytest.mark.parametrize("status, headers", RESPONSES)
def test_same_bytes_as_h11(raw, status, headers):
    written = []
    for cls in (h11.Connection, _H11):
        conn = cls(h11.SERVER)
        conn.receive_data(raw)
        while not isinstance(conn.next_event(), h11.EndOfMessage):
            pass
        head = conn.send(_head(status, list(headers)))
        length = dict(headers).get(b"content-length")
        no_body = status in (204, 304) or raw.startswith(b"HEAD")
        body = b"" if no_body else (b"x" * int(length) if length is not None else b"chunk")
        tail = (conn.send(h11.Data(data=body)) if body else b"") + conn.send(h11.EndOfMessage())
        written.append((head, tail, conn.our_state, conn.their_state))
    assert written[0] == written[1]
