"""File tools: read, write, list and search inside the caller's workspace, and nowhere else.

Every path goes through ``_resolve``: realpath of both the workspace and the target,
then a separator-aware containment check (``commonpath``), so ``..`` escapes, sibling
directories such as ``ws-x`` next to ``ws``, absolute paths elsewhere and symlinks
pointing outside are all refused. Writes re-check after creating parent directories
and open the final file with ``O_NOFOLLOW``, so a symlink swapped in late is not
followed. Walks (list, search) never follow symlinks at all.

Blocking file I/O runs in a worker thread (``trio.to_thread``), and every walk is
bounded, so a big workspace cannot stall the event loop or the tool. Outputs name
paths relative to the workspace: the absolute location of the workspace is tern's
business, not the model's. Truncation, redaction and timeouts are the pipeline's job.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import stat
import tempfile
from typing import Any
from collections.abc import Callable, Iterator

import trio

from runtime.errors import ToolRefused
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry

__all__ = ["FILE_TOOLS", "register_file_tools", "file_read", "file_write", "file_list", "file_search"]

MiB = 1024 * 1024
MAX_READ_BYTES = 10 * MiB
MAX_WRITE_BYTES = 10 * MiB
MAX_PATH_CHARS = 4096
MAX_LIST_ENTRIES = 1000
MAX_WALK_ENTRIES = 100_000  # how far past MAX_LIST_ENTRIES we keep counting for "[N more]"
MAX_SEARCH_MATCHES = 200
MAX_SEARCH_FILES = 2000
MAX_SEARCH_FILE_BYTES = 1 * MiB
BINARY_SNIFF_BYTES = 8192
MAX_LINE_CHARS = 200

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)  # a FIFO must not hang the worker thread

_PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS,
         "description": "Path relative to the workspace (absolute paths only if inside it)."}


# --- paths ---------------------------------------------------------------------------------


def _workspace(context: ToolContext) -> str:
    """The caller's workspace, created private on first use, as a realpath."""
    if not context.workspace:
        raise ToolRefused("this caller has no workspace")
    os.makedirs(context.workspace, mode=0o700, exist_ok=True)
    return os.path.realpath(context.workspace)


def _show(path: str) -> str:
    """The requested path, shortened for an error message (it is the caller's own input)."""
    return repr(path if len(path) <= 200 else path[:200] + "...")


def _inside(ws: str, target: str) -> bool:
    return os.path.commonpath([ws, target]) == ws


def _resolve(ws: str, path: str, shown: str = "") -> str:
    """The realpath of ``path`` (relative to ``ws``), refused unless inside ``ws``.
    ``shown`` is what error messages name (default: ``path`` as the caller gave it)."""
    shown = shown or path
    if "\x00" in path:
        raise ToolRefused("path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise ToolRefused(f"path is too long ({len(path)} characters, at most {MAX_PATH_CHARS})")
    try:
        target = os.path.realpath(os.path.join(ws, path))
    except (OSError, ValueError) as exc:
        raise ToolRefused(f"cannot resolve path {_show(shown)}: {type(exc).__name__}") from None
    if not _inside(ws, target):
        raise ToolRefused(f"path escapes the workspace: {_show(shown)}")
    return target


def _rel(ws: str, target: str) -> str:
    rel = os.path.relpath(target, ws)
    return rel.replace(os.sep, "/")


def _os_error(exc: OSError, rel: str) -> ToolRefused:
    """An OSError without the absolute path its message would carry."""
    return ToolRefused(f"{rel}: {exc.strerror or type(exc).__name__}")


def _open_regular(target: str, rel: str, max_bytes: int) -> tuple[int, int]:
    """Open a regular file for reading without following a final symlink; (fd, size)."""
    try:
        st = os.stat(target)
    except OSError as exc:
        raise _os_error(exc, rel) from None
    if stat.S_ISDIR(st.st_mode):
        raise ToolRefused(f"{rel} is a directory (use file_list)")
    if not stat.S_ISREG(st.st_mode):
        raise ToolRefused(f"{rel} is not a regular file")
    try:
        fd = os.open(target, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC | _O_NONBLOCK)
    except OSError as exc:
        raise _os_error(exc, rel) from None
    size = os.fstat(fd).st_size
    if size > max_bytes:
        os.close(fd)
        raise ToolRefused(f"{rel} is too large ({size} bytes, at most {max_bytes})")
    return fd, size


def _read_all(fd: int, limit: int) -> bytes:
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit)


# --- handlers --------------------------------------------------------------------------------


def _tool(sync: Callable[[dict[str, Any], ToolContext], ToolResult], *, abandon: bool) -> Callable[..., Any]:
    """An async handler running ``sync`` in a worker thread, refusals as tool errors.
    Read-only tools may be abandoned on cancel (the pipeline's timeout then returns at
    once); a write is waited for, so it has either happened or not when we answer."""

    def guarded(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            return sync(arguments, context)
        except ToolRefused as exc:
            return ToolResult(str(exc), is_error=True)
        except OSError as exc:  # not about a path we can name: no filename, no absolute path
            return ToolResult(f"file error: {exc.strerror or type(exc).__name__}", is_error=True)

    @functools.wraps(sync)
    async def handler(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return await trio.to_thread.run_sync(guarded, arguments, context, abandon_on_cancel=abandon)

    return handler


def _file_read(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    ws = _workspace(context)
    target = _resolve(ws, arguments["path"])
    rel = _rel(ws, target)
    fd, _ = _open_regular(target, rel, MAX_READ_BYTES)
    text = _read_all(fd, MAX_READ_BYTES + 1).decode("utf-8", errors="replace")
    offset = arguments.get("offset", 0)
    limit = arguments.get("limit")
    part = text[offset:] if limit is None else text[offset:offset + limit]
    return ToolResult(part, structured={"path": rel, "total_chars": len(text), "offset": offset,
                                        "returned_chars": len(part)})


def _file_write(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    ws = _workspace(context)
    path = arguments["path"]
    data = arguments["content"].encode("utf-8", errors="replace")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolRefused(f"content is too large ({len(data)} bytes, at most {MAX_WRITE_BYTES})")
    _resolve(ws, path)  # NUL, length, and a first containment check of the whole path
    joined = os.path.join(ws, path)
    name = os.path.basename(joined)
    if name in ("", ".", ".."):
        raise ToolRefused(f"not a file path: {_show(path)}")
    parent = _resolve(ws, os.path.dirname(joined), path)
    try:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise _os_error(exc, _rel(ws, parent)) from None
    parent = _resolve(ws, parent, path)  # again: a symlink may have appeared while we created it
    final = _resolve(ws, os.path.join(parent, name), path)  # a symlink named by path must point inside
    rel = _rel(ws, final)
    if os.path.isdir(final):
        raise ToolRefused(f"{rel} is a directory")
    try:
        if arguments.get("append", False):
            _append(final, data)
        else:
            _replace(final, data)
    except OSError as exc:
        raise _os_error(exc, rel) from None
    return ToolResult(f"wrote {len(data)} bytes to {rel}")


def _append(final: str, data: bytes) -> None:
    fd = os.open(final, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _replace(final: str, data: bytes) -> None:
    """Write a temp file beside ``final`` and rename it over: readers see the old or the new
    content, never half. ``os.replace`` renames over a symlink rather than through it."""
    directory, name = os.path.split(final)
    try:
        mode = stat.S_IMODE(os.stat(final, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        mode = 0o600
    fd, temp = tempfile.mkstemp(prefix=f".{name[:100]}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, mode)
        os.replace(temp, final)
    except BaseException:
        try:
            os.unlink(temp)
        except OSError:
            pass
        raise


def _walk(ws: str, top: str, recursive: bool) -> Iterator[tuple[str, os.DirEntry[str], bool]]:
    """(workspace-relative path, entry, is_dir) in sorted depth-first order. Symlinks are
    listed but never followed (a symlinked directory is not a directory here); unreadable
    directories are skipped. Iterative: a deep tree must not hit the recursion limit."""
    stack: list[Iterator[os.DirEntry[str]]] = [_entries(top)]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
        except OSError:
            is_dir = False
        yield _rel(ws, entry.path), entry, is_dir
        if recursive and is_dir:
            stack.append(_entries(entry.path))


def _entries(directory: str) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scan:
            return iter(sorted(scan, key=lambda e: e.name))
    except OSError:
        return iter(())


def _directory(ws: str, path: str) -> str:
    top = _resolve(ws, path)
    if not os.path.isdir(top):
        raise ToolRefused(f"{_rel(ws, top)} is not a directory" if os.path.exists(top) else
                      f"{_rel(ws, top)}: no such directory")
    return top


def _file_list(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    ws = _workspace(context)
    top = _directory(ws, arguments.get("path", "."))
    lines: list[str] = []
    more = 0
    for rel, _, is_dir in _walk(ws, top, arguments.get("recursive", False)):
        if len(lines) < MAX_LIST_ENTRIES:
            lines.append(rel + "/" if is_dir else rel)
        else:
            more += 1
            if more >= MAX_WALK_ENTRIES:
                lines.append(f"[at least {more} more]")
                break
    else:
        if more:
            lines.append(f"[{more} more]")
    return ToolResult("\n".join(lines) if lines else "(empty directory)")


def _file_search(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    ws = _workspace(context)
    pattern = arguments["pattern"]
    text = arguments.get("text")
    top = _directory(ws, arguments.get("path", "."))
    lines: list[str] = []
    scanned = skipped = 0
    stopped = ""
    for rel, entry, is_dir in _walk(ws, top, True):
        if is_dir or not entry.is_file(follow_symlinks=False):
            continue  # directories, and symlinks (never followed)
        if scanned >= MAX_SEARCH_FILES:
            stopped = f"[stopped after scanning {MAX_SEARCH_FILES} files]"
            break
        scanned += 1
        subject = rel if "/" in pattern else entry.name
        if not fnmatch.fnmatchcase(subject, pattern):
            continue
        if text is None:
            lines.append(rel)
        else:
            found = _grep(entry.path, rel, text, MAX_SEARCH_MATCHES - len(lines))
            if found is None:
                skipped += 1
            lines.extend(found or [])
        if len(lines) >= MAX_SEARCH_MATCHES:
            stopped = f"[stopped at {MAX_SEARCH_MATCHES} matches]"
            break
    if skipped:
        lines.append(f"[skipped {skipped} binary, large or unreadable files]")
    if stopped:
        lines.append(stopped)
    return ToolResult("\n".join(lines) if lines else "no matches")


def _grep(path: str, rel: str, text: str, room: int) -> list[str] | None:
    """Matching lines of one file, at most ``room``; None when skipped (binary, too large,
    unreadable)."""
    try:
        fd, _ = _open_regular(path, rel, MAX_SEARCH_FILE_BYTES)
        data = _read_all(fd, MAX_SEARCH_FILE_BYTES + 1)
    except (ToolRefused, OSError):
        return None
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    found = []
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        if text in line:
            found.append(f"{rel}:{number}: {line[:MAX_LINE_CHARS]}")
            if len(found) >= room:
                break
    return found


file_read = _tool(_file_read, abandon=True)
file_write = _tool(_file_write, abandon=False)
file_list = _tool(_file_list, abandon=True)
file_search = _tool(_file_search, abandon=True)

_BOOL = {"type": "boolean"}

FILE_TOOLS: list[tuple[Tool, Any]] = [
    (Tool("file_read", "Read a text file in your workspace (UTF-8; at most 10 MiB). "
          "offset and limit select a range of characters.",
          {"type": "object", "properties": {
              "path": _PATH,
              "offset": {"type": "integer", "minimum": 0, "description": "First character to return."},
              "limit": {"type": "integer", "minimum": 0, "description": "How many characters to return."}},
           "required": ["path"], "additionalProperties": False}), file_read),
    (Tool("file_write", "Write a text file in your workspace, replacing it atomically, or append to it. "
          "Parent directories are created.",
          {"type": "object", "properties": {
              "path": _PATH,
              "content": {"type": "string", "maxLength": MAX_WRITE_BYTES},
              "append": {**_BOOL, "description": "Append instead of replacing."}},
           "required": ["path", "content"], "additionalProperties": False}), file_write),
    (Tool("file_list", "List a directory of your workspace (directories end with '/'); "
          "recursive lists the whole tree. Symlinks are not followed.",
          {"type": "object", "properties": {
              "path": {**_PATH, "description": "Directory to list (default: the workspace)."},
              "recursive": _BOOL},
           "additionalProperties": False}), file_list),
    (Tool("file_search", "Find files in your workspace by glob (e.g. '*.md'; a pattern with '/' matches "
          "the whole relative path) and, with text, the lines containing that text.",
          {"type": "object", "properties": {
              "pattern": {"type": "string", "minLength": 1, "maxLength": 1000},
              "text": {"type": "string", "minLength": 1, "maxLength": 1000,
                       "description": "Substring to look for in file contents (case-sensitive)."},
              "path": {**_PATH, "description": "Directory to search (default: the workspace)."}},
           "required": ["pattern"], "additionalProperties": False}), file_search),
]


def register_file_tools(registry: ToolRegistry) -> None:
    for tool, handler in FILE_TOOLS:
        registry.register(tool, handler)
