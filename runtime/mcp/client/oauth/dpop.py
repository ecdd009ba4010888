"""DPoP (RFC 9449), sans-IO: proofs that the sender of a token holds its key.

A DPoP-bound token is useless without the private key, so a stolen token file or a
logged header is not enough to call the server. One P-256 key per MCP server, made on
first use and kept by the store; a proof is a JWT (``typ: dpop+jwt``, ES256, the
public key in its header) naming the request's method and URL (``htm``, ``htu``,
without query or fragment), its time, a fresh ``jti``, the server's nonce when it
demanded one and, at the resource server, the token's hash (``ath``).

Nonces (RFC 9449 sections 8 and 9) are per server (the authorization server's and the
MCP server's are different, even on one origin): ``Nonces`` keeps the latest one each
URL handed out and says whether a ``use_dpop_nonce`` refusal is worth one more try.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from urllib.parse import urlsplit, urlunsplit

import msgspec

from runtime.mcp.client.oauth.jwt import EcKey, N, public_point, sign_es256
from runtime.mcp.client.oauth.model import AuthError

__all__ = ["DpopKey", "new_key", "check_key", "proof", "encoded_header", "claims_of", "htu", "ath", "Nonces", "ALG",
           "MAX_NONCE_CHARS"]

ALG = "ES256"
MAX_NONCE_CHARS = 512  # a nonce is opaque but short; a longer one is refused, not stored
MAX_NONCE_SERVERS = 16


class DpopKey(msgspec.Struct, frozen=True):
    """A DPoP key as saved (the private scalar, base64url) with its public JWK."""

    d: str
    x: str
    y: str

    def __repr__(self) -> str:  # never print the private part
        return f"DpopKey(P-256, x={self.x[:8]}...)"

    @property
    def ec(self) -> EcKey:
        return EcKey(int.from_bytes(_unb64(self.d), "big"))

    @property
    def jwk(self) -> dict[str, str]:
        return {"kty": "EC", "crv": "P-256", "x": self.x, "y": self.y}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def new_key() -> DpopKey:
    d = secrets.randbelow(N - 1) + 1
    x, y = public_point(EcKey(d))
    return DpopKey(d=_b64(d.to_bytes(32, "big")), x=_b64(x.to_bytes(32, "big")), y=_b64(y.to_bytes(32, "big")))


def check_key(key: DpopKey) -> DpopKey:
    """A saved key, checked: its public part must be its private part's (a file edited
    by hand, or half of another key, is refused rather than sending proofs nobody accepts)."""
    try:
        d = int.from_bytes(_unb64(key.d), "big")
        if not 1 <= d < N:
            raise ValueError
        x, y = public_point(EcKey(d))
    except (ValueError, TypeError):
        raise AuthError("the saved DPoP key is not a P-256 private key") from None
    if (_b64(x.to_bytes(32, "big")), _b64(y.to_bytes(32, "big"))) != (key.x, key.y):
        raise AuthError("the saved DPoP key's public part does not match its private part")
    return key


def htu(url: str) -> str:
    """The ``htu`` of a request: its URL without query and fragment (RFC 9449 section 4.2)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def ath(access_token: str) -> str:
    """The access token's hash, binding a proof to the token it accompanies."""
    return _b64(hashlib.sha256(access_token.encode("ascii")).digest())


class _Header(msgspec.Struct):
    typ: str
    alg: str
    jwk: dict[str, str]


def proof(key: DpopKey, method: str, url: str, now: float, *, nonce: str = "", access_token: str = "",
          header: bytes | None = None) -> str:
    """A DPoP proof for one request (``header`` is the encoded JWS header, if the caller
    keeps it: it only depends on the key)."""
    claims: dict[str, object] = {"jti": secrets.token_urlsafe(16), "htm": method.upper(), "htu": htu(url),
                                 "iat": int(now)}
    if nonce:
        claims["nonce"] = nonce
    if access_token:
        claims["ath"] = ath(access_token)
    head = header if header is not None else encoded_header(key)
    signing_input = head + b"." + _b64(msgspec.json.encode(claims)).encode("ascii")
    return (signing_input + b"." + _b64(sign_es256(key.ec, signing_input)).encode("ascii")).decode("ascii")


def encoded_header(key: DpopKey) -> bytes:
    return _b64(msgspec.json.encode(_Header(typ="dpop+jwt", alg=ALG, jwk=key.jwk))).encode("ascii")


def claims_of(token: str) -> dict[str, object]:
    """The claims of a JWT, unverified (a proof of ours, read back to see which URL and
    nonce it named); empty for anything that is not one."""
    parts = token.split(".")
    if len(parts) != 3 or len(token) > 8192:
        return {}
    try:
        doc = msgspec.json.decode(_unb64(parts[1]))
    except (ValueError, msgspec.DecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


class Nonces:
    """The latest DPoP nonce each server (keyed by the ``htu`` it was demanded for)
    demanded, and whether a request carrying it has been accepted since. A ``use_dpop_nonce`` refusal is retried
    once per request: when the refused proof carried the server's latest nonce and that
    nonce never worked, the server is asking for a new nonce forever, and the refusal
    stands."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[str, bool]] = {}

    @staticmethod
    def _key(url: str) -> str:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path, "", ""))

    def get(self, url: str) -> str:
        entry = self._latest.get(self._key(url))
        return entry[0] if entry else ""

    def worked(self, url: str, nonce: str) -> None:
        """A request whose proof carried ``nonce`` was accepted."""
        key = self._key(url)
        if nonce and self._latest.get(key, ("", False))[0] == nonce:
            self._latest[key] = (nonce, True)

    def offered(self, url: str, nonce: str) -> None:
        """A server sent ``DPoP-Nonce`` (with a refusal or with an answer): use it from now on."""
        if not nonce or len(nonce) > MAX_NONCE_CHARS or not nonce.isprintable():
            return
        key = self._key(url)
        if self._latest.get(key, ("", False))[0] == nonce:
            return
        self._latest.pop(key, None)
        while len(self._latest) >= MAX_NONCE_SERVERS:
            self._latest.pop(next(iter(self._latest)))
        self._latest[key] = (nonce, False)

    def retry(self, url: str, sent_nonce: str, demanded: str) -> bool:
        """A ``use_dpop_nonce`` refusal of a proof that carried ``sent_nonce``, with the
        server now demanding ``demanded``: True if one more try can help."""
        key = self._key(url)
        latest, worked = self._latest.get(key, ("", False))
        if sent_nonce and sent_nonce == latest and not worked:
            return False  # already retried with what it asked for, and it asks again
        self.offered(url, demanded)
        return bool(self.get(url)) and self.get(url) != sent_nonce
