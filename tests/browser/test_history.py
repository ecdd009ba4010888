"""The dashboard's memory, in headless Chromium against a real ``tern serve`` (the built
pyz) on the bundled config (offline: its deterministic ``echo`` and ``files`` agents), with
a scripted model agent and a schedule trigger added: runs are made, the daemon is stopped
and started again, and the overview (charts filled, recent runs, each agent's last run
and description), the triggers page (next run with its zone, last runs, Fire) and one
run's timeline (its model and tool calls) show what happened before the restart. The
sign-in wall names the local token's file. Screenshots go to test-artifacts/dashboard/."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.browser.support import ARTIFACTS, ROOT, Daemon, expect, wait_for
from tests.chat_stub import calls_tool, serve_chat

pytestmark = pytest.mark.slow


def bundled_config(tmp: Path, model_url: str) -> Path:
    """The shipped config.toml on a free port with its state in ``tmp``, plus a scripted
    model agent that calls ``time_now`` and an hourly trigger in Berlin time."""
    text = re.sub(r'(?m)^listen = .*$', 'listen = "127.0.0.1:0"', (ROOT / "config.toml").read_text(), count=1)
    text += (f'\n[state]\ndir = "{tmp / "state"}"\n'
             '[[agents]]\nname = "clock"\nkind = "llm"\ntools = ["time_now"]\n'
             'description = "A scripted model that asks for the time."\n'
             f'[agents.model]\nbase_url = "{model_url}"\nmodel = "scripted"\n'
             '[[triggers]]\nname = "hourly"\nagent = "echo"\nkind = "schedule"\nevery = "1h"\n'
             'timezone = "Europe/Berlin"\nmessage = "the hourly tick"\n')
    config = tmp / "config.toml"
    config.write_text(text)
    return config


@pytest.fixture(scope="module")
def restarted(pyz, tmp_path_factory):
    """A daemon that ran echo, files, clock and the trigger, then was stopped and started
    again: ``(url, client, state dir)``."""
    tmp = tmp_path_factory.mktemp("history")
    with serve_chat(calls_tool("time_now", {})) as model_url:
        config = bundled_config(tmp, model_url)
        first = Daemon(config, pyz)
        try:
            with httpx.Client(base_url=first.url, timeout=30) as client:
                for agent, text in (("echo", "hello before the restart"), ("files", "."), ("clock", "what time?")):
                    answer = client.post(f"/api/agents/{agent}/message", json={"message": text})
                    assert answer.status_code == 200, answer.text
                fired = client.post("/api/triggers/hourly/fire")
                assert fired.status_code == 202, fired.text
                run_id = fired.json()["run_id"]
                wait_for(lambda: client.get(f"/api/triggers/hourly/runs/{run_id}").json()["outcome"] == "ok", 30,
                         "the trigger's run to end")
                wait_for(lambda: len(client.get("/api/activity").json()["runs"]) >= 4, 10, "the history to be written")
        finally:
            first.stop()
        second = Daemon(config, pyz)
        try:
            with httpx.Client(base_url=second.url, timeout=30) as client:
                yield second.url, client, tmp / "state", run_id
        finally:
            second.stop()


def open_page(watched, url: str, route: str, heading: str):
    page = watched.page
    page.goto(f"{url}/#/{route}")
    expect(page.locator("#main h1")).to_have_text(heading)
    expect(page.get_by_role("status", name="Connection")).to_have_text("Live")
    return page


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_overview_remembers_what_ran_before_the_restart(watched, restarted):
    url, client, _, _ = restarted
    page = open_page(watched, url, "overview", "Overview")
    main = page.locator("#main")
    runs = page.get_by_role("table", name="Recent runs")
    for agent in ("echo", "files", "clock"):
        expect(runs.get_by_role("row").filter(has_text=agent).first).to_be_visible()
    expect(runs.get_by_role("row").filter(has_text="trigger:hourly").first).to_be_visible()  # who asked
    clock = runs.get_by_role("row").filter(has_text="clock").locator("td")
    expect(clock.nth(2)).to_have_text("local")  # asked by: the owner's browser
    expect(clock.nth(5)).to_have_text("2")  # what it cost: two model calls, one tool call, some tokens
    expect(clock.nth(6)).to_have_text("1")
    expect(clock.nth(7)).to_have_text(re.compile(r"^[1-9]\d*$"))
    for name in ("Agent runs", "Model calls", "Tool calls", "Errors"):
        expect(main.get_by_role("img", name=name, exact=True)).to_be_visible()
    for name in ("Agent runs", "Tool calls", "Model calls"):  # filled from the history, not from page load
        chart = page.locator("figure", has=page.get_by_role("img", name=name, exact=True))
        expect(chart).to_contain_text(re.compile(r"[1-9]\d* in \d+ min"))
    agents = page.get_by_role("table", name="Agents", exact=True)
    expect(agents).to_contain_text("Lists the files in its workspace directory")  # descriptions
    files = agents.get_by_role("row").filter(has_text="Lists the files")
    expect(files.get_by_role("link", name=re.compile("ago"))).to_have_count(1)  # its last run
    expect(agents.get_by_role("row").filter(has_text="A general assistant")).to_contain_text("never")
    triggers = page.get_by_role("table", name="Triggers")
    expect(triggers.get_by_role("row").filter(has_text="hourly")).to_contain_text("(Europe/Berlin)")
    expect(triggers.get_by_role("row").filter(has_text="hourly")).to_contain_text("ok")
    # one heading per section: the tables' captions are for screen readers only
    seen = page.evaluate("""names => names.map(n => [...document.querySelectorAll('#main h2, #main caption')]
        .filter(e => e.textContent.trim() === n && e.getBoundingClientRect().width > 2).length)""",
                         ["Agents", "Recent runs", "MCP servers", "Activity", "Triggers"])
    assert seen == [1, 1, 1, 1, 1], seen
    shot(page, "history-overview")


def test_the_triggers_page_shows_next_and_last_runs_and_fires(watched, restarted):
    url, client, _, run_id = restarted
    page = open_page(watched, url, "triggers", "Triggers")
    row = page.get_by_role("table", name="Triggers").get_by_role("row").filter(has_text="hourly")
    expect(row).to_contain_text("every 1h")
    expect(row).to_contain_text("Europe/Berlin")  # the next run in its own zone, named
    expect(row).to_contain_text(re.compile(r"GMT\+\d|CES?T"))
    expect(row).to_contain_text(re.compile(r"in \d+ min|in \d+ h"))
    expect(row).to_contain_text("ok")  # the last run, from before the restart
    expect(row.get_by_role("cell").nth(3)).to_contain_text("Europe/Berlin")  # the last run (cell 3), in its zone
    shot(page, "triggers")
    row.get_by_role("button", name="Fire hourly").click()
    status = page.get_by_role("status").filter(has_text="started")
    expect(status).to_contain_text(re.compile(r"hourly: run run_[0-9a-f]+ started"))
    row.get_by_role("link", name="hourly", exact=True).click()
    runs = page.get_by_role("table", name="Runs of hourly")
    expect(runs.get_by_role("row").filter(has_text="manual")).to_have_count(2)
    expect(runs.get_by_role("row").filter(has_text="manual").first).to_contain_text("Europe/Berlin")  # its zone
    runs.get_by_role("link", name=f"Timeline of {run_id}").click()
    expect(page.locator("#main h1")).to_have_text("Runs")
    expect(page.locator("#main")).to_contain_text("trigger:hourly")
    expect(page.get_by_role("table", name="Timeline")).to_contain_text("echo")


def test_a_runs_timeline_draws_its_model_and_tool_calls(watched, restarted):
    url, client, _, _ = restarted
    page = open_page(watched, url, "overview", "Overview")
    page.get_by_role("table", name="Recent runs").get_by_role("row").filter(has_text="clock").get_by_role(
        "link").click()
    expect(page.locator("#main h1")).to_have_text("Runs")
    timeline = page.get_by_role("table", name="Timeline")
    rows = timeline.locator("tbody tr")
    expect(rows).to_have_count(4)  # the run, a model call, the tool call, the model's answer
    expect(rows.nth(0)).to_contain_text("clock")
    expect(rows.nth(1)).to_contain_text(re.compile(r"model\s*scripted"))
    expect(rows.nth(2)).to_contain_text(re.compile(r"tool\s*time_now"))
    expect(rows.nth(3)).to_contain_text(re.compile(r"model\s*scripted"))
    expect(timeline.locator("rect.span")).to_have_count(4)
    main = page.locator("#main")
    expect(main).to_contain_text("2 model calls, 1 tool call")
    # the bars are in order: each call starts at or after the one before it
    starts = [float(x) for x in timeline.locator("rect.span").evaluate_all("els => els.map(e => e.getAttribute('x'))")]
    assert starts == sorted(starts), starts
    shot(page, "run-timeline")
    watched.page.set_viewport_size({"width": 375, "height": 812})
    width = page.evaluate("() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]")
    assert width[0] <= width[1], f"the timeline scrolls sideways at 375 px: {width}"
    shot(page, "narrow-run-timeline")


def test_the_sign_in_wall_names_the_local_token(watched, restarted):
    """A browser the daemon cannot tell is its owner's (forced here: the first status call
    answers 401) is told where the local token is; pasting it signs in."""
    url, client, state, _ = restarted
    page = watched.page
    refused = {"n": 0}

    def once(route):
        if refused["n"] == 0:
            refused["n"] += 1
            route.fulfill(status=401, json={"error": {"message": "not known to be the owner"}})
        else:
            route.continue_()

    page.route("**/api/status", once)
    watched.allowed.append("status of 401")
    page.goto(f"{url}/#/overview")
    form = page.get_by_role("form", name="Sign in")
    token_file = state / "local-token"
    note = form.get_by_role("note", name="Where the key is")
    expect(note).to_contain_text("local token")
    expect(note).to_contain_text(str(token_file))
    expect(note).to_contain_text(f"cat {token_file}")
    shot(page, "sign-in-local-token")
    form.get_by_label("API key").fill(token_file.read_text().strip())
    form.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("table", name="Recent runs")).to_contain_text("clock")
    assert client.get("/api/sign-in").json()["local_token_path"] == str(token_file)
