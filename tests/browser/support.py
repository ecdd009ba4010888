"""What the browser tests and bench/dashboard.py share: a real ``tern serve`` with the data
every dashboard page shows, and Debian's Chromium driven by Playwright's Python package.

Playwright comes from its own peer venv (``peers.playwright_site_packages``: made by this
interpreter, so its compiled greenlet fits), appended to ``sys.path``: this venv's own
packages still win. Its browser download is never used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests import peers

ROOT = Path(__file__).resolve().parent.parent.parent
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
V10 = {"A2A-Version": "1.0"}

#: Chromium's switches: no sandbox (CI runs as root), no GPU, and none of the background
#: traffic (updates, sync, safe-browsing lists) a test machine has no use for.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic", "--disable-dev-shm-usage"]


def import_playwright(site_packages: Path):
    """``playwright.sync_api.sync_playwright``, imported from the peer venv's ``site_packages``."""
    if str(site_packages) not in sys.path:
        sys.path.append(str(site_packages))
    from playwright.sync_api import sync_playwright

    return sync_playwright


def launch(playwright):
    """Headless Debian Chromium. Playwright gives each launch a fresh temporary profile
    (user-data dir), removed when the browser closes."""
    return playwright.chromium.launch(executable_path=peers.CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def config_text(state: Path, *, model_url: str = "", scribe_url: str = "", everything: Path | None = None,
                api_key_env: str = "") -> str:
    """A daemon on 127.0.0.1:0: the echo agent; a ``writer`` whose tool (file_write) a rule
    says to ask about; with ``model_url`` an LLM agent ``helper`` that may call ``time_now``,
    with ``scribe_url`` one (``scribe``) that may call ``file_write``; with ``everything``
    the MCP reference server over stdio; A2A on."""
    text = ('[server]\nlisten = "127.0.0.1:0"\nrate_limit_per_sec = 0\nmax_connections_per_client = 0\n'
            + (f'api_key_env = "{api_key_env}"\n' if api_key_env else "")
            + f'[state]\ndir = "{state}"\n'
            '[a2a]\nenabled = true\ndefault_agent = "echo"\n'
            '[governance]\napproval_timeout_secs = 600\nmax_pending_per_agent = 20\n'
            '[[governance.rules]]\ntool = "file_write"\ndecision = "ask"\n'
            '[[agents]]\nname = "echo"\nkind = "echo"\ndescription = "Replies with the message it was sent."\n'
            '[[agents]]\nname = "writer"\nkind = "tool"\ntool = "file_write"\n'
            'description = "Writes a file; each write waits for a person to approve it."\n')
    if model_url:
        text += ('[[agents]]\nname = "helper"\nkind = "llm"\ntools = ["time_now"]\n'
                 'description = "A scripted model that asks for the time."\n'
                 f'[agents.model]\nbase_url = "{model_url}"\nmodel = "scripted"\n')
    if scribe_url:
        text += ('[[agents]]\nname = "scribe"\nkind = "llm"\ntools = ["file_write"]\n'
                 'description = "A scripted model that writes a file (a person approves it)."\n'
                 f'[agents.model]\nbase_url = "{scribe_url}"\nmodel = "scripted"\n')
    if everything is not None:
        node = peers.node()
        text += (f'[[mcp_servers]]\nname = "everything"\n'
                 f'transport = {{ type = "stdio", command = "{node}", args = ["{everything}", "stdio"] }}\n')
    return text


class Daemon:
    """``tern serve --config CONFIG`` from ``pyz`` (or the source tree when None), its stderr
    drained into ``lines`` (a full pipe would stall it); ``url`` once it serves."""

    def __init__(self, config: Path, pyz: Path | None = None, env_extra: dict[str, str] | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
        env.update(env_extra or {})
        if pyz is None:
            env["PYTHONPATH"] = str(ROOT)
            argv = [sys.executable, "-m", "runtime"]
        else:
            env.pop("PYTHONPATH", None)
            env["TERN_CACHE_DIR"] = str(config.parent / "cache")
            argv = [getattr(sys, "_base_executable", None) or sys.executable, "-I", str(pyz)]
        self.config = config
        self.process = subprocess.Popen([*argv, "serve", "--config", str(config)], stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                        cwd=config.parent)
        self.lines: list[str] = []
        self.url = ""
        started = threading.Event()

        def drain() -> None:
            for line in self.process.stderr:
                if len(self.lines) < 10_000:
                    self.lines.append(line)
                if not self.url and "serving on " in line:
                    self.url = line.split("serving on ", 1)[1].split()[0].strip()
                    started.set()
            started.set()

        threading.Thread(target=drain, daemon=True).start()
        if not started.wait(60) or not self.url:
            self.stop()
            raise AssertionError(f"the daemon did not start: {''.join(self.lines)[-2000:]}")

    def log(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait(timeout=30)


def wait_for(check: Callable[[], object], timeout: float = 30.0, what: str = "a condition"):
    """``check()``'s first truthy value, polled every 50 ms for at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


def a2a_send(client: httpx.Client, text: str, agent: str = "", wait: bool = True) -> dict:
    """A2A ``SendMessage`` (1.0 JSON-RPC) to ``agent`` (default: the default agent), its answer;
    ``wait=False`` answers at once with the task still running."""
    message = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}],
               "metadata": {}}
    answer = client.post(f"/a2a/{agent}" if agent else "/a2a", headers=V10,
                         json={"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                               "params": {"message": message, "configuration": {"returnImmediately": not wait}}})
    answer.raise_for_status()
    return answer.json()


def ask_to_write(client: httpx.Client, path: str, content: str, results: list) -> threading.Thread:
    """A thread sending ``writer`` a file write: it waits for a person's decision, then its
    response is appended to ``results``."""

    def send() -> None:
        body = {"message": json.dumps({"path": path, "content": content})}
        try:
            results.append(client.post("/api/agents/writer/message", json=body, timeout=600))
        except httpx.HTTPError as exc:
            results.append(exc)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def pending_approval(client: httpx.Client, path: str, timeout: float = 30.0) -> dict:
    """The pending approval request for the write of ``path``."""

    def find():
        for request in client.get("/api/approvals").json()["approvals"]:
            if request.get("arguments", {}).get("path") == path:
                return request
        return None

    return wait_for(find, timeout, f"the approval request for {path}")


def temp_dir(prefix: str) -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


def expect(target, message: str | None = None):
    """Playwright's ``expect`` (auto-retrying assertions, 10 s), imported once the peer is on sys.path."""
    from playwright.sync_api import expect as playwright_expect

    playwright_expect.set_options(timeout=10_000)
    return playwright_expect(target, message)
