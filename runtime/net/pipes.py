"""Reading and writing pipes (stdio, a subprocess's stdin/stdout) with fewer turns of
trio's event loop than ``FdStream``.

``FdStream.receive_some`` and ``send_all`` each start with a checkpoint, and a lock
around a write costs another: three trips through the scheduler for one request and
its answer, about a third of a local MCP call. Here a write goes straight to the
non-blocking descriptor when nobody else is writing, and a read yields only when it did
not already wait for input, so a flood still cannot starve other tasks. Streams without
a descriptor (in-memory ones in tests) take the ordinary path.
"""

from __future__ import annotations

import os
import select
from typing import Any

import trio

__all__ = ["PipeReader", "PipeWriter"]

ATOMIC_WRITE_BYTES = getattr(select, "PIPE_BUF", 512)  # POSIX: a pipe write this small is all or nothing


def _fileno_of(stream: Any) -> Any:
    """The stream's ``fileno`` method, or None. Asked before every read and write, never
    cached: a closed FdStream answers -1, where a cached number might by then be some
    other file's."""
    fileno = getattr(stream, "fileno", None)
    return fileno if callable(fileno) else None


def _open_fd(fileno: Any) -> int:
    fd = fileno()
    if fd < 0:
        raise trio.ClosedResourceError("the pipe was closed")
    return fd


class PipeReader:
    def __init__(self, stream: trio.abc.ReceiveStream, max_bytes: int = 65536) -> None:
        self.stream = stream
        self.max_bytes = max_bytes
        self._fileno = _fileno_of(stream)
        self._waited = False  # the last read waited for input, and so let other tasks run
        self._ending = False  # end_when_empty was called

    async def receive_some(self) -> bytes:
        """Up to ``max_bytes``; b"" at EOF. Raises OSError from ``os.read``, or
        trio.ClosedResourceError once the stream is closed."""
        if self._fileno is None:
            return await self.stream.receive_some(self.max_bytes)
        if not self._waited:
            await trio.lowlevel.checkpoint()
        self._waited = False
        while True:
            fd = _open_fd(self._fileno)
            try:
                return os.read(fd, self.max_bytes)
            except BlockingIOError:
                if self._ending:
                    return b""
                self._waited = True
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:
                    if not self._ending:
                        raise

    def end_when_empty(self) -> None:
        """From now on, an empty pipe is EOF: what is buffered is still read, but no
        read waits for more. For a pipe whose writer is known to be gone while someone
        else (a grandchild) may still hold its write end open. Wakes a waiting read."""
        self._ending = True
        if self._fileno is not None:
            fd = self._fileno()
            if fd >= 0:
                trio.lowlevel.notify_closing(fd)


class PipeWriter:
    """Whole messages, one at a time and in order. The common case is one non-blocking
    ``os.write`` and no await at all; the rest waits its turn under a lock, shielded (a
    cancelled caller cannot cut a message short) and bounded by ``timeout_secs`` (a
    reader that stops reading raises ``trio.TooSlowError``)."""

    def __init__(self, stream: trio.abc.SendStream, *, timeout_secs: float = 30.0) -> None:
        self.stream = stream
        self.timeout_secs = timeout_secs
        self._fileno = _fileno_of(stream)
        self._lock = trio.StrictFIFOLock()

    def try_send_all(self, data: bytes) -> bool:
        """Write ``data`` only if that needs no waiting: nobody else writing, the pipe
        has room, and ``data`` fits one atomic pipe write (``PIPE_BUF``, 4096 on Linux, so it is either
        written whole or not at all). False if it was not written."""
        if self._fileno is None or self._lock.locked() or len(data) > ATOMIC_WRITE_BYTES:
            return False
        try:
            return os.write(_open_fd(self._fileno), data) == len(data)
        except BlockingIOError:
            return False

    async def send_all(self, data: bytes) -> None:
        """Raises OSError, trio.BrokenResourceError or ClosedResourceError when the
        other end is gone, trio.TooSlowError when it stopped reading."""
        if self._fileno is not None and not self._lock.locked():
            try:
                written = os.write(_open_fd(self._fileno), data)
            except BlockingIOError:
                written = 0
            if written == len(data):
                return
            data = data[written:]
            self._lock.acquire_nowait()  # no await since the write: nobody got in between
        else:
            await self._lock.acquire()
        try:
            with trio.CancelScope(shield=True):
                with trio.fail_after(self.timeout_secs):
                    await self.stream.send_all(data)
        finally:
            self._lock.release()
