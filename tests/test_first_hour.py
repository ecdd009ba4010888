"""A newcomer's first hour, as the README and the docs tell it, on the single file in an
empty home with nothing else installed (#34): ``python3 dist/tern.pyz install``, the
``tern`` command it makes, ``tern serve`` on the bundled offline config, the quick start's
commands, a pipe into ``head``, Ctrl-C; an approval answered from a phone-sized browser
through a notify link (tests/browser/test_first_hour_phone.py: the browser tests' one
Chromium); then the triggers example, offline, with its own ``openssl``/``curl``
lines. Every command and config block is read from the docs, so they cannot drift from
what works."""

from __future__ import annotations

import http.server
import json
import os
import queue
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.pyz, pytest.mark.slow,
              pytest.mark.skipif(os.name != "posix", reason="POSIX shells and signals")]


def block(text: str, after: str, fence: str = "sh") -> str:
    """The first fenced block of kind ``fence`` after the line holding ``after``."""
    return (text.split(after, 1)[1] if after else text).split(f"```{fence}\n", 1)[1].split("```", 1)[0]


def commands(text: str) -> list[str]:
    return [line.split("  #", 1)[0].strip() for line in text.splitlines() if line.strip()]


class Newcomer:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = {"PATH": f"{home / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}", "HOME": str(home),
                    "TERN_CACHE_DIR": str(home / ".cache" / "tern"), "LANG": "C.UTF-8"}

    def sh(self, line: str, cwd: Path | None = None, stdin: str = "", timeout: float = 90,
           **extra: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", line], cwd=cwd or self.home, env={**self.env, **extra}, input=stdin,
                              capture_output=True, text=True, timeout=timeout)

    def start(self, line: str, cwd: Path | None = None, **extra: str) -> tuple[subprocess.Popen, queue.Queue]:
        process = subprocess.Popen(shlex.split(line), cwd=cwd or self.home, env={**self.env, **extra},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, start_new_session=True)
        lines: queue.Queue = queue.Queue()
        for stream in (process.stdout, process.stderr):
            threading.Thread(target=lambda s=stream: [lines.put(x) for x in s], daemon=True).start()
        return process, lines


def wait_for(lines: queue.Queue, text: str, timeout: float = 60) -> str:
    seen = ""
    while text not in seen:
        seen += lines.get(timeout=timeout)
    return seen


def stop(process: subprocess.Popen) -> int:
    """Ctrl-C, as the quick start says; the code it exits with."""
    os.killpg(process.pid, signal.SIGINT)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise


def test_the_first_hour_follows_the_docs(pyz: Path, tmp_path: Path):
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    home = tmp_path / "home"
    (home / "dist").mkdir(parents=True)
    shutil.copy(pyz, home / "dist" / "tern.pyz")
    me = Newcomer(home)

    # Build and install: the build is done (the fixture); the install line runs as written.
    [build_and_install, serve] = commands(block(quick, "Build the single file"))
    install = build_and_install.split("&&", 1)[1].strip()
    assert install == "python3 dist/tern.pyz install"
    installed = me.sh(install.replace("python3", shlex.quote(sys.executable), 1))
    assert installed.returncode == 0 and (home / ".local/bin/tern").exists(), installed.stderr
    assert me.sh("command -v tern").stdout.strip() == str(home / ".local/bin/tern")

    # `tern serve` on the bundled config (an ephemeral port: 50051 may be taken on a CI box).
    assert serve == "tern serve"
    daemon, daemon_lines = me.start(f"{serve} --listen 127.0.0.1:0")
    events = None
    try:
        url = wait_for(daemon_lines, "serving on").split("serving on ", 1)[1].split()[0]
        health = me.sh(f"curl -sS {url}/health")
        assert health.returncode == 0 and json.loads(health.stdout)["status"] == "ok", health

        status_line, events_line, run_line, chat_line = commands(block(quick, "In another terminal"))
        events, event_lines = me.start(events_line)
        status = me.sh(status_line)
        assert status.returncode == 0 and "files" in status.stdout and "config" in status.stdout, status
        ran = me.sh(run_line)
        assert ran.returncode == 0 and "(empty directory: " in ran.stdout and "tool_error" not in ran.stderr, ran
        chat = me.sh(chat_line, stdin="hello from the first hour\n/exit\n")
        assert chat.returncode == 0 and "hello from the first hour" in chat.stdout and "--context" in chat.stderr, chat
        assert "agent echo" in wait_for(event_lines, "agent echo")

        # Piping the CLI: 50 runs of `tern status | head -1`, every one exits 0 (#34 item 9).
        piped = me.sh("for i in $(seq 50); do tern status | head -1 >/dev/null; "
                      "[ ${PIPESTATUS[0]} = 0 ] || { echo \"run $i: ${PIPESTATUS[0]}\"; exit 1; }; done")
        assert piped.returncode == 0, piped.stdout + piped.stderr

        assert stop(daemon) == 0
    finally:
        for process in (events, daemon):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_the_triggers_example_runs_offline(pyz: Path, tmp_path: Path):
    """The triggers page's example as a newcomer runs it: the offline agent the page names,
    its config in ./config.toml, its curl line signed with its openssl line, then the same
    delivery again (409) and the runs it lists."""
    page = (ROOT / "docs" / "triggers.md").read_text().split("## An example", 1)[1].split("\n## ", 1)[0]
    agent = block(page, "needs no model", fence="toml")
    home = tmp_path / "home"
    (home / "dist").mkdir(parents=True)
    (home / "notes").mkdir()
    shutil.copy(pyz, home / "dist" / "tern.pyz")
    me = Newcomer(home)
    assert me.sh(f"{shlex.quote(sys.executable)} dist/tern.pyz install").returncode == 0
    (home / "notes" / "config.toml").write_text(agent + block(page, "`[[triggers]]`", fence="toml"))
    secret = "a-newcomer-secret"
    checked = me.sh("tern config check", cwd=home / "notes", CI_HOOK_SECRET=secret)
    assert checked.returncode == 0, checked.stderr
    daemon, daemon_lines = me.start("tern serve --listen 127.0.0.1:0", cwd=home / "notes", CI_HOOK_SECRET=secret)
    try:
        url = wait_for(daemon_lines, "serving on").split("serving on ", 1)[1].split()[0]
        lines = commands(page.split("```sh\n", 1)[1].split("```", 1)[0])
        deliver = "\n".join(line for line in lines if not line.startswith(("#", "tern ")))
        deliver = deliver.replace("http://127.0.0.1:50051", url)
        first = me.sh(deliver, cwd=home / "notes", CI_HOOK_SECRET=secret)
        assert first.returncode == 0 and json.loads(first.stdout)["run_id"].startswith("run_"), first
        again = me.sh(deliver.replace("curl -sS", "curl -sS -o /dev/null -w '%{http_code}'"), cwd=home / "notes",
                      CI_HOOK_SECRET=secret)
        assert again.stdout == "409", again
        listing = me.sh("tern triggers", cwd=home / "notes")
        assert listing.returncode == 0 and "morning" in listing.stdout and "ci" in listing.stdout, listing
        for _ in range(60):
            runs = me.sh("tern triggers runs ci --json", cwd=home / "notes")
            found = json.loads(runs.stdout)["runs"] if runs.returncode == 0 else []
            if found and found[0].get("outcome") not in (None, "running"):
                break
            me.sh("sleep 0.5")
        assert found[0]["outcome"] == "ok" and "CI failed on acme/api" in found[0]["reply"], found
        fired = me.sh("tern triggers fire morning --wait", cwd=home / "notes")
        assert fired.returncode == 0 and "Summarise the files in inbox/" in fired.stdout, fired
        assert stop(daemon) == 0
    finally:
        if daemon.poll() is None:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook endpoint on loopback that keeps what it is sent (the notify channel's target)."""

    def __init__(self) -> None:
        self.bodies: queue.Queue = queue.Queue()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = min(int(self.headers.get("Content-Length", "0")), 1 << 20)
                outer.bodies.put(json.loads(self.rfile.read(length)))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
