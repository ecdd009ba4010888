"""W3C Trace Context: every ``traceparent`` and ``tracestate`` a peer may send, valid or
hostile, and what tern makes of it (a context, or nothing and a trace of its own)."""

from __future__ import annotations

import pytest

from runtime.telemetry.context import (
    MAX_STATE_CHARS,
    SpanContext,
    extract,
    format_traceparent,
    format_tracestate,
    parse_traceparent,
    parse_tracestate,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{SPAN}-01"


@pytest.mark.parametrize(("header", "flags"), [
    (GOOD, 0x01),
    (f"00-{TRACE}-{SPAN}-00", 0x00),
    (f"00-{TRACE}-{SPAN}-03", 0x03),  # sampled + random (level 2)
    (f"00-{TRACE}-{SPAN}-ff", 0x03),  # flags tern does not know are not carried on
    (f"cc-{TRACE}-{SPAN}-01", 0x01),  # a future version: the version-00 fields are read
    (f"cc-{TRACE}-{SPAN}-01-what-the-future-will-be-like", 0x01),
    (f"cc-{TRACE}-{SPAN}-03", 0x01),  # ... and only its sampled bit
    (f"fe-{TRACE}-{SPAN}-00-", 0x00),
])
def test_a_valid_traceparent_is_read(header, flags):
    context = parse_traceparent(header)
    assert context == SpanContext(bytes.fromhex(TRACE), bytes.fromhex(SPAN), flags, remote=True)
    assert context.sampled is bool(flags & 1)


@pytest.mark.parametrize("header", [
    "",
    GOOD[:-1],  # 54 characters
    GOOD + "-",  # version 00 has exactly four fields
    GOOD + "-extra",
    GOOD + "0",
    " " + GOOD,  # no whitespace around it
    GOOD + " ",
    GOOD + "\n",
    f"ff-{TRACE}-{SPAN}-01",  # version ff is invalid
    f"0g-{TRACE}-{SPAN}-01",
    f"0-{TRACE}-{SPAN}-01",
    f"00-{TRACE.upper()}-{SPAN}-01",  # lowercase only
    f"00-{TRACE}-{SPAN.upper()}-01",
    f"00-{TRACE}-{SPAN}-0A",
    f"00-{'0' * 32}-{SPAN}-01",  # all-zero ids are invalid
    f"00-{TRACE}-{'0' * 16}-01",
    f"00-{TRACE[:-1]}-{SPAN}-01",
    f"00-{TRACE}x-{SPAN}-01",
    f"00-{TRACE}-{SPAN}x-01",
    f"00_{TRACE}_{SPAN}_01",
    f"00-{TRACE[:-1]}\u0661-{SPAN}-01",  # a non-ASCII digit
    f"cc-{TRACE}-{SPAN}-01.what",  # a future version: a dash or the end after the flags
    f"cc-{TRACE}-{SPAN}",
    f"00-{TRACE}-{SPAN}-01" + "-x" * 5000,  # oversized
    "00-" + "a" * 1_000_000,
    None, 1, b"00-" + TRACE.encode(), ["00", TRACE], {"traceparent": GOOD},
])
def test_an_invalid_traceparent_is_dropped(header):
    assert parse_traceparent(header) is None


@pytest.mark.parametrize("header", [GOOD, f"00-{TRACE}-{SPAN}-00", f"00-{TRACE}-{SPAN}-03"])
def test_a_version_00_traceparent_formats_back_to_itself(header):
    assert format_traceparent(parse_traceparent(header)) == header


def test_tern_sends_version_00_whatever_it_received():
    assert format_traceparent(parse_traceparent(f"cc-{TRACE}-{SPAN}-01-more")) == GOOD


@pytest.mark.parametrize(("header", "members"), [
    ("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", (("rojo", "00f067aa0ba902b7"), ("congo", "t61rcWkgMzE"))),
    (" rojo=1 ,\tcongo=2\t", (("rojo", "1"), ("congo", "2"))),  # optional whitespace around members
    (",,rojo=1,, ,", (("rojo", "1"),)),  # empty members are allowed
    ("", ()),
    ("fw529a3039@dt=abc", (("fw529a3039@dt", "abc"),)),  # multi-tenant key
    ("0tenant@sys_-*/9=x", (("0tenant@sys_-*/9", "x"),)),
    ("k_-*/9=a b!~", (("k_-*/9", "a b!~"),)),  # spaces inside a value
    ("k= v", (("k", " v"),)),  # ... and at its start
    ("a" + "b" * 255 + "=v", (("a" + "b" * 255, "v"),)),  # the longest simple key
    ("k=" + "v" * 256, (("k", "v" * 256),)),  # the longest value
    (",".join(f"k{i}=v" for i in range(32)), tuple((f"k{i}", "v") for i in range(32))),
])
def test_a_valid_tracestate_is_read(header, members):
    assert parse_tracestate(header) == members


@pytest.mark.parametrize("header", [
    "Rojo=1",  # keys are lowercase
    "rojo=1,rojo=2",  # duplicate key: the whole value is dropped
    "rojo",
    "=1",
    "rojo=",  # a value has at least one character
    "rojo=a=b",
    "rojo=1 x=2",
    "rojo=\x7f",
    "rojo=caf\u00e9",
    "rojo=1\n",
    "ro jo=1",
    "_rojo=1",  # a simple key starts with a letter
    "a" + "b" * 256 + "=v",  # key over 256 characters
    "k=" + "v" * 257,  # value over 256 characters
    "tenant@system123456789=v",  # system id over 14 characters
    "tenant@9sys=v",  # system id starts with a letter
    "a@b@c=v",
    "good=1,Bad=2",  # one bad member drops all of them
    ",".join(f"k{i}=v" for i in range(33)),  # over 32 members
    "k=v," * 100_000,  # oversized
    None, 7, b"rojo=1", ["rojo=1"],
])
def test_an_invalid_tracestate_is_dropped(header):
    assert parse_tracestate(header) == ()


def test_a_long_tracestate_is_cut_the_specs_way():
    """Over 512 characters: members over 128 characters go first, then from the right."""
    long_member = ("big", "x" * 200)
    small = [(f"k{i:02d}", "v" * 36) for i in range(20)]  # 40 characters each, 20 of them
    state = parse_tracestate(format_tracestate((small[0], long_member, *small[1:])))
    assert long_member not in state
    assert state == tuple(small[:12])  # 12 * 40 + 11 commas = 491; a 13th makes 532
    assert len(format_tracestate(state)) <= MAX_STATE_CHARS


def test_extract_reads_the_state_only_beside_a_valid_parent():
    context = extract(GOOD, "rojo=1,congo=2")
    assert context.state == (("rojo", "1"), ("congo", "2")) and context.remote
    assert extract(f"ff-{TRACE}-{SPAN}-01", "rojo=1") is None
    assert extract(GOOD, "Bad=1").state == ()
    assert extract(GOOD).state == ()
    assert format_tracestate(context.state) == "rojo=1,congo=2"
