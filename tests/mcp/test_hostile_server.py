"""A hostile MCP stdio server (``tests/fixtures/hostile_mcp_server.py``) against tern as
its client: request and log floods, a dead server that looks alive, a server that never
answers, tool names spelled to dodge an exclude glob. Driven through ``tern`` itself
(the CLI, as a subprocess) where the effect is visible there, and through the
supervisor in this process where memory is what is measured."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import tracemalloc

import pytest
import trio

from runtime.config import McpServerEntry, StdioTransport
from runtime.errors import ConnectionLost, ProtocolError
from runtime.mcp.client.client import McpClient
from runtime.mcp.client.inputs import MAX_ROUNDS
from runtime.mcp.client.supervisor import McpSupervisor
from tests.mcp.conftest import FIXTURES
from tests.processes import gone
from tests.test_cli import ROOT

HOSTILE = str(FIXTURES / "hostile_mcp_server.py")


def config_file(tmp_path, *flags: str, timeout_secs: float = 30.0, extra: str = "") -> str:
    path = tmp_path / "config.toml"
    path.write_text(f"""
[[mcp_servers]]
name = "h"
timeout_secs = {timeout_secs}
transport = {{ type = "stdio", command = {json.dumps(sys.executable)}, args = {json.dumps([HOSTILE, *flags])} }}
{extra}
""")
    return str(path)


def tern(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def entry(*flags: str, timeout_secs: float = 30.0) -> McpServerEntry:
    return McpServerEntry(name="h", timeout_secs=timeout_secs,
                          transport=StdioTransport(command=sys.executable, args=[HOSTILE, *flags]))


async def ready(nursery, *entries: McpServerEntry) -> McpSupervisor:
    supervisor = McpSupervisor(list(entries), backoff_base=30.0)
    await nursery.start(supervisor.run)
    await supervisor.wait_settled(20)
    assert supervisor.status("h").state == "ready", supervisor.status("h").last_error
    return supervisor


# --- Item 19: globs on normalised names ---------------------------------------------------


def test_exclude_glob_catches_every_spelling(tmp_path):
    config = config_file(tmp_path, "--tools", "delete-repo,Delete_Repo,DELETE-branch,list_repos",
                         extra='tools_exclude = ["delete_*"]')
    done = tern("tools", "--json", "--config", config)
    mcp = sorted(t["original_name"] for t in json.loads(done.stdout)["tools"] if t.get("source") == "mcp")
    assert mcp == ["list_repos"]


def test_include_glob_matches_every_spelling(tmp_path):
    config = config_file(tmp_path, "--tools", "Read-File,read_dir,write-file", extra='tools_include = ["read_*"]')
    done = tern("tools", "--json", "--config", config)
    mcp = sorted(t["original_name"] for t in json.loads(done.stdout)["tools"] if t.get("source") == "mcp")
    assert mcp == ["Read-File", "read_dir"]


def test_agent_capability_and_mcp_server_exposure_match_every_spelling():
    from runtime.config import AgentConfig
    from runtime.kernel.pipeline import allowed

    agent = AgentConfig(name="a", kind="llm", tools=["mcp_h_read_*", "File-*"])
    assert allowed(agent, "mcp_h_read_file") and allowed(agent, "MCP_H_READ-DIR") and allowed(agent, "file_read")
    assert not allowed(agent, "mcp_h_write_file") and not allowed(agent, "shell_exec")


# --- Item 12: a dead server, a server that never answers ----------------------------------


@pytest.mark.parametrize("escape", [False, True], ids=["in-group", "own-session"])
async def test_killed_server_whose_grandchild_holds_stdout_is_seen_dead_at_once(nursery, tmp_path, escape):
    """In its group, the grandchild is killed with the server; in a session of its own
    (out of reach), it keeps stdout open, and tern still closes the connection."""
    pids = tmp_path / "pids"
    flags = ("--escape",) if escape else ()
    supervisor = await ready(nursery, entry("--tools", "hang,echo", "--grandchild", str(pids), *flags))
    server_pid, grandchild_pid = map(int, pids.read_text().split())
    failed: list[BaseException] = []

    async def in_flight() -> None:
        try:
            await supervisor.call("mcp_h_hang", {})
        except ConnectionLost as exc:
            failed.append(exc)

    try:
        nursery.start_soon(in_flight)
        await trio.sleep(0.2)  # the call is sent and waiting
        started = time.monotonic()
        os.kill(server_pid, signal.SIGKILL)
        with trio.fail_after(5):  # before the fix: ready for ever, the call waiting out its 30 s
            while supervisor.status("h").state == "ready" or not failed:
                await trio.sleep(0.01)
        assert time.monotonic() - started < 3
        assert "exited" in str(failed[0]), failed[0]
        if not escape:
            assert await gone(grandchild_pid), "the grandchild outlived its server"
        with pytest.raises(ConnectionLost, match="MCP server 'h' is"):
            await supervisor.call("mcp_h_echo", {"message": "x"})
    finally:
        if escape:
            os.kill(grandchild_pid, signal.SIGKILL)


def test_server_timeout_secs_bounds_a_tool_call(tmp_path):
    config = config_file(tmp_path, "--tools", "hang,echo", timeout_secs=1)
    started = time.monotonic()
    done = tern("call", "mcp_h_hang", "--config", config, timeout=30)  # [tools] timeout_secs: 60
    elapsed = time.monotonic() - started
    assert done.returncode == 1 and "did not answer tools/call within 1 s" in done.stdout, done.stdout
    assert elapsed < 15  # start-up and handshake included; before the fix, 60 s


# --- Item 10: floods --------------------------------------------------------------------


async def test_a_flood_of_server_requests_keeps_memory_bounded(nursery):
    supervisor = await ready(nursery, entry("--tools", "flood_requests,echo,answers"))
    tracemalloc.start()
    try:
        result = await supervisor.call("mcp_h_flood_requests", {"n": 20_000, "pause_secs": 1.0})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.text() == "sent 20000 requests"
    # before the fix: a task per request, ~19,000 of them blocked on the full pipe (75 MB);
    # after, 16 tasks and the rest refused at once (0.4 MB)
    assert peak < 4 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    with trio.fail_after(10):
        echoed = await supervisor.call("mcp_h_echo", {"message": "still here"})
    assert echoed.text() == "still here"
    answers = json.loads((await supervisor.call("mcp_h_answers", {})).text())
    # 16 at a time answered; refusals written while the pipe had room, the rest unanswered
    assert answers["results"] >= 16 and answers["refused"] > 0 and answers["other"] == 0, answers
    assert answers["results"] + answers["refused"] <= 20_000


_LINE_START = re.compile(r"^\d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR) ")


def test_a_flood_of_log_messages_is_bounded_and_cannot_forge_lines(tmp_path):
    config = config_file(tmp_path, "--tools", "flood_logs")
    started = time.monotonic()
    done = tern("call", "mcp_h_flood_logs", "--args", '{"n": 20000}', "--log-level", "info", "--config", config,
                timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 0 and done.stdout == "sent 20000 log messages\n", done.stderr[-2000:]
    lines = done.stderr.split("\n")
    forged = [line for line in lines if "forged" in line]
    # burst 100, then 20 a second, plus one summary a second: before the fix, 20,000 of them
    assert 100 <= len(forged) <= 100 + 25 * (elapsed + 1), (len(forged), elapsed)
    assert "\x1b" not in done.stderr and "\x9b" not in done.stderr and "\r" not in done.stderr
    for line in lines:  # every line is a record of its own, none a forged one
        assert not line or _LINE_START.match(line), repr(line[:200])
    assert any("log messages dropped" in line for line in lines)
    assert r"\x1b[31mred" in forged[0] and r"\n2026-11-23 12:00:00 ERROR tern.api: forged" in forged[0]


# --- Questions without end (MRTR) ------------------------------------------------------------


async def test_a_server_that_asks_forever_is_stopped_after_the_round_limit(nursery):
    """Each input_required is answered and retried, but only ``MAX_ROUNDS`` times; a
    result with too many input requests is refused before anyone is asked."""
    asked: list[str] = []

    async def person(method: str, params: dict) -> dict:
        asked.append(method)
        return {"action": "accept", "content": {}}

    client = await McpClient.connect(entry("--tools", "ask_forever,ask_many,echo,answers"), nursery, on_input=person)
    try:
        with trio.fail_after(20), pytest.raises(ProtocolError, match="after 8 rounds"):
            await client.call_tool("ask_forever", {})
        assert len(asked) == MAX_ROUNDS
        with trio.fail_after(20), pytest.raises(ProtocolError, match="at most 8"):
            await client.call_tool("ask_many", {})
        assert len(asked) == MAX_ROUNDS
        assert json.loads((await client.call_tool("answers", {})).text())["asked"] == MAX_ROUNDS + 1
        assert (await client.call_tool("echo", {"message": "still here"})).text() == "still here"
    finally:
        await client.aclose()


@pytest.mark.parametrize("form_id", [0, -7, "q 1", ""], ids=["zero", "negative", "string", "empty-string"])
def test_standalone_tern_call_asks_a_question_whatever_its_id(tmp_path, form_id):
    """Every id JSON-RPC allows (0, negative, any string) reaches the person at the terminal
    of a standalone ``tern call`` (issue #32), and the answer goes back under that id."""
    config = config_file(tmp_path, "--tools", "ask_form", extra=f'[state]\ndir = "{tmp_path / "state"}"\n'
                         '[governance]\napproval_timeout_secs = 20\n')  # bounds the wait if it is never shown
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", config, "call", "mcp_h_ask_form",
                                "--args", json.dumps({"fields": 1, "form_id": form_id})], env=env, text=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stderr is not None and process.stdout is not None
        deadline = time.monotonic() + 30
        for line in process.stderr:  # what the person reads at that terminal
            shown = re.search(r"waiting for a person: tern approve (\S+)", line)
            if shown:
                break
            assert time.monotonic() < deadline
        else:
            pytest.fail("tern call never showed the question")
        approved = tern("--config", config, "approve", shown.group(1), "--set", "f0=yes")
        assert approved.returncode == 0, approved.stderr
        assert process.wait(30) == 0
        assert json.loads(process.stdout.read()) == {"action": "accept", "content": {"f0": "yes"}}
    finally:
        process.kill()
        process.wait()
