"""A person's login, headless-friendly: ``tern auth login`` prints the authorization
URL (and opens a browser unless told not to), then takes the redirect from whichever
comes first: the loopback callback (``http://127.0.0.1:<port>/callback``, RFC 8252) or
the redirect URL pasted on stdin (or just its ``?code=...&state=...``), for a machine
whose browser is elsewhere.

A redirect that is not this login's (wrong state or issuer) is refused with a message,
and the login keeps waiting for the right one: a stray or forged request to the
loopback port cannot end it. Every wait is bounded; a callback request is read with a
deadline and at most 8 KiB.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO
from urllib.parse import urlsplit

import trio

from runtime.log import get_logger
from runtime.mcp.client.oauth.model import AuthError

__all__ = ["LoginAuthorizer"]

log = get_logger("mcp.oauth")
MAX_REQUEST_BYTES = 8192
REQUEST_SECS = 10.0
_PAGE = ("<!doctype html><meta charset=utf-8><title>tern</title><p>{}</p>")


class LoginAuthorizer:
    """Completes a login for ``tern auth login``. ``start`` binds the callback port
    (``port`` 0: any free one) unless ``redirect_uri`` points elsewhere."""

    def __init__(self, *, port: int = 0, redirect_uri: str = "", open_browser: bool = True,
                 out: TextIO | None = None, stdin: TextIO | None = None) -> None:
        self.port = port
        self.redirect_uri = redirect_uri
        self.open_browser = open_browser
        self.out = out or sys.stderr
        self.stdin = stdin
        self._listeners: list[trio.SocketListener] = []
        self._done: trio.MemorySendChannel[str] | None = None
        self._path = "/callback"

    async def start(self) -> None:
        """Bind the loopback callback if the redirect URI is ours to serve."""
        if self.redirect_uri:
            parts = urlsplit(self.redirect_uri)
            if parts.scheme != "http" or parts.hostname not in ("127.0.0.1", "localhost", "::1"):
                return  # another address: the person pastes the redirect back
            self.port, self._path = parts.port or 80, parts.path or "/"
        self._listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        port = self._listeners[0].socket.getsockname()[1]
        if not self.redirect_uri:
            self.redirect_uri = f"http://127.0.0.1:{port}{self._path}"

    async def aclose(self) -> None:
        for listener in self._listeners:
            await listener.aclose()
        self._listeners = []

    async def __call__(self, url: str, accept: Callable[[str], str]) -> str:
        self._say(f"Open this URL in a browser to log in:\n\n  {url}\n")
        if self._listeners:
            self._say(f"Waiting for the redirect to {self.redirect_uri}; or paste the URL the browser "
                      "ended on (or its ?code=...&state=...) here and press Enter.")
        else:
            self._say("Then paste the URL the browser ended on (or its ?code=...&state=...) here and press Enter.")
        if self.open_browser:
            await trio.to_thread.run_sync(_open_browser, url, abandon_on_cancel=True)
        send, receive = trio.open_memory_channel[str](1)
        self._done = send
        async with trio.open_nursery() as nursery:
            for listener in self._listeners:
                nursery.start_soon(self._serve, listener, accept, nursery)
            nursery.start_soon(self._read_stdin, accept)
            code = await receive.receive()
            nursery.cancel_scope.cancel()
        return code

    def _say(self, text: str) -> None:
        """A line for the person at the terminal: the URL and the errors in it are the
        servers' text, so control and bidi characters show as escapes (``log.clean``)."""
        from runtime.log import clean

        print(clean(text, lines=True), file=self.out, flush=True)

    def _offer(self, redirect: str, accept: Callable[[str], str]) -> str:
        """Check one redirect: "" when it was this login's code (delivered), else why not."""
        try:
            code = accept(redirect)
        except AuthError as exc:
            self._say(f"tern: {exc}; still waiting")
            return str(exc)
        assert self._done is not None
        try:
            self._done.send_nowait(code)
        except trio.WouldBlock:
            pass  # a second good redirect: the first one won
        return ""

    async def _read_stdin(self, accept: Callable[[str], str]) -> None:
        stream = self.stdin if self.stdin is not None else sys.stdin
        while True:
            line = await trio.to_thread.run_sync(stream.readline, abandon_on_cancel=True)
            if not line:
                return  # no terminal (or closed): the callback is the only way
            if line.strip() and not self._offer(line.strip()[:MAX_REQUEST_BYTES], accept):
                return

    async def _serve(self, listener: trio.SocketListener, accept: Callable[[str], str], nursery: Any) -> None:
        while True:
            stream = await listener.accept()
            nursery.start_soon(self._one_request, stream, accept)

    async def _one_request(self, stream: trio.SocketStream, accept: Callable[[str], str]) -> None:
        async with stream:
            head = b""
            with trio.move_on_after(REQUEST_SECS):
                while b"\r\n\r\n" not in head and len(head) <= MAX_REQUEST_BYTES:
                    chunk = await stream.receive_some(4096)
                    if not chunk:
                        break
                    head += chunk
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            if len(parts) != 3 or parts[0] != "GET" or not parts[2].startswith("HTTP/1."):
                await _answer(stream, 400, "Not a login redirect.")
                return
            target = urlsplit(parts[1])
            if target.path != self._path:
                await _answer(stream, 404, "Not found.")
                return
            why = self._offer("?" + target.query, accept)
            if why:
                await _answer(stream, 400, "tern refused this redirect: " + why)
            else:
                await _answer(stream, 200, "Logged in. You can close this tab and return to the terminal.")


async def _answer(stream: trio.SocketStream, status: int, text: str) -> None:
    import html

    body = _PAGE.format(html.escape(text)).encode("utf-8")
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n")
    with trio.move_on_after(REQUEST_SECS):
        try:
            await stream.send_all(head.encode("ascii") + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


def _open_browser(url: str) -> None:
    import webbrowser

    try:
        webbrowser.open(url)
    except Exception as exc:  # no browser here: the printed URL is enough
        log.debug("no browser opened: %s", exc)
