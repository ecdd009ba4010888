"""File tools: read, write, list and search inside the caller's workspace, and nowhere else.

A path is split into components lexically (``..`` that would climb out of the workspace,
sibling directories such as ``ws-x`` next to ``ws`` and absolute paths elsewhere are
refused), then opened by ``fs_beneath``: one component at a time from a descriptor of the
workspace, never following a symlink. So nothing swapped in while a call runs can redirect
it outside. Symlinks inside the workspace are refused (read, write) or listed but not
followed (list, search), wherever they point: "points inside" is a fact that can change
between the check and the use. Writes refuse files with more than one hard link and
anything that is not a regular file; reads refuse FIFOs and devices without opening them.

Blocking file I/O runs in a worker thread (``trio.to_thread``), and every walk is
bounded, so a big workspace cannot stall the event loop or the tool. Outputs name
paths relative to the workspace: the absolute location of the workspace is tern's
business, not the model's. Truncation, redaction and timeouts are the pipeline's job.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import os
import stat
from typing import Any
from collections.abc import Callable, Iterator

import trio

from runtime.errors import ToolRefused
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel import fs_beneath
from runtime.kernel.fs_beneath import os_refusal, symlink_refusal
from runtime.kernel.registry import ToolRegistry

__all__ = ["FILE_TOOLS", "register_file_tools", "file_read", "file_write", "file_list", "file_search",
           "read_bytes", "list_paths", "stamp"]

MiB = 1024 * 1024
MAX_READ_BYTES = 10 * MiB
MAX_WRITE_BYTES = 10 * MiB
MAX_PATH_CHARS = 4096
MAX_FULL_PATH_BYTES = 4095  # the workspace and the path together: PATH_MAX, so other tools can use it
MAX_LIST_ENTRIES = 1000
MAX_WALK_ENTRIES = 100_000  # how far past MAX_LIST_ENTRIES we keep counting for "[N more]"
MAX_WALK_DEPTH = 100  # a walk holds one descriptor per level
MAX_SEARCH_MATCHES = 200
MAX_SEARCH_FILES = 2000
MAX_SEARCH_FILE_BYTES = 1 * MiB
BINARY_SNIFF_BYTES = 8192
MAX_LINE_CHARS = 200

_PATH = {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS,
         "description": "Path relative to the workspace (absolute paths only if inside it)."}


# --- paths ---------------------------------------------------------------------------------


def _show(path: str) -> str:
    """The requested path, shortened for an error message (it is the caller's own input)."""
    return repr(path if len(path) <= 200 else path[:200] + "...")


def _parts(context: ToolContext, path: str) -> tuple[str, list[str]]:
    """(the workspace's realpath, the components of ``path`` beneath it), refused unless
    inside. Lexical: no component is ``..``, and none has been looked at on disk yet."""
    if not context.workspace:
        raise ToolRefused("this caller has no workspace")
    if "\x00" in path:
        raise ToolRefused("path contains a NUL byte")
    if len(path) > MAX_PATH_CHARS:
        raise ToolRefused(f"path is too long ({len(path)} characters, at most {MAX_PATH_CHARS})")
    os.makedirs(context.workspace, mode=0o700, exist_ok=True)
    ws = os.path.realpath(context.workspace)
    rel = os.path.normpath(path)
    if os.path.isabs(rel):  # allowed when inside the workspace as configured or as resolved
        for root in dict.fromkeys([ws, os.path.abspath(context.workspace)]):
            if os.path.commonpath([root, rel]) == root:
                rel = os.path.relpath(rel, root)
                break
        else:
            raise ToolRefused(f"path escapes the workspace: {_show(path)}")
    parts = [] if rel == "." else rel.split(os.sep)
    if parts and parts[0] == "..":
        raise ToolRefused(f"path escapes the workspace: {_show(path)}")
    if len(os.fsencode(os.path.join(ws, *parts))) > MAX_FULL_PATH_BYTES:
        raise ToolRefused(f"path is too long for this workspace: {_show(path)}")
    return ws, parts


@contextlib.contextmanager
def _closing(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def _open_regular(dir_fd: int, name: str, rel: str, max_bytes: int) -> tuple[int, int]:
    """Open a regular file for reading without following a symlink; (fd, size). A FIFO or
    device is refused before it is opened, and checked again on the descriptor."""
    found = fs_beneath.lstat(dir_fd, name)
    if found is None:
        raise ToolRefused(f"{rel}: No such file or directory")
    _check_regular(found, rel, "is a directory (use file_list)")
    fd = fs_beneath.open_file(dir_fd, name, rel, fs_beneath.READ_FLAGS)
    try:
        st = os.fstat(fd)
        _check_regular(st, rel, "is a directory (use file_list)")
        if st.st_size > max_bytes:
            raise ToolRefused(f"{rel} is too large ({st.st_size} bytes, at most {max_bytes})")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _check_regular(st: os.stat_result, rel: str, directory: str) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise symlink_refusal(rel)
    if stat.S_ISDIR(st.st_mode):
        raise ToolRefused(f"{rel} {directory}")
    if not stat.S_ISREG(st.st_mode):
        raise ToolRefused(f"{rel} is not a regular file")


def _check_writable(st: os.stat_result, rel: str) -> None:
    _check_regular(st, rel, "is a directory")
    if st.st_nlink > 1:
        raise ToolRefused(f"{rel} has {st.st_nlink} hard links: the file tools do not write to a file linked "
                          "from elsewhere")


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
    ws, parts = _parts(context, arguments["path"])
    rel = "/".join(parts) or "."
    with _closing(fs_beneath.open_root(ws)) as root:
        if not parts:
            raise ToolRefused(". is a directory (use file_list)")
        with _closing(fs_beneath.open_dir(root, parts[:-1])) as parent:
            fd, _ = _open_regular(parent, parts[-1], rel, MAX_READ_BYTES)
    text = _read_all(fd, MAX_READ_BYTES + 1).decode("utf-8", errors="replace")
    offset = arguments.get("offset", 0)
    limit = arguments.get("limit")
    part = text[offset:] if limit is None else text[offset:offset + limit]
    return ToolResult(part, structured={"path": rel, "total_chars": len(text), "offset": offset,
                                        "returned_chars": len(part)})


def read_bytes(workspace: str, path: str, max_bytes: int) -> bytes:
    """One regular file of ``workspace``, opened as ``file_read`` opens it (beneath the
    workspace, no symlink followed); refused (ToolRefused) when larger than ``max_bytes``.
    Blocking: for other readers of a workspace (the MCP server's resources), in a thread."""
    ws, parts = _parts(ToolContext(workspace=workspace), path)
    rel = "/".join(parts) or "."
    if not parts:
        raise ToolRefused(". is a directory")
    with _closing(fs_beneath.open_root(ws)) as root, _closing(fs_beneath.open_dir(root, parts[:-1])) as parent:
        fd, _ = _open_regular(parent, parts[-1], rel, max_bytes)
    return _read_all(fd, max_bytes + 1)[:max_bytes]


def stamp(workspace: str, path: str) -> tuple[int, int, int] | None:
    """(mtime_ns, size, inode) of one regular file of ``workspace`` (found without following a
    symlink), or None when there is none: to tell that a file changed. Blocking."""
    try:
        ws, parts = _parts(ToolContext(workspace=workspace), path)
        if not parts:
            return None
        with _closing(fs_beneath.open_root(ws)) as root, _closing(fs_beneath.open_dir(root, parts[:-1])) as parent:
            found = fs_beneath.lstat(parent, parts[-1])
    except (ToolRefused, OSError):
        return None
    if found is None or not stat.S_ISREG(found.st_mode):
        return None
    return found.st_mtime_ns, found.st_size, found.st_ino


def list_paths(workspace: str, limit: int) -> list[str]:
    """The regular files of ``workspace`` (relative, sorted depth-first, symlinks left out),
    at most ``limit``; an absent workspace has none. Blocking, as ``read_bytes``."""
    if not os.path.isdir(workspace):
        return []
    found: list[str] = []
    with _closing(fs_beneath.open_root(os.path.realpath(workspace))) as root, \
            contextlib.closing(_walk(root, "", True)) as walk:
        for rel, _, _, _, is_file in walk:
            if is_file:
                found.append(rel)
                if len(found) >= limit:
                    break
    return found


def _file_write(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    path = arguments["path"]
    data = arguments["content"].encode("utf-8", errors="replace")
    if len(data) > MAX_WRITE_BYTES:
        raise ToolRefused(f"content is too large ({len(data)} bytes, at most {MAX_WRITE_BYTES})")
    ws, parts = _parts(context, path)
    if not parts:
        raise ToolRefused(f"not a file path: {_show(path)}")
    rel, name = "/".join(parts), parts[-1]
    with _closing(fs_beneath.open_root(ws)) as root, \
            _closing(fs_beneath.open_dir(root, parts[:-1], create=True)) as parent:
        found = fs_beneath.lstat(parent, name)
        if found is not None:
            _check_writable(found, rel)
        try:
            if arguments.get("append", False):
                _append(parent, name, rel, data)
            else:
                fs_beneath.replace_file(parent, name, data, stat.S_IMODE(found.st_mode) if found else 0o600)
        except OSError as exc:
            raise os_refusal(exc, rel) from None
    return ToolResult(f"wrote {len(data)} bytes to {rel}")


def _append(parent: int, name: str, rel: str, data: bytes) -> None:
    """Append through a descriptor checked after opening: a regular file with one link."""
    fd = fs_beneath.open_file(parent, name, rel, fs_beneath.APPEND_FLAGS)
    with os.fdopen(fd, "wb") as handle:
        _check_writable(os.fstat(fd), rel)
        handle.write(data)


def _walk(top: int, prefix: str, recursive: bool) -> Iterator[tuple[str, int, str, bool, bool]]:
    """(workspace-relative path, its directory's fd, name, is_dir, is_file) in sorted depth-first
    order. Symlinks are listed but never followed (a symlinked directory is not a directory
    here); unreadable directories, and those deeper than MAX_WALK_DEPTH, are skipped.
    Iterative: a deep tree must not hit the recursion limit."""
    stack: list[tuple[int, str, Iterator[tuple[str, bool, bool]]]] = []
    try:
        fd = os.dup(top)
        stack.append((fd, prefix, _entries(fd)))
        while stack:
            fd, base, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(stack.pop()[0])
                continue
            name, is_dir, is_file = entry
            rel = f"{base}/{name}" if base else name
            yield rel, fd, name, is_dir, is_file
            if recursive and is_dir and len(stack) < MAX_WALK_DEPTH:
                try:
                    child = os.open(name, fs_beneath.DIR_FLAGS, dir_fd=fd)
                except OSError:
                    continue  # gone, swapped for a symlink, or unreadable
                stack.append((child, rel, _entries(child)))
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _entries(fd: int) -> Iterator[tuple[str, bool, bool]]:
    """(name, is_dir, is_file) of the directory ``fd``, sorted, symlinks not followed (both
    False); empty when it cannot be read."""
    found = []
    try:
        with os.scandir(fd) as scan:
            for entry in scan:
                try:
                    kind = entry.is_dir(follow_symlinks=False), entry.is_file(follow_symlinks=False)
                except OSError:
                    kind = False, False
                found.append((entry.name, *kind))
    except OSError:
        return iter(())
    return iter(sorted(found))


def _directory(root: int, parts: list[str]) -> int:
    """A descriptor of the directory the caller names, with the sentences list and search use."""
    rel = "/".join(parts) or "."
    if not parts:
        return os.dup(root)
    with _closing(fs_beneath.open_dir(root, parts[:-1])) as parent:
        found = fs_beneath.lstat(parent, parts[-1])
        if found is None:
            raise ToolRefused(f"{rel}: no such directory")
        if stat.S_ISLNK(found.st_mode):
            raise symlink_refusal(rel)
        if not stat.S_ISDIR(found.st_mode):
            raise ToolRefused(f"{rel} is not a directory")
        return fs_beneath.open_dir(parent, parts[-1:])


def _file_list(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    ws, parts = _parts(context, arguments.get("path", "."))
    lines: list[str] = []
    more = 0
    with _closing(fs_beneath.open_root(ws)) as root, _closing(_directory(root, parts)) as top, \
            contextlib.closing(_walk(top, "/".join(parts), arguments.get("recursive", False))) as walk:
        for rel, _, _, is_dir, _ in walk:
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
    if lines:
        return ToolResult("\n".join(lines))
    where = os.path.join(str(ws), *parts)  # name it: "(empty directory)" alone leaves a person asking which
    return ToolResult(f"(empty directory: {where})")


def _file_search(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
    pattern = arguments["pattern"]
    text = arguments.get("text")
    ws, parts = _parts(context, arguments.get("path", "."))
    lines: list[str] = []
    scanned = skipped = 0
    stopped = ""
    with _closing(fs_beneath.open_root(ws)) as root, _closing(_directory(root, parts)) as top, \
            contextlib.closing(_walk(top, "/".join(parts), True)) as walk:
        for rel, dir_fd, name, _, is_file in walk:
            if not is_file:
                continue  # directories, symlinks (never followed), FIFOs, devices
            if scanned >= MAX_SEARCH_FILES:
                stopped = f"[stopped after scanning {MAX_SEARCH_FILES} files]"
                break
            scanned += 1
            subject = rel if "/" in pattern else name
            if not fnmatch.fnmatchcase(subject, pattern):
                continue
            if text is None:
                lines.append(rel)
            else:
                hits = _grep(dir_fd, name, rel, text, MAX_SEARCH_MATCHES - len(lines))
                if hits is None:
                    skipped += 1
                lines.extend(hits or [])
            if len(lines) >= MAX_SEARCH_MATCHES:
                stopped = f"[stopped at {MAX_SEARCH_MATCHES} matches]"
                break
    if skipped:
        lines.append(f"[skipped {skipped} binary, large or unreadable files]")
    if stopped:
        lines.append(stopped)
    return ToolResult("\n".join(lines) if lines else "no matches")


def _grep(dir_fd: int, name: str, rel: str, text: str, room: int) -> list[str] | None:
    """Matching lines of one file, at most ``room``; None when skipped (binary, too large,
    unreadable)."""
    try:
        fd, _ = _open_regular(dir_fd, name, rel, MAX_SEARCH_FILE_BYTES)
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
          "offset and limit select a range of characters. Symlinks are not followed.",
          {"type": "object", "properties": {
              "path": _PATH,
              "offset": {"type": "integer", "minimum": 0, "description": "First character to return."},
              "limit": {"type": "integer", "minimum": 0, "description": "How many characters to return."}},
           "required": ["path"], "additionalProperties": False}), file_read),
    (Tool("file_write", "Write a text file in your workspace, replacing it atomically, or append to it. "
          "Parent directories are created. Symlinks, files with several hard links and special files "
          "are refused.",
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
