"""``private_key_jwt`` client authentication (RFC 7523 §2.2) with ES256, sans-IO and
with no crypto library: tern's runtime depends on none, so the P-256 arithmetic is
its own (``runtime/crypto/p256.py``), checked against RFC 6979's test vectors.

The nonce is deterministic (RFC 6979), so a weak random source can never leak the
key. The arithmetic is plain Python integers, not constant-time: a process that can
time tern's requests finely could learn about the key (see docs/threat-model.md).
A ``private_key_jwt`` assertion is signed once per token, a DPoP proof once per
request (about 0.4 ms: the generator's multiples are tabulated once).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

import msgspec

from runtime.crypto.p256 import N, multiply_g
from runtime.mcp.client.oauth.model import AuthError

__all__ = ["EcKey", "load_private_key", "sign_es256", "client_assertion", "ASSERTION_TYPE"]

ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

_EC_PUBLIC_KEY = bytes.fromhex("2a8648ce3d0201")  # OID 1.2.840.10045.2.1
_P256 = bytes.fromhex("2a8648ce3d030107")  # OID 1.2.840.10045.3.1.7


class EcKey(msgspec.Struct, frozen=True):
    d: int

    def __repr__(self) -> str:
        return "EcKey(P-256, private)"


def public_point(key: EcKey) -> tuple[int, int]:
    return multiply_g(key.d)


def _bits2int(data: bytes) -> int:
    return int.from_bytes(data, "big")  # SHA-256 output is exactly 256 bits: no shift needed


def _nonces(d: int, digest: bytes):
    """RFC 6979 §3.2 candidates for k (HMAC-SHA256)."""
    x = d.to_bytes(32, "big")
    h = (_bits2int(digest) % N).to_bytes(32, "big")
    v, k = b"\x01" * 32, b"\x00" * 32
    k = hmac.new(k, v + b"\x00" + x + h, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    k = hmac.new(k, v + b"\x01" + x + h, hashlib.sha256).digest()
    v = hmac.new(k, v, hashlib.sha256).digest()
    while True:
        v = hmac.new(k, v, hashlib.sha256).digest()
        candidate = _bits2int(v)
        if 1 <= candidate < N:
            yield candidate
        k = hmac.new(k, v + b"\x00", hashlib.sha256).digest()
        v = hmac.new(k, v, hashlib.sha256).digest()


def sign_es256(key: EcKey, message: bytes) -> bytes:
    """The JWS ES256 signature of ``message``: r and s, 32 bytes each."""
    digest = hashlib.sha256(message).digest()
    e = _bits2int(digest) % N
    for k in _nonces(key.d, digest):
        r = multiply_g(k)[0] % N
        if r == 0:
            continue
        s = pow(k, -1, N) * (e + r * key.d) % N
        if s:
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    raise AssertionError("unreachable")


# --- PEM/DER ------------------------------------------------------------------------


def _der(data: bytes, i: int = 0) -> tuple[int, bytes, int]:
    """One DER element at ``i``: (tag, content, next index)."""
    if i + 2 > len(data):
        raise ValueError("truncated")
    tag, length = data[i], data[i + 1]
    i += 2
    if length & 0x80:
        count = length & 0x7F
        if count == 0 or count > 3 or i + count > len(data):
            raise ValueError("bad length")
        length = int.from_bytes(data[i:i + count], "big")
        i += count
    if i + length > len(data):
        raise ValueError("truncated")
    return tag, data[i:i + length], i + length


def _children(content: bytes) -> list[tuple[int, bytes]]:
    out, i = [], 0
    while i < len(content):
        tag, value, i = _der(content, i)
        out.append((tag, value))
    return out


def _sec1(content: bytes) -> int:
    parts = _children(content)
    if len(parts) < 2 or parts[0] != (0x02, b"\x01") or parts[1][0] != 0x04:
        raise ValueError("not an EC private key")
    for tag, value in parts[2:]:
        if tag == 0xA0 and _children(value) != [(0x06, _P256)]:
            raise ValueError("not a P-256 key")
    return int.from_bytes(parts[1][1], "big")


def load_private_key(pem: str) -> EcKey:
    """A P-256 private key from PEM (PKCS#8 ``PRIVATE KEY`` or SEC 1 ``EC PRIVATE KEY``)."""
    try:
        lines = [line.strip() for line in pem.strip().splitlines()]
        if len(lines) < 3 or not lines[0].startswith("-----BEGIN ") or not lines[-1].startswith("-----END "):
            raise ValueError("not PEM")
        kind = lines[0][len("-----BEGIN "):].rstrip("-")
        der = base64.b64decode("".join(lines[1:-1]), validate=True)
        tag, content, _ = _der(der)
        if tag != 0x30:
            raise ValueError("not a DER sequence")
        if kind == "EC PRIVATE KEY":
            d = _sec1(content)
        elif kind == "PRIVATE KEY":
            parts = _children(content)
            if len(parts) < 3 or parts[1][0] != 0x30 or parts[2][0] != 0x04:
                raise ValueError("not PKCS#8")
            if _children(parts[1][1]) != [(0x06, _EC_PUBLIC_KEY), (0x06, _P256)]:
                raise ValueError("not a P-256 EC key (only ES256 is supported)")
            inner_tag, inner, _ = _der(parts[2][1])
            d = _sec1(inner)
        else:
            raise ValueError(f"a {kind[:40]}, not a private key")
    except (ValueError, TypeError) as exc:
        raise AuthError(f"the OAuth private key cannot be used: {exc}") from None
    if not 1 <= d < N:
        raise AuthError("the OAuth private key cannot be used: out of range")
    return EcKey(d)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def client_assertion(key: EcKey, client_id: str, audience: str, now: float, lifetime: int = 300) -> str:
    """A signed JWT proving the client is ``client_id`` to ``audience`` (the issuer)."""
    header = _b64(msgspec.json.encode({"alg": "ES256", "typ": "JWT"}))
    claims = _b64(msgspec.json.encode({"iss": client_id, "sub": client_id, "aud": audience, "iat": int(now),
                                       "exp": int(now) + lifetime, "jti": secrets.token_urlsafe(16)}))
    signing_input = f"{header}.{claims}".encode("ascii")
    return f"{header}.{claims}.{_b64(sign_es256(key, signing_input))}"
