"""The scripts directory: which files are scripts, and reading one without following links.

A script is a regular, executable file directly in ``[scripts] dir`` whose name matches
``SCRIPT_NAME`` (so no path, no ``..``, no hidden file). Every open is relative to a
descriptor of that directory (its location is the operator's config: trusted), with
``O_NOFOLLOW | O_NONBLOCK``: a symlink is refused wherever it points, inside the
directory too ("points inside" can change between check and use), and a FIFO, socket
or device is refused by ``lstat`` before any open and by ``fstat`` after it, never
blocking on it.

``copy_verified`` is how a script runs exactly the bytes that were hashed: one pass
over one descriptor hashes the bytes and writes them into a private copy (in a 0700
directory of tern's state), and the copy is what is executed, its shebang interpreter
reading the copy too. An edit of the original after that read, a rename over it, or a
write through its inode changes nothing that runs. Executing the original through its
descriptor (``fexecve``) would not do: a write through the same inode still changes
what runs, and an interpreter reopens the file by path.
"""

from __future__ import annotations

import difflib
import errno
import hashlib
import heapq
import os
import stat
from typing import Any, NamedTuple

from runtime.config.checks import SCRIPT_NAME
from runtime.errors import ToolRefused
from runtime.kernel.fs_beneath import READ_FLAGS, SUPPORTED, lstat

__all__ = ["MAX_SCRIPT_BYTES", "MAX_SCRIPTS", "NoSuchScript", "Script", "Listing", "check_name", "open_directory",
           "hash_script", "copy_verified", "scan", "with_hint", "short"]

MAX_SCRIPT_BYTES = 64 * 1024 * 1024  # a script (or a small binary); larger ones are refused, never read whole
MAX_SCRIPTS = 1000  # entries listed from one directory; the rest are counted
_CHUNK = 1 << 16
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_COPY_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | _O_CLOEXEC


class NoSuchScript(ToolRefused):
    """No script of that name in the scripts directory (never made, or deleted)."""


class Script(NamedTuple):
    name: str
    sha256: str  # hex


class Listing(NamedTuple):
    """The directory as it is now: its scripts by name, the entries that are not scripts
    and why (a symlink, not executable...), and how many entries were past the bound."""

    scripts: list[Script]
    skipped: list[tuple[str, str]]
    more: int


def short(sha256: str) -> str:
    return sha256[:12]


def check_name(name: Any) -> str:
    """``name`` if it names a file directly in the directory, else ``ToolRefused``."""
    if not isinstance(name, str) or not name:
        raise ToolRefused("a script name is needed (see script_list)")
    if not SCRIPT_NAME.fullmatch(name):
        shown = name if len(name) <= 60 else name[:57] + "..."
        raise ToolRefused(f"{shown!r} is not a script name: 1 to 128 letters, digits, '-', '_' and '.', "
                          "starting with a letter or digit (no paths)")
    return name


def open_directory(path: str) -> int:
    """A descriptor of the scripts directory; the caller closes it."""
    if not path:
        raise ToolRefused("scripts are off: [scripts] dir is not set")
    if not SUPPORTED:  # no fallback to opening by resolved name: that is the race this module closes
        raise ToolRefused("approved scripts need openat and O_NOFOLLOW, which this platform does not offer")
    try:
        return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
    except OSError as exc:
        raise ToolRefused(f"the scripts directory cannot be opened: {exc.strerror or type(exc).__name__}") from None


def _not_a_script(found: os.stat_result) -> str | None:
    """Why an entry cannot be a script, in a few words, or None when it can."""
    if stat.S_ISLNK(found.st_mode):
        return "a symlink"
    if not stat.S_ISREG(found.st_mode):
        return "not a regular file"
    if not found.st_mode & stat.S_IXUSR:
        return "not executable"
    if found.st_size > MAX_SCRIPT_BYTES:
        return f"larger than {MAX_SCRIPT_BYTES} bytes"
    return None


_ADVICE = {"a symlink": ": scripts run only from regular files in the scripts directory, never through a link",
           "not executable": " (chmod u+x it)"}


def _refused(name: str, why: str) -> ToolRefused:
    return ToolRefused(f"script '{name}' is {why}{_ADVICE.get(why, '')}")


def _open(dir_fd: int, name: str) -> int:
    """The script ``name`` opened for reading, refused unless a regular executable file."""
    found = lstat(dir_fd, name)
    if found is None:
        raise NoSuchScript(f"there is no script named '{name}'")
    why = _not_a_script(found)
    if why:
        raise _refused(name, why)
    try:
        fd = os.open(name, READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        raise NoSuchScript(f"there is no script named '{name}'") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink since the lstat
            raise _refused(name, "a symlink") from None
        raise ToolRefused(f"script '{name}' cannot be opened: {exc.strerror or type(exc).__name__}") from None
    try:
        why = _not_a_script(os.fstat(fd))  # what was opened, not what the name was a moment ago
        if why:
            raise _refused(name, why)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _pump(fd: int, name: str, out: int = -1) -> str:
    """Read ``fd`` to its end (bounded), hashing every byte and writing it to ``out``."""
    digest = hashlib.sha256()
    total = 0
    while chunk := os.read(fd, _CHUNK):
        total += len(chunk)
        if total > MAX_SCRIPT_BYTES:
            raise ToolRefused(f"script '{name}' grew past {MAX_SCRIPT_BYTES} bytes while it was read")
        digest.update(chunk)
        if out >= 0:
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view):]
    return digest.hexdigest()


def hash_script(dir_fd: int, name: str) -> str:
    """The SHA-256 (hex) of the script's bytes as they are now."""
    fd = _open(dir_fd, name)
    try:
        return _pump(fd, name)
    finally:
        os.close(fd)


def copy_verified(dir_fd: int, name: str, private_dir: str) -> tuple[str, str]:
    """Copy the script into ``private_dir`` (a fresh 0700 directory of tern's) as an
    executable file of the same name, hashing exactly the bytes copied; (path, sha256)."""
    fd = _open(dir_fd, name)
    try:
        path = os.path.join(private_dir, name)
        out = os.open(path, _COPY_FLAGS, 0o700)
        try:
            sha256 = _pump(fd, name, out)
        finally:
            os.close(out)  # before the exec: a file open for writing cannot be executed (ETXTBSY)
    finally:
        os.close(fd)
    return path, sha256


def scan(dir_fd: int, cache: dict[tuple[Any, ...], str] | None = None) -> tuple[Listing, dict[tuple[Any, ...], str]]:
    """The first ``MAX_SCRIPTS`` entries by name that could be scripts, each hashed or
    skipped with the reason, and the hash cache for the next scan. A hash is reused only
    for an entry whose device, inode, size, mtime and ctime are unchanged (every write
    changes the ctime, which no user can set); running a script never uses the cache, it
    hashes what it copies."""
    cache = cache or {}
    fresh: dict[tuple[Any, ...], str] = {}
    scripts: list[Script] = []
    skipped: list[tuple[str, str]] = []
    names, more = _names(dir_fd, MAX_SCRIPTS)
    for name in names:
        found = lstat(dir_fd, name)
        if found is None:
            continue  # deleted meanwhile
        why = _not_a_script(found)
        if why:
            skipped.append((name, why))
            continue
        key = (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns, name)
        try:
            sha256 = cache.get(key) or hash_script(dir_fd, name)
        except NoSuchScript:
            continue
        except ToolRefused as exc:
            skipped.append((name, str(exc).removeprefix(f"script '{name}' is ")))
            continue
        fresh[key] = sha256
        scripts.append(Script(name, sha256))
    return Listing(scripts, skipped, more), fresh


def _names(dir_fd: int, limit: int) -> tuple[list[str], int]:
    """The first ``limit`` names (sorted) in the directory that could be scripts (hidden
    files cannot), and how many more there are; memory stays bounded by ``limit``."""
    seen = 0

    def candidates() -> Any:
        nonlocal seen
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                if SCRIPT_NAME.fullmatch(entry.name):
                    seen += 1
                    yield entry.name

    first = heapq.nsmallest(limit, candidates())
    return first, seen - len(first)


def with_hint(dir_fd: int, name: str, missing: NoSuchScript, see: str = "script_list") -> NoSuchScript:
    """``missing`` with up to three script names that look like ``name``, or where to look."""
    close = difflib.get_close_matches(name, _names(dir_fd, MAX_SCRIPTS)[0], n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(repr(n) for n in close)}?)" if close else f" (see {see})"
    return NoSuchScript(f"{missing}{hint}")
