"""``tern mcp``: choose how to answer, then serve the stdio shell.

A running daemon (its discovery file is live and it answers ``/health``) makes
``tern mcp`` a relay: each message goes to the daemon's ``POST /mcp`` with the key,
through tern's own Streamable HTTP client transport, and everything the daemon sends
comes back on stdout. The discovery file must pass ``discovery.py``'s checks first (a
file that does not is logged in one line, and tern serves in-process). Otherwise a
kernel boots in-process and ``LocalBackend`` answers
over its ports.

Before relaying, one authenticated request (a ``ping`` to ``POST /mcp``) checks that
the daemon will take this client: a desktop assistant usually starts ``tern mcp``
without the daemon's ``TERN_API_KEY``, and a relay that then fails every request with
a 401 is worse than a kernel of its own. So a refusal (401/403) or a daemon without
``POST /mcp`` (404) makes ``tern mcp`` serve in-process, saying why, and which variable
would let it share the daemon, in one line on stderr.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from collections.abc import Callable

import trio

from runtime.config import Config
from runtime.log import get_logger
from runtime.mcp.server.stdio import Emit, LocalBackend, Pending, StdioServer
from runtime.wire import jsonrpc

__all__ = ["serve_stdio", "RelayBackend", "daemon_url"]

log = get_logger("mcp.serve")

HEALTH_TIMEOUT_SECS = 1.0
PROBE_TIMEOUT_SECS = 5.0
_PROBE = b'{"jsonrpc":"2.0","id":"tern-mcp-probe","method":"ping"}'


class RelayBackend:
    """Forwards to a running daemon's ``POST /mcp`` (see the module docstring)."""

    def __init__(self, url: str, headers: dict[str, str], *, timeout_secs: float = 60.0) -> None:
        from runtime.mcp.client.streamable_http import StreamableHttpTransport
        from runtime.net.guard import AddressPolicy

        self.url = url
        self.transport = StreamableHttpTransport("daemon", SimpleNamespace(url=url, headers=headers),
                                                 policy=AddressPolicy(), timeout_secs=timeout_secs, environ={})
        self._initialize_ids: set[Any] = set()
        self.pending = Pending()
        self._emit: Emit | None = None

    async def start(self, nursery: trio.Nursery, emit: Emit) -> None:
        self._emit = emit
        await self.transport.start(nursery)
        nursery.start_soon(self._pump)

    async def submit(self, message: Any, hand_off: Callable[[], None]) -> None:
        """Forward the message; a relayed request is answered by ``_pump``, so the reader
        never needs to hand off."""
        from runtime.mcp.client.session import TransportClosed

        if isinstance(message, jsonrpc.Request):
            self.pending.add(message.id)
            if message.method == "initialize":
                self._initialize_ids.add(message.id)
        try:
            await self.transport.send(message)
        except TransportClosed as exc:
            if isinstance(message, jsonrpc.Request):
                self.pending.done(message.id)
                await self._emit(jsonrpc.encode(jsonrpc.error_response(  # type: ignore[misc]
                    message.id, jsonrpc.INTERNAL_ERROR, f"the tern daemon at {self.url} is unreachable: {exc}")))

    async def _pump(self) -> None:
        from runtime.mcp.client.session import TransportClosed

        while True:
            try:
                body = await self.transport.receive()
            except TransportClosed as exc:
                log.warning("the tern daemon at %s is gone: %s", self.url, exc)
                return
            if self._initialize_ids:
                self._note_version(body)
            await self._emit(body)  # type: ignore[misc]
            if self.pending.ids and b'"method"' not in body[:64]:
                self.pending.done(jsonrpc.sniff_id(body[:256]))

    def _note_version(self, body: bytes) -> None:
        try:
            message = jsonrpc.parse(body)
        except jsonrpc.InvalidMessage:
            return
        if isinstance(message, jsonrpc.Response) and message.id in self._initialize_ids:
            self._initialize_ids.discard(message.id)
            version = message.result.get("protocolVersion") if isinstance(message.result, dict) else None
            if isinstance(version, str):
                self.transport.connection.negotiated(version, "handshake")


async def daemon_url(config: Config, config_path: Path | None = None) -> str | None:
    """The running daemon's URL if its discovery file is live, it runs this config
    (``config_path``: the file ``config`` came from, None the bundled one), it answers
    /health and it takes this client on ``POST /mcp`` (see the module docstring)."""
    from runtime.host.daemon import client_headers, read_discovery
    from runtime.host.discovery import other_config

    record, why = read_discovery(config)
    if record is None:
        if why.startswith("not trusting"):
            log.warning("%s; serving in-process", why)
        return None
    running = other_config(record, config_path)
    if running:
        log.warning("the daemon on this state directory runs %s, not this config: serving this config's agents "
                    "in-process (give each config its own [state] dir to share a daemon)", running)
        return None
    import httpx

    from runtime.net.guard import AddressPolicy
    from runtime.net.outbound import make_client

    url = record["url"]
    headers = client_headers(config)
    async with make_client(AddressPolicy(), timeout=PROBE_TIMEOUT_SECS) as client:
        try:
            with trio.fail_after(HEALTH_TIMEOUT_SECS):
                response = await client.get(url + "/health")
            if response.status_code != 200:
                return None
            with trio.fail_after(PROBE_TIMEOUT_SECS):
                probe = await client.post(url + "/mcp", content=_PROBE, headers={
                    **headers, "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        except (httpx.HTTPError, trio.TooSlowError) as exc:
            log.info("the daemon at %s does not answer (%s): serving in-process", url, exc)
            return None
    refused = _refusal(config, url, probe.status_code, bool(headers))
    if refused:
        log.warning("%s; serving in-process with a kernel of its own", refused)
        return None
    return url


def _refusal(config: Config, url: str, status: int, sent_key: bool) -> str:
    """Why the daemon will not take this client, in one line ("" when it will)."""
    if status == 404:
        return f"the tern daemon at {url} does not serve MCP ([mcp_server] enabled = false there)"
    if status not in (401, 403):
        return ""
    variable = config.server.api_key_env or "TERN_API_KEY"
    if not sent_key or not (config.server.api_key or os.environ.get(variable)):
        return (f"the tern daemon at {url} wants an API key (HTTP {status}) and this tern mcp has none: to share "
                f"the daemon, give it the key as {variable} in its environment (the \"env\" of the assistant's "
                "MCP server entry)")
    return f"the tern daemon at {url} refused this tern mcp's API key (HTTP {status}): is {variable} the daemon's key?"


def _stdio_streams() -> tuple[trio.lowlevel.FdStream, trio.lowlevel.FdStream]:
    """Private copies of fds 0 and 1, then fd 1 -> stderr, so only we write the protocol."""
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    os.dup2(2, 1)
    return stdin, stdout


async def serve_stdio(config: Config, *, relay: bool | None = None, config_path: Path | None = None) -> None:
    """``tern mcp``: relay to a running daemon of this config if there is one
    (``relay=None``: look), else serve from an in-process kernel."""
    from runtime.host.daemon import client_headers

    url = await daemon_url(config, config_path) if relay is not False else None
    stdin, stdout = _stdio_streams()
    if url is not None:
        log.info("relaying to the tern daemon at %s", url)
        await StdioServer(RelayBackend(url + "/mcp", client_headers(config)), stdin, stdout).serve()
        return
    from runtime.kernel.kernel import Kernel
    from runtime.mcp.server.dispatch import McpServer

    from runtime.host.traces import traces

    from runtime.mcp.client.lock import lock_path

    kernel = Kernel(config, lock_path=lock_path(config_path))
    async with traces(config), trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        server = McpServer(config, kernel.pipeline, kernel.events, approvals=kernel.approvals,
                           content=kernel.content)
        await nursery.start(server.run)
        await StdioServer(LocalBackend(server), stdin, stdout).serve()
        nursery.cancel_scope.cancel()
