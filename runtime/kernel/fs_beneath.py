"""Open paths beneath a directory descriptor, one component at a time, never following a symlink.

Resolving a path to a string and then opening that string is a race: between the two, a
directory can be swapped for a symlink to ``/etc`` and the open lands outside. Here every
directory component is opened with ``O_DIRECTORY | O_NOFOLLOW`` relative to the descriptor
of the one before it, starting from the workspace root, and the final component with
``O_NOFOLLOW``; so a swap makes the operation fail instead of escaping. Paths are split by
the caller and contain no ``..`` (``parts`` below), so no step can climb out either.

Messages name paths relative to the workspace (``rel``), never the absolute location.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Sequence

from runtime.errors import ToolRefused

__all__ = ["SUPPORTED", "open_root", "open_dir", "open_file", "lstat", "replace_file", "symlink_refusal"]

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOCTTY = getattr(os, "O_NOCTTY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not hang the worker thread
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)

#: openat, mkdirat, fstatat, renameat and O_NOFOLLOW; without them (Windows) the file tools
#: refuse rather than fall back to resolving by path, which is the race this module closes.
SUPPORTED = (bool(_O_NOFOLLOW and _O_DIRECTORY) and os.open in os.supports_dir_fd
             and os.stat in os.supports_dir_fd and os.mkdir in os.supports_dir_fd
             and os.scandir in os.supports_fd)

DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
READ_FLAGS = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_NOCTTY | _O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_NOCTTY | _O_CLOEXEC


def symlink_refusal(rel: str) -> ToolRefused:
    return ToolRefused(f"{rel} is a symlink: symlinks inside the workspace are not followed")


def os_refusal(exc: OSError, rel: str) -> ToolRefused:
    """An OSError without the absolute path its message would carry."""
    return ToolRefused(f"{rel}: {exc.strerror or type(exc).__name__}")


def open_root(workspace: str) -> int:
    """A descriptor of the workspace directory itself (its location is tern's config: trusted)."""
    if not SUPPORTED:
        raise ToolRefused("the file tools need openat and O_NOFOLLOW, which this platform does not offer")
    return os.open(workspace, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)


def lstat(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry ``name`` itself (a symlink is not followed), or None when there is none."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _failed(dir_fd: int, name: str, rel: str, exc: OSError) -> ToolRefused:
    """Why opening ``name`` failed: a symlink gets its own sentence (O_NOFOLLOW reports it
    as ELOOP, or ENOTDIR together with O_DIRECTORY)."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
        try:
            found = lstat(dir_fd, name)
        except OSError:
            found = None
        if found is not None and stat.S_ISLNK(found.st_mode):
            return symlink_refusal(rel)
    return os_refusal(exc, rel)


def open_dir(root: int, parts: Sequence[str], *, create: bool = False) -> int:
    """A new descriptor of the directory ``root/parts...``, each component opened relative to
    the last without following symlinks; ``create`` makes missing ones (mode 0700)."""
    fd = os.dup(root)
    try:
        for index, name in enumerate(parts):
            rel = "/".join(parts[:index + 1])
            step = _step(fd, name, rel, create)
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


def _step(fd: int, name: str, rel: str, create: bool) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except FileNotFoundError as exc:
        if not create:
            raise os_refusal(exc, rel) from None
    except OSError as exc:
        raise _failed(fd, name, rel, exc) from None
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        pass  # made meanwhile: opened below with the same rules
    except OSError as exc:
        raise os_refusal(exc, rel) from None
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _failed(fd, name, rel, exc) from None


def open_file(dir_fd: int, name: str, rel: str, flags: int, mode: int = 0o600) -> int:
    """Open ``name`` in ``dir_fd`` with ``flags`` (which include O_NOFOLLOW)."""
    try:
        return os.open(name, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        raise _failed(dir_fd, name, rel, exc) from None


def replace_file(dir_fd: int, name: str, data: bytes, mode: int) -> None:
    """Write a temp file beside ``name`` and rename it over: readers see the old or the new
    content, never half. The rename replaces the directory entry (a symlink or hard link
    swapped in meanwhile is replaced, not written through)."""
    temp, fd = _temp(dir_fd, name)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def _temp(dir_fd: int, name: str) -> tuple[str, int]:
    for _ in range(100):
        temp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
        try:
            return temp, os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary file name")
