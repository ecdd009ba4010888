"""The daemon going away under an open page: the connection indicator says Offline (no
uncaught error, the page stays usable), and when tern is back on the same address the page
reconnects by itself and shows live data again, without a reload."""

from __future__ import annotations

import pytest

from tests.browser.support import Daemon, config_text, expect
from tests.mcp.test_real_peers_http import free_port

pytestmark = pytest.mark.slow

# While tern is down, Chromium logs each refused fetch and WebSocket attempt on the console.
REFUSED = ("ERR_CONNECTION_REFUSED", "WebSocket connection to")


def test_the_page_goes_offline_and_comes_back_with_the_daemon(watched, pyz, tmp_path):
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(config_text(tmp_path / "state").replace('listen = "127.0.0.1:0"', f'listen = "127.0.0.1:{port}"'))
    daemon = Daemon(config, pyz)
    try:
        page = watched.page
        page.goto(daemon.url + "/#/overview")
        connection = page.get_by_role("status", name="Connection")
        expect(connection).to_have_text("Live")
        watched.allowed.extend(REFUSED)
        daemon.stop()
        expect(connection).to_have_text("Offline")
        page.get_by_role("navigation", name="Dashboard").get_by_role("link", name="Chat", exact=True).click()
        expect(page.locator("#main h1")).to_have_text("Chat")  # still a working page
        config.write_text(config.read_text() + '[[agents]]\nname = "newcomer"\nkind = "echo"\n')
        daemon = Daemon(config, pyz)
        expect(connection).to_have_text("Live", timeout=45_000)  # reconnect backoff tops out at 30 s
        page.get_by_role("navigation", name="Dashboard").get_by_role("link", name="Overview", exact=True).click()
        expect(page.locator("#main")).to_contain_text("newcomer")
    finally:
        daemon.stop()
