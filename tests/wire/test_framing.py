import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.wire import framing
from runtime.wire.framing import (
    HEAD_BYTES,
    AutoDecoder,
    ContentLengthDecoder,
    Frame,
    Garbage,
    NdjsonDecoder,
    Oversized,
    detect_framing,
    encode_content_length,
    encode_ndjson,
    encoder_for,
)

MiB = 1024 * 1024


def feed_all(decoder, chunks, eof=False):
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    if eof:
        events.extend(decoder.feed_eof())
    return events


def every_split(data):
    """Each way to cut ``data`` into two reads, plus byte by byte."""
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


def frames(*bodies):
    return [Frame(b) for b in bodies]


def chunked(data, size):
    for i in range(0, len(data), size):
        yield data[i : i + size]


# --- NDJSON --------------------------------------------------------------------------


def test_ndjson_one_message_per_line():
    d = NdjsonDecoder()
    assert d.feed(b'{"a":1}\n') == frames(b'{"a":1}')
    assert d.feed(b'{"b":2}\n{"c":3}\n{"d"') == frames(b'{"b":2}', b'{"c":3}')
    assert d.pending_bytes == 4
    assert d.feed(b":4}\n") == frames(b'{"d":4}')
    assert d.pending_bytes == 0


def test_ndjson_every_split_point():
    data = b'{"id":1}\r\n\n  \n{"id":"\xc3\xa9\xe2\x98\x83"}\n\xff\xfe junk\n{"x":[]}\n'
    expected = frames(b'{"id":1}', b'{"id":"\xc3\xa9\xe2\x98\x83"}', b"\xff\xfe junk", b'{"x":[]}')
    for chunks in every_split(data):
        assert feed_all(NdjsonDecoder(), chunks) == expected, chunks


def test_ndjson_strips_cr_and_skips_blank_lines():
    d = NdjsonDecoder()
    assert d.feed(b"a\r\n\r\n \t \r\n\nb\n\r\n") == frames(b"a", b"b")
    # Only one trailing CR is a line end; inner bytes are kept as they are.
    assert d.feed(b" x \r\r\n") == frames(b" x \r")


def test_ndjson_many_messages_in_one_read():
    lines = [b'{"jsonrpc":"2.0","id":%d,"method":"m"}' % i for i in range(10_000)]
    d = NdjsonDecoder()
    assert d.feed(b"\n".join(lines) + b"\n") == [Frame(line) for line in lines]
    assert d.pending_bytes == 0


def test_ndjson_long_message_in_small_reads_is_not_rescanned():
    body = b'{"data":"' + b"x" * (2 * MiB) + b'"}'
    d = NdjsonDecoder()
    events = feed_all(d, chunked(body + b"\n", 1024))
    assert events == frames(body)


def test_ndjson_non_json_and_non_utf8_lines_pass_through():
    d = NdjsonDecoder()
    assert d.feed(b"hello world\n\x80\x81\xff\n") == frames(b"hello world", b"\x80\x81\xff")


def test_ndjson_accepts_bytearray_and_memoryview():
    d = NdjsonDecoder()
    assert d.feed(bytearray(b"a\nb")) == frames(b"a")
    assert d.feed(memoryview(b"c\n")) == frames(b"bc")
    assert type(d.feed(bytearray(b"x\n"))[0].body) is bytes


def test_ndjson_oversized_is_drained_without_buffering():
    limit = 1 * MiB
    d = NdjsonDecoder(max_message_bytes=limit)
    prefix = b'{"jsonrpc":"2.0","id":77,"method":"tools/call","params":{"blob":"'
    size = 20 * MiB
    big = prefix + b"z" * (size - len(prefix))
    peak = 0
    events = []
    for chunk in chunked(big, 64 * 1024):
        events += d.feed(chunk)
        peak = max(peak, d.pending_bytes)
    assert events == []
    assert peak <= limit + 64 * 1024
    assert d.pending_bytes <= HEAD_BYTES
    events = d.feed(b'\n{"jsonrpc":"2.0","id":78,"method":"ping"}\n')
    assert events == [
        Oversized(size, big[:HEAD_BYTES]),
        Frame(b'{"jsonrpc":"2.0","id":78,"method":"ping"}'),
    ]
    assert d.pending_bytes == 0


def test_ndjson_oversized_in_one_read_and_at_exact_limit():
    d = NdjsonDecoder(max_message_bytes=10)
    assert d.feed(b"0123456789\n01234567890\nok\n") == [
        Frame(b"0123456789"),
        Oversized(11, b"01234567890"),
        Frame(b"ok"),
    ]
    # The CR of a CRLF does not count against the limit.
    assert d.feed(b"0123456789\r\n") == frames(b"0123456789")


def test_ndjson_oversized_with_crlf_split_reads():
    d = NdjsonDecoder(max_message_bytes=10)
    events = feed_all(d, [b"x" * 30, b"y" * 5 + b"\r", b"\nnext\r\n"])
    assert events == [Oversized(35, b"x" * 30 + b"y" * 5), Frame(b"next")]


def test_ndjson_oversized_every_split_point():
    data = b"a" * 40 + b"\nsmall\n" + b"b" * 15 + b"\r\nend\n"
    expected = [Oversized(40, b"a" * 40), Frame(b"small"), Oversized(15, b"b" * 15), Frame(b"end")]
    for chunks in every_split(data):
        assert feed_all(NdjsonDecoder(max_message_bytes=12), chunks) == expected, chunks


def test_ndjson_oversized_head_is_capped():
    d = NdjsonDecoder(max_message_bytes=100)
    events = feed_all(d, [b"q" * 3000, b"r" * 3000, b"s" * 10, b"\n"])
    assert events == [Oversized(6010, (b"q" * 3000 + b"r" * 3000)[:HEAD_BYTES])]


def test_ndjson_feed_eof_flushes_last_line():
    d = NdjsonDecoder()
    assert d.feed(b'{"a":1}\n{"b"') == frames(b'{"a":1}')
    assert d.feed_eof() == frames(b'{"b"')
    assert d.feed_eof() == []
    d = NdjsonDecoder(max_message_bytes=4)
    assert d.feed(b"0123456789") == []
    assert d.feed_eof() == [Oversized(10, b"0123456789")]
    assert NdjsonDecoder().feed_eof() == []


# --- Content-Length ------------------------------------------------------------------


def test_content_length_basic_and_pending():
    d = ContentLengthDecoder()
    assert d.feed(b"Content-Length: 7\r\n\r\n{\"a\":1}") == frames(b'{"a":1}')
    assert d.feed(b"Content-Length: 2\r\n\r\n[") == []
    assert d.pending_bytes == 1
    assert d.feed(b"]") == frames(b"[]")
    assert d.pending_bytes == 0


def test_content_length_other_headers_and_case():
    d = ContentLengthDecoder()
    data = (
        b"content-type: application/vscode-jsonrpc; charset=utf-8\r\n"
        b"CONTENT-LENGTH:3\r\n\r\nabc"
        b"X-Other: 1\r\ncontent-length :  2 \r\n\r\nde"
    )
    assert d.feed(data) == frames(b"abc", b"de")


def test_content_length_bare_lf_terminators():
    d = ContentLengthDecoder()
    assert d.feed(b"Content-Length: 3\n\nabcContent-Length: 1\r\n\nz") == frames(b"abc", b"z")


def test_content_length_body_may_contain_anything():
    body = b"Content-Length: 5\r\n\r\n\n\n\xff\x00"
    d = ContentLengthDecoder()
    assert d.feed(encode_content_length(body) * 2) == frames(body, body)


def test_content_length_whitespace_between_frames_is_not_garbage():
    d = ContentLengthDecoder()
    assert d.feed(b"\r\n\r\n  Content-Length: 1\r\n\r\na\r\n\nContent-Length: 1\r\n\r\nb") == frames(
        b"a", b"b"
    )


def test_content_length_zero():
    d = ContentLengthDecoder()
    assert d.feed(b"Content-Length: 0\r\n\r\nContent-Length: 1\r\n\r\nx") == frames(b"", b"x")


def test_content_length_every_split_point():
    data = (
        b"Content-Length: 12\r\n\r\n{\"\xc3\xa9\":\"\xe2\x98\x83\"}"
        b"junk}Content-Length: 2\r\nContent-Type: x\r\n\r\n{}"
        b"Content-Length: 3\n\n[1]"
    )
    expected = [
        Frame(b'{"\xc3\xa9":"\xe2\x98\x83"}'),
        Garbage("bytes outside a Content-Length frame", 5),
        Frame(b"{}"),
        Frame(b"[1]"),
    ]
    for chunks in every_split(data):
        assert feed_all(ContentLengthDecoder(), chunks) == expected, chunks


@pytest.mark.parametrize(
    ("header", "reason"),
    [
        (b"Content-Length: -5", "invalid Content-Length"),
        (b"Content-Length: abc", "invalid Content-Length"),
        (b"Content-Length: ", "invalid Content-Length"),
        (b"Content-Length: 1.5", "invalid Content-Length"),
        (b"Content-Length: +3", "invalid Content-Length"),
        (b"Content-Length: 0x10", "invalid Content-Length"),
        (b"Content-Length: 99999999999999999999", "invalid Content-Length"),
        (b"Content-Length: 3\r\nContent-Length: 4", "conflicting Content-Length headers"),
        (b"Content-Type: text/plain", "header block without Content-Length"),
    ],
)
def test_content_length_bad_header_is_garbage_and_resyncs(header, reason):
    bad = header + b"\r\n\r\nxyz"
    good = b"Content-Length: 2\r\n\r\nok"
    for chunks in every_split(bad + good):
        events = feed_all(ContentLengthDecoder(), chunks)
        assert events == [Garbage(reason, len(bad)), Frame(b"ok")], chunks


def test_content_length_duplicate_equal_headers_are_fine():
    d = ContentLengthDecoder()
    assert d.feed(b"Content-Length: 2\r\ncontent-length: 2\r\n\r\nhi") == frames(b"hi")


def test_content_length_junk_before_first_header():
    d = ContentLengthDecoder()
    events = d.feed(b'{"jsonrpc":"2.0"}\nContent-Length: 1\r\n\r\n1')
    assert events == [Garbage("bytes outside a Content-Length frame", 18), Frame(b"1")]


def test_content_length_junk_is_reported_when_the_run_ends():
    d = ContentLengthDecoder()
    assert d.feed(b"{garbage") == []
    assert d.feed(b"more garbage" * 1000) == []
    assert d.pending_bytes < 20
    assert d.feed(b"conTENT-length: 1\r\n\r\n!") == [
        Garbage("bytes outside a Content-Length frame", 8 + 12000),
        Frame(b"!"),
    ]


def test_content_length_resync_token_split_across_reads():
    d = ContentLengthDecoder()
    events = feed_all(d, [b"{xxxContent-Len", b"gth: 2\r\n\r\nok"])
    assert events == [Garbage("bytes outside a Content-Length frame", 4), Frame(b"ok")]


def test_content_length_glued_to_token_junk():
    # "123Content-Length" reads as one header name until the block ends; the real
    # header glued mid-line is still found.
    for chunks in every_split(b"123Content-Length: 2\r\n\r\nokContent-Length: 1\r\n\r\n!"):
        events = feed_all(ContentLengthDecoder(), chunks)
        assert events == [
            Garbage("header block without Content-Length", 3),
            Frame(b"ok"),
            Frame(b"!"),
        ], chunks


def test_content_length_header_too_long():
    d = ContentLengthDecoder(max_header_bytes=100)
    events = d.feed(b"Content-Length: 2\r\nX-Pad: " + b"p" * 200)
    assert events == []
    assert d.pending_bytes < 20
    events = d.feed(b"\r\n\r\nzzContent-Length: 2\r\n\r\nok")
    assert events == [Garbage("header block too long", 19 + 7 + 200 + 6), Frame(b"ok")]


def test_content_length_header_without_terminator_is_bounded():
    d = ContentLengthDecoder(max_header_bytes=8 * 1024)
    for _ in range(100):
        d.feed(b"X-A: " + b"a" * 1000 + b"\r\n")
        assert d.pending_bytes <= 8 * 1024 + 1010


def test_content_length_oversized_is_drained():
    limit = 1 * MiB
    size = 20 * MiB
    d = ContentLengthDecoder(max_message_bytes=limit)
    prefix = b'{"jsonrpc":"2.0","id":"big","method":"m","params":"'
    body = prefix + b"w" * (size - len(prefix) - 2) + b'"}'
    assert len(body) == size
    assert d.feed(b"Content-Length: %d\r\n\r\n" % size) == []
    events = []
    for chunk in chunked(body, 64 * 1024):
        events += d.feed(chunk)
        assert d.pending_bytes <= HEAD_BYTES
    events += d.feed(b"Content-Length: 4\r\n\r\nnext")
    assert events == [Oversized(size, body[:HEAD_BYTES]), Frame(b"next")]
    assert d.pending_bytes == 0


def test_content_length_oversized_every_split_point():
    data = b"Content-Length: 20\r\n\r\n" + b"0123456789" * 2 + b"Content-Length: 1\r\n\r\nk"
    expected = [Oversized(20, b"0123456789" * 2), Frame(b"k")]
    for chunks in every_split(data):
        assert feed_all(ContentLengthDecoder(max_message_bytes=10), chunks) == expected


def test_content_length_feed_eof():
    d = ContentLengthDecoder()
    assert d.feed(b"Content-Length: 10\r\n\r\nabc") == []
    assert d.feed_eof() == [Garbage("stream ended inside a message", 3)]
    assert d.feed(b"Content-Length: 1\r\n\r\nx") == frames(b"x")
    assert d.feed(b"Content-Le") == []
    assert d.feed_eof() == [Garbage("stream ended inside a message", 10)]
    assert d.feed(b"\r\n\n") == []
    assert d.feed_eof() == []
    assert d.feed(b"junk") == []  # could still be a header name
    assert d.feed_eof() == [Garbage("stream ended inside a message", 4)]
    assert d.feed(b"{junk") == []
    assert d.feed_eof() == [Garbage("bytes outside a Content-Length frame", 5)]
    d = ContentLengthDecoder(max_message_bytes=2)
    assert d.feed(b"Content-Length: 10\r\n\r\nabcd") == []
    assert d.feed_eof() == [Garbage("stream ended inside a message", 4)]


# --- detection -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prefix", "expected"),
    [
        (b"", None),
        (b"  \r\n", None),
        (b"c", None),
        (b"C", None),
        (b"Content-", None),
        (b"content-l", None),
        (b"Content-Length", None),
        (b"Content-Length:", "content-length"),
        (b"content-length: 12\r\n", "content-length"),
        (b"\r\n CONTENT-TYPE: x", "content-length"),
        (b"Content-Type", None),
        (b"Content-T", None),
        (b"{", "ndjson"),
        (b"[", "ndjson"),
        (b" \n{", "ndjson"),
        (b"co{", "ndjson"),
        (b"Content-Lengthy", "ndjson"),
        (b"Content-Length :", "ndjson"),
        (b"hello", "ndjson"),
        (b"\xff", "ndjson"),
    ],
)
def test_detect_framing(prefix, expected):
    assert detect_framing(prefix) == expected


def test_detect_framing_on_every_prefix():
    header = b"Content-Length: 2\r\n\r\n{}"
    for i in range(len(header) + 1):
        assert detect_framing(header[:i]) == (None if i < 15 else "content-length")
    assert [detect_framing(b'{"a":1}'[:i]) for i in range(3)] == [None, "ndjson", "ndjson"]


@pytest.mark.parametrize(
    ("data", "framing", "expected"),
    [
        (b'{"id":1}\n{"id":2}\n', "ndjson", frames(b'{"id":1}', b'{"id":2}')),
        (b"Content-Length: 2\r\n\r\n{}Content-Length: 2\r\n\r\n[]", "content-length", frames(b"{}", b"[]")),
        (b"\r\n\r\ncontent-type: a\r\nContent-Length: 1\r\n\r\nx", "content-length", frames(b"x")),
        (b"content\n{}\n", "ndjson", frames(b"content", b"{}")),
    ],
)
def test_auto_decoder_every_split_point(data, framing, expected):
    for chunks in every_split(data):
        d = AutoDecoder()
        assert feed_all(d, chunks) == expected
        assert d.framing == framing


def test_auto_decoder_reports_none_until_known():
    d = AutoDecoder()
    assert d.framing is None
    assert d.feed(b"Conte") == []
    assert d.framing is None
    assert d.pending_bytes == 5
    assert d.feed(b"nt-Length: 1\r\n\r\n!") == frames(b"!")
    assert d.framing == "content-length"
    assert encoder_for(d.framing)(b"ok") == b"Content-Length: 2\r\n\r\nok"


def test_auto_decoder_gives_up_after_64_bytes():
    d = AutoDecoder()
    assert d.feed(b" " * 63) == []
    assert d.framing is None
    assert d.feed(b"\n") == []
    assert d.framing == "ndjson"
    assert d.feed(b'{"a":1}\n') == frames(b'{"a":1}')


def test_auto_decoder_eof_before_decision():
    d = AutoDecoder()
    assert d.feed(b"Content") == []
    assert d.feed_eof() == frames(b"Content")
    assert d.framing == "ndjson"
    d = AutoDecoder()
    assert d.feed(b'{"a"') == []
    assert d.feed_eof() == frames(b'{"a"')


def test_auto_decoder_passes_the_limit_on():
    d = AutoDecoder(max_message_bytes=4)
    assert d.feed(b"0123456789\nab\n") == [Oversized(10, b"0123456789"), Frame(b"ab")]


# --- encoders ------------------------------------------------------------------------


def test_encoders():
    assert encode_ndjson(b'{"a":1}') == b'{"a":1}\n'
    assert encode_content_length(b"") == b"Content-Length: 0\r\n\r\n"
    assert encode_content_length("é".encode()) == b"Content-Length: 2\r\n\r\n\xc3\xa9"
    assert encoder_for("ndjson") is encode_ndjson
    assert encoder_for("content-length") is encode_content_length
    with pytest.raises(ValueError):
        encoder_for("xml")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        encode_ndjson(b"a\nb")


# --- properties ----------------------------------------------------------------------

_ndjson_body = st.binary(min_size=1, max_size=60).filter(
    lambda b: b"\n" not in b and not b.rstrip(b"\r").isspace() and b.rstrip(b"\r") and b[-1:] != b"\r"
)


@st.composite
def chunkings(draw, data):
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    points = [0, *cuts, len(data)]
    return [data[a:b] for a, b in zip(points, points[1:])]


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(_ndjson_body, max_size=12), st.booleans())
def test_ndjson_property_any_chunking(data, bodies, crlf):
    end = b"\r\n" if crlf else b"\n"
    stream = b"".join(body + end for body in bodies)
    chunks = data.draw(chunkings(stream))
    assert feed_all(NdjsonDecoder(), chunks) == frames(*bodies)
    # Auto-detection reads the first line: one that starts like an LSP header is
    # (rightly) taken as Content-Length framing. Real NDJSON lines are JSON objects.
    first = bodies[0].lstrip().lower() if bodies else b""
    if not any(first.startswith(h[: len(first)]) or first.startswith(h)
               for h in (b"content-length:", b"content-type:")):
        assert feed_all(AutoDecoder(), chunks) == frames(*bodies)


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(st.binary(max_size=60), max_size=12))
def test_content_length_property_any_chunking(data, bodies):
    stream = b"".join(encode_content_length(body) for body in bodies)
    chunks = data.draw(chunkings(stream))
    assert feed_all(ContentLengthDecoder(), chunks, eof=True) == frames(*bodies)
    if bodies:
        d = AutoDecoder()
        assert feed_all(d, chunks) == frames(*bodies)
        assert d.framing == "content-length"


@settings(max_examples=200, deadline=None)
@given(st.data(), st.lists(st.binary(max_size=40), max_size=8), st.binary(max_size=40))
def test_content_length_property_junk_never_hides_later_frames(data, bodies, junk):
    # Junk (without newline or colon, so no header of its own), then good frames: every frame still arrives.
    junk = junk.replace(b"\n", b"").replace(b":", b"")
    stream = junk + b"".join(encode_content_length(body) for body in bodies)
    chunks = data.draw(chunkings(stream))
    events = feed_all(ContentLengthDecoder(), chunks, eof=True)
    assert [e for e in events if isinstance(e, Frame)] == frames(*bodies)
    garbage = [e for e in events if isinstance(e, Garbage)]
    assert sum(g.size_bytes for g in garbage) <= len(junk)


@settings(max_examples=100, deadline=None)
@given(st.data(), st.binary(max_size=300))
def test_decoders_never_fail_on_arbitrary_bytes(data, stream):
    chunks = data.draw(chunkings(stream))
    for decoder in (NdjsonDecoder(32), ContentLengthDecoder(32, 64), AutoDecoder(32)):
        events = feed_all(decoder, chunks, eof=True)
        assert all(isinstance(e, (Frame, Oversized, Garbage)) for e in events)
        assert decoder.pending_bytes == 0


def test_module_exports():
    assert set(framing.__all__) <= set(dir(framing))
