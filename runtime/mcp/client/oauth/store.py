"""Tokens and client registrations on disk, private to tern's user.

One small JSON file per key in ``<state dir>/oauth/`` (0700; every file 0600 from
its first byte, written whole to a temporary name and renamed, so a reader never sees
half a file): ``tokens-<hash of the server URL>.json``, ``dpop-<hash of the server
URL>.json`` (the private key DPoP-bound tokens need) and
``client-<hash of the issuer>.json`` (credentials are per authorization server: a
server that moves to another one never sends the old one's client there). A file that
cannot be read is moved aside with a warning and treated as absent: a broken file
costs a login, never a crash. File names hash the keys so no URL reaches a path.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
import msgspec

from runtime.log import get_logger
from runtime.mcp.client.oauth.dpop import DpopKey
from runtime.mcp.client.oauth.model import Client, Tokens
from runtime.storage import failed, move_aside

__all__ = ["TokenStore"]

log = get_logger("mcp.oauth")
MAX_FILE_BYTES = 256 * 1024


class _Saved(msgspec.Struct):
    key: str
    tokens: Tokens | None = None
    client: Client | None = None
    dpop: DpopKey | None = None


@functools.lru_cache(maxsize=256)  # asked on every request (the token file's stamp): hash once
def _name(kind: str, key: str) -> str:
    return f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


class TokenStore:
    """The OAuth files under ``state_dir`` (an empty ``state_dir`` keeps nothing on disk)."""

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.dir = Path(state_dir) / "oauth" if str(state_dir) else None
        self._dir_str = str(self.dir) if self.dir is not None else ""
        self._memory: dict[str, _Saved] = {}
        self._writes = 0  # the in-memory stamp

    # --- tokens, by server URL ------------------------------------------------------

    def tokens(self, server_url: str) -> Tokens | None:
        saved = self._read(_name("tokens", server_url), server_url)
        return saved.tokens if saved else None

    def save_tokens(self, server_url: str, tokens: Tokens) -> None:
        self._write(_name("tokens", server_url), _Saved(key=server_url, tokens=tokens))

    def forget_tokens(self, server_url: str) -> bool:
        return self._remove(_name("tokens", server_url))

    def tokens_stamp(self, server_url: str) -> tuple[int, int]:
        """Changes whenever the tokens file is replaced ((0, 0): no file), so a reader
        (the daemon, waiting for ``tern auth login``) rereads only then."""
        if self.dir is None:
            return (self._writes, 0)
        try:
            st = os.stat(os.path.join(self._dir_str, _name("tokens", server_url)))
        except OSError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_ino)

    # --- DPoP keys, by server URL ------------------------------------------------------

    def dpop_key(self, server_url: str) -> DpopKey | None:
        saved = self._read(_name("dpop", server_url), server_url)
        return saved.dpop if saved else None

    def save_dpop_key(self, server_url: str, key: DpopKey) -> None:
        self._write(_name("dpop", server_url), _Saved(key=server_url, dpop=key))

    # --- client registrations, by issuer --------------------------------------------

    def client(self, issuer: str) -> Client | None:
        saved = self._read(_name("client", issuer), issuer)
        return saved.client if saved else None

    def save_client(self, issuer: str, client: Client) -> None:
        self._write(_name("client", issuer), _Saved(key=issuer, client=client))

    def forget_client(self, issuer: str) -> bool:
        return self._remove(_name("client", issuer))

    # --- files ------------------------------------------------------------------------

    def _read(self, name: str, key: str) -> _Saved | None:
        if self.dir is None:
            return self._memory.get(name)
        path = self.dir / name
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read %s: %s", path, exc.strerror or exc)
            return None
        try:
            if len(data) > MAX_FILE_BYTES:
                raise msgspec.DecodeError(f"larger than {MAX_FILE_BYTES} bytes")
            saved = msgspec.json.decode(data, type=_Saved)
        except msgspec.DecodeError as exc:
            move_aside(path, f"not a tern OAuth file: {exc}")
            return None
        return saved if saved.key == key else None  # a hash collision, or a copied file: not ours

    def _write(self, name: str, saved: _Saved) -> None:
        if self.dir is None:
            self._memory[name] = saved
            self._writes += 1
            return
        path = self.dir / name
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(msgspec.json.encode(saved))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise failed("OAuth credentials not saved", exc) from None

    def _remove(self, name: str) -> bool:
        if self.dir is None:
            self._writes += 1
            return self._memory.pop(name, None) is not None
        try:
            os.unlink(self.dir / name)
            return True
        except FileNotFoundError:
            return False
