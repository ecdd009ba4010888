"""RFC 8785 JSON Canonicalization Scheme: the one byte string a JSON value signs as.

Keys sort by UTF-16 code units, strings escape only what JSON must (``"``, ``\\``,
C0 controls) and stay UTF-8 otherwise, numbers print as ECMAScript's
``Number::toString`` does (shortest round-trip digits; exponent form below 1e-6 and
from 1e21). Integers beyond 2**53 have no interoperable form and are refused, as
are NaN, infinities, non-string keys, unpaired surrogates and nesting past
:data:`MAX_DEPTH`."""

from __future__ import annotations

import math
import re
from typing import Any

from runtime.errors import ProtocolError

__all__ = ["canonicalize", "CanonicalError", "MAX_DEPTH"]

MAX_DEPTH = 64
_SAFE_INT = 2**53 - 1
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_ESCAPES.update({chr(c): f"\\u{c:04x}" for c in range(0x20) if chr(c) not in _ESCAPES})
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


class CanonicalError(ProtocolError, ValueError):
    """The value has no RFC 8785 form."""


def canonicalize(value: Any) -> bytes:
    """The canonical UTF-8 bytes of a JSON value (dict, list, str, int, float, bool, None)."""
    out: list[str] = []
    _write(value, out, 0)
    try:
        return "".join(out).encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalError("a string holds an unpaired surrogate") from None


def _write(value: Any, out: list[str], depth: int) -> None:
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, str):
        out.append(_string(value))
    elif isinstance(value, (int, float)):
        out.append(number(value))
    elif isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise CanonicalError(f"nested deeper than {MAX_DEPTH}")
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _write(item, out, depth + 1)
        out.append("]")
    elif isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise CanonicalError(f"nested deeper than {MAX_DEPTH}")
        if not all(isinstance(key, str) for key in value):
            raise CanonicalError("an object key is not a string")
        out.append("{")
        for i, key in enumerate(sorted(value, key=_utf16)):
            if i:
                out.append(",")
            out.append(_string(key))
            out.append(":")
            _write(value[key], out, depth + 1)
        out.append("}")
    else:
        raise CanonicalError(f"{type(value).__name__} is not a JSON value")


def _utf16(key: str) -> bytes:
    try:
        return key.encode("utf-16-be")
    except UnicodeEncodeError:
        raise CanonicalError("a key holds an unpaired surrogate") from None


def _string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES[m.group()], text) + '"'


def number(value: int | float) -> str:
    """ECMAScript ``Number::toString`` of a double (RFC 8785 §3.2.2.3)."""
    if isinstance(value, int):
        if abs(value) > _SAFE_INT:
            raise CanonicalError(f"the integer {value} is outside ±2**53 (no interoperable JSON form)")
        return str(value)
    if not math.isfinite(value):
        raise CanonicalError("NaN and infinities have no JSON form")
    if value == 0:
        return "0"
    mantissa, _, exponent = repr(abs(value)).partition("e")  # repr: the shortest digits that round-trip
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    n = len(whole) + int(exponent or 0) - (len(whole + fraction) - len(digits))  # value = 0.DIGITS * 10**n
    digits = digits.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * -n + digits
    else:
        e = n - 1
        text = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return ("-" if value < 0 else "") + text
