"""Fixtures for the dashboard in a real browser: one headless Chromium per session, one
``tern serve`` from the built pyz per module, a fresh browser context per test, and every
test failing on a console error, an uncaught exception or a CSP violation in its pages.

The daemon (``dashboard``) has what each page must show: the echo agent, a ``writer``
whose file writes wait for a person (one request is left pending), an LLM agent on a
scripted model that calls ``time_now`` and another whose ``file_write`` a person approves
in the chat, the MCP reference server ``server-everything``, and A2A with one task made
through ``SendMessage``. ``keyed`` is a second daemon that needs an API key.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests import peers
from tests.browser import support
from tests.chat_stub import calls_tool, serve_chat


@pytest.fixture(scope="session")
def browser():
    site = peers.require(peers.playwright_site_packages)
    sync_playwright = support.import_playwright(site)
    with sync_playwright() as playwright:
        browser = support.launch(playwright)
        yield browser
        browser.close()


@dataclass
class Watched:
    """A page and what went wrong in it: console errors, uncaught exceptions, CSP violations."""

    page: object
    problems: list = field(default_factory=list)
    allowed: list = field(default_factory=list)  # substrings of console errors a test expects

    def unexpected(self) -> list:
        return [p for p in self.problems if not any(a in p for a in self.allowed)]


# Every CSP violation is recorded, whether or not Chromium also logs it (init scripts
# are injected by the browser, not the page, so the CSP does not stop this one).
_CSP_WATCH = ("document.addEventListener('securitypolicyviolation', e => "
              "console.error('CSP violation: ' + e.violatedDirective + ' ' + e.blockedURI));")


@pytest.fixture
def watched(browser, request) -> Iterator[Watched]:
    """A page in a fresh context (no storage shared with other tests) at 1280x900; the test
    fails if anything unexpected reached the console."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.add_init_script(_CSP_WATCH)
    seen = Watched(page)
    page.on("console", lambda m: seen.problems.append(f"console.{m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.problems.append(f"uncaught: {e}"))
    yield seen
    if getattr(request.node, "rep_call_failed", False):
        support.ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(support.ARTIFACTS / f"FAILED-{request.node.name}.png"), full_page=True)
    context.close()
    assert not seen.unexpected(), "the page reported problems:\n" + "\n".join(seen.unexpected())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "call":
        item.rep_call_failed = report.failed
    return report


@dataclass
class Dashboard:
    url: str
    daemon: support.Daemon
    client: httpx.Client
    state: Path
    task_id: str = ""
    pending: dict = field(default_factory=dict)
    mcp_tools: int = 0


def start(tmp: Path, pyz: Path, text: str, env: dict | None = None) -> support.Daemon:
    config = tmp / "config.toml"
    config.write_text(text)
    return support.Daemon(config, pyz, env)


@pytest.fixture(scope="module")
def dashboard(pyz, tmp_path_factory) -> Iterator[Dashboard]:
    npm = peers.require(peers.npm_servers)
    tmp = tmp_path_factory.mktemp("dashboard")
    waiting: list = []
    writes = calls_tool("file_write", {"path": "from-chat.txt", "content": "approved in the chat"})
    with serve_chat(calls_tool("time_now", {})) as model_url, serve_chat(writes) as scribe_url:
        daemon = start(tmp, pyz, support.config_text(tmp / "state", model_url=model_url, scribe_url=scribe_url,
                                                      everything=npm["server-everything"]))
        client = httpx.Client(base_url=daemon.url, timeout=30)
        try:
            made = support.a2a_send(client, "hello from a2a")
            board = Dashboard(daemon.url, daemon, client, tmp / "state", task_id=made["result"]["task"]["id"])
            support.ask_to_write(client, "pending.txt", "left pending", waiting)
            board.pending = support.pending_approval(client, "pending.txt")
            board.mcp_tools = support.wait_for(
                lambda: next((s["tools"] for s in client.get("/api/status").json()["mcp_servers"]
                              if s["state"] == "ready"), 0), 60, "server-everything to be ready")
            yield board
        finally:
            client.close()
            daemon.stop()
    if daemon.process.returncode != 0:
        pytest.fail(f"the daemon exited {daemon.process.returncode}:\n{daemon.log()[-3000:]}")


@pytest.fixture(scope="module")
def keyed(pyz, tmp_path_factory) -> Iterator[tuple[str, str]]:
    """A second daemon that needs an API key: ``(url, key)``."""
    tmp = tmp_path_factory.mktemp("keyed")
    key = "browser-test-key-" + tmp.name
    daemon = start(tmp, pyz, support.config_text(tmp / "state", api_key_env="TERN_API_KEY"), {"TERN_API_KEY": key})
    try:
        yield daemon.url, key
    finally:
        daemon.stop()


@pytest.fixture(scope="session", autouse=True)
def fresh_artifacts() -> None:
    """Screenshots of this run only in test-artifacts/dashboard/."""
    shutil.rmtree(support.ARTIFACTS, ignore_errors=True)
    support.ARTIFACTS.mkdir(parents=True, exist_ok=True)
