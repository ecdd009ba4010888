"""tern's OAuth client against an MCP server built from the official Python SDK's auth
components (``tests/fixtures/sdk_oauth_server.py``: the SDK serves the metadata,
registration, authorization and token endpoints and checks every Bearer token).

``tern auth login`` runs as a person would run it (a subprocess, the URL on stderr),
the "browser" follows the authorization URL one hop; the daemon side is the real
supervisor waiting in ``needs_auth``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import trio

from runtime.errors import single_leaf
from runtime.config import HttpTransport, McpServerEntry, OAuthConfig, SseTransport
from runtime.mcp.client.client import McpClient, make_transport
from runtime.mcp.client.oauth.store import TokenStore
from runtime.mcp.client.supervisor import McpSupervisor
from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env
from tests.mcp.test_real_peers_http import free_port
from tests.test_cli import ROOT

SERVER = str(FIXTURES / "sdk_oauth_server.py")


def start(sdk_python: str, port: int, *extra: str) -> subprocess.Popen:
    process = subprocess.Popen([sdk_python, SERVER, str(port), *extra], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/test/stats", timeout=1.0)
            return process
        except httpx.HTTPError:
            assert process.poll() is None, "the SDK OAuth server exited"
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("the SDK OAuth server did not start")


@pytest.fixture
def oauth_server(sdk_python):
    servers = []

    def run(*extra: str) -> str:
        port = free_port()
        servers.append(start(sdk_python, port, *extra))
        return f"http://127.0.0.1:{port}"

    yield run
    for process in servers:
        process.terminate()
        process.wait(10)


def stats(base: str) -> dict:
    return httpx.get(f"{base}/test/stats").json()


def write_config(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n\n[[mcp_servers]]\nname = "sdk"\n\n'
                      f'[mcp_servers.transport]\ntype = "http"\nurl = "{url}"\n\n[mcp_servers.transport.oauth]\n')
    return config


def tern(tmp_path: Path, config: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=tern_env(tmp_path), cwd=ROOT, **kw)


def authorization_url(process: subprocess.Popen) -> str:
    for _ in range(20):
        line = process.stderr.readline()
        if "/authorize?" in line:
            return line.strip()
    raise AssertionError("tern auth login printed no authorization URL")


def follow(url: str) -> str:
    """The browser's one hop: the authorization server redirects at once."""
    answer = httpx.get(url)
    assert answer.status_code in (302, 303, 307), answer.text
    return answer.headers["location"]


def entry(url: str, **oauth) -> McpServerEntry:
    return McpServerEntry(name="sdk", transport=HttpTransport(url=url, oauth=OAuthConfig(**oauth)), timeout_secs=10)


async def call_add(state: Path, url: str, authorizer=None) -> tuple[int, McpClient]:
    e = entry(url)
    async with trio.open_nursery() as nursery:
        client = await McpClient.connect(e, nursery, transport=make_transport(e, state_dir=str(state),
                                                                              authorizer=authorizer))
        try:
            result = await client.call_tool("add", {"a": 2, "b": 3})
            return result.structured_content["result"], client
        finally:
            await client.aclose()
            nursery.cancel_scope.cancel()


def test_login_by_callback_then_calls_carry_the_token(oauth_server, tmp_path):
    base = oauth_server()
    config = write_config(tmp_path, f"{base}/mcp")
    login = tern(tmp_path, config, "auth", "login", "sdk", "--no-browser")
    try:
        callback = follow(authorization_url(login))
        assert callback.startswith("http://127.0.0.1:") and "/callback?" in callback
        page = httpx.get(callback)
        assert page.status_code == 200 and "Logged in" in page.text
        assert login.wait(30) == 0, login.stderr.read()
    finally:
        login.kill()
    assert "Logged in to MCP server 'sdk'" in login.stderr.read()
    status = tern(tmp_path, config, "auth", "status", "--json")
    out, _ = status.communicate(timeout=30)
    (row,) = json.loads(out)
    assert row["logged_in"] and row["issuer"] == base and row["scope"] == "tools" and row["refreshable"]
    assert trio.run(call_add, tmp_path / "state", f"{base}/mcp")[0] == 5
    assert stats(base)["authorization_code"] == 1 and stats(base)["register"] == 1
    files = list((tmp_path / "state" / "oauth").iterdir())
    assert files and all(f.stat().st_mode & 0o077 == 0 for f in files)
    out, _ = tern(tmp_path, config, "auth", "logout", "sdk").communicate(timeout=30)
    assert "tokens forgotten" in out and TokenStore(tmp_path / "state").tokens(f"{base}/mcp") is None


def test_login_by_pasting_the_redirect_and_a_forged_one_is_refused(oauth_server, tmp_path):
    base = oauth_server()
    config = write_config(tmp_path, f"{base}/mcp")
    login = tern(tmp_path, config, "auth", "login", "sdk", "--no-browser")
    try:
        redirect = follow(authorization_url(login))
        query = redirect.split("?", 1)[1]
        forged = "?" + "&".join(p if not p.startswith("state=") else "state=forged" for p in query.split("&"))
        port = redirect.split(":")[2].split("/")[0]
        refused = httpx.get(f"http://127.0.0.1:{port}/callback{forged}")  # someone else on this machine
        assert refused.status_code == 400 and "state" in refused.text
        login.stdin.write(forged + "\n")  # a stale paste: refused, still waiting
        login.stdin.write(redirect + "\n")
        login.stdin.flush()
        assert login.wait(30) == 0
    finally:
        login.kill()
    err = login.stderr.read()
    assert err.count("does not match this login") == 2 and "Logged in to MCP server 'sdk'" in err
    assert trio.run(call_add, tmp_path / "state", f"{base}/mcp")[0] == 5


class Browser:
    """A person who approves at once (the SDK server redirects straight back)."""

    redirect_uri = "http://127.0.0.1:9/callback"

    def __init__(self) -> None:
        self.logins = 0

    async def __call__(self, url: str, accept) -> str:
        self.logins += 1
        async with httpx.AsyncClient() as http:
            answer = await http.get(url)
        return accept(answer.headers["location"])


def test_refresh_before_expiry_and_a_revoked_token_logs_in_again(oauth_server, tmp_path):
    base = oauth_server("--lifetime", "4")
    browser = Browser()

    async def main():
        e = entry(f"{base}/mcp")
        async with trio.open_nursery() as nursery:
            client = await McpClient.connect(e, nursery, transport=make_transport(
                e, state_dir=str(tmp_path), authorizer=browser))
            assert (await client.call_tool("add", {"a": 1, "b": 1})).structured_content["result"] == 2
            assert stats(base)["refresh_token"] == 0
            await trio.sleep(2.5)  # past half its 4 s life: refreshed before the call, no 401 first
            refused = stats(base)["refused"]
            assert (await client.call_tool("add", {"a": 2, "b": 2})).structured_content["result"] == 4
            assert stats(base)["refresh_token"] == 1 and stats(base)["refused"] == refused
            httpx.post(f"{base}/test/revoke")  # access and refresh tokens both gone
            assert (await client.call_tool("add", {"a": 3, "b": 3})).structured_content["result"] == 6
            assert browser.logins == 2 and stats(base)["authorization_code"] == 2
            await client.aclose()
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_token_response_without_expires_in(oauth_server, tmp_path):
    base = oauth_server("--lifetime", "0")
    assert trio.run(call_add, tmp_path, f"{base}/mcp", Browser())[0] == 5
    tokens = TokenStore(tmp_path).tokens(f"{base}/mcp")
    assert tokens is not None and tokens.expires_at == 0.0  # used until the server refuses it
    assert trio.run(call_add, tmp_path, f"{base}/mcp")[0] == 5 and stats(base)["refresh_token"] == 0


class CodeInjector(Browser):
    """An attacker's code in the right redirect: the code was issued for another PKCE
    challenge, the state is this login's."""

    async def __call__(self, url: str, accept) -> str:
        from urllib.parse import parse_qsl, urlencode, urlsplit

        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        query["code_challenge"] = "A" * 43  # the attacker's own challenge
        async with httpx.AsyncClient() as http:
            answer = await http.get(f"{parts.scheme}://{parts.netloc}{parts.path}?{urlencode(query)}")
        return accept(answer.headers["location"])


def test_a_code_bound_to_another_pkce_challenge_is_refused(oauth_server, tmp_path):
    base = oauth_server()
    with pytest.raises(Exception) as caught:  # noqa: B017 - the leaf is checked below
        trio.run(call_add, tmp_path, f"{base}/mcp", CodeInjector())
    assert "invalid_grant (incorrect code_verifier)" in str(single_leaf(caught.value))
    assert stats(base)["authorization_code"] == 0 and TokenStore(tmp_path).tokens(f"{base}/mcp") is None


def test_legacy_sse_server_behind_oauth(oauth_server, tmp_path):
    base = oauth_server("--transport", "sse")
    browser = Browser()

    async def main():
        e = McpServerEntry(name="sdk", transport=SseTransport(url=f"{base}/sse", oauth=OAuthConfig()), timeout_secs=10)
        async with trio.open_nursery() as nursery:
            client = await McpClient.connect(e, nursery, transport=make_transport(
                e, state_dir=str(tmp_path), authorizer=browser))
            result = await client.call_tool("add", {"a": 20, "b": 22})
            await client.aclose()
            nursery.cancel_scope.cancel()
        return result.structured_content["result"]

    assert trio.run(main) == 42 and browser.logins == 1


@pytest.mark.parametrize("table", ["oauth table", "no oauth table"])
def test_the_daemon_waits_in_needs_auth_until_a_login_appears(oauth_server, tmp_path, table):
    """A server with an empty [oauth] table, and one configured with its URL alone (the
    default: log in when the server asks with RFC 9728 metadata)."""
    base = oauth_server()
    url = f"{base}/mcp"
    events = []
    server = entry(url) if table == "oauth table" else McpServerEntry(
        name="sdk", transport=HttpTransport(url=url), timeout_secs=10)

    async def main():
        supervisor = McpSupervisor([server], state_dir=str(tmp_path), on_event=lambda k, d: events.append((k, d)))
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            with trio.fail_after(10):
                while supervisor.statuses()[0].state != "needs_auth":
                    await trio.sleep(0.05)
            status = supervisor.statuses()[0]
            assert "tern auth login sdk" in status.last_error
            from runtime.mcp.client.oauth.shell import OAuthSession
            from runtime.net.guard import AddressPolicy
            from runtime.net.outbound import make_client

            async with make_client(AddressPolicy()) as http:  # what `tern auth login` does
                session = OAuthSession("sdk", url, OAuthConfig(), http, TokenStore(tmp_path), authorizer=Browser())
                await session.login(await session.probe())
            with trio.fail_after(10):
                while supervisor.statuses()[0].state != "ready":
                    await trio.sleep(0.05)
            assert supervisor.statuses()[0].tool_count == 1
            nursery.cancel_scope.cancel()

    trio.run(main)
    states = [d.get("state") for k, d in events if k == "mcp.server"]
    assert states[:3] == ["needs_auth", "connecting", "ready"], states
    assert not any("Bearer" in json.dumps(d) for _, d in events)


def test_through_the_daemon_and_no_secret_anywhere(oauth_server, tmp_path):
    """A real ``tern serve``: the server waits in needs_auth (shown by ``tern mcp
    servers``; the supervisor test above sees its event), ``tern auth login`` lets it connect, a tool call goes
    through; then no token or client secret is in the daemon's debug log, the audit
    log, the events, ``config show``, ``mcp servers`` or ``auth status``."""
    from tests.test_cli_daemon import Daemon, tern as tern_cli, write_config as daemon_config

    base = oauth_server()
    config = daemon_config(tmp_path, extra=f'[[mcp_servers]]\nname = "sdk"\n[mcp_servers.transport]\ntype = "http"\n'
                                           f'url = "{base}/mcp"\n[mcp_servers.transport.oauth]\n')
    daemon = Daemon(config, log_level="debug")
    outputs = []
    try:
        deadline = time.monotonic() + 20
        while "needs_auth" not in (listed := tern_cli("mcp", "servers", config=config).stdout):
            assert time.monotonic() < deadline, listed
            time.sleep(0.2)
        assert "tern auth login sdk" in listed
        outputs.append(listed)
        login = tern(tmp_path, Path(config), "auth", "login", "sdk", "--no-browser")
        try:
            assert httpx.get(follow(authorization_url(login))).status_code == 200
            assert login.wait(30) == 0
        finally:
            login.kill()
        deadline = time.monotonic() + 20
        while '"ready"' not in (listed := tern_cli("mcp", "servers", "--json", config=config).stdout):
            assert time.monotonic() < deadline, listed
            time.sleep(0.2)
        called = tern_cli("call", "mcp_sdk_add", "--args", '{"a": 2, "b": 3}', config=config)
        assert called.returncode == 0 and "5" in called.stdout, called.stderr
        outputs += [listed, called.stdout, called.stderr]
        for args in (("config", "show"), ("auth", "status", "--json"), ("mcp", "servers", "--json")):
            outputs.append(tern_cli(*args, config=config).stdout)
    finally:
        daemon.stop()
    tokens = TokenStore(tmp_path / "state").tokens(f"{base}/mcp")
    client = TokenStore(tmp_path / "state").client(base)
    assert tokens is not None and client is not None and client.client_secret
    outputs += [daemon.process.stderr.read(), json.dumps(daemon.seen)]
    outputs += [p.read_text() for p in (tmp_path / "state").glob("audit*.jsonl")]
    assert (tmp_path / "state" / "audit.jsonl").exists() and "mcp_sdk_add" in outputs[-1]
    everything = "\n".join(outputs)
    assert "tools/call" in everything  # the debug log's wire lines are in there
    for secret in (tokens.access_token, tokens.refresh_token, client.client_secret):
        assert secret not in everything


@pytest.mark.parametrize("kind", ["http", "sse"])
def test_a_revoked_login_puts_the_daemon_back_in_needs_auth(oauth_server, tmp_path, kind):
    """The tokens are revoked while connected: the next call fails with the command to
    run (no browser in a daemon), the server goes to needs_auth, a new login revives it."""
    from runtime.errors import ConnectionLost, RpcError
    from runtime.mcp.client.oauth.shell import OAuthSession
    from runtime.net.guard import AddressPolicy
    from runtime.net.outbound import make_client

    base = oauth_server("--transport", "streamable-http" if kind == "http" else "sse")
    url = f"{base}/mcp" if kind == "http" else f"{base}/sse"
    transport = HttpTransport(url=url, oauth=OAuthConfig()) if kind == "http" else SseTransport(
        url=url, oauth=OAuthConfig())

    async def login():
        async with make_client(AddressPolicy()) as http:
            session = OAuthSession("sdk", url, OAuthConfig(), http, TokenStore(tmp_path), authorizer=Browser())
            await session.login(await session.probe(sse=kind == "sse"))

    async def wait_state(supervisor, state):
        with trio.fail_after(15):
            while supervisor.statuses()[0].state != state:
                await trio.sleep(0.05)

    async def main():
        await login()
        supervisor = McpSupervisor([McpServerEntry(name="sdk", transport=transport, timeout_secs=10)],
                                   state_dir=str(tmp_path))
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            await wait_state(supervisor, "ready")
            assert (await supervisor.call("mcp_sdk_add", {"a": 1, "b": 2})).structured_content["result"] == 3
            httpx.post(f"{base}/test/revoke")
            with pytest.raises((RpcError, ConnectionLost), match="tern auth login sdk"):
                await supervisor.call("mcp_sdk_add", {"a": 1, "b": 2})
            await wait_state(supervisor, "needs_auth")
            await login()
            await wait_state(supervisor, "ready")
            assert (await supervisor.call("mcp_sdk_add", {"a": 2, "b": 2})).structured_content["result"] == 4
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_concurrent_refusals_run_one_login(oauth_server, tmp_path):
    from runtime.mcp.client.oauth.shell import OAuthSession
    from runtime.net.guard import AddressPolicy
    from runtime.net.outbound import make_client

    base = oauth_server()
    browser = Browser()

    async def main():
        async with make_client(AddressPolicy()) as http:
            session = OAuthSession("sdk", f"{base}/mcp", OAuthConfig(), http, TokenStore(tmp_path), authorizer=browser)
            results = []

            async def refused():
                results.append(await session.challenged(401, ['Bearer error="invalid_token"'], None))

            async with trio.open_nursery() as nursery:
                for _ in range(5):
                    nursery.start_soon(refused)
            return results

    assert trio.run(main) == [True] * 5
    assert browser.logins == 1 and stats(base)["authorization_code"] == 1 and stats(base)["register"] == 1
