"""Logging in to an OAuth MCP server from the overview, all in the browser: the MCP server
built from the official Python SDK's auth components waits in ``needs_auth``; "Log in to
sdk" shows the authorization URL as a link; the browser follows it (the authorization
server redirects at once to tern's loopback listener), and the row turns ``ready`` with
its tools, without a reload."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests import peers
from tests.browser.support import ARTIFACTS, Daemon, expect
from tests.mcp.oauth.test_sdk_server import start, stats
from tests.mcp.test_real_peers_http import free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def oauth_dashboard(pyz, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """``(tern's URL, the OAuth MCP server's URL)``."""
    sdk = peers.require(peers.mcp_sdk_python)
    port = free_port()
    server = start(str(sdk), port)
    base = f"http://127.0.0.1:{port}"
    tmp = tmp_path_factory.mktemp("oauth")
    config = tmp / "config.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:0"\n[state]\ndir = "{tmp / "state"}"\n'
                      '[[agents]]\nname = "echo"\nkind = "echo"\n'
                      f'[[mcp_servers]]\nname = "sdk"\n[mcp_servers.transport]\ntype = "http"\nurl = "{base}/mcp"\n'
                      '[mcp_servers.transport.oauth]\n')
    daemon = Daemon(config, pyz, {"HOME": str(tmp)})
    try:
        yield daemon.url, base
    finally:
        daemon.stop()
        server.terminate()
        server.wait(10)


def test_log_in_to_an_oauth_server_from_the_overview(watched, oauth_dashboard):
    url, base = oauth_dashboard
    page = watched.page
    page.goto(url + "/#/overview")
    row = page.get_by_role("row").filter(has_text="sdk")
    expect(row).to_contain_text(re.compile("needs.auth"), timeout=20_000)
    row.get_by_role("button", name="Log in to sdk").click()
    link = page.locator(f'a[href^="{base}/authorize?"]')
    expect(link).to_have_count(1)
    page.screenshot(path=str(ARTIFACTS / "login.png"))
    authorization = link.get_attribute("href")
    assert "code_challenge=" in authorization
    person = page.context.new_page()  # the person opens the link: the server redirects to tern's listener
    person.goto(authorization)
    expect(person.locator("body")).to_contain_text("Logged in")
    person.close()
    expect(row).to_contain_text("ready", timeout=20_000)
    expect(row.get_by_role("button", name="Log in to sdk")).to_have_count(0)
    assert stats(base)["authorization_code"] == 1
