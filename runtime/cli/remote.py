"""The CLI as a client of a running daemon: one kernel, one set of MCP servers, and
everything a command does shows in ``tern events``.

A daemon is used when its discovery file passes ``host/discovery.py``'s checks (the
same ones ``tern status`` makes before it sends a key), unless the command says
``--standalone``. Requests carry the key from the same config, else the local token.

Speed is the point of this module (``tern run echo hi`` against a daemon in well under
0.2 s): it speaks HTTP/1.1 with the standard library's ``http.client``, blocking, so a
command that only talks to the daemon never imports trio, httpx or the kernel.
A streamed run (``POST /api/agents/{name}/stream``, ``/api/tools/{name}/call``) is read
by a thread into a bounded queue; the command's own thread renders it and can put an
approval to its person meanwhile (``approve_inline``), and closing the connection
(Ctrl-C) is how it cancels the run in the daemon.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any
from collections.abc import Iterator

from runtime.errors import TernError, UsageError

__all__ = ["Daemon", "Stream", "find_daemon", "add_standalone", "follow", "STREAM_IDLE_SECS"]

REQUEST_TIMEOUT_SECS = 30.0
STREAM_IDLE_SECS = 60.0  # the daemon sends a keep-alive every 15 s: 60 s of silence is a dead daemon
MAX_ERROR_BYTES = 4096
QUEUE_EVENTS = 256


def add_standalone(parser: argparse.ArgumentParser) -> None:
    # SUPPRESS, not False: a subcommand's default would overwrite the parent's
    # (``tern mcp --standalone servers``); readers use getattr(args, "standalone", False).
    parser.add_argument("--standalone", action="store_true", default=argparse.SUPPRESS,
                        help="boot a kernel in this process even when a tern daemon runs on this state directory "
                             "(default: go through the daemon)")


def find_daemon(args: argparse.Namespace, config: Any) -> Daemon | None:
    """The daemon on this config's state directory, if there is one to trust and the
    command did not say ``--standalone``; a discovery file that fails the checks is
    reported in one line and the command runs in-process."""
    if getattr(args, "standalone", False):
        return None
    from runtime.host.discovery import client_headers, named_daemon, trusted_daemon

    named = named_daemon(getattr(args, "url", None), config)
    if named is not None:
        return Daemon(named[0]["url"], named[1], 0, config)
    if not config.state.dir:
        return None

    record, why = trusted_daemon(config)
    if record is None:
        if why.startswith("not trusting"):
            print(f"tern: {why}; working in-process", file=sys.stderr)
        return None
    from runtime.config import find_config
    from runtime.host.discovery import other_config

    running = other_config(record, find_config(getattr(args, "config", None)))
    if running:
        print(f"tern: the daemon on this state directory runs {running}, not this command's config: working "
              "in-process (--standalone says so quietly; give each config its own [state] dir to run both)",
              file=sys.stderr)
        return None
    return Daemon(record["url"], client_headers(config), int(record["pid"]), config)


class Daemon:
    def __init__(self, url: str, headers: dict[str, str], pid: int = 0, config: Any = None) -> None:
        """``config``: the client's own, which a refused key is explained from."""
        from urllib.parse import urlsplit

        self.url = url
        self.pid = pid
        self.config = config
        parts = urlsplit(url)
        self.tls = parts.scheme == "https"
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or (443 if self.tls else 80)
        self.headers = {**headers, "Accept": "application/json"}

    def _connection(self, timeout: float) -> Any:
        import http.client

        if self.tls:
            import ssl

            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def _send(self, method: str, path: str, body: Any, timeout: float) -> tuple[Any, Any]:
        connection = self._connection(timeout)
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            connection.request(method, path, body=data, headers=headers)
            return connection, connection.getresponse()
        except (OSError, ValueError) as exc:  # refused, reset, timed out; a malformed answer
            connection.close()
            raise TernError(f"the tern daemon (pid {self.pid}) at {self.url} does not answer: "
                            f"{getattr(exc, 'strerror', None) or exc or type(exc).__name__}; "
                            "run with --standalone to work without it") from None

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = REQUEST_TIMEOUT_SECS) -> Any:
        """One request; the JSON answer, or the daemon's error as a TernError."""
        connection, response = self._send(method, path, body, timeout)
        try:
            data = response.read()
        except OSError as exc:
            raise TernError(f"the tern daemon at {self.url} stopped answering: {exc}") from None
        finally:
            connection.close()
        if response.status >= 400:
            raise self.error(response.status, data)
        try:
            return json.loads(data) if data else None
        except ValueError:
            raise TernError(f"the tern daemon at {self.url} answered {path} with something that is not JSON") from None

    def stream(self, path: str, body: Any) -> Stream:
        connection, response = self._send("POST", path, body, STREAM_IDLE_SECS)
        if response.status >= 400:
            try:
                data = response.read(MAX_ERROR_BYTES)
            except OSError:
                data = b""
            connection.close()
            raise self.error(response.status, data)
        return Stream(connection, response, self.url)

    def error(self, status: int, body: bytes) -> TernError:
        """The daemon's error answer as one sentence; a refused key says where the key comes from."""
        try:
            message = json.loads(body)["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = body[:200].decode("utf-8", "replace").strip() or f"HTTP {status}"
        return answer_error(status, message, self.url, self.config)


def answer_error(status: int, message: str, url: str, config: Any = None) -> TernError:
    if status == 401:
        if config is not None:
            from runtime.host.daemon import unauthorized_hint  # the error path only: it imports trio

            return TernError(f"the tern daemon at {url} refused this client (HTTP 401): "
                             f"{unauthorized_hint(config, message)}")
        return TernError(f"the tern daemon at {url} refused this client ({message.rstrip('.')}): give this config "
                         "the daemon's key: [server] api_key_env names the variable that holds it "
                         "(TERN_API_KEY by default)")
    if status == 400:
        return UsageError(message)
    error = TernError(message)
    error.http_status = status
    return error


def start_without_signals(thread: Any) -> None:
    """Start a helper thread with SIGINT and SIGTERM blocked in it (it inherits this thread's
    mask). A signal the kernel hands to a helper thread does not wake the main thread from a
    blocking read: at the chat prompt, Ctrl-C would be lost until the next key."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class Stream:
    """A streamed run's events, read by a thread into a bounded queue: ``next()`` gives
    ``(event, data)``; ("end", None) once the daemon closed the stream, ("lost", why)
    if the connection broke. ``close()`` hangs up, which cancels the run in the daemon."""

    def __init__(self, connection: Any, response: Any, url: str) -> None:
        import queue
        import threading

        self.url = url
        self._connection = connection
        self._response = response
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue(QUEUE_EVENTS)
        self.closed = False
        start_without_signals(threading.Thread(target=self._read, name="tern-stream", daemon=True))

    def _read(self) -> None:
        from runtime.wire.sse import SseDecoder

        decoder = SseDecoder()
        try:
            while True:
                chunk = self._response.read1(65536)
                if not chunk:
                    break
                for event in decoder.feed(chunk):
                    try:
                        data = json.loads(event.data)
                    except ValueError:
                        continue
                    self.events.put((event.event, data))
            self.events.put(("end", None))
        except Exception as exc:  # noqa: BLE001 - a broken connection, a timeout, a bad chunk: all "lost"
            if not self.closed:
                self.events.put(("lost", f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__))

    def next(self, timeout: float | None = None) -> tuple[str, Any] | None:
        """The next event; None if ``timeout`` passed first. Waits in short slices so
        Ctrl-C is seen at once."""
        import queue
        import time

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = 0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic()))
            try:
                return self.events.get(timeout=wait)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    return None

    def close(self) -> None:
        import socket

        self.closed = True
        sock = getattr(self._connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._connection.close()


def follow(daemon: Daemon, stream: Stream, out: Any, *, quiet: bool = False, no_wait: bool = False) -> dict[str, Any]:
    """Render a streamed run until its end: text to ``out`` (a ``common.TextOut``), tool
    calls as lines on stderr, approvals put to the person (``approvals.ask_through_daemon``);
    the final ``reply`` or ``result`` is returned, an ``error`` raised as the sentence it is."""
    from collections import deque

    backlog: deque[tuple[str, Any]] = deque()
    for kind, data in _events(stream, backlog):
        if kind == "text":
            out(data.get("text", ""))
        elif kind == "tool":
            out.tool(data, quiet)
        elif kind == "approval":
            from runtime.cli.approvals import ask_through_daemon

            out.end_line()
            ask_through_daemon(daemon, stream, data, backlog, no_wait=no_wait)
        elif kind in ("reply", "result"):
            return data
        elif kind == "error":
            raise answer_error(int(data.get("status", 500)), str(data.get("message", "?")), daemon.url, daemon.config)
        elif kind == "end":
            raise TernError(f"the tern daemon at {daemon.url} ended the run without an answer")
        elif kind == "lost":
            raise TernError(f"the connection to the tern daemon at {daemon.url} broke: {data}")
    raise AssertionError("unreachable")


def _events(stream: Stream, backlog: Any) -> Iterator[tuple[str, Any]]:
    while True:
        item = backlog.popleft() if backlog else stream.next()
        assert item is not None
        yield item


def quote_path(value: str) -> str:
    from urllib.parse import quote

    return quote(value, safe="")


def isatty() -> bool:
    return os.isatty(0) and os.isatty(2)
