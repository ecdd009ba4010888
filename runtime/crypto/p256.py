"""NIST P-256 (SEC 2 secp256r1) arithmetic and ES256 verification, plain Python integers.

Shared by the OAuth client's ``private_key_jwt`` and DPoP signatures (which sign with
it) and the agent-card verifier (which checks peers' ES256 signatures). Not
constant-time: see ``mcp/client/oauth/jwt.py`` for why signing with it is acceptable;
verification handles only public values.
"""

from __future__ import annotations

import hashlib

__all__ = ["P", "A", "B", "N", "G", "on_curve", "multiply", "multiply_g", "verify_es256"]

# NIST P-256 (SEC 2 secp256r1)
P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
A = P - 3
B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
G = (0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
     0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5)
def _add(p1: tuple[int, int, int] | None, p2: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    """Jacobian point addition (None is the point at infinity)."""
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    x1, y1, z1 = p1
    x2, y2, z2 = p2
    z1z1, z2z2 = z1 * z1 % P, z2 * z2 % P
    u1, u2 = x1 * z2z2 % P, x2 * z1z1 % P
    s1, s2 = y1 * z2 * z2z2 % P, y2 * z1 * z1z1 % P
    if u1 == u2:
        return _double(p1) if s1 == s2 else None
    h, r = (u2 - u1) % P, (s2 - s1) % P
    hh = h * h % P
    hhh = h * hh % P
    v = u1 * hh % P
    x3 = (r * r - hhh - 2 * v) % P
    y3 = (r * (v - x3) - s1 * hhh) % P
    return x3, y3, h * z1 * z2 % P


def _double(p1: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    if p1 is None or p1[1] == 0:
        return None
    x, y, z = p1
    yy = y * y % P
    s = 4 * x * yy % P
    zz = z * z % P
    m = (3 * x * x + A * zz * zz) % P
    x3 = (m * m - 2 * s) % P
    return x3, (m * (s - x3) - 8 * yy * yy) % P, 2 * y * z % P


def multiply(k: int, point: tuple[int, int] = G) -> tuple[int, int]:
    result: tuple[int, int, int] | None = None
    addend: tuple[int, int, int] | None = (point[0], point[1], 1)
    while k:
        if k & 1:
            result = _add(result, addend)
        addend = _double(addend)
        k >>= 1
    return _to_xy(result)


_WINDOW = 4
_G_TABLE: list[list[tuple[int, int, int] | None]] = []


def multiply_g(k: int) -> tuple[int, int]:
    """``k`` times the generator with a table of its multiples (``_WINDOW`` bits a row,
    built once, about 30 ms): 64 additions instead of 256 doublings and ~128 additions,
    which makes a signature (one per DPoP proof, so one per request) about 4x cheaper."""
    if not _G_TABLE:
        base: tuple[int, int, int] | None = (G[0], G[1], 1)
        for _ in range(256 // _WINDOW):
            row: list[tuple[int, int, int] | None] = [None]
            for _ in range((1 << _WINDOW) - 1):
                row.append(_affine(_add(row[-1], base)))
            _G_TABLE.append(row)
            for _ in range(_WINDOW):
                base = _double(base)
    result: tuple[int, int, int] | None = None
    for row in _G_TABLE:
        result = _add(result, row[k & ((1 << _WINDOW) - 1)])
        k >>= _WINDOW
    return _to_xy(result)


def _affine(point: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
    if point is None:
        return None
    x, y = _to_xy(point)
    return x, y, 1


def _to_xy(point: tuple[int, int, int] | None) -> tuple[int, int]:
    if point is None:
        raise ValueError("point at infinity")
    x, y, z = point
    zi = pow(z, -1, P)
    return x * zi * zi % P, y * zi * zi * zi % P


def on_curve(x: int, y: int) -> bool:
    """Whether (x, y) is a point of the curve (a public key must be, or ECDSA proves nothing)."""
    return 0 <= x < P and 0 <= y < P and (y * y - x * x * x - A * x - B) % P == 0


def verify_es256(point: tuple[int, int], message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` (r and s, 32 bytes each) is ``point``'s over ``message``."""
    if len(signature) != 64:
        return False
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    if not (1 <= r < N and 1 <= s < N):
        return False
    e = int.from_bytes(hashlib.sha256(message).digest(), "big") % N
    w = pow(s, -1, N)
    p1 = multiply(e * w % N)
    p2 = multiply(r * w % N, point)
    total = _add((p1[0], p1[1], 1), (p2[0], p2[1], 1))
    if total is None:
        return False
    x, _, z = total
    return x * pow(z * z, -1, P) % P % N == r
