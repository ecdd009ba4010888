"""``tern auth``: log in to remote MCP servers that use OAuth, see and end those logins.

The daemon never opens a browser: a server that needs a person's login waits in
state ``needs_auth`` until ``tern auth login NAME`` has saved a token, which it picks
up by itself. Tokens are never printed.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from runtime.cli.common import Commands, needs_subcommand, print_json


def add_commands(commands: Commands) -> None:
    auth = commands.add("auth", needs_subcommand, "log in to remote MCP servers that use OAuth")
    sub = commands.group(auth, "auth_command")
    login = sub.add("login", cmd_auth_login, "log in to an MCP server (prints the URL to open; takes the redirect "
                                             "on a loopback port or pasted on stdin)")
    login.add_argument("name", help="the MCP server's name")
    login.add_argument("--no-browser", action="store_true", help="only print the URL (default: also open a browser)")
    login.add_argument("--port", type=int, default=None, metavar="N",
                       help="the loopback callback port (default: redirect_port from the config, else any free one)")
    login.add_argument("--redirect-uri", default="", metavar="URI",
                       help="the redirect URI to register and use (default: the config's, else the loopback one)")
    status = sub.add("status", cmd_auth_status, "show each OAuth server's login (never the tokens)")
    status.add_argument("--json", action="store_true", help="print JSON")
    logout = sub.add("logout", cmd_auth_logout, "forget an MCP server's tokens")
    logout.add_argument("name", help="the MCP server's name")


def _oauth_entries(config: Any) -> list[Any]:
    from runtime.config import oauth_of

    return [e for e in config.mcp_servers if oauth_of(e.transport) is not None]


def _entry(config: Any, name: str) -> Any:
    from runtime.errors import UsageError

    for entry in config.mcp_servers:
        if entry.name == name:
            if entry not in _oauth_entries(config):
                raise UsageError(f"MCP server '{name}' logs in another way: a stdio server takes its credentials "
                                 "from its environment, and one with a static Authorization header uses that")
            return entry
    names = ", ".join(e.name for e in _oauth_entries(config)) or "none"
    raise UsageError(f"no MCP server named '{name}' (servers with OAuth: {names})")


def cmd_auth_login(args: argparse.Namespace) -> int:
    import sys

    import trio

    from runtime.config import load_config, oauth_of
    from runtime.mcp.client.oauth.login import LoginAuthorizer
    from runtime.mcp.client.oauth.shell import OAuthSession
    from runtime.mcp.client.oauth.store import TokenStore
    from runtime.net.guard import AddressPolicy
    from runtime.net.outbound import make_client

    config = load_config(getattr(args, "config", None)).config
    entry = _entry(config, args.name)
    oauth = oauth_of(entry.transport)
    if oauth.grant != "authorization_code":
        from runtime.errors import UsageError

        raise UsageError(f"MCP server '{entry.name}' uses the {oauth.grant} grant: it needs no login")

    async def main() -> Any:
        authorizer = LoginAuthorizer(port=args.port if args.port is not None else oauth.redirect_port,
                                     redirect_uri=args.redirect_uri or oauth.redirect_uri,
                                     open_browser=not args.no_browser)
        await authorizer.start()
        try:
            async with make_client(AddressPolicy.from_security(config.security), timeout=entry.timeout_secs) as http:
                session = OAuthSession(entry.name, entry.transport.url, oauth, http, TokenStore(config.state.dir),
                                       authorizer=authorizer, timeout_secs=entry.timeout_secs)
                challenge = await session.probe(sse=entry.transport.__struct_config__.tag == "sse")
                return await session.login(challenge)
        finally:
            await authorizer.aclose()

    tokens = trio.run(main)
    from runtime.log import clean  # the issuer and scope are the authorization server's words

    print(clean(f"Logged in to MCP server '{entry.name}' at {tokens.issuer}"
                + (f" (scope: {tokens.scope})" if tokens.scope else "")), file=sys.stderr)
    return 0


def _describe(entry: Any, store: Any, now: float) -> dict[str, Any]:
    from runtime.config import oauth_of

    tokens = store.tokens(entry.transport.url)
    oauth = oauth_of(entry.transport)
    row: dict[str, Any] = {"name": entry.name, "url": entry.transport.url, "grant": oauth.grant,
                           "logged_in": tokens is not None}
    if tokens is not None:
        row.update(issuer=tokens.issuer, scope=tokens.scope, refreshable=bool(tokens.refresh_token),
                   expires_in_secs=round(tokens.expires_at - now) if tokens.expires_at else None)
    return row


def cmd_auth_status(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.mcp.client.oauth.store import TokenStore

    config = load_config(getattr(args, "config", None)).config
    store = TokenStore(config.state.dir)
    now = time.time()
    rows = [_describe(entry, store, now) for entry in _oauth_entries(config)]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print("no MCP server uses OAuth in this config")
    for row in rows:
        if not row["logged_in"]:
            state = (f"gets its own token ({row['grant']})" if row["grant"] != "authorization_code"
                     else f"not logged in: run `tern auth login {row['name']}`")
        else:
            expiry = row["expires_in_secs"]
            when = ("no expiry given" if expiry is None else f"expired {-expiry} s ago" if expiry <= 0
                    else f"expires in {expiry} s")
            state = f"logged in at {row['issuer']}, {when}" + (", refreshable" if row["refreshable"] else "") + (
                f", scope {row['scope']}" if row["scope"] else "")
        print(f"{row['name']}: {state}")
    return 0


def cmd_auth_logout(args: argparse.Namespace) -> int:
    from runtime.config import load_config
    from runtime.mcp.client.oauth.store import TokenStore

    config = load_config(getattr(args, "config", None)).config
    entry = _entry(config, args.name)
    forgot = TokenStore(config.state.dir).forget_tokens(entry.transport.url)
    print(f"MCP server '{entry.name}': " + ("tokens forgotten" if forgot else "was not logged in"))
    return 0
