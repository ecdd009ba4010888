"""The watch trigger: poll a directory, and start a run with the files that appeared or
changed once they have been quiet for a while.

Polling (not inotify) so it works on every filesystem and host; its parts:
- ``scan`` (blocking, run in a worker thread with a timeout): every regular file under
  the root as ``path -> (mtime_ns, size, inode)``, walked depth first in name order with
  ``os.scandir``. Symlinks are neither followed nor reported, so a link out of the
  workspace or a directory loop is invisible. At most ``max_files`` entries (files and
  directories) and ``MAX_DEPTH`` levels are read: a bigger tree is cut, logged once (the
  cut is the same from scan to scan while the tree does not change: no phantom runs).
- ``changed`` (sans-IO): the paths of two snapshots that are new or differ. A rename
  shows as its new name, a file replaced under the same name as a change (new inode);
  a deleted file starts no run (nor does one made and deleted again before its run).
- ``Debounce`` (sans-IO): changes gather until none has come for ``debounce`` seconds,
  or for at most ``MAX_WAIT_DEBOUNCES`` x ``debounce`` overall so a constant writer still
  gets runs; then one run gets the paths, sorted, at most ``max_paths_per_run`` of them,
  the rest counted in a last entry ``"... and N more"`` (one burst is one run).
"""

from __future__ import annotations

import itertools
import os
import re
import threading
from collections.abc import Awaitable, Callable, Collection, Iterator
from pathlib import Path

import trio

from runtime.kernel.fs_beneath import DIR_FLAGS
from runtime.log import get_logger

__all__ = ["Stamp", "Snapshot", "scan", "changed", "Debounce", "watch_dir", "SCAN_TIMEOUT_SECS", "MAX_DEPTH",
           "MAX_WAIT_DEBOUNCES"]

Stamp = tuple[int, int, int]  # mtime_ns, size, inode
Snapshot = dict[str, Stamp]  # path relative to the root, "/"-separated -> stamp
SCAN_TIMEOUT_SECS = 30.0
MAX_DEPTH = 32  # directory levels walked below the root: each holds a descriptor open during the scan
MAX_WAIT_DEBOUNCES = 10
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_log = get_logger("triggers.watch")


def scan(root: Path, max_files: int) -> tuple[Snapshot, bool]:
    """The regular files under ``root`` and whether the walk was cut (``max_files`` entries or
    ``MAX_DEPTH`` levels). Each directory is opened relative to its parent's descriptor with
    ``O_NOFOLLOW``, so one swapped for a symlink mid-walk is not entered either."""
    found: Snapshot = {}
    seen = 0
    cut = False
    try:
        stack = [("", *_open(str(root), None, max_files))]
    except OSError:
        return found, False  # no root (yet), or a symlink: nothing to watch
    try:
        while stack:
            prefix, fd, entries = stack[-1]
            entry = next(entries, None)
            if entry is None:
                os.close(fd)
                stack.pop()
                continue
            seen += 1
            if seen > max_files:
                return found, True
            if not _printable(entry.name):
                continue
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if len(stack) >= MAX_DEPTH:
                        cut = True
                    else:
                        stack.append((prefix + entry.name + "/", *_open(entry.name, fd, max_files)))
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    found[prefix + entry.name] = (info.st_mtime_ns, info.st_size, info.st_ino)
            except OSError:
                continue  # vanished, swapped or unreadable: the next scan looks again
        return found, cut
    finally:
        for _, fd, _ in stack:
            os.close(fd)


def _open(name: str, parent: int | None, max_files: int) -> tuple[int, Iterator[os.DirEntry]]:
    """A directory's descriptor and its entries in name order; at most ``max_files + 1`` are read,
    so a huge directory costs bounded memory (and is cut in the order the system lists it)."""
    fd = os.open(name, DIR_FLAGS, dir_fd=parent)
    try:
        with os.scandir(fd) as listing:
            return fd, iter(sorted(itertools.islice(listing, max_files + 1), key=lambda entry: entry.name))
    except OSError:
        os.close(fd)
        raise


def _printable(name: str) -> bool:
    """A name that can travel as one line of text in a run's message: valid UTF-8 with no
    control characters (a file named to forge lines in a prompt starts no run)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return not _CONTROL.search(name)


def changed(old: Snapshot, new: Snapshot) -> list[str]:
    """Paths in ``new`` that ``old`` lacks or stamps differently (created, modified, renamed to)."""
    return [path for path, stamp in new.items() if old.get(path) != stamp]


class Debounce:
    """Gathers changed paths and says when they have settled; time is the caller's (seconds)."""

    def __init__(self, debounce: float) -> None:
        self.debounce = debounce
        self._paths: dict[str, None] = {}  # insertion-ordered set
        self._first = self._last = 0.0

    def add(self, paths: list[str], now: float, present: Collection[str]) -> None:
        """Gather ``paths`` seen changed at ``now``; forget gathered ones no longer ``present``
        (a file made and deleted again starts no run, and the set stays within one snapshot)."""
        for gone in [path for path in self._paths if path not in present]:
            del self._paths[gone]
        if not paths:
            return
        if not self._paths:
            self._first = now
        self._last = now
        self._paths.update(dict.fromkeys(paths))

    def due(self, now: float) -> bool:
        return bool(self._paths) and (now - self._last >= self.debounce
                                      or now - self._first >= MAX_WAIT_DEBOUNCES * self.debounce)

    def take(self, max_paths: int) -> list[str]:
        """The gathered paths, sorted, the ones past ``max_paths`` counted in a last entry; clears."""
        paths = sorted(self._paths)
        self._paths.clear()
        if len(paths) <= max_paths:
            return paths
        return [*paths[:max_paths], f"... and {len(paths) - max_paths} more"]


async def watch_dir(root: Path, *, interval: float, debounce: float, max_files: int, max_paths_per_run: int,
                    fire: Callable[[list[str]], Awaitable[None]]) -> None:
    """Poll ``root`` every ``interval`` seconds and ``fire(paths)`` for settled changes; never
    returns. Files present when it starts are the baseline and start no run."""
    scanner = _Scanner(root, max_files)
    snapshot = await scanner.scan()
    while snapshot is None:
        await trio.sleep(interval)
        snapshot = await scanner.scan()
    pending = Debounce(debounce)
    while True:
        await trio.sleep(interval)
        fresh = await scanner.scan()
        if fresh is not None:
            pending.add(changed(snapshot, fresh), trio.current_time(), fresh)
            snapshot = fresh
        if pending.due(trio.current_time()):
            await fire(pending.take(max_paths_per_run))


class _Scanner:
    """Runs ``scan`` in a worker thread with a timeout; a scan that outlives it is abandoned,
    and no new one starts until it ends, so a hung filesystem holds at most one thread."""

    def __init__(self, root: Path, max_files: int) -> None:
        self.root = root
        self.max_files = max_files
        self._busy = threading.Lock()
        self._cut_logged = False

    async def scan(self) -> Snapshot | None:
        """The snapshot, or None when this round has none (timed out, or the last one still runs)."""
        with trio.move_on_after(SCAN_TIMEOUT_SECS):
            result = await trio.to_thread.run_sync(self._scan, abandon_on_cancel=True)
            if result is None:
                return None
            snapshot, cut = result
            if cut and not self._cut_logged:
                self._cut_logged = True
                _log.warning("watch %s: more than %d entries or %d levels; changes past them are not seen",
                             self.root, self.max_files, MAX_DEPTH)
            return snapshot
        _log.warning("watch %s: a scan took longer than %.0f s; skipped", self.root, SCAN_TIMEOUT_SECS)
        return None

    def _scan(self) -> tuple[Snapshot, bool] | None:
        if not self._busy.acquire(blocking=False):
            return None
        try:
            return scan(self.root, self.max_files)
        finally:
            self._busy.release()
