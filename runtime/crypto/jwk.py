"""JSON Web Keys (RFC 7517) for card signatures: public keys read with bounds, tern's
own Ed25519 key pair, and RFC 7638 thumbprints (the ``kid`` tern signs with).

A public key is one of OKP/Ed25519 (``EdDSA``), EC/P-256 (``ES256``) or RSA
(``RS256``); anything else is refused with the reason, as is a point off the curve,
a modulus outside 2048..8192 bits, or a private member in what should be public.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from dataclasses import dataclass
from typing import Any

from runtime.crypto import ed25519, p256, rsa
from runtime.errors import ProtocolError
from runtime.wire.jcs import canonicalize

__all__ = ["PublicKey", "SigningKey", "BadKey", "b64url", "unb64url", "public_key", "signing_key",
           "generate", "thumbprint", "MAX_KEYS"]

MAX_KEYS = 16  # keys read from one JWKS
_MAX_MEMBER = 1400  # base64url characters of one member (an 8192-bit modulus is 1366)
_PRIVATE = ("d", "p", "q", "dp", "dq", "qi", "k")
_B64URL = re.compile(r"[A-Za-z0-9_-]+")


class BadKey(ProtocolError, ValueError):
    """A JWK tern cannot use; the text says why."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: Any, what: str = "a value", limit: int = _MAX_MEMBER) -> bytes:
    if not isinstance(text, str) or not text or len(text) > limit:
        raise BadKey(f"{what} is missing, not a string or longer than {limit} characters")
    if not _B64URL.fullmatch(text):
        raise BadKey(f"{what} is not unpadded base64url")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadKey(f"{what} is not base64url") from None


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A verification key: ``alg`` is the one JWS algorithm it verifies."""

    alg: str
    kid: str
    material: Any  # Ed25519: 32 bytes; ES256: (x, y); RS256: (n, e)
    jwk: dict[str, str]

    def verify(self, message: bytes, signature: bytes) -> bool:
        if self.alg == "EdDSA":
            return ed25519.verify(self.material, message, signature)
        if self.alg == "ES256":
            return p256.verify_es256(self.material, message, signature)
        return rsa.verify_rs256(*self.material, message, signature)


@dataclass(frozen=True, slots=True)
class SigningKey:
    """tern's Ed25519 key pair; ``repr`` never shows the private half."""

    seed: bytes
    public: PublicKey

    def __repr__(self) -> str:
        return f"SigningKey(Ed25519, kid={self.public.kid})"

    def private_jwk(self) -> dict[str, str]:
        return {**self.public.jwk, "d": b64url(self.seed)}


def thumbprint(jwk: dict[str, str]) -> str:
    """RFC 7638: SHA-256 over the required members, canonical JSON."""
    required = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n")}[jwk["kty"]]
    return b64url(hashlib.sha256(canonicalize({k: jwk[k] for k in required})).digest())


def public_key(jwk: Any) -> PublicKey:
    """A verification key from a public JWK; :class:`BadKey` says why not."""
    if not isinstance(jwk, dict):
        raise BadKey("a JWK must be a JSON object")
    if any(member in jwk for member in _PRIVATE):
        raise BadKey("the JWK holds a private key member: publish only the public key")
    kty, alg = jwk.get("kty"), jwk.get("alg")
    use = jwk.get("use")
    if use is not None and use != "sig":
        raise BadKey(f"the JWK is for {str(use)[:20]!r}, not signatures")
    if kty == "OKP" and jwk.get("crv") == "Ed25519":
        x = unb64url(jwk.get("x"), "the key's x")
        if len(x) != 32:
            raise BadKey("an Ed25519 key is 32 bytes")
        name, material, public = "EdDSA", x, {"kty": "OKP", "crv": "Ed25519", "x": jwk["x"]}
    elif kty == "EC" and jwk.get("crv") == "P-256":
        raw_x, raw_y = unb64url(jwk.get("x"), "the key's x"), unb64url(jwk.get("y"), "the key's y")
        if len(raw_x) != 32 or len(raw_y) != 32:
            raise BadKey("a P-256 coordinate is 32 bytes")
        point = (int.from_bytes(raw_x, "big"), int.from_bytes(raw_y, "big"))
        if not p256.on_curve(*point):
            raise BadKey("the P-256 key is not a point of the curve")
        name, material, public = "ES256", point, {"kty": "EC", "crv": "P-256", "x": jwk["x"], "y": jwk["y"]}
    elif kty == "RSA":
        n = int.from_bytes(unb64url(jwk.get("n"), "the RSA modulus", 4 * _MAX_MEMBER), "big")  # room to say its size
        e = int.from_bytes(unb64url(jwk.get("e"), "the RSA exponent", 12), "big")
        why = rsa.check_key(n, e)
        if why:
            raise BadKey(why)
        name, material, public = "RS256", (n, e), {"kty": "RSA", "n": jwk["n"], "e": jwk["e"]}
    else:
        raise BadKey(f"a {str(kty)[:10]!r} key on {str(jwk.get('crv'))[:10]!r}: tern verifies Ed25519 (EdDSA), "
                        "P-256 (ES256) and RSA (RS256) keys")
    if alg is not None and alg != name:
        raise BadKey(f"the JWK says alg {str(alg)[:20]!r}, but the key is for {name}")
    kid = jwk.get("kid")
    return PublicKey(name, kid if isinstance(kid, str) else thumbprint(public), material, public)


def signing_key(jwk: Any) -> SigningKey:
    """tern's key pair from a private OKP/Ed25519 JWK (``d`` is the seed)."""
    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise BadKey("the card signing key must be an Ed25519 JWK (kty OKP, crv Ed25519)")
    seed = unb64url(jwk.get("d"), "the key's d")
    if len(seed) != 32:
        raise BadKey("an Ed25519 private key is 32 bytes")
    pair = _pair(seed)
    if "x" in jwk and jwk["x"] != pair.public.jwk["x"]:
        raise BadKey("the key's x is not the public key of its d")
    return pair


def generate() -> SigningKey:
    return _pair(secrets.token_bytes(32))


def _pair(seed: bytes) -> SigningKey:
    raw = ed25519.public_key(seed)
    public = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
    kid = thumbprint(public)
    return SigningKey(seed, PublicKey("EdDSA", kid, raw, {**public, "kid": kid, "alg": "EdDSA", "use": "sig"}))
