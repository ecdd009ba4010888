"""An MCP server's OAuth login started from the dashboard (``POST /api/mcp/servers/{name}/login``).

``tern auth login`` runs the login in a terminal; here the daemon runs it in its own
nursery: it binds the loopback redirect listener, answers the authorization URL for
the page to show as a link (tern opens no browser), and waits for the redirect. When
the tokens are saved the server is reconnected, so it leaves ``needs_auth`` at once.
One login at a time per server: asking again while one waits answers the same URL.
Every step is bounded (``START_SECS`` until the URL is known, the grant's own limit
for the person); a failure after the URL was given is logged and published as an
``mcp.login`` event, never raised into the daemon's nursery.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import trio

from runtime.errors import TernError
from runtime.host.node import Node
from runtime.httpd.messages import HttpError
from runtime.log import get_logger
from runtime.mcp.client.oauth.login import LoginAuthorizer

__all__ = ["McpLogins"]

log = get_logger("mcp.oauth")
START_SECS = 30.0  # the server's probe, its metadata and the client's registration, before the URL exists


def _loopback_redirect(uri: str) -> bool:
    """Whether the redirect comes back to a port tern can listen on (none set: its own)."""
    from urllib.parse import urlsplit

    if not uri:
        return True
    parts = urlsplit(uri)
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")


class _Login:
    """One login in progress: its URL once the authorization server's request is made."""

    def __init__(self) -> None:
        self.url = ""
        self.known = trio.Event()  # the URL is known, or the login ended before it was


class _PageAuthorizer(LoginAuthorizer):
    """The loopback login with no terminal: the URL goes to the waiting request."""

    def __init__(self, port: int, redirect_uri: str, login: _Login, task_status: Any) -> None:
        super().__init__(port=port, redirect_uri=redirect_uri, open_browser=False, out=io.StringIO(),
                         stdin=io.StringIO())  # no stdin to read: the redirect comes to the listener
        self._login = login
        self._task_status = task_status

    async def __call__(self, url: str, accept: Callable[[str], str]) -> str:
        self._login.url = url
        self._login.known.set()
        self._task_status.started(url)
        self.out = io.StringIO()  # what it prints for a person is not kept
        return await super().__call__(url, accept)


class McpLogins:
    """The logins in progress, by server name."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._running: dict[str, _Login] = {}

    async def start(self, name: str) -> str:
        """The authorization URL of a login for ``name``, started if none runs.
        404 unknown server, 400 one that needs no person's login."""
        from runtime.config import oauth_of

        node = self._node
        entry = next((e for e in node.config.mcp_servers if e.name == name), None)
        if entry is None:
            known = ", ".join(e.name for e in node.config.mcp_servers) or "none configured"
            raise HttpError(404, f"no MCP server named {name!r} (servers: {known})")
        oauth = oauth_of(entry.transport)
        if oauth is None:
            raise HttpError(400, f"MCP server '{name}' needs no login: a stdio server takes its credentials from "
                            "its environment, and one with a static Authorization header uses that")
        if oauth.grant != "authorization_code":
            raise HttpError(400, f"MCP server '{name}' uses the {oauth.grant} grant: it needs no login")
        if not _loopback_redirect(oauth.redirect_uri):
            raise HttpError(400, f"MCP server '{name}' redirects logins to {oauth.redirect_uri}, which tern cannot "
                            f"listen on: run `tern auth login {name}` and paste the redirect there")
        if node.nursery is None:
            raise HttpError(503, "tern is not running its servers yet; try again shortly")
        try:
            with trio.fail_after(START_SECS):
                login = self._running.get(name)
                if login is None:
                    login = self._running[name] = _Login()
                    return await node.nursery.start(self._login, entry, oauth, login)
                await login.known.wait()  # one login at a time: the same URL
        except trio.TooSlowError:
            raise HttpError(504, f"MCP server '{name}': no authorization URL within {START_SECS:.0f} s "
                            "(its authorization server is slow or unreachable)") from None
        if not login.url:
            raise HttpError(502, f"MCP server '{name}': the login could not start (the daemon's log says why)")
        return login.url

    async def _login(self, entry: Any, oauth: Any, login: _Login, *,
                     task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from runtime.mcp.client.oauth.shell import OAuthSession
        from runtime.mcp.client.oauth.store import TokenStore
        from runtime.net.guard import AddressPolicy
        from runtime.net.outbound import make_client

        config = self._node.config
        kernel = self._node.kernel
        authorizer = _PageAuthorizer(oauth.redirect_port, oauth.redirect_uri, login, task_status)
        try:
            try:
                await authorizer.start()
            except OSError as exc:  # the configured redirect_port is taken (a `tern auth login` running?)
                raise HttpError(409, f"MCP server '{entry.name}': cannot listen for the login's redirect on "
                                f"port {authorizer.port}: {exc.strerror or exc}") from None
            async with make_client(AddressPolicy.from_security(config.security), timeout=entry.timeout_secs) as http:
                session = OAuthSession(entry.name, entry.transport.url, oauth, http, TokenStore(config.state.dir),
                                       authorizer=authorizer, timeout_secs=entry.timeout_secs)
                challenge = await session.probe(sse=entry.transport.__struct_config__.tag == "sse")
                tokens = await session.login(challenge)  # the grant bounds the person's wait (LOGIN_SECS)
        except Exception as exc:  # noqa: BLE001 - once the URL is out, nothing may reach the node's nursery
            if not login.url:
                raise  # the request that asked hears of it
            log.warning("MCP server '%s': the login from the dashboard failed: %s", entry.name, exc,
                        exc_info=not isinstance(exc, TernError))
            kernel.events.publish("mcp.login", {"server": entry.name, "outcome": "failed", "error": str(exc)[:500]})
            return
        finally:
            if self._running.get(entry.name) is login:
                del self._running[entry.name]
            login.known.set()
            with trio.CancelScope(shield=True):
                await authorizer.aclose()
        log.warning("MCP server '%s': logged in from the dashboard at %s; reconnecting", entry.name, tokens.issuer)
        kernel.events.publish("mcp.login", {"server": entry.name, "outcome": "ok"})
        try:
            kernel.mcp.restart(entry.name)
        except TernError as exc:  # removed or disabled by a reload meanwhile: the tokens stay for later
            log.warning("MCP server '%s': not reconnected after the login: %s", entry.name, exc)
