"""The keys ``tern keys add`` made: their names, scopes and SHA-256, never the keys.

``<state>/keys.json`` (0600, written whole to a temporary file and renamed, so a reader
sees the old file or the new one). A file that does not parse is moved aside
(``runtime.storage.move_aside``) with one loud line, as a broken database is, and tern
goes on with the keys of its config alone. The daemon reads it at boot and on reload.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from pathlib import Path
from typing import Any

import msgspec

from runtime.config import Config
from runtime.config.keys import DEFAULT_SCOPES, NAME_PATTERN, OWNER_NAMES, SCOPES
from runtime.errors import UsageError
from runtime.host.discovery import _read_private
from runtime.log import get_logger

__all__ = ["KEYS_FILE", "StoredKey", "read_keys", "add_key", "remove_key", "stored_keys", "describe"]

log = get_logger("tern.keys")
KEYS_FILE = "keys.json"
MAX_KEYS = 1000


class StoredKey(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    sha256: str
    scopes: list[str] = []
    agents: list[str] = msgspec.field(default_factory=lambda: ["*"])
    created: float = 0.0


def _path(config: Config) -> Path:
    return Path(config.state.dir) / KEYS_FILE


def stored_keys(config: Config) -> list[StoredKey]:
    """What the file holds; [] when there is none, it is not safe to read (logged), or it
    is broken (moved aside, logged)."""
    path = _path(config)
    data, why = _read_private(path, "the key store")
    if why:
        log.error("%s: the stored keys are not used", why)
        return []
    if not data:
        return []
    try:
        keys = msgspec.json.decode(data, type=list[StoredKey])
        if len(keys) > MAX_KEYS:
            raise ValueError(f"more than {MAX_KEYS} keys")
        for key in keys:
            if not NAME_PATTERN.fullmatch(key.name) or len(key.sha256) != 64:
                raise ValueError("a key's name or hash is not valid")
            bytes.fromhex(key.sha256)  # ValueError if not hex
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        from runtime.storage import move_aside

        move_aside(path, f"not a key store: {str(exc)[:200]}")
        return []
    return keys


def read_keys(config: Config) -> list[tuple[str, str, list[str], list[str]]]:
    """The stored keys as ``KeyTable.build`` takes them."""
    if not config.state.dir:
        return []
    return [(k.name, k.sha256, k.scopes, k.agents) for k in stored_keys(config)]


def _write(config: Config, keys: list[StoredKey]) -> None:
    path = _path(config)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_name(f".{KEYS_FILE}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(msgspec.json.format(msgspec.json.encode(keys)))
    os.replace(temp, path)


def add_key(config: Config, name: str, scopes: list[str], agents: list[str]) -> str:
    """Make a key named ``name`` and store its hash; the key is returned, once."""
    import time

    if not NAME_PATTERN.fullmatch(name) or name in OWNER_NAMES:
        raise UsageError(f'a key name is 1-64 of a-z 0-9 _ . - (not "admin" or "local"), got {name!r}')
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise UsageError(f"unknown scope {', '.join(unknown)}; expected some of {', '.join(SCOPES)}")
    keys = stored_keys(config)
    if any(k.name == name for k in keys) or any(k.name == name for k in config.server.keys):
        raise UsageError(f"a key named {name!r} exists already (tern keys remove {name} first)")
    if len(keys) >= MAX_KEYS:
        raise UsageError(f"the key store holds {MAX_KEYS} keys already")
    key = "tern_" + secrets.token_urlsafe(32)
    keys.append(StoredKey(name, hashlib.sha256(key.encode()).hexdigest(), sorted(scopes), agents or ["*"],
                          round(time.time(), 3)))
    _write(config, keys)
    return key


def remove_key(config: Config, name: str) -> None:
    keys = stored_keys(config)
    kept = [k for k in keys if k.name != name]
    if len(kept) == len(keys):
        raise UsageError(f"no stored key is named {name!r} (see tern keys list)")
    _write(config, kept)


def describe(config: Config) -> list[dict[str, Any]]:
    """Every key, configured and stored, as ``tern keys list`` shows it: no secrets."""
    rows: list[dict[str, Any]] = []
    if config.server.api_key or config.server.api_key_env:
        rows.append({"name": "admin", "scopes": ["admin"], "agents": ["*"], "source": "api_key"})
    for key in config.server.keys:
        rows.append({"name": key.name, "scopes": key.scopes or sorted(DEFAULT_SCOPES), "agents": key.agents,
                     "source": "config" + (" (tls_subject)" if key.tls_subject else "")})
    for key in stored_keys(config) if config.state.dir else []:
        rows.append({"name": key.name, "scopes": key.scopes or sorted(DEFAULT_SCOPES), "agents": key.agents,
                     "source": "tern keys"})
    return rows
