"""Signed checkpoints of the audit log, sans-IO: one line each in ``audit.checkpoints``
beside the log, so that a copy of the log can be checked on another machine with tern's
public key alone (``tern audit verify --public-key``).

A line is its signed bytes with the signature spliced in last::

    {"hash":"<64 hex>","kind":"checkpoint","seq":812,"time":1700000000.5,"sig":"<128 hex>"}

- ``checkpoint``: the log reached record ``seq``, whose hash (``runtime.kernel.audit_chain``:
  keyless, so it vouches for every record before it) was ``hash``, at ``time``.
- ``start``: the records up to ``seq`` were rotated away; ``hash`` is that record's (null
  when an older tern's log was taken over and it is not known). The log must begin at
  the record after it: without such a mark, at seq 1.
- ``sig``: Ed25519 (RFC 8032) over ``DOMAIN`` followed by the line without
  ``,"sig":"..."``, with the key in ``audit-signing.key`` (a 32-byte seed, 0600, never
  leaves the state directory; ``tern audit key`` prints its public half).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

import msgspec

from runtime.crypto import ed25519
from runtime.errors import UsageError
from runtime.kernel.audit_chain import Line, Mark, Problem

__all__ = ["DOMAIN", "KINDS", "BadPublicKey", "encode", "format_public", "kind_of", "parse_public", "read", "seq_of"]

DOMAIN = b"tern audit checkpoint 1\n"  # signs nothing but a checkpoint, whatever else the key may sign one day
KINDS = ("checkpoint", "start")
SIG_BYTES = 138  # ,"sig":"  +  128 hex  +  "}
_SIG_KEY = b',"sig":"'
_HEX = frozenset(b"0123456789abcdef")
_encoder = msgspec.json.Encoder(order="sorted")
_decode = msgspec.json.Decoder().decode


class BadPublicKey(UsageError, ValueError):
    """Text that is no Ed25519 public key in a form tern reads."""


def encode(seed: bytes, kind: str, seq: int, link: bytes | None, moment: float) -> bytes:
    """The signed line (with its newline) of one mark."""
    body = _encoder.encode({"hash": link.decode() if link is not None else None, "kind": kind, "seq": seq,
                            "time": round(moment, 6)})
    signature = ed25519.sign(seed, DOMAIN + body).hex().encode()
    return body[:-1] + _SIG_KEY + signature + b'"}\n'


def _fields(line: bytes) -> dict:
    try:
        fields = _decode(line)
    except msgspec.DecodeError:
        return {}
    return fields if isinstance(fields, dict) else {}


def seq_of(line: bytes) -> int | None:
    """The seq a line of the file names, unchecked (for the writer: which marks to keep)."""
    seq = _fields(line).get("seq")
    return seq if type(seq) is int else None


def kind_of(line: bytes) -> str | None:
    """The kind a line of the file names, unchecked."""
    kind = _fields(line).get("kind")
    return kind if kind in KINDS else None


def read(lines: Iterable[Line], public: bytes) -> tuple[list[Mark], list[Problem]]:
    """The marks of the file whose signature ``public`` verifies, and a problem for each
    line that is not one (forged, signed by another key, damaged)."""
    marks: list[Mark] = []
    problems: list[Problem] = []

    def problem(line: Line, kind: str, text: str) -> None:
        problems.append(Problem(line.file, line.number, None, kind, f"{line.file} line {line.number} {text}"))

    for line in lines:
        data = line.data
        if not line.terminated:
            problem(line, "partial", "is a checkpoint cut off before its end: the file was truncated, or its writer "
                                     "stopped mid-write")
            continue
        if len(data) <= SIG_BYTES or data[-SIG_BYTES:-130] != _SIG_KEY or data[-2:] != b'"}' \
                or not _HEX.issuperset(data[-130:-2]):
            problem(line, "unreadable", "is not a checkpoint tern wrote (no signature)")
            continue
        body = data[:-SIG_BYTES] + b"}"
        if not ed25519.verify(public, DOMAIN + body, bytes.fromhex(data[-130:-2].decode())):
            problem(line, "forged", "is a checkpoint not signed by this key: forged, or signed by another tern")
            continue
        try:
            fields = _decode(body)
        except msgspec.DecodeError:
            fields = None
        if not isinstance(fields, dict):
            problem(line, "unreadable", "is signed but is no checkpoint tern wrote")
            continue
        kind, seq, link, moment = fields.get("kind"), fields.get("seq"), fields.get("hash"), fields.get("time")
        if kind not in KINDS or type(seq) is not int or seq < 0 or not isinstance(moment, (int, float)) \
                or not (link is None or (isinstance(link, str) and len(link) == 64 and _HEX.issuperset(link.encode()))):
            problem(line, "unreadable", "is signed but is no checkpoint this tern reads")
            continue
        marks.append(Mark(line.file, line.number, kind, seq, link.encode() if link is not None else None,
                          float(moment)))
    return marks, problems


def format_public(public: bytes) -> str:
    """How tern shows a public key: ``ed25519:`` and its 64 hex digits."""
    return "ed25519:" + public.hex()


def parse_public(text: str) -> bytes:
    """A public key as ``tern audit key`` prints it, or its 32 bytes in hex or base64
    (plain or URL-safe), with or without the ``ed25519:`` prefix."""
    value = text.strip()
    if value.lower().startswith("ed25519:"):
        value = value[len("ed25519:"):]
    raw: bytes | None = None
    if len(value) == 64:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = None
    if raw is None and len(value) in (43, 44):
        try:
            raw = base64.b64decode(value.replace("-", "+").replace("_", "/") + "=" * (-len(value) % 4),
                                   validate=True)
        except (binascii.Error, ValueError):
            raw = None
    if raw is None or len(raw) != 32:
        raise BadPublicKey("not an Ed25519 public key: give it as `tern audit key` prints it (ed25519: and 64 hex "
                           "digits), or a file holding that")
    if not ed25519.is_public_key(raw):
        raise BadPublicKey("not an Ed25519 public key: those 32 bytes are no point of the curve")
    return raw
