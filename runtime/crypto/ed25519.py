"""Ed25519 (RFC 8032 §5.1): the signature tern puts on its agent cards (JWS ``EdDSA``).

Signatures are deterministic (the nonce is a hash of the key and the message), so no
random source can leak the key. The arithmetic is plain Python integers, not
constant-time; tern signs only its own cards' content, once per content (the routes
cache it), so a caller cannot make it sign chosen messages to time. Verification is
the cofactorless equation, as OpenSSL and ``cryptography`` check it.
"""

from __future__ import annotations

import hashlib

__all__ = ["is_public_key", "public_key", "sign", "verify"]

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, -1, P) % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)

Point = tuple[int, int, int, int]  # extended coordinates (X, Y, Z, T), x = X/Z, y = Y/Z, xy = T/Z


def _add(p: Point, q: Point) -> Point:
    x1, y1, z1, t1 = p
    x2, y2, z2, t2 = q
    a = (y1 - x1) * (y2 - x2) % P
    b = (y1 + x1) * (y2 + x2) % P
    c = 2 * t1 * t2 * D % P
    d = 2 * z1 * z2 % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return e * f % P, g * h % P, f * g % P, e * h % P


def _multiply(scalar: int, point: Point) -> Point:
    result: Point = (0, 1, 1, 0)
    while scalar:
        if scalar & 1:
            result = _add(result, point)
        point = _add(point, point)
        scalar >>= 1
    return result


def _recover_x(y: int, sign: int) -> int | None:
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, -1, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P:
        x = x * _SQRT_M1 % P
    if (x * x - x2) % P:
        return None
    return P - x if (x & 1) != sign else x


_GY = 4 * pow(5, -1, P) % P
_GX = _recover_x(_GY, 0)
assert _GX is not None
G: Point = (_GX, _GY, 1, _GX * _GY % P)


def _encode(point: Point) -> bytes:
    x, y, z, _ = point
    zi = pow(z, -1, P)
    x, y = x * zi % P, y * zi % P
    return (y | (x & 1) << 255).to_bytes(32, "little")


def _decode(data: bytes) -> Point | None:
    value = int.from_bytes(data, "little")
    y, sign = value & ((1 << 255) - 1), value >> 255
    x = _recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


def _secret(seed: bytes) -> tuple[int, bytes]:
    if len(seed) != 32:
        raise ValueError("an Ed25519 private key is 32 bytes")
    digest = hashlib.sha512(seed).digest()
    scalar = int.from_bytes(digest[:32], "little") & ((1 << 254) - 8) | (1 << 254)
    return scalar, digest[32:]


def _h(*parts: bytes) -> int:
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little") % L


def public_key(seed: bytes) -> bytes:
    """The 32-byte public key of a 32-byte private key (the seed)."""
    return _encode(_multiply(_secret(seed)[0], G))


def sign(seed: bytes, message: bytes) -> bytes:
    """The 64-byte signature of ``message``."""
    scalar, prefix = _secret(seed)
    public = _encode(_multiply(scalar, G))
    r = _h(prefix, message)
    big_r = _encode(_multiply(r, G))
    s = (r + _h(big_r, public, message) * scalar) % L
    return big_r + s.to_bytes(32, "little")


def is_public_key(public: bytes) -> bool:
    """Whether ``public`` is 32 bytes that encode a point of the curve."""
    return len(public) == 32 and _decode(public) is not None


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` is ``public``'s over ``message`` (malformed input: False)."""
    if len(public) != 32 or len(signature) != 64:
        return False
    a, r = _decode(public), _decode(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L:
        return False
    left = _multiply(s, G)
    right = _add(r, _multiply(_h(signature[:32], public, message), a))
    return (left[0] * right[2] - right[0] * left[2]) % P == 0 and (left[1] * right[2] - right[1] * left[2]) % P == 0
