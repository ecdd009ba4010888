"""The dashboard's first render (target: the overview within 300 ms of navigation on
loopback in headless Chromium). A real ``tern serve`` with data to show (the echo agent,
the MCP reference server ``server-everything``, one A2A task, one pending approval);
Debian's Chromium driven by Playwright's Python package (the tests' peer, see
tests/browser/support.py). Each run opens ``/#/overview`` in a fresh browser context (no
cache, no storage) and measures, from navigation start (``performance.now()``'s origin):

- overview: the MCP servers table's ``everything`` row on screen (a MutationObserver set
  before any page script runs notes the moment the row is added)
- FCP: the first contentful paint (Paint Timing API)
- where the time goes: DOMContentLoaded (every module script fetched and run), and the
  end of the last API answer that came before the render; and Chromium's own floor, the
  DOMContentLoaded of ``/health`` (a page with nothing to load or run)

and the bytes the page loaded: the document and its assets, and its API calls.

    .venv/bin/python bench/dashboard.py [--runs 20] [--pyz dist/tern.pyz] [--screenshot docs/img/overview.png]

``--screenshot``: afterwards, the overview at 1100x700 with some traffic in its charts (the
README's picture; shrunk for the README with ``pngquant --quality 60-85 --strip``).
"""

from __future__ import annotations

import argparse
import statistics
import time
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import peers  # noqa: E402
from tests.browser import support  # noqa: E402

# Runs before the page's own scripts: the moment an element whose text names the MCP
# server lands inside a table row of the MCP servers table.
_WATCH_ROW = """
new MutationObserver((_, observer) => {
  for (const row of document.querySelectorAll('#main tr')) {
    if (row.textContent.includes('everything') && row.closest('table')) {
      window.__ternOverviewAt = performance.now(); observer.disconnect(); return;
    }
  }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""


def measure(browser, url: str) -> dict:
    context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
    page = context.new_page()
    page.add_init_script(_WATCH_ROW)
    sizes: list[tuple[str, int]] = []
    page.on("requestfinished", lambda request: sizes.append((request.url, request.sizes()["responseBodySize"])))
    try:
        page.goto(url + "/#/overview")
        page.wait_for_function("() => window.__ternOverviewAt !== undefined", timeout=10_000)
        overview = page.evaluate("() => window.__ternOverviewAt")
        fcp = page.evaluate("""() => new Promise(resolve => {
            const found = () => performance.getEntriesByName('first-contentful-paint')[0];
            if (found()) return resolve(found().startTime);
            new PerformanceObserver(() => found() && resolve(found().startTime)).observe({type: 'paint'});
        })""")
        page.wait_for_load_state("networkidle")
        dcl, api_end = page.evaluate("""() => [performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd,
            Math.max(0, ...performance.getEntriesByType('resource').filter(e => e.name.includes('/api/'))
                                      .map(e => e.responseEnd).filter(t => t <= window.__ternOverviewAt))]""")
        api = [size for address, size in sizes if "/api/" in address]
        return {"overview": overview, "fcp": fcp, "dcl": dcl, "api_end": api_end,
                "assets": sum(size for _, size in sizes) - sum(api), "files": len(sizes) - len(api),
                "api": sum(api), "calls": len(api)}
    finally:
        context.close()


def floor(browser, url: str) -> float:
    """DOMContentLoaded of ``/health`` (15 bytes of JSON) in a fresh context: what Chromium
    itself costs here for a page with nothing to run, to read the figures above against."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(url + "/health")
        return page.evaluate("() => performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    finally:
        context.close()


def _ready(client: httpx.Client) -> bool:
    return any(s["state"] == "ready" for s in client.get("/api/status").json()["mcp_servers"])


def picture(browser, client: httpx.Client, path: Path) -> None:
    """The overview after ~15 s of calls (echo messages, tool calls, a failing one), so its charts show some."""
    context = browser.new_context(viewport={"width": 1100, "height": 700})
    page = context.new_page()
    page.goto(str(client.base_url) + "/#/overview")
    page.get_by_role("row").filter(has_text="everything").wait_for()
    for second in range(15):
        for n in range(second % 4 + 1):
            client.post("/api/agents/echo/message", json={"message": f"ping {second}.{n}"})
            with client.stream("POST", "/api/tools/time_now/call", json={"arguments": {}}) as called:
                called.read()
        if second % 5 == 2:
            with client.stream("POST", "/api/tools/file_read/call", json={"arguments": {"path": "nothere"}}) as failed:
                failed.read()
        time.sleep(1)
    page.screenshot(path=str(path))
    context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pyz", type=lambda p: Path(p).resolve(),
                        help="serve from this built tern.pyz (default: the source tree)")
    parser.add_argument("--screenshot", type=Path, help="then save a picture of the overview here")
    args = parser.parse_args()
    sync_playwright = support.import_playwright(peers.playwright_site_packages())
    npm = peers.npm_servers()
    tmp = support.temp_dir("tern-bench-dashboard-")
    config = tmp / "config.toml"
    config.write_text(support.config_text(tmp / "state", everything=npm["server-everything"]))
    daemon = support.Daemon(config, args.pyz)
    try:
        with httpx.Client(base_url=daemon.url, timeout=30) as client:
            support.a2a_send(client, "a task for the overview")
            waiting: list = []
            support.ask_to_write(client, "bench.txt", "pending", waiting)
            support.pending_approval(client, "bench.txt")
            support.wait_for(lambda: _ready(client), 60, "server-everything to be ready")
            with sync_playwright() as playwright:
                browser = support.launch(playwright)
                measure(browser, daemon.url)  # warm-up: the daemon's first requests, Chromium's first page
                runs = [measure(browser, daemon.url) for _ in range(args.runs)]
                floors = [floor(browser, daemon.url) for _ in range(args.runs)]
                if args.screenshot:
                    picture(browser, client, args.screenshot)
                browser.close()
    finally:
        daemon.stop()
    overview = [r["overview"] for r in runs]
    fcp = [r["fcp"] for r in runs]
    print(f"dashboard overview, {args.runs} runs, Chromium {peers.CHROMIUM}, {'pyz' if args.pyz else 'source'}")
    p90 = statistics.quantiles(overview, n=10)[-1] if len(overview) > 1 else overview[0]
    print(f"  overview rendered: median {statistics.median(overview):.1f} ms, p90 {p90:.1f} ms, "
          f"max {max(overview):.1f} ms (target 300 ms)")
    print(f"  where the time goes (medians): DOMContentLoaded {statistics.median(r['dcl'] for r in runs):.1f} ms, "
          f"last API answer before the render {statistics.median(r['api_end'] for r in runs):.1f} ms")
    print(f"  Chromium's floor here (DOMContentLoaded of /health): median {statistics.median(floors):.1f} ms")
    print(f"  first contentful paint: median {statistics.median(fcp):.1f} ms, max {max(fcp):.1f} ms")
    last = runs[-1]
    print(f"  loaded: {last['assets']} bytes of page and assets in {last['files']} files, "
          f"{last['api']} bytes from {last['calls']} API calls")


if __name__ == "__main__":
    main()
