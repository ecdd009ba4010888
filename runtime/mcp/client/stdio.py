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
- In a sandbox when its entry says ``sandbox`` (``runtime.net.sandbox``: bubblewrap or
  Landlock, per ``sandbox_box``): a server whose mode gives none is not started. When a
  sandboxed server exits, the lines of its stderr tail that say it was refused
  (``EACCES``, ``EPERM``, the launcher's own) are named in the error, with the key that
  would allow it.
- Start and shutdown are ``runtime.net.process``'s: its own session; close stdin, wait,
  SIGTERM the process group, wait, SIGKILL. If tern itself is killed with SIGKILL, the
  server sees EOF on stdin, which the spec makes its signal to exit (not
  PR_SET_PDEATHSIG, which killed every server after 10 s: see ``runtime.net.process``).
"""

from __future__ import annotations

import os
import re
import shutil
from collections import deque
from typing import Any

import trio

from runtime.config.itself import DEPTH_ENV, MAX_DEPTH, depth, runs_tern
from runtime.config import StdioTransport as StdioConfig
from runtime.errors import ConnectionLost
from runtime.log import LogBudget, clean, get_logger, log_wire
from runtime.mcp.client.connection import McpConnection
from runtime.net.process import shutdown, spawn, subprocess_env, watch_exit
from runtime.net.sandbox import Box, Wrapped, choose, wrap
from runtime.net.pipes import PipeReader, PipeWriter
from runtime.mcp.client.session import TransportClosed
from runtime.wire import framing, jsonrpc

__all__ = ["StdioTransport", "sandbox_box", "denials"]

log = get_logger("mcp.stdio")

STDERR_LINE_CHARS = 1000
STDERR_LINES_PER_SEC = 20.0
STDERR_BURST = 100
READ_BYTES = 65536
STDERR_TAIL = 5  # lines quoted in the error when the process exits
STDERR_TAIL_CHARS = 300
STDERR_TAIL_WAIT_SECS = 0.5  # how long an exit waits for stderr's last bytes
WRITE_TIMEOUT_SECS = 30.0  # a server that reads nothing of a message for this long is dropped
NODE_FAMILY = ("node", "nodejs", "npx", "npm")
_DENIED = re.compile(r"EACCES|EPERM|[Pp]ermission denied|[Oo]peration not permitted|tern sandbox")
_HIDDEN = re.compile(r"ENOENT|No such file or directory|[Dd]irectory nonexistent")  # bubblewrap: not there
_DENIED_CALL = re.compile(r"\b(open|mkdir|scandir|access|stat|lstat|unlink|rename|rmdir|connect|bind|copyfile|"
                          r"symlink|chmod|cannot create|cannot run)\b")
_DENIED_PATH = re.compile(r"'(/[^']*)'|(/[^\s:,']+)")


def sandbox_box(config: StdioConfig, env: dict[str, str]) -> Box:
    """What a sandboxed server may reach: its cwd (read-write) and ``writable``; its
    ``readable``; npm's cache (``~/.npm``) for the node family: writable for npx and npm,
    which install the package into it on the first run (``npx -y``), read-only for node;
    the network per ``network``."""
    read = list(config.readable)
    write = list(config.writable) + ([config.cwd] if config.cwd else [])
    name = os.path.basename(config.command)
    if name in NODE_FAMILY and env.get("HOME"):
        (write if name in ("npx", "npm") else read).append(os.path.join(env["HOME"], ".npm"))
    return Box(read=tuple(read), write=tuple(write), network=config.network)


def denials(lines: list[str], kind: str = "landlock") -> list[str]:
    """The lines of a stderr tail that say the sandbox refused something (under bubblewrap
    also what it hid: a path outside is not there), each shortened to the call and the
    path when it names them."""
    found = []
    for line in lines:
        if not (_DENIED.search(line) or kind == "bubblewrap" and _HIDDEN.search(line)):
            continue
        call = _DENIED_CALL.search(line)
        path = _DENIED_PATH.search(line, call.end()) if call else None
        named = " ".join(part for part in (call and call.group(1), path and (path.group(1) or path.group(2))) if part)
        found.append(named if call and path else line[:200])
    return found


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
        self._boxed: Wrapped | None = None

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
        executable = None
        if self.config.sandbox != "off":
            self._boxed = await self._sandboxed(argv, env)
            argv, executable, env = self._boxed.argv, self._boxed.executable, self._boxed.env
        try:
            self._process = await spawn(argv, env=env, cwd=self.config.cwd or None, executable=executable)
        except OSError as exc:
            raise ConnectionLost(f"cannot start MCP server '{self.name}' ({self.config.command}): "
                                 f"{exc.strerror or exc}") from None
        self._reader = PipeReader(self._process.stdout, READ_BYTES)
        self._writer = PipeWriter(self._process.stdin, timeout_secs=WRITE_TIMEOUT_SECS)
        nursery.start_soon(self._drain_stderr)
        nursery.start_soon(self._watch_exit)

    async def _sandboxed(self, argv: list[str], env: dict[str, str]) -> Wrapped:
        """``argv`` wrapped in the sandbox the entry asks for, or ``ConnectionLost``."""
        mode = self.config.sandbox
        kind, reason = await trio.to_thread.run_sync(choose, mode)  # probed once per process
        if kind is None:
            raise ConnectionLost(f"MCP server '{self.name}' not started: sandbox = \"{mode}\" but this host gives "
                                 f"no sandbox ({reason}); install bubblewrap or use Linux 5.13+ with Landlock, or "
                                 f"set sandbox = \"off\" for this server to run it as tern's user")
        path = os.pathsep.join(d for d in env.get("PATH", "").split(os.pathsep) if os.path.isabs(d))
        executable = self.config.command if os.path.isabs(self.config.command) else \
            shutil.which(self.config.command, path=path)
        if executable is None:
            raise ConnectionLost(f"cannot start MCP server '{self.name}' ({self.config.command}): not found on PATH")
        cwd = self.config.cwd or os.getcwd()
        box = sandbox_box(self.config, env)
        box = Box(read=(*box.read, cwd), write=box.write, network=box.network)  # its own HOME: its npm cache
        try:
            return wrap(kind, box, argv, executable, cwd=cwd, env=env)
        except OSError as exc:
            raise ConnectionLost(f"MCP server '{self.name}' not started: the {kind} sandbox cannot start: "
                                 f"{exc.strerror or exc}") from None

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
        denied = denials(list(self.stderr_tail), self._boxed.kind) if self._boxed is not None else []
        if denied:
            said += (f"; the {self._boxed.kind} sandbox denied: {'; '.join(denied)} (allow it with the server's "
                     "transport.writable, readable or network, or sandbox = \"off\")")
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
        try:
            if self._process is not None:
                self.exit_code = await shutdown(self._process, grace_secs=self.grace_secs)
        finally:
            if self._boxed is not None:
                self._boxed.cleanup()
