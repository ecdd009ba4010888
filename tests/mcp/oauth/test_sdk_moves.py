"""An MCP server built from the official Python SDK's auth components that moves to
another authorization server, and one whose authorization server lies about its
issuer (``tests/fixtures/sdk_oauth_server.py --moves`` / ``--wrong-issuer``).

Each authorization server logs what it was sent, so the tests can say what tern did
NOT send where: AS-1's refresh token and client never reach AS-2, and nothing but a
metadata GET reaches an authorization server whose document names another issuer.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import trio

from runtime.errors import ConnectionLost, RpcError
from runtime.mcp.client.oauth.challenge import parse_www_authenticate
from runtime.mcp.client.oauth.store import TokenStore
from runtime.mcp.client.supervisor import McpSupervisor
from tests.mcp.oauth.test_sdk_server import SERVER, authorization_url, entry, follow, start, tern, write_config
from tests.mcp.test_real_peers_http import free_port

WELL_KNOWN = "/.well-known/"


@pytest.fixture
def moving_server(sdk_python):
    """The MCP server and its two authorization servers: (mcp base, AS-1, AS-2)."""
    ports = [free_port() for _ in range(3)]
    process = subprocess.Popen([sdk_python, SERVER, str(ports[0]), "--moves", str(ports[1]), str(ports[2])],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bases = [f"http://127.0.0.1:{port}" for port in ports]
    deadline = time.monotonic() + 30
    try:
        for base in bases:
            while True:
                try:
                    httpx.get(f"{base}/test/stats", timeout=1.0)  # any answer: it listens
                    break
                except httpx.HTTPError:
                    assert process.poll() is None and time.monotonic() < deadline, "the SDK OAuth server did not start"
                    time.sleep(0.1)
        yield bases
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def lying_server(sdk_python):
    """The MCP server and its authorization server, whose metadata names another issuer."""
    port = free_port()
    process = start(sdk_python, port, "--wrong-issuer")
    yield f"http://127.0.0.1:{port}"
    process.terminate()
    process.wait(10)


def requests_to(server: str) -> list[dict]:
    return httpx.get(f"{server}/test/log").json()


def login_by_paste(tmp_path: Path, config: Path) -> str:
    """``tern auth login`` as a person on another machine does it: open the URL, paste
    where the browser landed. The authorization URL it printed."""
    login = tern(tmp_path, config, "auth", "login", "sdk", "--no-browser")
    try:
        url = authorization_url(login)
        login.stdin.write(follow(url) + "\n")
        login.stdin.flush()
        assert login.wait(30) == 0, login.stderr.read()
    finally:
        login.kill()
    assert "Logged in to MCP server 'sdk'" in login.stderr.read()
    return url


async def wait_state(supervisor: McpSupervisor, state: str) -> None:
    with trio.fail_after(15):
        while supervisor.statuses()[0].state != state:
            await trio.sleep(0.05)


async def add(supervisor: McpSupervisor, a: int, b: int) -> int:
    return (await supervisor.call("mcp_sdk_add", {"a": a, "b": b})).structured_content["result"]


def test_a_server_that_moves_to_another_authorization_server(moving_server, tmp_path):
    """Logged in at AS-1; the server switches to AS-2; the next call's 401 leads tern
    to AS-2's metadata, where it sends nothing of AS-1's (no refresh there, no client
    id), forgets the dead tokens and waits in needs_auth; a login at AS-2 revives it."""
    base, as1, as2 = moving_server
    url = f"{base}/mcp"
    config = write_config(tmp_path, url)
    store = TokenStore(tmp_path / "state")
    assert login_by_paste(tmp_path, config).startswith(f"{as1}/authorize?")
    old, old_client = store.tokens(url), store.client(as1)
    assert old is not None and old.issuer == as1 and old.refresh_token and old_client is not None
    seen_by_as1 = len(requests_to(as1))

    async def main():
        supervisor = McpSupervisor([entry(url)], state_dir=str(tmp_path / "state"))
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            await wait_state(supervisor, "ready")
            assert await add(supervisor, 1, 2) == 3
            moved = httpx.post(f"{base}/test/move", params={"to": "2"})
            assert moved.json()["authorization_servers"] == [as2]
            refused = httpx.post(url, headers={"Authorization": old.header, "Content-Type": "application/json"},
                                 content=b"{}")
            challenge = parse_www_authenticate(refused.headers.get_list("www-authenticate"))
            assert refused.status_code == 401 and challenge.error == "invalid_token"
            assert httpx.get(challenge.resource_metadata).json()["authorization_servers"] == [as2]
            with pytest.raises((RpcError, ConnectionLost), match="tern auth login sdk"):
                await add(supervisor, 2, 2)
            await wait_state(supervisor, "needs_auth")
            assert "tern auth login sdk" in supervisor.statuses()[0].last_error
            assert store.tokens(url) is None  # refused and not refreshable here: gone
            before_login = requests_to(as2)
            second = await trio.to_thread.run_sync(login_by_paste, tmp_path, config)
            assert second.startswith(f"{as2}/authorize?")
            await wait_state(supervisor, "ready")
            assert await add(supervisor, 2, 3) == 5
            nursery.cancel_scope.cancel()
        return before_login

    before_login = trio.run(main)
    assert before_login and all(r["method"] == "GET" and r["path"].startswith(WELL_KNOWN) for r in before_login)
    new, new_client = store.tokens(url), store.client(as2)
    assert new is not None and new.issuer == as2 and new_client is not None
    assert new_client.client_id != old_client.client_id
    sent_to_as2 = json.dumps(requests_to(as2))
    for secret in filter(None, (old.access_token, old.refresh_token, old_client.client_id, old_client.client_secret)):
        assert secret not in sent_to_as2
    assert new_client.client_id in sent_to_as2  # the log would show a client id sent there
    assert httpx.get(f"{as2}/test/stats").json() | {"refused": 0} == {
        "register": 1, "authorization_code": 1, "refresh_token": 0, "refused": 0}
    assert not [r for r in requests_to(as1)[seen_by_as1:] if r["method"] != "GET"]  # the old login is left alone


def test_an_authorization_server_naming_another_issuer_is_refused(lying_server, tmp_path):
    """RFC 8414 section 3.3 (a mix-up): the metadata names an issuer other than the one
    it was fetched for. ``tern auth login`` and ``tern mcp servers`` say so, and
    nothing but metadata GETs reaches that server's endpoints."""
    from tests.test_cli_daemon import Daemon, tern as tern_cli, write_config as daemon_config

    base = lying_server
    config = daemon_config(tmp_path, extra=f'[[mcp_servers]]\nname = "sdk"\n[mcp_servers.transport]\ntype = "http"\n'
                                           f'url = "{base}/mcp"\n')  # OAuth when the server asks: it probes
    login = tern(tmp_path, Path(config), "auth", "login", "sdk", "--no-browser")
    try:
        _, err = login.communicate(timeout=15)
    finally:
        login.kill()
    assert login.returncode != 0 and "/authorize?" not in err
    assert "names the issuer 'https://issuer.example': refused" in err, err
    daemon = Daemon(config)
    try:
        deadline = time.monotonic() + 20
        while "issuer.example" not in (listed := tern_cli("mcp", "servers", config=config).stdout):
            assert time.monotonic() < deadline, listed
            time.sleep(0.2)
    finally:
        daemon.stop()
    assert "names the issuer 'https://issuer.example': refused" in listed, listed
    sent = requests_to(base)
    assert sent and all(r["method"] == "GET" and r["path"].startswith(WELL_KNOWN) for r in sent), sent
    assert not (tmp_path / "state" / "oauth").exists() or not list((tmp_path / "state" / "oauth").glob("client-*"))
