"""tern's card signing key and its signatures: every card tern serves carries one
(A2A 1.0 ``signatures``), and ``/.well-known/jwks.json`` serves the public key.

The key is Ed25519 (JWS ``EdDSA``, RFC 8037), read at first use from ``[a2a]
card_signing_key`` (a private JWK or a PKCS#8 PEM file) or from
``<state dir>/card-signing-key.jwk``, which tern makes then if it does not exist:
0600, written to a temporary file and linked into place, so two processes starting
at once end with one key (with no state directory at all, the key lives in memory for
the process). A key file that is a symlink or readable by group or
others is refused: whoever reads it can sign as this tern. The ``kid`` is the key's
RFC 7638 thumbprint. A card is signed once per content (a bounded cache), not per
request.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections import OrderedDict
from pathlib import Path
from typing import Any

import msgspec

from runtime.a2a.signatures import sign_card, signed_view
from runtime.config import Config
from runtime.crypto import jwk
from runtime.errors import TernError
from runtime.log import get_logger
from runtime.wire.jcs import canonicalize

__all__ = ["CardSigner", "KEY_FILE", "load_key"]

KEY_FILE = "card-signing-key.jwk"
MAX_KEY_FILE = 16 * 1024
_CACHED = 256
_PKCS8_ED25519 = bytes.fromhex("302e020100300506032b657004220420")  # PKCS#8 wrapper of a 32-byte Ed25519 seed
log = get_logger("a2a")


class CardSigner:
    def __init__(self, config: Config) -> None:
        configured = config.a2a.card_signing_key
        state = config.state.dir
        self.path = Path(configured) if configured else Path(state) / KEY_FILE if state else None
        self.generate = not configured
        self._key: jwk.SigningKey | None = None
        self._signed: OrderedDict[bytes, list[dict[str, str]]] = OrderedDict()

    def key(self) -> jwk.SigningKey:
        if self._key is None:  # no state directory (an embedded kernel): a key for this process only
            self._key = load_key(self.path, generate=self.generate) if self.path else jwk.generate()
        return self._key

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.key().public.jwk]}

    def sign(self, card: dict[str, Any]) -> dict[str, Any]:
        """``card`` with tern's signature, from the cache when this content was signed before."""
        digest = hashlib.sha256(canonicalize(signed_view(card))).digest()
        signatures = self._signed.get(digest)
        if signatures is None:
            signatures = sign_card(card, self.key())["signatures"]
            self._signed[digest] = signatures
            if len(self._signed) > _CACHED:
                self._signed.popitem(last=False)
        else:
            self._signed.move_to_end(digest)
        return {**card, "signatures": signatures}


def load_key(path: Path, *, generate: bool) -> jwk.SigningKey:
    """The key in ``path`` (made there first when ``generate`` and missing)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        if not generate:
            raise TernError(f"[a2a] card_signing_key: no file {path}") from None
        return _create(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        raise TernError(f"the card signing key {path} is a symlink or not a regular file: refused "
                        "(replace it with the key file itself)")
    if info.st_mode & 0o077:
        raise TernError(f"the card signing key {path} may be read by other users (mode {info.st_mode & 0o777:o}): "
                        f"chmod 600 {path}")
    if info.st_size > MAX_KEY_FILE:
        raise TernError(f"the card signing key {path} is {info.st_size} bytes: not a key")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as handle:
            text = handle.read(MAX_KEY_FILE).decode("utf-8")
        return _parse(text)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise TernError(f"the card signing key {path} cannot be used: {exc}") from None


def _parse(text: str) -> jwk.SigningKey:
    stripped = text.strip()
    if stripped.startswith("-----BEGIN PRIVATE KEY-----"):
        body = "".join(stripped.splitlines()[1:-1])
        try:
            der = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("the PEM body is not base64") from None
        if len(der) != 48 or not der.startswith(_PKCS8_ED25519):
            raise ValueError("not an Ed25519 private key (PKCS#8); tern signs cards with Ed25519")
        return jwk.signing_key({"kty": "OKP", "crv": "Ed25519", "d": jwk.b64url(der[16:])})
    try:
        return jwk.signing_key(msgspec.json.decode(stripped))
    except msgspec.DecodeError:
        raise ValueError("neither a JWK (JSON) nor a PEM private key") from None


def _create(path: Path) -> jwk.SigningKey:
    key = jwk.generate()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(msgspec.json.encode(key.private_jwk()))
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # fails if another process made one meanwhile: that one counts
        except FileExistsError:
            return load_key(path, generate=False)
    finally:
        temporary.unlink(missing_ok=True)
    log.info("made the card signing key %s (kid %s)", path, key.public.kid)
    return key
