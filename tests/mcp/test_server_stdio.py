"""``tern mcp`` as a real process, spoken to with raw bytes: both eras, both framings,
bad input of every kind, cancellation, progress, logging, EOF and stdout hygiene."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import trio

from tests.mcp.server_harness import (META, MODERN, TernMcp, initialize, request, tern_env,
                                      write_config)
from tests.test_cli import ROOT


@pytest.fixture
def config(tmp_path):
    return write_config(tmp_path)


@pytest.fixture
async def tern(config, tmp_path):
    server = await TernMcp.start(config, tern_env(tmp_path), "--standalone")
    yield server
    await server.close()


async def test_handshake_lists_agents_allowlisted_tools_and_presets(tern):
    reply = await tern.handshake()
    result = reply["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "tern"
    assert result["capabilities"] == {"tools": {"listChanged": True}, "logging": {}, "completions": {},
                                      "resources": {"subscribe": True, "listChanged": True},
                                      "prompts": {"listChanged": True}}
    tools = (await tern.call(1, "tools/list"))["result"]["tools"]
    names = [t["name"] for t in tools]
    assert names == ["tern_agent_echo", "tern_agent_slow_poke", "tern_agent_counter", "tern_agent_logger",
                     "time_now", "say_hi"]  # hyphen -> "_"; only the allowlisted built-in; the preset
    echo = tools[0]
    assert echo["inputSchema"]["required"] == ["message"]
    assert set(echo["inputSchema"]["properties"]) == {"message", "context_id"}
    assert echo["outputSchema"]["required"] == ["reply", "context_id"]
    assert tools[-1]["inputSchema"] == {"type": "object", "properties": {}, "additionalProperties": False}
    assert "shell_exec" not in names and "file_write" not in names


async def test_version_negotiation(tern):
    for msg_id, asked, got in [(1, "2024-11-05", "2024-11-05"), (2, "2025-03-26", "2025-03-26"),
                               (3, "2025-06-18", "2025-06-18"), (4, "1999-01-01", "2025-11-25")]:
        await tern.send(initialize(msg_id, asked))
        reply, _ = await tern.answer(msg_id)
        assert reply["result"]["protocolVersion"] == got


async def test_agent_call_and_conversation_continues(tern, tmp_path):
    await tern.handshake()
    first = (await tern.call(1, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "hello"}}))
    result = first["result"]
    assert result["content"] == [{"type": "text", "text": "hello"}] and result["isError"] is False
    context = result["structuredContent"]["context_id"]
    assert result["structuredContent"]["reply"] == "hello"
    second = await tern.call(2, "tools/call", {"name": "tern_agent_echo",
                                               "arguments": {"message": "again", "context_id": context}})
    assert second["result"]["structuredContent"] == {"reply": "again", "context_id": context}
    preset = await tern.call(3, "tools/call", {"name": "say_hi"})  # no arguments at all
    assert preset["result"]["content"][0]["text"] == "hi there"
    now = await tern.call(4, "tools/call", {"name": "time_now", "arguments": {}})
    assert now["result"]["isError"] is False and "20" in now["result"]["content"][0]["text"]
    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert any({"kind": "tool_call", "tool": "agent_send", "caller": "mcp:stdio"}.items() <= r.items()
               for r in audit)  # through the pipeline


async def test_tool_errors_are_results_and_protocol_errors_are_errors(tern):
    await tern.handshake()
    missing = await tern.call(1, "tools/call", {"name": "tern_agent_echo", "arguments": {}})
    assert missing["result"]["isError"] is True
    assert "message" in missing["result"]["content"][0]["text"]
    unknown = await tern.call(2, "tools/call", {"name": "shell_exec", "arguments": {"command": "id"}})
    assert unknown["error"]["code"] == -32602 and "shell_exec" in unknown["error"]["message"]
    bad_args = await tern.call(3, "tools/call", {"name": "tern_agent_echo", "arguments": [1]})
    assert bad_args["error"]["code"] == -32602
    no_name = await tern.call(4, "tools/call", {"arguments": {}})
    assert no_name["error"]["code"] == -32602


async def test_modern_era_on_stdio(tern):
    discover = await tern.call(1, "server/discover", {"_meta": META})
    result = discover["result"]
    assert result["supportedVersions"][0] == MODERN and "2025-11-25" in result["supportedVersions"]
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "tern"
    assert {"cacheScope", "ttlMs", "capabilities"} <= set(result)
    listed = await tern.call(2, "tools/list", {"_meta": META})
    assert listed["result"]["resultType"] == "complete" and listed["result"]["tools"]
    called = await tern.call(3, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "m"},
                                               "_meta": META})
    assert called["result"]["content"][0]["text"] == "m" and called["result"]["resultType"] == "complete"
    wrong = await tern.call(
        4, "tools/list", {"_meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
    )
    assert wrong["error"]["code"] == -32022
    assert wrong["error"]["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
    no_caps = await tern.call(5, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN}})
    assert no_caps["error"]["code"] == -32602
    ping = await tern.call(6, "ping", {"_meta": META})  # gone in 2026-07-28
    assert ping["error"]["code"] == -32601


async def test_bad_input_never_stops_the_server(tern):
    await tern.write(b"this is not json\n")
    reply = await tern.receive()
    assert reply["id"] is None and reply["error"]["code"] == -32700
    await tern.write(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]\n')  # batches ended with 2025-06-18
    assert (await tern.receive())["error"]["code"] == -32600
    await tern.write(b'{"jsonrpc":"2.0","id":7}\n')  # neither request nor response
    invalid = await tern.receive()
    assert invalid["error"]["code"] == -32600 and invalid["id"] == 7
    await tern.write(b'{"jsonrpc":"1.0","id":8,"method":"ping"}\n')
    assert (await tern.receive())["error"]["code"] == -32600
    assert (await tern.call(9, "tools/list"))["error"]["code"] == -32600  # before initialize
    await tern.write(b"\n\n   \n")  # blank lines are nothing
    await tern.handshake()
    await tern.send({"jsonrpc": "2.0", "method": "notifications/whatever", "params": {}})  # never answered
    assert (await tern.call(10, "no/such/method"))["error"]["code"] == -32601
    assert (await tern.call(11, "ping"))["result"] == {}
    assert (await tern.call(12, "tools/list", {"cursor": "garbage!"}))["error"]["code"] == -32602
    await tern.write(
        json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 13,
                "method": "tools/call",
                "params": {"name": "tern_agent_echo", "arguments": {"message": "x" * (11 * 1024 * 1024)}},
            }
        ).encode()
        + b"\n"
    )
    big = await tern.receive(timeout=20)
    assert big["id"] == 13 and big["error"]["code"] == -32600 and "too large" in big["error"]["message"]
    await tern.write(b'{"jsonrpc":"2.0","method":"notifications/x","params":"' + b"y" * (11 * 1024 * 1024) + b'"}\n')
    await tern.write('{"jsonrpc":"2.0","id":"ünï","method":"ping"}\n'.encode())
    after = await tern.receive(timeout=20)  # the oversized notification got no answer: this is the ping's
    assert after == {"jsonrpc": "2.0", "id": "ünï", "result": {}}


async def test_interleaved_calls_all_answered_by_id(tern):
    await tern.handshake()
    await tern.send(
        *[
            request(f"r{i}", "tools/call", {"name": "tern_agent_echo", "arguments": {"message": f"m{i}"}})
            for i in range(30)
        ]
    )
    seen = {}
    for _ in range(30):
        reply = await tern.receive()
        seen[reply["id"]] = reply["result"]["content"][0]["text"]
    assert seen == {f"r{i}": f"m{i}" for i in range(30)}


async def test_pipelined_requests_start_in_order_and_quick_ones_answer_in_it(tern):
    """A client that writes everything at once (``printf ... | tern mcp``) gets initialize
    answered first and the rest in order: requests read together start one by one."""
    echo = [
        request(i, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": f"m{i}"}}) for i in range(2, 12)
    ]
    await tern.send(
        initialize(0),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        request(1, "tools/list"),
        *echo,
        request(12, "ping"),
    )
    replies = [await tern.receive() for _ in range(13)]
    assert [reply["id"] for reply in replies] == list(range(13))
    assert replies[0]["result"]["protocolVersion"] == "2025-11-25"
    assert [r["result"]["content"][0]["text"] for r in replies[2:12]] == [f"m{i}" for i in range(2, 12)]


async def test_beyond_max_inflight_a_call_is_refused_and_stdin_is_still_read(tern):
    """64 slow calls run; the 65th is refused at once, a ping is still answered, a cancel
    still gets through (and frees a slot), and stdin EOF still ends the server."""
    from runtime.mcp.server.stdio import MAX_INFLIGHT, SERVER_BUSY

    await tern.handshake()
    slow = [
        request(i, "tools/call", {"name": "tern_agent_slow_poke", "arguments": {"message": ""}})
        for i in range(1, MAX_INFLIGHT + 1)
    ]
    await tern.send(
        *slow, request("one-more", "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "x"}})
    )
    refused, _ = await tern.answer("one-more")
    assert refused["error"]["code"] == SERVER_BUSY and "busy" in refused["error"]["message"]
    assert (await tern.call("ping", "ping"))["result"] == {}
    await tern.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})
    # The slot is free once the cancelled call has wound down (its agent's process ended):
    # a real process, so real time; ask again until then rather than guess how long it takes.
    with trio.fail_after(10):
        for attempt in range(1000):
            again = await tern.call(
                f"again-{attempt}", "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "y"}}
            )
            if "error" not in again:
                break
            assert again["error"]["code"] == SERVER_BUSY
            await trio.sleep(0.05)
    assert again["result"]["content"][0]["text"] == "y"
    started = time.monotonic()
    assert await tern.close() == 0  # stdin EOF: the calls in flight are cancelled
    assert time.monotonic() - started < 5  # a real process: a generous bound (the grace is 0.5 s)


async def test_content_length_framing_is_answered_in_kind(config, tmp_path):
    server = await TernMcp.start(config, tern_env(tmp_path), "--standalone", framing="content-length")
    try:
        reply = await server.handshake()
        assert reply["result"]["protocolVersion"] == "2025-11-25"
        called = await server.call(1, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "cl"}})
        assert called["result"]["content"][0]["text"] == "cl"
        await server.write(b"Content-Length: 5\r\n\r\nnope!")
        assert (await server.receive())["error"]["code"] == -32700
        assert (await server.call(2, "ping"))["result"] == {}
    finally:
        assert await server.close() == 0


async def test_progress_during_a_long_agent_call(tern):
    await tern.handshake()
    await tern.send(
        request(
            1,
            "tools/call",
            {"name": "tern_agent_counter", "arguments": {"message": ""}, "_meta": {"progressToken": "tok"}},
        )
    )
    reply, before = await tern.answer(1)
    progress = [m["params"] for m in before if m.get("method") == "notifications/progress"]
    assert len(progress) >= 3 and all(p["progressToken"] == "tok" for p in progress)
    values = [p["progress"] for p in progress]
    assert values == sorted(set(values))  # strictly increasing
    assert any("step" in p["message"] for p in progress)
    assert reply["result"]["content"][0]["text"].count("step") == 4


async def test_no_progress_without_a_token(tern):
    await tern.handshake()
    await tern.send(request(1, "tools/call", {"name": "tern_agent_counter", "arguments": {"message": ""}}))
    reply, before = await tern.answer(1)
    assert before == [] and not reply["result"]["isError"]


async def test_logging_set_level_and_log_messages(tern):
    await tern.handshake()
    assert (await tern.call(1, "logging/setLevel", {"level": "shouting"}))["error"]["code"] == -32602
    assert (await tern.call(2, "logging/setLevel", {"level": "info"}))["result"] == {}
    await tern.send(request(3, "tools/call", {"name": "tern_agent_logger", "arguments": {"message": ""}}))
    reply, before = await tern.answer(3)
    logs = [m["params"] for m in before if m.get("method") == "notifications/message"]
    assert [log["data"] for log in logs] == ["log line 1", "log line 2", "log line 3"]
    assert all(log["level"] == "info" and log["logger"] == "tern" for log in logs)
    assert (await tern.call(4, "logging/setLevel", {"level": "error"}))["result"] == {}
    await tern.send(request(5, "tools/call", {"name": "tern_agent_logger", "arguments": {"message": ""}}))
    assert (await tern.answer(5))[1] == []  # below the level: nothing


async def test_cancelled_call_gets_no_answer_and_the_server_goes_on(tern, tmp_path):
    await tern.handshake()
    await tern.send(
        request(
            1,
            "tools/call",
            {"name": "tern_agent_slow_poke", "arguments": {"message": ""}, "_meta": {"progressToken": 1}},
        )
    )
    started = await tern.receive()
    assert started["method"] == "notifications/progress"
    await tern.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "x"}})
    assert (await tern.call(2, "ping"))["result"] == {}
    with trio.move_on_after(0.5):
        late = await tern.receive()
        assert late.get("id") != 1 or late.get("method"), f"a cancelled call was answered: {late}"
    await trio.sleep(0.2)
    audit = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert any(r["kind"] == "agent_message" and r["agent"] == "slow-poke" and r["outcome"] == "cancelled"
               for r in audit)
    assert any(
        r["kind"] == "tool_call" and r["tool"] == "agent_send" and r["outcome"] == "cancelled" for r in audit
    )  # the pipeline audits the cancelled call as such


async def test_stdin_eof_cancels_in_flight_calls_and_exits_0(tern):
    await tern.handshake()
    await tern.send(request(1, "tools/call", {"name": "tern_agent_slow_poke", "arguments": {"message": ""}}))
    await trio.sleep(0.3)
    started = time.monotonic()
    assert await tern.close() == 0
    assert time.monotonic() - started < 5  # a real process: a generous bound (the grace is 0.5 s)


def test_stray_prints_go_to_stderr_not_the_protocol_stream():
    script = (
        "import trio, sys\n"
        "from runtime.host.mcp_stdio import _stdio_streams\n"
        "async def main():\n"
        "    stdin, stdout = _stdio_streams()\n"
        "    print('a stray print', flush=True)\n"
        "    sys.stdout.write('more noise\\n'); sys.stdout.flush()\n"
        '    await stdout.send_all(b\'{"jsonrpc":"2.0","id":1,"result":{}}\\n\')\n'
        "trio.run(main)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=30, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\n'
    assert b"a stray print" in done.stderr and b"more noise" in done.stderr


async def test_first_answer_does_not_wait_for_mcp_servers_and_list_changes_follow(tmp_path):
    from tests.mcp.conftest import FAKE

    config = write_config(
        tmp_path,
        f"""
[[mcp_servers]]
name = "fake"
transport = {{ type = "stdio", command = "{sys.executable}", args = ["{FAKE}", "--init-delay", "1.5"] }}
""",
        mcp_server='tools = ["time_now", "mcp_fake_*"]',
    )
    server = await TernMcp.start(config, tern_env(tmp_path), "--standalone")
    try:
        started = time.monotonic()
        await server.handshake()
        # Real processes, so real time, and this includes tern's own start: only bounded by
        # the fake's 1.5 s. The proof that nothing waited is the list below, without its tools.
        assert time.monotonic() - started < 1.5
        names = [t["name"] for t in (await server.call(1, "tools/list"))["result"]["tools"]]
        assert not any(n.startswith("mcp_fake_") for n in names)
        changed = await server.receive(timeout=15)
        assert changed == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
        names = [t["name"] for t in (await server.call(2, "tools/list"))["result"]["tools"]]
        assert "mcp_fake_echo" in names and "mcp_fake_grow" in names and "mcp_fake_grown" not in names
        content = await server.call(3, "tools/call", {"name": "mcp_fake_content", "arguments": {}})
        kinds = [item["type"] for item in content["result"]["content"]]
        assert kinds == ["text", "image", "audio", "resource", "resource_link"]  # passed through whole
        await server.send(request(4, "tools/call", {"name": "mcp_fake_grow", "arguments": {}}))
        reply, _ = await server.answer(4)
        assert reply["result"]["content"][0]["text"] == "grew"
        assert (await server.receive(timeout=10))["method"] == "notifications/tools/list_changed"
        names = [t["name"] for t in (await server.call(5, "tools/list"))["result"]["tools"]]
        assert "mcp_fake_grown" in names
    finally:
        assert await server.close() == 0
