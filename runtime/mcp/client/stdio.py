"""The stdio transport: an MCP server as a supervised subprocess speaking NDJSON.

Security and robustness, because the subprocess is someone else's code:

- The environment is cleared and rebuilt from PATH, HOME and the temp-dir variables
  (plus the Windows profile variables), and only the names listed in ``env``.
- stdout is framed by ``NdjsonDecoder`` with a size cap: an oversized line is drained
  and logged, the connection continues. Non-JSON lines are the session's to skip.
- stderr is drained all the time into the log, bounded per line and rate-limited (a
  ``LogBudget``: 20 lines/s, burst 100, one summary a second of what was dropped), so a
  chatty server can neither block on a full pipe nor flood tern's log; the log's
  formatter escapes its control characters. Its last few lines are kept (``STDERR_TAIL``
  lines of at most ``STDERR_TAIL_CHARS``) and quoted when the process exits, so a
  server that dies at start says why in its state's last error ("process exited with
  code 1; stderr: ...") instead of only in a log line nobody saw.
- The process itself is watched, not only its stdout: when it exits, its process group
  is killed and stdout is read only to its end of what is buffered, then the transport
  closes, so a grandchild holding stdout open cannot make a dead server look alive.
- Start and shutdown are ``runtime.net.process``'s: its own session; close stdin, wait,
  SIGTERM the process group, wait, SIGKILL. If tern itself is killed with SIGKILL, the
  server sees EOF on stdin, which the spec makes its signal to exit (not
  PR_SET_PDEATHSIG, which killed every server after 10 s: see ``runtime.net.process``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import trio

from runtime.config.itself import DEPTH_ENV, MAX_DEPTH, depth, runs_tern
from runtime.config import StdioTransport as StdioConfig
from runtime.errors import ConnectionLost
from runtime.log import LogBudget, clean, get_logger, log_wire
from runtime.mcp.client.connection import McpConnection
from runtime.net.process import shutdown, spawn, subprocess_env, watch_exit
from runtime.net.pipes import PipeReader, PipeWriter
from runtime.mcp.client.session import TransportClosed
from runtime.wire import framing, jsonrpc

__all__ = ["StdioTransport"]

log = get_logger("mcp.stdio")

STDERR_LINE_CHARS = 1000
STDERR_LINES_PER_SEC = 20.0
STDERR_BURST = 100
READ_BYTES = 65536
STDERR_TAIL = 5  # lines quoted in the error when the process exits
STDERR_TAIL_CHARS = 300
STDERR_TAIL_WAIT_SECS = 0.5  # how long an exit waits for stderr's last bytes
WRITE_TIMEOUT_SECS = 30.0  # a server that reads nothing of a message for this long is dropped


class StdioTransport:
    """Spawns the server on ``start`` and moves NDJSON messages over its stdio."""

    def __init__(self, name: str, config: StdioConfig, env_names: list[str], *,
                 max_message_bytes: int = framing.MAX_MESSAGE_BYTES, grace_secs: float = 2.0) -> None:
        self.name = name
        self.config = config
        self.env_names = env_names
        self.grace_secs = grace_secs
        self.connection = McpConnection("parallel")  # send server/discover and ping together (see session.py)
        self._decoder = framing.NdjsonDecoder(max_message_bytes)
        self._frames: deque[bytes] = deque()
        self._process: Any = None
        self._reader: PipeReader | None = None
        self._writer: PipeWriter | None = None
        self._eof = False
        self.exit_code: int | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
        self._stderr_done = trio.Event()

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    async def start(self, nursery: trio.Nursery) -> None:
        """Spawn the process and start draining its stderr in ``nursery``."""
        argv = [self.config.command, *self.config.args]
        deep = depth()
        if deep >= MAX_DEPTH or deep and runs_tern(self.config.command, self.config.args):
            why = "it runs tern, and this tern was itself started by a tern" if deep < MAX_DEPTH else \
                f"this tern was started by {deep} terns' MCP servers already (a loop through a wrapper?)"
            raise ConnectionLost(f"MCP server '{self.name}' not started: {why}; a tern that starts tern through "
                                 "its own [[mcp_servers]] would start processes without end")
        env = {**subprocess_env(self.env_names), DEPTH_ENV: str(deep + 1)}
        try:
            self._process = await spawn(argv, env=env, cwd=self.config.cwd or None)
        except OSError as exc:
            raise ConnectionLost(f"cannot start MCP server '{self.name}' ({self.config.command}): "
                                 f"{exc.strerror or exc}") from None
        self._reader = PipeReader(self._process.stdout, READ_BYTES)
        self._writer = PipeWriter(self._process.stdin, timeout_secs=WRITE_TIMEOUT_SECS)
        nursery.start_soon(self._drain_stderr)
        nursery.start_soon(self._watch_exit)

    async def _watch_exit(self) -> None:
        """When the process exits: kill its group, and let stdout end once it is empty."""
        self.exit_code = await watch_exit(self._process)
        assert self._reader is not None
        self._reader.end_when_empty()

    async def send(self, message: jsonrpc.Message) -> None:
        if self._writer is None:
            raise TransportClosed("not started")
        data = framing.encode_ndjson(jsonrpc.encode(message))
        log_wire("out", getattr(message, "method", None), getattr(message, "id", None), len(data),
                 peer=f"mcp:{self.name}")
        try:  # one message at a time, whole; never held across a call
            await self._writer.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise TransportClosed(f"stdin closed: {exc}") from None
        except trio.TooSlowError:
            raise TransportClosed(f"the server read nothing for {WRITE_TIMEOUT_SECS:g} s") from None

    def send_nowait(self, message: jsonrpc.Message) -> bool:
        """Write a small message only if the pipe takes it without waiting (see
        ``McpSession._refuse``); False if it was not written."""
        if self._writer is None:
            return False
        return self._writer.try_send_all(framing.encode_ndjson(jsonrpc.encode(message)))

    async def receive(self) -> bytes:
        while not self._frames:
            if self._eof:
                raise TransportClosed(await self._exit_description())
            try:
                data = await self._reader.receive_some()  # type: ignore[union-attr]
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                data = b""
            if not data:
                self._eof = True
                events = self._decoder.feed_eof()
            else:
                events = self._decoder.feed(data)
            for event in events:
                if isinstance(event, framing.Frame):
                    self._frames.append(event.body)
                elif isinstance(event, framing.Oversized):
                    log.warning("MCP server '%s' sent a %d-byte message, over the limit; dropped",
                                self.name, event.size_bytes)
                else:
                    log.warning("MCP server '%s' sent unframed bytes (%s); skipped", self.name, event.reason)
        return self._frames.popleft()

    async def _exit_description(self) -> str:
        with trio.move_on_after(0.5):
            self.exit_code = await self._process.wait()
        with trio.move_on_after(STDERR_TAIL_WAIT_SECS):  # its last words may still be in the pipe
            await self._stderr_done.wait()
        said = f"; stderr: {' | '.join(self.stderr_tail)}" if self.stderr_tail else ""
        if self.exit_code is None:
            return f"stdout closed{said}"
        return f"process exited with code {self.exit_code}{said}"

    async def _drain_stderr(self) -> None:
        """Log stderr line by line: each line cut to a bound, at most ~20 lines/s."""
        stream = self._process.stderr
        pending = b""
        budget = LogBudget(STDERR_LINES_PER_SEC, STDERR_BURST)
        try:
            while True:
                try:
                    data = await stream.receive_some(READ_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    break
                lines = (pending + data).split(b"\n")
                pending = lines.pop()[-STDERR_LINE_CHARS:]
                now = trio.current_time()
                for line in lines:
                    text = line[:STDERR_LINE_CHARS].decode("utf-8", "replace").rstrip()
                    if text:
                        self.stderr_tail.append(clean(text[:STDERR_TAIL_CHARS]))
                    if text and budget.admit(now):
                        log.info("MCP server '%s' stderr: %s", self.name, text)
                self._stderr_dropped(budget, now)
            last = pending.decode("utf-8", "replace").rstrip()
            if last:  # a last line without a newline
                self.stderr_tail.append(clean(last[:STDERR_TAIL_CHARS]))
                log.info("MCP server '%s' stderr: %s", self.name, last)
            self._stderr_dropped(budget, trio.current_time(), final=True)
        finally:
            self._stderr_done.set()

    def _stderr_dropped(self, budget: LogBudget, now: float, *, final: bool = False) -> None:
        dropped = budget.dropped(now, final=final)
        if dropped:
            log.info("MCP server '%s' stderr: (%d lines suppressed)", self.name, dropped)

    async def aclose(self) -> None:
        """Close stdin, then SIGTERM, then SIGKILL the group; always reap the process."""
        if self._process is not None:
            self.exit_code = await shutdown(self._process, grace_secs=self.grace_secs)
