""""Approve always" on the Approvals page: the request waiting on it goes ahead, and the
same agent's next call of that tool runs without asking anyone (the decision is kept for
that agent and tool). On a daemon of its own: the shared one's ``writer`` must keep asking."""

from __future__ import annotations

import httpx
import pytest

from tests.browser.support import Daemon, ask_to_write, config_text, expect, pending_approval

pytestmark = pytest.mark.slow


def approve_on_the_page(watched, daemon, client, path: str, content: str, button: str):
    """A write of ``path`` waits for a person; the approvals page answers it with ``button``
    and the write goes through. The page, for what the test checks next."""
    results: list = []
    waiting = ask_to_write(client, path, content, results)
    pending_approval(client, path)
    page = watched.page
    page.goto(daemon.url + "/#/approvals")
    expect(page.get_by_role("status", name="Connection")).to_have_text("Live")
    page.get_by_role("listitem").filter(has_text=path).get_by_role("button", name=button).click()
    waiting.join(30)
    assert [r.status_code for r in results] == [200], results
    return page


def test_approve_always_lets_the_next_call_through_unasked(watched, pyz, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(config_text(tmp_path / "state"))
    daemon = Daemon(config, pyz)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            approve_on_the_page(watched, daemon, client, "first.txt", "asked once", "Approve always")
            decided = client.get("/api/approvals?state=all").json()["approvals"]
            assert [(a["state"], a["scope"]) for a in decided] == [("approved", "always")]
            second = client.post("/api/agents/writer/message", timeout=30,
                                 json={"message": '{"path": "second.txt", "content": "not asked"}'})
            assert second.status_code == 200, second.text
            assert len(client.get("/api/approvals?state=all").json()["approvals"]) == 1  # nobody was asked again
            workspace = tmp_path / "state" / "workspaces" / "writer"
            assert (workspace / "first.txt").read_text() == "asked once"
            assert (workspace / "second.txt").read_text() == "not asked"
    finally:
        watched.allowed.append("ERR_CONNECTION_REFUSED")  # the open page retries its socket once the daemon is gone
        daemon.stop()


def test_always_with_these_arguments_holds_for_the_same_arguments_only(watched, pyz, tmp_path):
    """"Always with these arguments": the same call again runs unasked; the same tool with
    other arguments still waits for a person."""
    config = tmp_path / "config.toml"
    config.write_text(config_text(tmp_path / "state"))
    daemon = Daemon(config, pyz)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            page = approve_on_the_page(watched, daemon, client, "same.txt", "same arguments",
                                       "Always with these arguments")
            decided = client.get("/api/approvals?state=all").json()["approvals"]
            assert [(a["state"], a["scope"]) for a in decided] == [("approved", "args")]
            recent = page.locator("#main li").filter(has_text="(always with these arguments) file_write")
            expect(recent).to_have_count(1)
            again = client.post("/api/agents/writer/message", timeout=30,
                                json={"message": '{"path": "same.txt", "content": "same arguments"}'})
            assert again.status_code == 200, again.text
            assert len(client.get("/api/approvals?state=all").json()["approvals"]) == 1  # not asked again
            other: list = []
            ask_to_write(client, "other.txt", "other arguments", other)
            assert pending_approval(client, "other.txt")["state"] == "pending"  # these arguments were not approved
    finally:
        watched.allowed.append("ERR_CONNECTION_REFUSED")
        daemon.stop()
