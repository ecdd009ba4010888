"""The CLI as a client of a real ``tern serve``, and the same commands in-process:
runs and calls go through the daemon (they show in its events), tool calls show on
stderr as they happen, approvals are asked inline on a real pseudo-terminal either way,
chat behaves under Ctrl-C, conversations are listed and deleted, and the rough edges
(a model that never stops, a keyed daemon without the key, ``status --json``) are one
clear line."""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.chat_stub import calls_tool, serve_chat
from tests.test_cli import ROOT
from tests.test_daemon import start_daemon

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX processes and terminals")


def env(**extra: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    clean["PYTHONPATH"] = str(ROOT)
    clean.update(extra)
    return clean


def tern(*args: str, config: str, stdin: str | None = None, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime", *args, "--config", config], capture_output=True,
                          text=True, env=env(**extra), input=stdin, stdin=None if stdin is not None else
                          subprocess.DEVNULL, timeout=60)


def write_config(tmp_path, model_url: str = "", *, extra: str = "", max_iterations: int = 10) -> str:
    path = tmp_path / "config.toml"
    text = ('[server]\nlisten = "127.0.0.1:0"\nrate_limit_per_sec = 0\n'
            f'[state]\ndir = "{tmp_path / "state"}"\n'
            '[[agents]]\nname = "echo"\nkind = "echo"\n'
            '[[agents]]\nname = "writer"\nkind = "tool"\ntool = "file_write"\n'
            '[[agents]]\nname = "slow"\nkind = "command"\ncommand = ["sleep", "30"]\n')
    if model_url:
        text += (f'[[agents]]\nname = "bot"\nkind = "llm"\ntools = ["time_now"]\nmax_iterations = {max_iterations}\n'
                 f'[agents.model]\nbase_url = "{model_url}"\nmodel = "stub-model"\n')
    path.write_text(text + extra)
    return str(path)


class Daemon:
    """A real ``tern serve`` and a ``tern events --json`` following it (not with
    ``env_extra``: a keyed daemon's events need the key)."""

    def __init__(self, config: str, log_level: str = "", **env_extra: str) -> None:
        self.config = config
        if log_level:  # its own start: the log is read at the end (stderr stays a pipe)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "runtime", "serve", "--log-level", log_level, "--config", config],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
            line = ""
            while "serving on " not in line:  # the log's line at info level, a plain one otherwise
                line = self.process.stderr.readline()
                assert line, "the daemon did not start"
            self.url = line.split("serving on ", 1)[1].split()[0]
        else:
            self.process, self.url = start_daemon(config, env_extra or None)
        self.events = subprocess.Popen([sys.executable, "-m", "runtime", "events", "--json", "--config", config],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=env(**env_extra)) if not env_extra else None
        self.seen: list[dict] = []
        self.taken: set[int] = set()
        if self.events is not None:
            import threading

            assert '"hello"' in self.events.stdout.readline()
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.events.stdout:
            self.seen.append(json.loads(line))

    def event(self, kind: str, within: float = 20) -> dict:
        """The first event of this kind the daemon published that no call returned yet."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            for index, event in enumerate(list(self.seen)):
                if event["type"] == kind and index not in self.taken:
                    self.taken.add(index)
                    return event
            time.sleep(0.05)
        raise AssertionError(f"no {kind} event within {within} s: {self.seen}")

    def stop(self) -> None:
        for process in (self.events, self.process):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def model_url():
    with serve_chat(calls_tool("time_now", {})) as url:
        yield url


@pytest.fixture
def daemon(tmp_path, model_url):
    running = Daemon(write_config(tmp_path, model_url))
    yield running
    running.stop()


class Terminal:
    """A tern command on a real pseudo-terminal that is its controlling terminal (so
    ``\\x03`` is a Ctrl-C: SIGINT from the terminal driver); stdout and stderr both on it."""

    def __init__(self, *args: str, config: str) -> None:
        import fcntl
        import pty
        import termios

        self.leader, follower = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "runtime", *args, "--config", config], stdin=follower, stdout=follower,
            stderr=follower, env=env(), start_new_session=True,
            preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(follower)
        self.screen = b""
        self.cursor = 0

    def wait_for(self, text: str, within: float = 30) -> str:
        """Read until ``text`` shows after the last text waited for; the screen between."""
        start = self.cursor
        deadline = time.monotonic() + within
        while (found := self.screen.find(text.encode(), start)) < 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} did not show; the screen: {self.screen.decode(errors='replace')}")
            if select.select([self.leader], [], [], 0.1)[0]:
                try:
                    self.screen += os.read(self.leader, 4096)
                except OSError:  # EIO: the process ended
                    time.sleep(0.1)
        self.cursor = found + len(text)
        return self.screen[start:self.cursor].decode(errors="replace")

    def type(self, data: bytes) -> None:
        os.write(self.leader, data)

    def exit_code(self, within: float = 15) -> int:
        deadline = time.monotonic() + within
        while self.process.poll() is None and time.monotonic() < deadline:
            if select.select([self.leader], [], [], 0.1)[0]:
                try:
                    self.screen += os.read(self.leader, 4096)
                except OSError:
                    time.sleep(0.05)
        return self.process.wait(timeout=1)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.leader)


def audit(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]


# --- through the daemon -----------------------------------------------------------------


def test_run_goes_through_the_daemon_and_shows_tool_calls(daemon):
    run = tern("run", "bot", "what time is it", config=daemon.config)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("the tool said: 20")  # the model read time_now's result
    assert "[tool] time_now {}" in run.stderr and "[tool] time_now: ok in " in run.stderr
    model = daemon.event("model.call")  # the daemon's kernel did the work: its bus saw it
    assert (model["agent"], model["model"], model["outcome"], model["tool_calls"]) == ("bot", "stub-model", "ok", 1)
    assert model["tokens"] > 0 and model["ms"] > 0
    call = daemon.event("tool.call")
    assert (call["tool"], call["agent"], call["outcome"], call["arguments"]) == ("time_now", "bot", "ok", "{}")
    message = daemon.event("agent.message")
    assert (message["agent"], message["outcome"]) == ("bot", "ok")
    quiet = tern("run", "bot", "again", "--quiet", "--json", config=daemon.config)
    assert quiet.returncode == 0 and "[tool]" not in quiet.stderr
    assert json.loads(quiet.stdout)["agent"] == "bot"


def test_call_tools_and_conversations_through_the_daemon(daemon, tmp_path):
    called = tern("call", "time_now", "--json", config=daemon.config)
    assert called.returncode == 0 and json.loads(called.stdout)["is_error"] is False
    assert daemon.event("tool.call")["caller"].startswith("api:")
    listed = tern("tools", "--json", config=daemon.config)
    assert listed.returncode == 0 and "time_now" in [t["name"] for t in json.loads(listed.stdout)["tools"]]
    human = tern("tools", config=daemon.config)
    assert human.returncode == 0 and human.stdout.startswith("built-in (") and "  time_now " in human.stdout
    servers = tern("mcp", "servers", config=daemon.config)
    assert servers.returncode == 0 and servers.stdout == "no [[mcp_servers]] in the config\n"
    assert json.loads(tern("mcp", "servers", "--json", config=daemon.config).stdout)["connected"] == []
    tail = tern("audit", "tail", "-n", "1", "--json", "--tool", "time_*", config=daemon.config)
    assert tail.returncode == 0 and json.loads(tail.stdout)["tool"] == "time_now"
    assert tern("audit", "tail", "-n", "1", "--json", "--standalone", "--tool", "time_*",
                config=daemon.config).stdout == tail.stdout
    verify = tern("audit", "verify", "--json", config=daemon.config)
    assert verify.returncode == 0 and json.loads(verify.stdout)["ok"] is True
    assert "chain intact" in tern("audit", "verify", config=daemon.config).stdout
    bad = tern("call", "no_such_tool", config=daemon.config)
    assert bad.returncode == 1 and "no tool named 'no_such_tool'" in bad.stdout
    first = tern("run", "bot", "remember me", "--json", config=daemon.config)
    context = json.loads(first.stdout)["context_id"]
    conversations = tern("conversations", "--json", config=daemon.config)
    [entry] = json.loads(conversations.stdout)["conversations"]
    assert (entry["context_id"], entry["agent"], entry["messages"], entry["preview"]) == (context, "bot", 2,
                                                                                           "remember me")
    human = tern("conversations", config=daemon.config)
    assert context in human.stdout and "remember me" in human.stdout
    shown = tern("conversations", "show", context, config=daemon.config)
    assert shown.returncode == 0 and shown.stdout.startswith("you: remember me\nbot: the tool said: ")
    assert tern("conversations", "show", context, "--standalone", config=daemon.config).stdout == shown.stdout
    for mode in ([], ["--standalone"]):
        resumed = tern("chat", "bot", "--context", context, *mode, config=daemon.config, stdin="/exit\n")
        assert resumed.returncode == 0 and "(2 messages so far)" in resumed.stderr, resumed.stderr
        assert "you: remember me\nbot: the tool said: " in resumed.stderr
    deleted = tern("conversations", "delete", context, config=daemon.config)
    assert deleted.returncode == 0 and "deleted conversation" in deleted.stdout
    again = tern("conversations", "delete", context, config=daemon.config)
    assert again.returncode == 1 and "no conversation has the id" in again.stderr
    assert json.loads(tern("conversations", "--json", "--standalone", config=daemon.config).stdout) == {
        "conversations": []}


def test_approvals_through_the_daemon_are_asked_inline_on_a_terminal(daemon, tmp_path):
    """A tool agent's file_write waits for approval in the daemon; the CLI's person
    answers "y" at the prompt; the decision is the terminal's, made through the API."""
    terminal = Terminal("run", "writer", json.dumps({"path": "t.txt", "content": "tty"}), config=daemon.config)
    try:
        asked = terminal.wait_for("approve?")
        assert "agent 'writer' wants to call file_write" in asked and "[tool] file_write" in asked
        requested = daemon.event("approval_requested")
        terminal.type(b"y\n")
        terminal.wait_for("wrote 3 bytes to t.txt")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    resolved = daemon.event("approval_resolved")["approval"]
    assert resolved["id"] == requested["approval"]["id"] and resolved["channel"] == "terminal"
    assert resolved["state"] == "approved" and resolved["decided_by"].startswith("terminal:api:")
    # answered elsewhere: the prompt gives way, the run goes on
    terminal = Terminal("run", "writer", json.dumps({"path": "u.txt", "content": "tty"}), config=daemon.config)
    try:
        terminal.wait_for("approve?")
        [pending] = json.loads(tern("approvals", "--json", config=daemon.config).stdout)["approvals"]
        assert tern("deny", pending["id"], "--reason", "not now", config=daemon.config).returncode == 0
        seen = terminal.wait_for("answered elsewhere")
        assert terminal.exit_code() == 1
        seen += terminal.screen.decode(errors="replace")
        assert "not now" in seen
    finally:
        terminal.close()


def test_a_keyed_daemon_without_the_key_is_one_line_naming_where_the_key_comes_from(tmp_path):
    config = write_config(tmp_path, extra="")
    text = open(config).read()
    keyed = 'rate_limit_per_sec = 0\napi_key_env = "TERN_API_KEY"\n'
    open(config, "w").write(text.replace("rate_limit_per_sec = 0\n", keyed))
    running = Daemon(config, TERN_API_KEY="k" * 40)
    try:
        for args in (["events"], ["run", "echo", "hi"], ["status"]):
            refused = tern(*args, config=config)
            assert refused.returncode == 1, args
            [line] = refused.stderr.splitlines()
            assert "api_key_env" in line and "TERN_API_KEY" in line and "(" in line, line
            assert "Traceback" not in refused.stderr and "b'" not in line
        keyed = tern("run", "echo", "hi", config=config, TERN_API_KEY="k" * 40)
        assert keyed.returncode == 0 and keyed.stdout == "hi\n"
        status = tern("status", "--json", config=config, TERN_API_KEY="k" * 40)
        shown = json.loads(status.stdout)
        assert shown["url"] == running.url and shown["pid"] == running.process.pid
        assert [a["name"] for a in shown["agents"]] == ["echo", "writer", "slow"]
    finally:
        running.stop()


# --- in-process, and both ---------------------------------------------------------------


@pytest.mark.parametrize("through", ["daemon", "standalone"])
def test_a_model_that_never_stops_exits_non_zero(tmp_path, through):
    with serve_chat(lambda messages: {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{len(messages)}", "type": "function", "function": {"name": "time_now", "arguments": "{}"}}]}) \
            as url:
        config = write_config(tmp_path, url, max_iterations=2)
        running = Daemon(config) if through == "daemon" else None
        try:
            run = tern("run", "bot", "loop", config=config)
        finally:
            if running is not None:
                running.stop()
    assert run.returncode == 1 and run.stdout == ""
    assert "stopped after 2 model turns without a final answer" in run.stderr and "Traceback" not in run.stderr
    assert run.stderr.count("[tool] time_now: ok") == 2


def test_standalone_says_which_mcp_servers_it_waits_for(tmp_path, model_url):
    slow = (f'[[mcp_servers]]\nname = "sleepy"\n[mcp_servers.transport]\ntype = "stdio"\n'
            f'command = "{sys.executable}"\nargs = ["-c", "import time; time.sleep(2)"]\n')
    config = write_config(tmp_path, model_url, extra=slow)
    run = tern("run", "bot", "hi", config=config)
    assert run.returncode == 0, run.stderr
    assert "tern: waiting for MCP server sleepy" in run.stderr
    assert "[tool] time_now {}" in run.stderr and "[tool] time_now: ok" in run.stderr  # in-process too
    quiet = tern("run", "echo", "hi", "--quiet", config=config)
    assert quiet.returncode == 0 and "waiting for" not in quiet.stderr


def replying(parent: int, within: float = 30) -> None:
    """Until the slow agent's command (``sleep 30``, a child of ``parent``) runs, however
    loaded the machine."""
    deadline = time.monotonic() + within
    while subprocess.run(["pgrep", "-P", str(parent), "-f", "^sleep 30$"], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, "the slow agent never started"
        time.sleep(0.05)


@pytest.mark.parametrize("through", ["daemon", "standalone"])
def test_chat_on_a_terminal(tmp_path, through):
    """The context id is shown; /help; a reply; Ctrl-C during a slow reply cancels it and
    the prompt comes back; /new; --context resumes; Ctrl-C at the prompt leaves at once (130)."""
    config = write_config(tmp_path)
    running = Daemon(config) if through == "daemon" else None
    args = ["chat", "echo"] + (["--standalone"] if through == "standalone" else [])
    terminal = Terminal(*args, config=config)
    try:
        banner = terminal.wait_for("> ")
        context = banner.split("context ", 1)[1].split()[0]
        assert f"--context {context}" in banner
        terminal.type(b"/help\n")
        assert "/new" in terminal.wait_for("> ")
        terminal.type(b"hello there\n")
        terminal.wait_for("hello there\r\n> ")
        terminal.type(b"/new\n")
        fresh = terminal.wait_for("> ")
        assert "new conversation, context" in fresh and context not in fresh
        terminal.type(b"/exit\n")
        assert terminal.exit_code() == 0
    finally:
        terminal.close()
    terminal = Terminal(*args[:1], "slow", *args[2:], "--context", "ctx-resumed", config=config)
    try:
        assert "resuming (0 messages so far), context ctx-resumed" in terminal.wait_for("> ")
        terminal.type(b"take your time\n")
        replying((running or terminal).process.pid)  # the slow agent runs: Ctrl-C cancels the reply, not the chat
        terminal.type(b"\x03")
        terminal.wait_for("reply cancelled")
        terminal.wait_for("> ")
        assert terminal.process.poll() is None  # still chatting
        terminal.type(b"\x03")
        started = time.monotonic()
        assert terminal.exit_code() == 130
        assert time.monotonic() - started < 5
        deadline = time.monotonic() + 15  # the daemon sees the hang-up and audits the cancel in its own time
        while not (cancelled := slow_runs(tmp_path)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [r["outcome"] for r in cancelled] == ["cancelled"]
    finally:
        terminal.close()
        if running is not None:
            running.stop()


def slow_runs(tmp_path) -> list[dict]:
    path = tmp_path / "state" / "audit.jsonl"
    if not path.exists():
        return []
    return [r for r in audit(tmp_path) if r["kind"] == "agent_message" and r["agent"] == "slow"]


def test_a2a_task_transitions_and_the_access_log(tmp_path):
    """An A2A task's states reach the daemon's events; each request is one access-log
    line at info level, with no query string and no key."""
    import httpx

    config = write_config(tmp_path, extra="[a2a]\nenabled = true\n")
    running = Daemon(config, log_level="info")
    try:
        message = {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}
        answer = httpx.post(running.url + "/a2a/echo", json={"jsonrpc": "2.0", "id": 1, "method": "message/send",
                                                             "params": {"message": message}}, timeout=30)
        assert answer.status_code == 200, answer.text
        states = []
        while not states or states[-1] != "completed":
            event = running.event("a2a.task")
            assert (event["agent"], event["context_id"]) == ("echo", answer.json()["result"]["contextId"])
            states.append(event["state"])
        assert states[0] in ("submitted", "working"), states
        assert httpx.get(running.url + "/api/status?api_key=secret-value", timeout=10).status_code == 401
        running.process.send_signal(signal.SIGTERM)
        log = running.process.stderr.read().splitlines()
    finally:
        running.stop()
    access = [line for line in log if "http.access" in line]
    assert any("POST /a2a/echo 200" in line and "127.0.0.1" in line for line in access), access
    assert any("GET /api/status 401" in line for line in access) and not any("secret-value" in line for line in log)


def test_ctrl_c_during_a_run_cancels_it_in_the_daemon(tmp_path):
    config = write_config(tmp_path)
    running = Daemon(config)
    try:
        run = subprocess.Popen([sys.executable, "-m", "runtime", "run", "slow", "hi", "--config", config],
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env())
        time.sleep(1.5)  # the command agent runs in the daemon now
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=15)
        assert run.returncode == 130 and "interrupted" in err
        message = running.event("agent.message")
        assert (message["agent"], message["outcome"]) == ("slow", "cancelled") and message["ms"] < 10_000
    finally:
        running.stop()


def test_readable_event_lines_name_what_happened_and_escape_peer_text():
    from runtime.cli.daemon import _event_line

    lines = [_event_line({"time": 0, **event}) for event in (
        {"type": "tool.call", "tool": "file_write", "agent": "bot", "arguments": '{"path":"a"}', "outcome": "ok",
         "ms": 2.5},
        {"type": "model.call", "agent": "bot", "model": "m", "outcome": "ok", "ms": 80, "tokens": 120},
        {"type": "agent.message", "agent": "bot", "context_id": "c1", "outcome": "cancelled", "ms": 9},
        {"type": "a2a.task", "task_id": "t1", "agent": "echo", "state": "completed"},
        {"type": "mcp.server", "name": "fs", "state": "failed", "last_error": "boom\n\x1b[31mforged"},
        {"type": "mcp.task", "server": "up", "tool": "mcp_up_job", "task": "t9", "status": "cancelled", "by": "tern"},
        {"type": "tool.call", "tool": "mcp_up_job", "caller": "cli", "arguments": "{}", "outcome": "ok", "ms": 3,
         "task": "t9"},
    )]
    assert lines[0].endswith('tool file_write by bot {"path":"a"}: ok in 2.5 ms')
    assert lines[1].endswith("model m for bot: ok in 80 ms, 120 tokens")
    assert lines[2].endswith("agent bot [c1]: cancelled in 9 ms")
    assert lines[3].endswith("A2A task t1 (echo): completed")
    assert "\n" not in lines[4] and "\x1b" not in lines[4] and "forged" in lines[4]
    assert lines[5].endswith("MCP task t9 (mcp_up_job): cancelled by tern")
    assert lines[6].endswith("tool mcp_up_job (cli) {}: ok in 3 ms as MCP task t9")


def test_a_discovery_file_that_fails_the_checks_is_not_used(tmp_path):
    """A daemon.json pointing away from loopback (planted or stale) is named in one line
    and the command works in-process: no key goes anywhere."""
    config = write_config(tmp_path)
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    planted = state / "daemon.json"
    planted.write_text(json.dumps({"pid": os.getpid(), "url": "http://192.0.2.1:8080"}))
    planted.chmod(0o600)
    run = tern("run", "echo", "hi", config=config)
    assert run.returncode == 0 and run.stdout == "hi\n"
    assert "not trusting" in run.stderr and "is not a loopback http(s) URL; working in-process" in run.stderr


def lines_of(stream) -> queue.Queue:
    """A child's pipe, line by line, read in a thread: ``get(timeout=...)`` bounds each
    wait (select would miss lines already in the text buffer)."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def test_the_readme_quick_start_goes_through_the_daemon(tmp_path):
    """The quick start's commands, as written (``tern``, which ``tern install`` makes, as
    ``python -m runtime``), on the bundled config against a running daemon: events sees the run."""
    readme = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = readme.split("In another terminal", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].split() for line in block.splitlines()]
    assert [c[1] for c in commands] == ["status", "events", "run", "chat"]
    home = tmp_path / "home"
    home.mkdir()
    quick = env(HOME=str(home), XDG_STATE_HOME=str(home / "state"), XDG_CONFIG_HOME=str(home / "config"))

    def argv(words: list[str]) -> list[str]:
        assert words[:1] == ["tern"]
        return [sys.executable, "-m", "runtime", *(w.strip('"') for w in words[1:])]

    files = next(c for c in commands if c[1] == "run")
    files = files[:3] + [" ".join(files[3:]).strip('"')]  # the quoted message is one argument
    daemon = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--listen", "127.0.0.1:0"], cwd=home,
                              env=quick, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    events = None
    try:
        assert "serving on" in lines_of(daemon.stderr).get(timeout=30)
        status = subprocess.run(argv(commands[0]), cwd=home, env=quick, capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "files" in status.stdout, status.stderr
        events = subprocess.Popen(argv(commands[1]), cwd=home, env=quick, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        event_lines = lines_of(events.stdout)
        assert "hello" in event_lines.get(timeout=30)  # subscribed before the run
        ran = subprocess.run(argv(files[:3]) + [files[3]], cwd=home, env=quick, capture_output=True, text=True,
                             timeout=60)
        assert ran.returncode == 0 and "(empty directory: " in ran.stdout and "[tool] file_list" in ran.stderr, ran
        assert "workspaces/files)" in ran.stdout and "tool_error" not in ran.stderr, ran  # #34 item 5: it names the
        # directory, and the guessed path that failed is not shown as a broken first call
        chat = subprocess.run(argv(commands[3]), cwd=home, env=quick, input="hi there\n/exit\n", capture_output=True,
                              text=True, timeout=60)
        assert chat.returncode == 0 and "hi there" in chat.stdout and "--context" in chat.stderr, chat
        seen = ""
        while "agent echo" not in seen:
            seen += event_lines.get(timeout=30)
        assert "tool file_list by files" in seen and "agent files" in seen and "agent echo" in seen, seen
    finally:
        for process in (events, daemon):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize("argv", [["mcp", "--standalone", "servers"], ["mcp", "servers", "--standalone"],
                                  ["mcp", "--standalone"], ["run", "echo", "hi", "--standalone"],
                                  ["audit", "tail", "--standalone"], ["conversations", "--standalone"]])
def test_standalone_is_heard_wherever_it_is_written(argv):
    """``tern mcp --standalone servers`` went through the daemon: the subcommand's own
    ``--standalone`` default overwrote the parent's."""
    from runtime.cli import build_parser

    assert getattr(build_parser().parse_args(argv), "standalone", False) is True
    assert getattr(build_parser().parse_args([a for a in argv if a != "--standalone"]), "standalone", False) is False


@pytest.mark.parametrize("through", ["daemon", "standalone"])
def test_a_line_typed_before_the_approval_question_does_not_answer_it(tmp_path, through):
    """A "y" typed while the model was still thinking (meant for the chat, or a stray
    key) is dropped when the question shows: the approval waits for a key pressed after."""

    def slow_then_write(messages):
        if messages[-1]["role"] == "tool":
            return {"role": "assistant", "content": f"the tool said: {messages[-1]['content']}"}
        time.sleep(1.5)  # the person types ahead meanwhile
        call = {"id": "w1", "type": "function",
                "function": {"name": "file_write", "arguments": json.dumps({"path": "a.txt", "content": "x"})}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    with serve_chat(slow_then_write) as url:
        config = write_config(tmp_path, extra=f'[[agents]]\nname = "scribe"\nkind = "llm"\ntools = ["file_write"]\n'
                                              f'[agents.model]\nbase_url = "{url}"\nmodel = "stub-model"\n')
        running = Daemon(config) if through == "daemon" else None
        extra = ["--standalone"] if through == "standalone" else []
        terminal = Terminal("run", "scribe", "write a.txt", *extra, config=config)
        try:
            terminal.type(b"y\n")
            terminal.wait_for("approve?")
            time.sleep(0.5)
            [pending] = json.loads(tern("approvals", "--json", config=config).stdout)["approvals"]
            assert pending["tool"] == "file_write"  # still waiting: the early "y" answered nothing
            terminal.type(b"n\n")
            terminal.wait_for("the tool said:")
            assert terminal.exit_code() == 0
        finally:
            terminal.close()
            if running is not None:
                running.stop()
    assert not (tmp_path / "state" / "workspaces" / "scribe" / "a.txt").exists()


def test_events_says_so_when_the_daemon_stops(tmp_path):
    """#34 item 11: ``tern events`` does not end silently with 0 when its daemon goes."""
    daemon = Daemon(write_config(tmp_path))
    try:
        daemon.process.terminate()
        daemon.process.wait(timeout=30)
        _, err = daemon.events.communicate(timeout=30)
        assert daemon.events.returncode == 1 and "the daemon closed the event stream" in err, err
    finally:
        daemon.stop()


def test_a_command_uses_the_daemon_only_when_it_runs_the_same_config(tmp_path):
    """#34 item 2: ``--config B`` while a daemon runs A on the same state directory used
    to answer from A's agents in silence; now it says so and works from B, and
    ``tern status`` names the config the daemon runs."""
    a = write_config(tmp_path)
    b = tmp_path / "b.toml"
    b.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "helper"\nkind = "echo"\n')
    daemon = Daemon(a)
    try:
        status = subprocess.run([sys.executable, "-m", "runtime", "status", "--config", a], capture_output=True,
                                text=True, env=env(), timeout=60)
        assert f"config: {Path(a).resolve()}" in status.stdout, status.stdout
        ran = subprocess.run([sys.executable, "-m", "runtime", "--config", str(b), "run", "helper", "hi"],
                             capture_output=True, text=True, env=env(), timeout=60)
        assert ran.returncode == 0 and ran.stdout.strip() == "hi", ran.stderr
        assert f"runs {Path(a).resolve()}, not this command's config" in ran.stderr
        mcp = subprocess.run([sys.executable, "-m", "runtime", "--config", str(b), "mcp"], input=(
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
            '"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n'
            '{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
            '{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n'), capture_output=True, text=True, env=env(),
            timeout=60)
        assert "tern_agent_helper" in mcp.stdout and "tern_agent_echo" not in mcp.stdout, mcp.stdout[-500:]
        assert "not this config" in mcp.stderr
    finally:
        daemon.stop()


def test_an_operator_reaches_a_daemon_it_cannot_discover_by_url(tmp_path):
    """#34 item 4: a daemon run as another user (the system service) has its own state
    directory; ``--url`` (or ``TERN_URL``) with the key reaches it, and with neither the
    CLI says where it looked instead of a bare "no pending approval requests"."""
    key = "operator-key-0123456789abcdef"
    config = write_config(tmp_path, extra="")
    Path(config).write_text(Path(config).read_text().replace("[server]\n", '[server]\napi_key_env = "TERN_API_KEY"\n'))
    daemon = Daemon(config, TERN_API_KEY=key)
    try:
        elsewhere = tmp_path / "operator"
        elsewhere.mkdir()
        mine = elsewhere / "config.toml"
        mine.write_text(f'[state]\ndir = "{elsewhere / "state"}"\n')
        local = subprocess.run([sys.executable, "-m", "runtime", "--config", str(mine), "approvals"],
                               capture_output=True, text=True, env=env(), timeout=60)
        assert "no daemon runs on this state directory" in local.stdout, local.stdout
        for args, extra in (([f"--url={daemon.url}"], {}), ([], {"TERN_URL": daemon.url})):
            reached = subprocess.run([sys.executable, "-m", "runtime", "--config", str(mine), *args, "approvals"],
                                     capture_output=True, text=True, env=env(TERN_API_KEY=key, **extra), timeout=60)
            assert reached.returncode == 0 and reached.stdout.strip() == "no pending approval requests", reached
            status = subprocess.run([sys.executable, "-m", "runtime", "--config", str(mine), *args, "status"],
                                    capture_output=True, text=True, env=env(TERN_API_KEY=key, **extra), timeout=60)
            assert status.returncode == 0 and daemon.url in status.stdout, status
        refused = subprocess.run([sys.executable, "-m", "runtime", "--config", str(mine), "--url", daemon.url,
                                  "approvals"], capture_output=True, text=True, env=env(), timeout=60)
        assert refused.returncode != 0 and "key" in refused.stderr, refused
    finally:
        daemon.stop()
