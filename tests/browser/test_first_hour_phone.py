"""The first hour's approval from a phone (#34): the bundled config, a rule that asks
before ``files`` lists, the notify page's webhook channel pointed at a receiver on this
machine; a phone-sized Chromium follows the link (this directory's one browser: Playwright's
sync API runs one per process)."""

from __future__ import annotations

import os
import queue
import shlex
import shutil
import signal
import sys
from pathlib import Path

import httpx
import pytest

from tests.browser.support import ARTIFACTS
from tests.test_first_hour import ROOT, Newcomer, Receiver, block, free_port, stop, wait_for

pytestmark = [pytest.mark.pyz, pytest.mark.slow,
              pytest.mark.skipif(os.name != "posix", reason="POSIX shells and signals")]


def test_an_approval_answered_from_a_phone_through_a_notify_link(pyz: Path, tmp_path: Path, browser):
    """The bundled config, a rule that asks before ``files`` lists, and the notify page's
    webhook channel pointed at a receiver on this machine: ``tern run`` waits, the webhook
    brings the link, a phone-sized Chromium opens it (the page shows the arguments' hash
    and decides nothing), taps Approve, and the run goes on; the spent link decides nothing more."""
    page = (ROOT / "docs" / "approvals-notify.md").read_text()
    example = block(page, "", fence="toml")
    channel = "[[governance.notify]]" + example.split("[[governance.notify]]")[1]  # the webhook one
    assert 'kind = "webhook"' in channel
    home = tmp_path / "home"
    (home / "dist").mkdir(parents=True)
    shutil.copy(pyz, home / "dist" / "tern.pyz")
    me = Newcomer(home)
    assert me.sh(f"{shlex.quote(sys.executable)} dist/tern.pyz install").returncode == 0
    receiver = Receiver()
    port = free_port()
    config = (ROOT / "config.toml").read_text().replace('listen = "127.0.0.1:50051"', f'listen = "127.0.0.1:{port}"')
    config += ("\n[[governance.rules]]\ntool = \"file_list\"\nagent = \"files\"\ndecision = \"ask\"\n\n"
               + channel.replace("https://hooks.example.org/tern", f"http://127.0.0.1:{receiver.server_port}/tern")
               .replace('secret_env = "TERN_NOTIFY_SECRET"', "allow_private = true  # the receiver is on loopback"))
    (home / "config.toml").write_text(config)
    assert me.sh("tern config check").returncode == 0, me.sh("tern config check").stderr
    daemon, daemon_lines = me.start("tern serve")
    run = None
    try:
        wait_for(daemon_lines, "serving on")
        run, run_lines = me.start('tern run files "list my files"')
        body = receiver.bodies.get(timeout=60)
        assert body["tool"] == "file_list" and body["agent"] == "files", body
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
        try:
            tab = phone.new_page()
            first = body
            while True:  # the files agent may call twice (its guess at a path, then the workspace)
                tab.goto(body["approve_url"])
                assert body["arguments_sha256"] in tab.content()
                assert run.poll() is None  # looking decided nothing
                with tab.expect_navigation():
                    tab.get_by_role("button", name="Approve").tap()
                assert "<h1>Approved</h1>" in tab.content()
                try:
                    body = receiver.bodies.get(timeout=5)
                except queue.Empty:
                    break
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            tab.screenshot(path=str(ARTIFACTS / "phone-approved-through-a-notify-link.png"))
            assert run.wait(timeout=60) == 0
            again = httpx.post(first["approve_url"], timeout=10)
            assert again.status_code >= 400  # spent: one decision per link
        finally:
            phone.close()
        out = ""
        while not run_lines.empty():
            out += run_lines.get()
        assert "(empty directory: " in out, out
        assert stop(daemon) == 0
    finally:
        receiver.shutdown()
        for process in (run, daemon):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
