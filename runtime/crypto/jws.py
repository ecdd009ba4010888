"""JWS (RFC 7515) with a detached payload, as agent cards carry their signatures:
``{protected, signature, header}`` beside the content they sign.

Only ``EdDSA``, ``ES256`` and ``RS256`` exist here; ``none``, HMAC and anything else
are refused before any key is looked at, as is a ``crit`` header (no extension is
understood) and a protected header over :data:`MAX_HEADER` characters. The algorithm
must be the key's own (no RSA key checked as HMAC, no confusion)."""

from __future__ import annotations

from typing import Any

from runtime.crypto import ed25519
from runtime.crypto.jwk import BadKey, PublicKey, SigningKey, b64url, unb64url
from runtime.errors import ProtocolError
from runtime.wire.depth import loads as json_loads
from runtime.wire.jcs import canonicalize

__all__ = ["ALGORITHMS", "BadJws", "protected_header", "verify", "sign", "MAX_HEADER", "MAX_SIGNATURE"]

ALGORITHMS = frozenset({"EdDSA", "ES256", "RS256"})
MAX_HEADER = 4096  # base64url characters of a protected header
MAX_SIGNATURE = 1400  # an RS256 signature with an 8192-bit key is 1366


class BadJws(ProtocolError, ValueError):
    """A signature that cannot be checked; the text says why."""


def protected_header(protected: Any) -> dict[str, Any]:
    """The decoded protected header, checked for what tern refuses outright."""
    try:
        raw = unb64url(protected, "the protected header", MAX_HEADER)
        header = json_loads(raw)
    except BadKey as exc:
        raise BadJws(str(exc)) from None
    except (ValueError, UnicodeDecodeError):
        raise BadJws("the protected header is not JSON") from None
    if not isinstance(header, dict):
        raise BadJws("the protected header is not a JSON object")
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise BadJws(f"the algorithm {str(alg)[:20]!r} is not accepted (tern accepts {', '.join(sorted(ALGORITHMS))})")
    if "crit" in header:
        raise BadJws("the protected header has critical extensions tern does not understand")
    for name in ("kid", "jku", "x5u", "typ"):
        if name in header and not isinstance(header[name], str):
            raise BadJws(f"the protected header's {name} is not a string")
    return header


def verify(key: PublicKey, protected: str, payload: bytes, signature: Any) -> bool:
    """Whether ``signature`` is ``key``'s over ``protected`` and ``payload`` (the header is
    checked first with :func:`protected_header`; its ``alg`` must be the key's)."""
    header = protected_header(protected)
    if header["alg"] != key.alg:
        raise BadJws(f"the signature says {header['alg']} but the key is for {key.alg}")
    try:
        raw = unb64url(signature, "the signature", MAX_SIGNATURE)
    except BadKey as exc:
        raise BadJws(str(exc)) from None
    return key.verify(f"{protected}.{b64url(payload)}".encode("ascii"), raw)


def sign(key: SigningKey, header: dict[str, Any], payload: bytes) -> tuple[str, str]:
    """``(protected, signature)`` for ``payload`` with tern's Ed25519 key."""
    protected = b64url(canonicalize({**header, "alg": "EdDSA", "kid": key.public.kid}))
    return protected, b64url(ed25519.sign(key.seed, f"{protected}.{b64url(payload)}".encode("ascii")))
