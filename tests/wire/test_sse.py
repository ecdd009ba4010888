import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.errors import ProtocolError
from runtime.wire import sse
from runtime.wire.sse import ServerSentEvent, SseDecoder, encode_comment, encode_event


def decode(*chunks, decoder=None):
    decoder = decoder or SseDecoder()
    events = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    return events


def every_split(data):
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]
    yield [data[i : i + 1] for i in range(len(data))]


# --- encoding ------------------------------------------------------------------------


def test_encode_event_simple():
    assert encode_event("hello") == b"data: hello\n\n"
    assert encode_event("") == b"data: \n\n"


def test_encode_event_all_fields_and_multiline_data():
    out = encode_event("a\nb\r\nc\rd", event="message", id="42", retry=3000)
    assert out == b"event: message\nid: 42\nretry: 3000\ndata: a\ndata: b\ndata: c\ndata: d\n\n"


def test_encode_event_unicode():
    assert encode_event("h\u00e9 \u2603", event="t\u00e9") == "event: t\u00e9\ndata: h\u00e9 \u2603\n\n".encode()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"event": "a\nb"},
        {"event": "a\r"},
        {"id": "1\n2"},
        {"id": "\r"},
        {"id": "a\0b"},
        {"retry": -1},
        {"retry": 1.5},
    ],
)
def test_encode_event_rejects_bad_fields(kwargs):
    with pytest.raises(ValueError):
        encode_event("x", **kwargs)


def test_encode_comment():
    assert encode_comment("keep-alive") == b": keep-alive\n\n"
    assert encode_comment() == b": \n\n"
    with pytest.raises(ValueError):
        encode_comment("a\nb")


# --- decoding ------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_ends(eol):
    data = eol.join([b"event: update", b"data: one", b"data: two", b"", b"data: three", b"", b""])
    assert decode(data) == [
        ServerSentEvent("one\ntwo", "update"),
        ServerSentEvent("three"),
    ]


def test_mixed_line_ends_every_split_point():
    data = b"data: a\r\ndata: b\rdata: c\n\r\ndata: d\r\r"
    expected = [ServerSentEvent("a\nb\nc"), ServerSentEvent("d")]
    for chunks in every_split(data):
        assert decode(*chunks) == expected, chunks


def test_cr_and_lf_split_across_feeds_is_one_line_end():
    d = SseDecoder()
    assert d.feed(b"data: x\r") == []
    # If the LF began a new line, this blank line would not be seen as the second one.
    assert d.feed(b"\ndata: y\r") == []
    assert d.feed(b"\n\r") == [ServerSentEvent("x\ny")]
    assert d.feed(b"") == []
    assert d.feed(b"\n") == []  # LF after the dispatching CR: same line end
    assert d.feed(b"data: z\n\n") == [ServerSentEvent("z")]


def test_space_after_colon_is_removed_once():
    assert decode(b"data:no-space\n\ndata:  two spaces\n\ndata:\n\n") == [
        ServerSentEvent("no-space"),
        ServerSentEvent(" two spaces"),
        ServerSentEvent(""),
    ]


def test_field_without_colon():
    # "data" alone appends an empty line; "event" alone resets the type to message.
    assert decode(b"data\ndata\n\nevent\ndata: x\n\n") == [
        ServerSentEvent("\n"),
        ServerSentEvent("x"),
    ]


def test_comments_and_unknown_fields_are_ignored():
    data = b": hello\n:\nfoo: bar\nDATA: upper\ndata: real\n: mid comment\n\n"
    assert decode(data) == [ServerSentEvent("real")]


def test_blank_line_without_data_dispatches_nothing_but_resets_the_type():
    d = SseDecoder()
    assert d.feed(b"event: first\n\n") == []
    assert d.feed(b"data: x\n\n") == [ServerSentEvent("x", "message")]
    assert d.feed(b": keep-alive\n\n\n\n") == []


def test_empty_event_type_means_message():
    assert decode(b"event:\ndata: x\n\n") == [ServerSentEvent("x", "message")]


def test_id_persists_and_can_be_reset():
    d = SseDecoder()
    events = d.feed(b"id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\nid: 7\n\ndata: d\n\n")
    assert events == [
        ServerSentEvent("a", id="1"),
        ServerSentEvent("b", id="1"),
        ServerSentEvent("c", id=None),
        ServerSentEvent("d", id="7"),
    ]
    assert d.last_event_id == "7"


def test_id_with_nul_is_ignored():
    d = SseDecoder()
    assert d.feed(b"id: 5\n\nid: a\0b\ndata: x\n\n") == [ServerSentEvent("x", id="5")]
    assert d.last_event_id == "5"


def test_retry():
    d = SseDecoder()
    assert d.retry is None
    assert d.feed(b"retry: 1500\n\n") == []
    assert d.retry == 1500
    assert d.feed(b"retry: 12a\nretry: -5\nretry:\nretry: \xd9\xa3\ndata: x\n\n") == [
        ServerSentEvent("x")
    ]
    assert d.retry == 1500
    assert d.feed(b"retry: 20\ndata: y\n\n") == [ServerSentEvent("y", retry=20)]
    assert d.feed(b"data: z\n\n") == [ServerSentEvent("z")]
    assert d.retry == 20


def test_bom_is_stripped_once():
    assert decode(b"\xef\xbb\xbfdata: a\n\n") == [ServerSentEvent("a")]
    for chunks in every_split(b"\xef\xbb\xbfdata: a\n\n"):
        assert decode(*chunks) == [ServerSentEvent("a")], chunks
    # A second BOM is not stripped: it makes the field name unknown.
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\ndata: b\n\n") == [ServerSentEvent("b")]
    # A BOM later in the stream is data.
    assert decode(b"data: x\n\n", b"\xef\xbb\xbfdata: y\n\n") == [ServerSentEvent("x")]


def test_short_stream_that_starts_like_a_bom():
    assert decode(b"\xef", b"\xbb") == []
    assert decode(b"\xef", b"data: a\n\n") == []  # unknown field "\ufffddata"
    assert decode(b"d", b"ata: a\n\n") == [ServerSentEvent("a")]


def test_unicode_split_across_feeds():
    data = "event: \u00e9v\ndata: \u2603 snow \U0001f600\n\n".encode()
    expected = [ServerSentEvent("\u2603 snow \U0001f600", "\u00e9v")]
    for chunks in every_split(data):
        assert decode(*chunks) == expected, chunks


def test_invalid_utf8_is_replaced():
    assert decode(b"data: a\xffb\xe2\x98\n\n") == [ServerSentEvent("a\ufffdb\ufffd")]


def test_unfinished_event_is_not_dispatched():
    d = SseDecoder()
    assert d.feed(b"data: a\n\ndata: b\n") == [ServerSentEvent("a")]
    assert d.feed(b"data: c") == []


def test_many_events_in_one_feed():
    data = b"".join(encode_event(str(i), id=str(i)) for i in range(2000))
    events = decode(data)
    assert [e.data for e in events] == [str(i) for i in range(2000)]
    assert events[-1].id == "1999"


def test_event_size_bound_on_data_lines():
    d = SseDecoder(max_event_bytes=100)
    assert d.feed(b"data: " + b"a" * 60 + b"\n") == []
    with pytest.raises(ProtocolError) as info:
        d.feed(b"data: " + b"b" * 60 + b"\n")
    assert "100 bytes" in str(info.value)


def test_event_size_bound_on_an_unterminated_line():
    d = SseDecoder(max_event_bytes=1000)
    with pytest.raises(ProtocolError):
        for _ in range(100):
            d.feed(b"x" * 64)


def test_event_size_bound_resets_after_dispatch():
    d = SseDecoder(max_event_bytes=100)
    for _ in range(50):
        assert d.feed(b"data: " + b"a" * 80 + b"\n\n") == [ServerSentEvent("a" * 80)]


def test_large_event_in_small_chunks():
    payload = b"q" * (1024 * 1024)
    data = b"data: " + payload + b"\n\n"
    d = SseDecoder()
    events = []
    for i in range(0, len(data), 4096):
        events += d.feed(data[i : i + 4096])
    assert events == [ServerSentEvent(payload.decode())]


# --- properties ----------------------------------------------------------------------

_field_text = st.text(st.characters(blacklist_characters="\r\n\0", blacklist_categories=("Cs",)))


@st.composite
def events(draw):
    data = draw(st.text(st.characters(blacklist_categories=("Cs",))))
    event = draw(st.none() | _field_text.filter(bool))
    id = draw(st.none() | _field_text.filter(bool))
    retry = draw(st.none() | st.integers(0, 10**9))
    return data, event, id, retry


@settings(max_examples=200, deadline=None)
@given(st.lists(events(), max_size=6), st.data())
def test_round_trip_any_chunking(evs, data):
    stream = b"".join(encode_event(d, event=e, id=i, retry=r) for d, e, i, r in evs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    points = [0, *cuts, len(stream)]
    decoded = decode(*(stream[a:b] for a, b in zip(points, points[1:])))
    expected = []
    last_id = None
    for d, e, i, r in evs:
        last_id = i if i is not None else last_id
        # Line ends inside data come back as LF, whichever was sent.
        text = d.replace("\r\n", "\n").replace("\r", "\n")
        expected.append(ServerSentEvent(text, e or "message", last_id, r))
    assert decoded == expected


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=300), st.data())
def test_arbitrary_bytes_never_break_the_decoder(stream, data):
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    points = [0, *cuts, len(stream)]
    whole = decode(stream)
    assert decode(*(stream[a:b] for a, b in zip(points, points[1:]))) == whole
    assert all(isinstance(e, ServerSentEvent) for e in whole)


def test_module_exports():
    assert set(sse.__all__) <= set(dir(sse))
