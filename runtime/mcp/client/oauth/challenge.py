"""Reading a ``WWW-Authenticate`` header (RFC 9110 section 11.6.1, RFC 6750 section 3).

Only the ``Bearer`` challenge, or a ``DPoP`` one (RFC 9449 section 7.1), matters to
MCP: its ``resource_metadata`` (RFC 9728 section 5.1) says where the server's metadata
is, ``scope`` what to ask for, ``error="insufficient_scope"`` that a wider token is
needed (step-up) and ``error="use_dpop_nonce"`` that a proof needs the server's nonce.
"""

from __future__ import annotations

import re

import msgspec

__all__ = ["Challenge", "parse_www_authenticate"]

MAX_HEADER = 8192
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SPACE = re.compile(r"[ \t]*")
_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_BARE = re.compile(r"[^,\s]*")


class Challenge(msgspec.Struct, frozen=True):
    """The ``Bearer`` (or ``DPoP``) challenge of a 401 or 403 (all fields empty if there is none)."""

    scheme: str = ""
    resource_metadata: str = ""
    scope: str = ""
    error: str = ""
    error_description: str = ""

    @property
    def insufficient_scope(self) -> bool:
        return self.error == "insufficient_scope"

    @property
    def use_dpop_nonce(self) -> bool:
        return self.error == "use_dpop_nonce"


def _quoted(text: str, i: int) -> tuple[str, int]:
    out: list[str] = []
    i += 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c == '"':
            return "".join(out), i + 1
        out.append(c)
        i += 1
    return "".join(out), i  # unterminated: take what there is


def _challenges(text: str) -> list[tuple[str, dict[str, str]]]:
    """Every challenge in the header: ``[(scheme, {param: value})]``. Lenient: a
    malformed part ends the parse, what was read so far is kept."""
    found: list[tuple[str, dict[str, str]]] = []
    i = 0
    n = len(text)
    while i < n:
        i = _SPACE.match(text, i).end()
        while i < n and text[i] == ",":
            i = _SPACE.match(text, i + 1).end()
        m = _TOKEN.match(text, i)
        if not m:
            break
        scheme, i = m.group(), m.end()
        params: dict[str, str] = {}
        found.append((scheme.lower(), params))
        first = True  # a token68 (no "=") may only follow the scheme itself
        while i < n:
            j = _SPACE.match(text, i).end()
            if j < n and text[j] == ",":
                i, first = j + 1, False
                continue
            m = _TOKEN.match(text, j)
            if not m:
                i = j
                break
            k = _SPACE.match(text, m.end()).end()
            if k >= n or text[k] != "=" or (k + 1 < n and text[k + 1] == "=" and first):
                if first and k < n and text[k] not in ",":
                    i = _TOKEN68.match(text, j).end()
                    first = False
                    continue
                i = j  # the next challenge's scheme
                break
            first = False
            name = m.group().lower()
            k = _SPACE.match(text, k + 1).end()
            if k < n and text[k] == '"':
                value, i = _quoted(text, k)
            else:
                v = _BARE.match(text, k)
                value, i = v.group(), v.end()
            params.setdefault(name, value)
    return found


def parse_www_authenticate(values: list[str] | str | None) -> Challenge:
    """The ``Bearer`` challenge among the header's values (several headers or one
    comma-joined), else the ``DPoP`` one. Bounded: a header over 8 KiB is cut."""
    if not values:
        return Challenge()
    text = ", ".join(values) if isinstance(values, list) else values
    found = dict(reversed(_challenges(text[:MAX_HEADER])))  # the first of each scheme
    scheme = "bearer" if "bearer" in found else "dpop" if "dpop" in found else ""
    if not scheme:
        return Challenge()
    params = found[scheme]
    return Challenge(scheme=scheme, resource_metadata=params.get("resource_metadata", ""),
                     scope=params.get("scope", ""), error=params.get("error", ""),
                     error_description=params.get("error_description", ""))
