"""RS256 verification (RSASSA-PKCS1-v1_5 with SHA-256, RFC 8017 §8.2.2): public
operations only, for peers that sign their cards with RSA keys.

The encoded message is rebuilt and compared whole (no parsing of the padding, so no
Bleichenbacher-style forgery on a small exponent). Keys are bounded by the caller
(:data:`MIN_BITS` to :data:`MAX_BITS`, an odd exponent below 2**32) so one
verification costs at most one 8192-bit modular exponentiation with a small exponent.
"""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["verify_rs256", "check_key", "MIN_BITS", "MAX_BITS"]

MIN_BITS = 2048
MAX_BITS = 8192
_SHA256_INFO = bytes.fromhex("3031300d060960864801650304020105000420")  # DigestInfo prefix, RFC 8017 §9.2


def check_key(n: int, e: int) -> str | None:
    """Why this public key is refused, or None."""
    if not MIN_BITS <= n.bit_length() <= MAX_BITS:
        return f"an RSA modulus of {n.bit_length()} bits (tern accepts {MIN_BITS} to {MAX_BITS})"
    if not (3 <= e < 2**32 and e & 1) or not n & 1:
        return "an RSA key with an unusable exponent or an even modulus"
    return None


def verify_rs256(n: int, e: int, message: bytes, signature: bytes) -> bool:
    if check_key(n, e) is not None:
        return False
    size = (n.bit_length() + 7) // 8
    if len(signature) != size:
        return False
    s = int.from_bytes(signature, "big")
    if s >= n:
        return False
    info = _SHA256_INFO + hashlib.sha256(message).digest()
    expected = b"\x00\x01" + b"\xff" * (size - len(info) - 3) + b"\x00" + info
    return hmac.compare_digest(pow(s, e, n).to_bytes(size, "big"), expected)
