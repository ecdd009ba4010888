"""``tern.lock``: what each MCP server was when a person last looked, pinned.

The file sits beside the config and is written by ``tern mcp lock``. For each server it
holds the *source* (an ``npx``/``uvx`` package spec, the SHA-256 of a command's resolved
executable, or a remote server's URL) and, for each tool, the SHA-256 of its definition
(name, description, input schema, annotations) in RFC 8785 canonical JSON, with the
definition itself so that a change can be shown as a diff. A tool whose definition no
longer hashes to the lock's is ``drifted``; one the lock does not name is ``new``.

What happens to them is the server's ``lock`` mode (the supervisor applies it): ``off``
(never looked at), ``warn`` (offered, logged and evented) or ``enforce`` (held back from
agents until a person approves the new definition; a changed source is not started).
Unset, a server enforces when a ``tern.lock`` exists and is off when none does.

The file is JSON, read whole (at most ``MAX_LOCK_BYTES``), and checked: a definition that
does not hash to its own recorded digest makes the file corrupt, so the digests cannot
be edited by hand to match a changed server without the diff showing it. Writes are
atomic (a temporary file in the same directory, fsync, rename).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import msgspec

from runtime.errors import ConfigError
from runtime.log import get_logger
from runtime.wire.jcs import CanonicalError, canonicalize

__all__ = ["LOCK_NAME", "MAX_LOCK_BYTES", "LockFile", "LockedServer", "LockedTool", "LockStore", "ToolCheck",
           "definition", "digest", "source_of", "lock_path", "read_lock", "write_lock", "diff_text", "check_tools"]

log = get_logger("mcp")

LOCK_NAME = "tern.lock"
FORMAT = 1
MAX_LOCK_BYTES = 8 * 1024 * 1024  # thousands of tools with large schemas fit; a runaway file does not
MAX_DIFF_LINES = 200  # of one tool's diff, as an approval shows it
HASH_CHUNK = 1024 * 1024
PACKAGE_RUNNERS = {"npx": "npm", "bunx": "npm", "uvx": "pypi", "pipx": "pypi"}
Mode = Literal["off", "warn", "enforce"]


class LockedTool(msgspec.Struct, forbid_unknown_fields=True):
    sha256: str
    definition: dict[str, Any]


class LockedServer(msgspec.Struct, forbid_unknown_fields=True):
    source: dict[str, str] = {}
    tools: dict[str, LockedTool] = {}


class LockFile(msgspec.Struct, forbid_unknown_fields=True):
    tern_lock: int = FORMAT
    servers: dict[str, LockedServer] = {}


class ToolCheck(msgspec.Struct, frozen=True):
    """One listed tool against the lock: ``locked`` (as pinned), ``drifted`` or ``new``."""

    tool: str
    state: Literal["locked", "drifted", "new"]
    sha256: str
    definition: dict[str, Any]
    was: LockedTool | None = None

    def shown(self, max_lines: int = MAX_DIFF_LINES) -> dict[str, Any]:
        """What a person is asked to approve: the tool, its new digest and the diff."""
        return {"tool": self.tool, "state": self.state, "sha256": self.sha256,
                "was": self.was.sha256 if self.was is not None else None,
                "diff": diff_text(self.was.definition if self.was is not None else None, self.definition,
                                  max_lines=max_lines)}


def definition(tool: Any) -> dict[str, Any]:
    """The part of an ``McpTool`` that is pinned: what a model reads and what it may send."""
    return {"name": tool.name, "description": tool.description, "inputSchema": tool.input_schema,
            "annotations": tool.annotations}


def digest(value: dict[str, Any]) -> str:
    """SHA-256 of the definition's canonical JSON (RFC 8785). A schema JCS cannot express
    (an integer past 2**53) falls back to sorted-key JSON: still one string per value."""
    try:
        data = canonicalize(value)
    except CanonicalError:
        data = msgspec.json.encode(value, order="sorted")
    return hashlib.sha256(data).hexdigest()


def lock_path(config_path: Path | None) -> Path | None:
    """``tern.lock`` beside the config file; None for the bundled default (no file)."""
    return None if config_path is None else Path(config_path).resolve().parent / LOCK_NAME


# --- sources ------------------------------------------------------------------------------


def source_of(entry: Any) -> dict[str, str]:
    """What started (or is) the server: ``{"kind": "npm"|"pypi", "package": spec}`` for a
    package runner, ``{"kind": "command", "path", "sha256"}`` for any other command (the
    resolved executable file's bytes), ``{"kind": "url", "url"}`` for a remote one (no
    query: it may carry a secret). Reads the executable: call it off the event loop."""
    transport = entry.transport
    command = getattr(transport, "command", None)
    if command is None:
        url = str(getattr(transport, "url", ""))
        return {"kind": "url", "url": url.split("?", 1)[0].split("#", 1)[0]}
    runner = PACKAGE_RUNNERS.get(Path(command).name.removesuffix(".cmd").removesuffix(".exe"))
    if runner is not None:
        package = _package_arg(list(transport.args))
        if package:
            return {"kind": runner, "package": package}
    path = _resolve(command, transport.cwd)
    if path is None:
        return {"kind": "command", "path": command, "sha256": ""}  # not found: the connection says so
    return {"kind": "command", "path": path, "sha256": _file_sha256(path)}


def _package_arg(args: list[str]) -> str:
    """The package a runner's arguments name: ``--package``/``-p``/``--from``'s value, else
    the first argument that is not an option."""
    for i, arg in enumerate(args):
        if arg in ("-p", "--package", "--from") and i + 1 < len(args):
            return args[i + 1]
        for prefix in ("--package=", "--from="):
            if arg.startswith(prefix):
                return arg[len(prefix):]
    return next((arg for arg in args if not arg.startswith("-")), "")


def _resolve(command: str, cwd: str) -> str | None:
    if os.sep in command or (os.altsep and os.altsep in command):
        path = Path(cwd or ".") / command
        return str(path.resolve()) if path.is_file() else None
    found = shutil.which(command)
    return str(Path(found).resolve()) if found else None


def _file_sha256(path: str) -> str:
    hashed = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(HASH_CHUNK):
                hashed.update(chunk)
    except OSError:
        return ""
    return hashed.hexdigest()


def source_change(was: dict[str, str], now: dict[str, str]) -> str:
    """A sentence naming how the source moved from the lock's, or "" when it did not."""
    if not was or was == now:
        return ""
    if was.get("kind") != now.get("kind"):
        return f"it was a {was.get('kind')} server when locked and is a {now.get('kind')} server now"
    if now.get("kind") == "command":
        if was.get("path") != now.get("path"):
            return f"its command resolves to {now.get('path')}, not {was.get('path')} as locked"
        return f"its executable {now.get('path')} changed (SHA-256 {now.get('sha256', '')[:12]}..., " \
               f"locked {was.get('sha256', '')[:12]}...)"
    if now.get("kind") == "url":
        return f"its URL is {now.get('url')}, not {was.get('url')} as locked"
    return f"its package is {now.get('package')}, not {was.get('package')} as locked"


# --- checking -----------------------------------------------------------------------------


def check_tools(locked: LockedServer | None, tools: list[Any]) -> dict[str, ToolCheck]:
    """Each listed tool (``McpTool``) against the server's lock entry."""
    pinned = locked.tools if locked is not None else {}
    checks: dict[str, ToolCheck] = {}
    for tool in tools:
        shape = definition(tool)
        sha = digest(shape)
        was = pinned.get(tool.name)
        state = "new" if was is None else "locked" if was.sha256 == sha else "drifted"
        checks[tool.name] = ToolCheck(tool.name, state, sha, shape, was)  # type: ignore[arg-type]
    return checks


def diff_text(old: dict[str, Any] | None, new: dict[str, Any], *, max_lines: int = MAX_DIFF_LINES) -> str:
    """A unified diff of two definitions as sorted, indented JSON (a new tool: all of it),
    cut at ``max_lines`` with a note of what was left out."""
    def lines(value: dict[str, Any] | None) -> list[str]:
        return [] if value is None else json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()

    out = list(difflib.unified_diff(lines(old), lines(new), "tern.lock", "server", n=2, lineterm=""))
    if len(out) > max_lines:
        out = out[:max_lines] + [f"... {len(out) - max_lines} more lines"]
    return "\n".join(out)


# --- the file -----------------------------------------------------------------------------


def read_lock(path: Path) -> LockFile | None:
    """The lock at ``path``, None when there is none. ConfigError (one line) for a file
    that is too big, not JSON, not a tern lock, or whose definitions do not match their
    digests."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_LOCK_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_LOCK_BYTES:
        raise ConfigError(f"{path}: over {MAX_LOCK_BYTES // (1024 * 1024)} MiB, more than a lock file holds; "
                          "remove it and run `tern mcp lock` again")
    try:
        lock = msgspec.json.decode(data, type=LockFile)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{path}: not a tern lock file ({exc}); remove it and run `tern mcp lock` again") \
            from None
    if lock.tern_lock != FORMAT:
        raise ConfigError(f"{path}: lock format {lock.tern_lock}, this tern reads format {FORMAT}")
    for server, entry in lock.servers.items():
        for name, tool in entry.tools.items():
            if tool.definition.get("name") != name or digest(tool.definition) != tool.sha256:
                raise ConfigError(f"{path}: the definition of {server}/{name} does not match its sha256 (edited by "
                                  "hand?); run `tern mcp lock` again")
    return lock


def write_lock(path: Path, lock: LockFile) -> None:
    """Write ``lock`` atomically: a temporary file beside it, fsync, rename over."""
    data = msgspec.json.format(msgspec.json.encode(lock, order="sorted"), indent=2) + b"\n"
    mode = 0o644
    try:
        mode = os.stat(path).st_mode & 0o777
    except FileNotFoundError:
        pass
    fd, temp = tempfile.mkstemp(prefix=".tern.lock.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


class LockStore:
    """The lock file as the supervisor uses it: read at start (a bad file stops the boot
    with its one line), read again when it changed on disk (``tern mcp lock`` while a
    daemon runs; a bad file then keeps the last good one and says so), updated when a
    person approves a tool."""

    def __init__(self, path: Path | None, configured: list[str] | None = None) -> None:
        self.path = path
        self.configured = configured
        self._stamp: tuple[int, int] | None = None
        self.lock: LockFile | None = None
        self.exists = False
        if path is not None:
            self.lock = read_lock(path)
            self.exists = self.lock is not None
            self._stamp = self._stat()
            self._unconfigured()

    def _stat(self) -> tuple[int, int] | None:
        try:
            stat = os.stat(self.path)  # type: ignore[arg-type]
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size

    def _unconfigured(self) -> None:
        if self.lock is None or self.configured is None:
            return
        for name in self.lock.servers:
            if name not in self.configured:
                log.warning("%s pins MCP server '%s', which the config does not have: ignored (`tern mcp lock` "
                            "drops it)", self.path, name)

    def refresh(self) -> None:
        """Read the file again if it changed since it was last read."""
        if self.path is None:
            return
        stamp = self._stat()
        if stamp == self._stamp:
            return
        try:
            lock = read_lock(self.path)
        except ConfigError as exc:
            log.error("%s; keeping the lock as it was", exc)
            return
        self._stamp, self.lock, self.exists = stamp, lock, lock is not None
        self._unconfigured()

    def mode(self, entry: Any) -> Mode:
        chosen = getattr(entry, "lock", None)
        return chosen if chosen is not None else "enforce" if self.exists else "off"

    def server(self, name: str) -> LockedServer | None:
        return self.lock.servers.get(name) if self.lock is not None else None

    def approve(self, server: str, source: dict[str, str], checks: list[ToolCheck]) -> None:
        """Pin these definitions (and the server's source, when the lock had none) and
        write the file. The pins hold in memory even when the write fails (OSError)."""
        self.refresh()
        lock = self.lock if self.lock is not None else LockFile()
        entry = lock.servers.get(server) or LockedServer(source=source)
        tools = {**entry.tools, **{c.tool: LockedTool(c.sha256, c.definition) for c in checks}}
        servers = {**lock.servers, server: LockedServer(entry.source or source, tools)}
        self.lock = LockFile(FORMAT, servers)
        self.exists = True
        if self.path is None:
            raise OSError("no config file, so no tern.lock beside it")
        write_lock(self.path, self.lock)
        self._stamp = self._stat()
