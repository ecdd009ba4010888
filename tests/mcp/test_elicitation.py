"""An upstream MCP server's question answered with typed values, against real peers.

- The official Python SDK server asks a form with required fields, an enum, numbers and
  a boolean (both eras: the handshake era's ``elicitation/create``, 2026-07-28's
  ``input_required``); a person answers through the approvals (as every channel does):
  answers that break the form are refused and the request stays pending; decline and
  cancel reach the server as such.
- server-everything's ``trigger-elicitation-request`` (text, booleans, numbers, formats,
  the SEP-1330 enum styles) on stdio answered through the daemon's API, its WebSocket,
  and over Streamable HTTP with ``tern approve --set``.
- The relay: the official SDK client, with an elicitation callback, calls a tern agent
  through ``tern mcp`` whose tool is the upstream SDK server's; the client's callback
  gets the upstream question and its answer reaches the upstream server, in both eras.
  A client that cannot elicit leaves it to the person channels; one that never answers
  leaves the upstream server with ``cancel`` when the request expires.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from runtime.config import Config, GovernanceConfig, HttpTransport, McpServerEntry, StateConfig, StdioTransport
from runtime.errors import UsageError
from runtime.kernel.approvals import Approvals
from tests.mcp.conftest import FIXTURES, SDK_SERVER, stdio_entry
from tests.mcp.server_harness import ROOT, tern_env, tern_serve, write_config
from tests.netns import isolated_server

CLIENT = str(FIXTURES / "sdk_mcp_form_client.py")
EVERYTHING_TOOL = "mcp_everything_trigger_elicitation_request"


async def booted(nursery, tmp_path, entry: McpServerEntry, timeout_secs: float = 60.0):
    from runtime.kernel.kernel import Kernel

    kernel = Kernel(Config(mcp_servers=[entry], state=StateConfig(dir=str(tmp_path / "state")),
                           governance=GovernanceConfig(approval_timeout_secs=timeout_secs)))
    await nursery.start(kernel.run)
    with trio.fail_after(60):
        await kernel.mcp.wait_settled()
    assert kernel.mcp.status(entry.name).state == "ready", kernel.mcp.status(entry.name).last_error
    return kernel


async def next_question(approvals):
    with trio.fail_after(30):
        while not await approvals.list():
            await trio.sleep(0.02)
    return (await approvals.list())[0]


BAD_PROFILES = [
    ({"name": "Ada", "age": "x"}, "field 'age': must be a whole number"),
    ({"name": "Ada", "age": 200}, "field 'age': must be between 0 and 150"),
    ({"name": "Ada", "age": 3, "color": "pink"}, "field 'color': must be one of red, green, blue"),
    ({"age": 3}, "field 'name' is required"),
    ({"name": "A" * 1_000_000, "age": 3}, "over 65536 bytes"),
]


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
async def test_sdk_server_form_answered_with_typed_values(sdk_python, nursery, tmp_path, protocol):
    kernel = await booted(nursery, tmp_path, stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol=protocol,
                                                          timeout_secs=20))
    results = []
    for decide in ("typed", "decline", "cancel"):
        async with trio.open_nursery() as inner:
            async def answer() -> None:
                question = await next_question(kernel.approvals)
                assert question.tool == "mcp_sdk_elicitation" and question.caller == "mcp:sdk"
                assert question.form["message"] == "Who are you?"
                fields = question.form["requestedSchema"]["properties"]
                assert fields["color"]["enum"] == ["red", "green", "blue"] and fields["age"]["maximum"] == 150
                if decide == "typed":
                    for bad, text in BAD_PROFILES:
                        with pytest.raises(UsageError, match=text):
                            await kernel.approvals.decide(question.id, True, answer=bad, by="tester")
                        assert (await kernel.approvals.get(question.id)).state == "pending"
                    await kernel.approvals.decide(question.id, True, answer={"name": "Ada", "age": 36, "color": "blue"},
                                            by="tester", channel="test")
                else:
                    await kernel.approvals.decide(question.id, False, cancel=decide == "cancel", by="tester")

            inner.start_soon(answer)
            results.append((await kernel.call_tool("mcp_sdk_profile", {})).text)
    assert results == ['accept: {"name":"Ada","age":36,"color":"blue","score":0.5,"subscribe":false}',
                       "decline: ", "cancel: "]


@pytest.mark.parametrize("protocol", ["2025-11-25", "2026-07-28"])
async def test_the_calls_timeout_stops_while_a_person_answers(sdk_python, nursery, tmp_path, protocol):
    """The pipeline gives the call 1.5 s (so does its MCP request), the person takes 3 s: the call's
    clock stops while its server's question waits, so the answer still reaches it."""
    kernel = await booted(nursery, tmp_path, stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol=protocol,
                                                          timeout_secs=20))
    async with trio.open_nursery() as inner:
        async def answer() -> None:
            question = await next_question(kernel.approvals)
            await trio.sleep(3.0)
            await kernel.approvals.decide(question.id, True, answer={"name": "Ada", "age": 36}, by="tester")

        inner.start_soon(answer)
        with trio.fail_after(15):
            result = await kernel.call_tool("mcp_sdk_profile", {}, timeout_secs=1.5)
    assert result.text.startswith('accept: {"name":"Ada","age":36'), result.text


async def test_defaults_answer_a_question_approved_without_values(sdk_python, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol="2025-11-25",
                                                          timeout_secs=20))
    async with trio.open_nursery() as inner:
        async def answer() -> None:
            await kernel.approvals.decide((await next_question(kernel.approvals)).id, True, by="tester")

        inner.start_soon(answer)
        result = await kernel.call_tool("mcp_sdk_confirm", {"question": "Deploy now?"})
    assert result.text == 'accept: {"confirmed":true,"note":"as proposed"}'


async def test_a_question_nobody_answers_is_cancelled(sdk_python, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, stdio_entry(sdk_python, SDK_SERVER, name="sdk", protocol="2025-11-25",
                                                          timeout_secs=20), timeout_secs=2)
    result = await kernel.call_tool("mcp_sdk_ask_name", {})
    assert result.text == "cancel" and (await kernel.approvals.list(state=None))[0].state == "expired"


async def test_hostile_questions_are_declined_without_asking(nursery, tmp_path):
    entry = McpServerEntry(name="h", timeout_secs=20, transport=StdioTransport(
        command=sys.executable, args=[str(FIXTURES / "hostile_mcp_server.py"), "--tools", "ask_form"]))
    kernel = await booted(nursery, tmp_path, entry)
    for arguments in ({"fields": 10_000}, {"fields": 65}, {"message_chars": 1_000_000}):
        result = await kernel.call_tool("mcp_h_ask_form", arguments)
        assert json.loads(result.text) == {"action": "decline"}, arguments
    assert await kernel.approvals.list(state=None) == []
    async with trio.open_nursery() as inner:  # a small form from the same server is put to a person
        async def answer() -> None:
            question = await next_question(kernel.approvals)
            await kernel.approvals.decide(question.id, True, answer={"f0": "ok", "f2": "fine"}, by="tester")

        inner.start_soon(answer)
        result = await kernel.call_tool("mcp_h_ask_form", {"fields": 3})
    assert json.loads(result.text) == {"action": "accept", "content": {"f0": "ok", "f2": "fine"}}


# --- server-everything -------------------------------------------------------------------------

EVERYTHING_SETS = ["name=Ada Lovelace", "check=yes", "email=ada@example.org", "integer=7",
                   "untitledSingleSelectEnum=Joey", "titledSingleSelectEnum=Wonder Woman",
                   "untitledMultipleSelectEnum=Piano,Drums", "titledMultipleSelectEnum=Tuna"]
EVERYTHING_ANSWER = {"name": "Ada Lovelace", "check": True, "email": "ada@example.org", "integer": 7,
                     "untitledSingleSelectEnum": "Joey", "titledSingleSelectEnum": "hero-3",
                     "untitledMultipleSelectEnum": ["Piano", "Drums"], "titledMultipleSelectEnum": ["fish-1"]}


def check_everything_answered(text: str) -> None:
    assert "User provided the requested information" in text, text
    for line in ("- Name: Ada Lovelace", "- Agreed to terms: true", "- Email: ada@example.org",
                 "- Favorite Integer: 7", "- Favorite Number: 3.14"):  # the last one: the form's default
        assert line in text, text


async def test_server_everything_over_http_answered_with_tern_approve_set(npm, node, nursery, tmp_path):
    async with isolated_server([node, npm["server-everything"], "streamableHttp"], 3001,
                               env={"PORT": "3001"}) as base:
        entry = McpServerEntry(name="everything", transport=HttpTransport(url=f"{base}/mcp"), timeout_secs=20)
        kernel = await booted(nursery, tmp_path, entry)
        config = tmp_path / "config.toml"
        config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n')
        winner: list = []
        async with trio.open_nursery() as inner:
            async def answer() -> None:
                question = await next_question(kernel.approvals)
                tern = [sys.executable, "-m", "runtime", "--config", str(config)]
                env = tern_env(tmp_path)
                listed = await trio.run_process([*tern, "approvals"], capture_stdout=True, env=env, cwd=ROOT)
                assert b"mcp:everything asks: Please provide inputs" in listed.stdout
                assert b"untitledSingleSelectEnum (string, optional)" in listed.stdout
                bad = await trio.run_process([*tern, "approve", question.id, "--set", "name=Ada", "--set",
                                              "integer=500"], check=False, capture_stderr=True, env=env, cwd=ROOT)
                assert bad.returncode == 2 and b"field 'integer': must be between 1 and 100" in bad.stderr
                done: list = []

                async def person(name: str) -> None:  # two people answer at once: one wins
                    sets = [arg for item in [*EVERYTHING_SETS, f"name={name}"] for arg in ("--set", item)]
                    done.append(await trio.run_process([*tern, "approve", question.id, *sets], check=False,
                                                       capture_stdout=True, capture_stderr=True, env=env, cwd=ROOT))

                async with trio.open_nursery() as both:
                    both.start_soon(person, "Ada Lovelace")
                    both.start_soon(person, "Grace Hopper")
                (won,) = [p for p in done if p.returncode == 0]
                (lost,) = [p for p in done if p.returncode != 0]
                assert won.stdout.startswith(f"answered {question.id}".encode())
                assert b"is already approved" in lost.stderr
                winner.append(next(arg[5:] for arg in reversed(won.args) if arg.startswith("name=")))

            inner.start_soon(answer)
            result = await kernel.call_tool(EVERYTHING_TOOL, {})
        assert f"- Name: {winner[0]}" in result.text  # the winner's answer, whole
        check_everything_answered(result.text.replace(f"- Name: {winner[0]}", "- Name: Ada Lovelace"))
        await kernel.mcp.aclose()


EVERYTHING_CONFIG = """
[[mcp_servers]]
name = "everything"
timeout_secs = 20
[mcp_servers.transport]
type = "stdio"
command = "{node}"
args = ["{server}", "stdio"]
"""


@pytest.fixture(scope="module")
def everything_daemon(tmp_path_factory, npm, node):
    tmp = tmp_path_factory.mktemp("everything")
    config = write_config(tmp, EVERYTHING_CONFIG.format(node=node, server=npm["server-everything"]))
    with tern_serve(tmp, config, tern_env(tmp), servers_connected=True) as url:
        yield url


def stream_call(url: str, tool: str, seen: list) -> None:
    """``POST /api/tools/{tool}/call``: its SSE events, in order."""
    with httpx.stream("POST", f"{url}/api/tools/{tool}/call", json={"arguments": {}}, timeout=60) as response:
        event = ""
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                seen.append((event, json.loads(line[5:])))


async def test_server_everything_on_stdio_answered_through_the_api(everything_daemon):
    url = everything_daemon
    seen: list = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, stream_call, url, EVERYTHING_TOOL, seen)
        with trio.fail_after(30):
            while not any(kind == "approval" for kind, _ in seen):
                await trio.sleep(0.05)
        question = next(data for kind, data in seen if kind == "approval")  # the streamed call's own prompt
        assert question["form"]["requestedSchema"]["required"] == ["name"]
        post = f"{url}/api/approvals/{question['id']}"
        bad = await trio.to_thread.run_sync(lambda: httpx.post(post, json={
            "decision": "approve", "answer": {**EVERYTHING_ANSWER, "untitledSingleSelectEnum": "Gunther"}}))
        assert bad.status_code == 400 and "must be one of Monica" in bad.json()["error"]["message"]
        missing = await trio.to_thread.run_sync(lambda: httpx.post(post, json={"decision": "approve"}))
        assert missing.status_code == 400 and "field 'name' is required" in missing.json()["error"]["message"]
        decided = await trio.to_thread.run_sync(lambda: httpx.post(post, json={"decision": "approve",
                                                                               "answer": EVERYTHING_ANSWER}))
        assert decided.status_code == 200 and decided.json()["state"] == "approved"
        assert "answer" not in decided.json()  # the values are the server's, not the API's to repeat
    kind, result = seen[-1]
    assert kind == "result", seen
    check_everything_answered(result["text"])


async def test_server_everything_answered_on_the_websocket(everything_daemon):
    from trio_websocket import open_websocket_url

    url = everything_daemon
    seen: list = []
    replies: list = []
    async with open_websocket_url(url.replace("http://", "ws://") + "/api/events") as socket:
        assert json.loads(await socket.get_message())["type"] == "hello"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, stream_call, url, EVERYTHING_TOOL, seen)
            while True:
                with trio.fail_after(30):
                    event = json.loads(await socket.get_message())
                if event["type"] == "approval_requested" and event["approval"]["form"]:
                    approval_id = event["approval"]["id"]
                    await socket.send_message("not json")
                    await socket.send_message(json.dumps({"type": "decide", "id": approval_id,
                                                          "decision": "approve", "answer": {"integer": 0}}))
                    await socket.send_message(json.dumps({"type": "decide", "id": approval_id,
                                                          "decision": "approve", "answer": EVERYTHING_ANSWER}))
                elif event["type"] in ("error", "decided"):
                    replies.append(event)
                    if event["type"] == "decided":
                        break
    assert [reply["type"] for reply in replies] == ["error", "error", "decided"]
    assert "not valid JSON" in replies[0]["error"] or "JSON" in replies[0]["error"]
    assert replies[1] == {"type": "error", "id": approval_id, "error": "field 'name' is required"}
    assert replies[2]["approval"]["channel"] == "websocket"
    with trio.fail_after(30):
        while not seen or seen[-1][0] != "result":
            await trio.sleep(0.05)
    check_everything_answered(seen[-1][1]["text"])


async def test_the_websocket_refuses_bad_decisions_and_keeps_serving(everything_daemon):
    from trio_websocket import ConnectionClosed, open_websocket_url

    url = everything_daemon.replace("http://", "ws://") + "/api/events"
    async with open_websocket_url(url) as socket:
        assert json.loads(await socket.get_message())["type"] == "hello"
        for message, text in (("[1]", "a message must be"), ('{"type": "ping"}', "a message must be"),
                              ('{"type": "decide", "id": 5, "decision": "approve"}', "names its approval"),
                              ('{"type": "decide", "id": "ap_nothere", "decision": "approve"}',
                               "no approval request has the id 'ap_nothere'"),
                              ('{"type": "decide", "id": "ap_x", "decision": "maybe"}', "decision"),
                              (json.dumps({"type": "decide", "id": "a" * 5000, "decision": "deny"}),
                               "ids are at most")):
            await socket.send_message(message)
            while True:
                with trio.fail_after(10):
                    reply = json.loads(await socket.get_message())
                if reply["type"] == "error":
                    break
            assert text in reply["error"], (message, reply)
        await socket.send_message("x" * 70_000)  # over the bound: the socket is closed, the daemon serves on
        with pytest.raises(ConnectionClosed), trio.fail_after(10):
            while True:
                await socket.get_message()
        assert socket.closed.code == 1009
    assert httpx.get(everything_daemon.replace("ws://", "http://") + "/health").status_code == 200


# --- the relay: tern mcp asks its own client ------------------------------------------------

RELAY_CONFIG = """
[[mcp_servers]]
name = "sdk"
protocol = "2025-11-25"
timeout_secs = 20
[mcp_servers.transport]
{transport}

[[agents]]
name = "profiler"
kind = "tool"
tool = "mcp_sdk_profile"

[governance]
approval_timeout_secs = {timeout}
"""


def relay_config(tmp: Path, sdk_python: str, timeout: int = 60, url: str = "") -> Path:
    transport = f'type = "http"\nurl = "{url}"' if url else f'type = "stdio"\ncommand = "{sdk_python}"\n' \
                                                             f'args = ["{SDK_SERVER}"]'
    return write_config(tmp, RELAY_CONFIG.format(transport=transport, timeout=timeout))


def run_client(sdk_python: str, mode: str, answer: str, config: Path, env: dict, url: str = "") -> dict:
    target = [url] if url else ["--", sys.executable, "-m", "runtime", "--config", str(config), "mcp"]
    done = subprocess.run([sdk_python, CLIENT, mode, answer, "tern_agent_profiler", *target], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode,version", [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")])
def test_the_desktop_client_answers_the_upstream_question(sdk_python, tmp_path, mode, version):
    seen = run_client(sdk_python, mode, "typed", relay_config(tmp_path, sdk_python), tern_env(tmp_path))
    assert seen["version"] == version
    (asked,) = seen["asked"]
    assert asked["message"] == "Who are you?" and asked["schema"]["required"] == ["name", "age"]
    assert not seen["is_error"], seen
    assert seen["text"] == 'accept: {"name":"Ada","age":36,"color":"blue","score":0.5,"subscribe":true}'
    approvals = Approvals(tmp_path / "state" / "approvals.sqlite3")
    try:
        (question,) = trio.run(approvals.list, None)
        assert (question.state, question.channel, question.tool) == ("approved", "mcp", "mcp_sdk_elicitation")
    finally:
        approvals.close()
    audit = (tmp_path / "state" / "audit.jsonl").read_text()
    assert "Ada" not in audit and '"answer":"sha256:' in audit


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_the_upstream_question_on_the_calls_own_http_stream(sdk_python, tmp_path, mode):
    """The upstream server speaks Streamable HTTP: its question comes on the POST stream
    of the call that caused it, and goes to that call's client."""
    from tests.mcp.test_real_peers_http import free_port, start_sdk_http

    port = free_port()
    upstream = start_sdk_http(sdk_python, port)
    try:
        config = relay_config(tmp_path, sdk_python, url=f"http://127.0.0.1:{port}/mcp")
        seen = run_client(sdk_python, mode, "typed", config, tern_env(tmp_path))
    finally:
        upstream.kill()
        upstream.wait()
    assert [asked["message"] for asked in seen["asked"]] == ["Who are you?"]
    assert seen["text"] == 'accept: {"name":"Ada","age":36,"color":"blue","score":0.5,"subscribe":true}'


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_a_client_of_the_daemons_post_mcp_answers_the_upstream_question(sdk_python, tmp_path, mode):
    config = relay_config(tmp_path, sdk_python)
    with tern_serve(tmp_path, config, tern_env(tmp_path), servers_connected=True) as url:
        seen = run_client(sdk_python, mode, "typed", config, tern_env(tmp_path), url=f"{url}/mcp")
        relayed = run_client(sdk_python, mode, "typed", config, tern_env(tmp_path))  # tern mcp relays to it
    for each in (seen, relayed):
        assert [asked["message"] for asked in each["asked"]] == ["Who are you?"]
        assert each["text"] == 'accept: {"name":"Ada","age":36,"color":"blue","score":0.5,"subscribe":true}'


def test_a_desktop_client_that_declines(sdk_python, tmp_path):
    seen = run_client(sdk_python, "legacy", "decline", relay_config(tmp_path, sdk_python), tern_env(tmp_path))
    assert seen["text"] == "decline: " and len(seen["asked"]) == 1


def test_a_desktop_client_that_never_answers_leaves_the_upstream_cancelled(sdk_python, tmp_path):
    seen = run_client(sdk_python, "legacy", "hang", relay_config(tmp_path, sdk_python, timeout=4), tern_env(tmp_path))
    assert seen["text"] == "cancel: " and len(seen["asked"]) == 1


def test_a_client_that_cannot_elicit_leaves_it_to_a_person(sdk_python, tmp_path):
    config = relay_config(tmp_path, sdk_python)
    target = ["--", sys.executable, "-m", "runtime", "--config", str(config), "mcp"]
    process = subprocess.Popen([sdk_python, CLIENT, "legacy", "none", "tern_agent_profiler", *target],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                               env=tern_env(tmp_path))
    approvals = Approvals(tmp_path / "state" / "approvals.sqlite3")
    try:
        import time

        deadline = time.monotonic() + 60
        while not (pending := trio.run(approvals.list, "pending")):
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.05)
        trio.run(partial(approvals.decide, pending[0].id, True, answer={"name": "Bob", "age": 7}, by="the test",
                         channel="test"))
    finally:
        approvals.close()
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["asked"] == [] and seen["text"].startswith('accept: {"name":"Bob","age":7,')


TERMINAL_SCRIPT = [("answer? [y]es", b"y\n"), ("  name: ", b"Ada\n"), ("  age: ", b"abc\n"),
                   ("not a whole number", b""), ("  age: ", b"36\n"), ("  color [green]: ", b"\n"),
                   ("  score [0.5]: ", b"\n"), ("  subscribe [false]: ", b"yes\n")]


def run_on_terminal(config: Path, env: dict, script: list) -> tuple[str, str]:
    """``tern run profiler`` under a real pseudo-terminal, answering each expected text
    with its reply in turn: what the terminal showed, and stdout."""
    import os
    import pty
    import select
    import time

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(config), "run", "profiler", "{}"],
                               stdin=follower, stdout=subprocess.PIPE, stderr=follower, env=env, cwd=ROOT, text=True)
    os.close(follower)
    screen, seen_up_to = "", 0
    try:
        deadline = time.monotonic() + 60
        for expected, reply in script:
            while expected not in screen[seen_up_to:]:
                assert time.monotonic() < deadline and process.poll() is None, screen
                if select.select([leader], [], [], 0.1)[0]:
                    try:
                        screen += os.read(leader, 4096).decode(errors="replace")
                    except OSError:  # EIO: the process ended
                        raise AssertionError(screen) from None
            seen_up_to = screen.index(expected, seen_up_to) + len(expected)
            os.write(leader, reply)
        out, _ = process.communicate(timeout=60)
    finally:
        process.kill()
        os.close(leader)
    return screen.replace("\r", ""), out


def check_terminal_answer(screen: str, out: str) -> None:
    assert "mcp:sdk asks: Who are you?" in screen
    assert "color (string, optional): Color one of: red, green, blue [default green]" in screen
    assert out.strip() == 'accept: {"name":"Ada","age":36,"color":"green","score":0.5,"subscribe":true}', out


def test_a_run_on_a_terminal_asks_each_field(sdk_python, tmp_path):
    """``tern run`` in-process: the question, its fields, and a prompt per field (a wrong
    value is asked again, Enter takes the default)."""
    check_terminal_answer(*run_on_terminal(relay_config(tmp_path, sdk_python), tern_env(tmp_path), TERMINAL_SCRIPT))


def test_a_run_through_the_daemon_asks_each_field(sdk_python, tmp_path):
    """``tern run`` with a daemon running: the streamed run's question is asked inline and
    the answer goes to the daemon's API."""
    config = relay_config(tmp_path, sdk_python)
    with tern_serve(tmp_path, config, tern_env(tmp_path), servers_connected=True):
        check_terminal_answer(*run_on_terminal(config, tern_env(tmp_path), TERMINAL_SCRIPT))
    approvals = Approvals(tmp_path / "state" / "approvals.sqlite3")
    try:
        (question,) = trio.run(approvals.list, None)
        assert (question.state, question.channel) == ("approved", "terminal")
        assert question.decided_by.startswith("terminal:api:127.0.0.1")  # answered through the daemon
    finally:
        approvals.close()


async def test_a_url_question_shows_its_url_and_is_answered(npm, node, nursery, tmp_path):
    kernel = await booted(nursery, tmp_path, stdio_entry(node, npm["server-everything"], "stdio", name="everything"))
    for decide, expected in ((True, "User completed the URL elicitation flow"), (False, "User declined to open")):
        async with trio.open_nursery() as inner:
            async def answer() -> None:
                question = await next_question(kernel.approvals)
                assert question.form["mode"] == "url" and question.form["url"] == "https://example.com/login"
                with pytest.raises(UsageError, match="takes no answer"):
                    await kernel.approvals.decide(question.id, True, answer={"x": 1}, by="tester")
                await kernel.approvals.decide(question.id, decide, by="tester")

            inner.start_soon(answer)
            result = await kernel.call_tool("mcp_everything_trigger_url_elicitation",
                                            {"url": "https://example.com/login", "message": "Log in, please"})
        assert expected in result.text, result.text
