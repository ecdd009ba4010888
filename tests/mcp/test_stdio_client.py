"""The MCP client over stdio against servers that misbehave on purpose."""

import json
import os

import pytest
import trio

from runtime.errors import ConnectionLost, TernTimeout
from runtime.mcp.client.client import McpClient


async def test_handshake_pagination_and_call(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(), nursery)
    assert client.info.era == "handshake" and client.info.version == "2025-11-25"
    assert client.info.name == "fake"
    tools = await client.list_tools()
    assert [t.name for t in tools][:2] == ["echo", "sleep"] and len(tools) == 9  # two pages
    result = await client.call_tool("echo", {"message": "héllo"})
    assert result.text() == "héllo" and not result.is_error
    await client.aclose()


async def test_silent_legacy_server_costs_one_round_trip(fake_entry, nursery):
    # The fake ignores server/discover entirely; the ping answer must end the probe.
    started = trio.current_time()
    client = await McpClient.connect(fake_entry(), nursery)
    assert client.info.era == "handshake"
    assert trio.current_time() - started < 3.0  # far below the 5 s probe timeout
    await client.aclose()


async def test_modern_server_with_a_late_discover_answer_is_not_lost(fake_entry, nursery):
    # Ping answered at once, discover only after the grace: initialize is tried, refused,
    # and the discover answer that arrived meanwhile decides.
    client = await McpClient.connect(fake_entry("--late-discover", "0.3"), nursery)
    assert (client.info.era, client.info.version, client.info.name) == ("modern", "2026-07-28", "late-modern")
    await client.aclose()


async def test_every_content_type_and_is_error(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(), nursery)
    result = await client.call_tool("content")
    assert result.structured_content == {"n": 1}
    assert result.text().splitlines() == [
        "hello", "[image: image/png, 100 bytes]", "[audio: audio/wav, 4 bytes]", "inside", "[link: b.txt file:///b.txt]"]
    failed = await client.call_tool("fail")
    assert failed.is_error and failed.text() == "it broke"
    await client.aclose()


async def test_crash_mid_call_fails_in_flight_calls_at_once(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(timeout_secs=30), nursery)
    results = {}

    async def slow():
        try:
            await client.call_tool("sleep", {"ms": 20_000})
        except ConnectionLost as exc:
            results["slow"] = exc

    nursery.start_soon(slow)
    await trio.sleep(0.2)
    started = trio.current_time()
    with pytest.raises(ConnectionLost, match="exited with code 9"):
        await client.call_tool("crash")
    with trio.fail_after(5):  # real process, real time: wait for it rather than a fixed 0.1 s
        while "slow" not in results:
            await trio.sleep(0.01)
    assert isinstance(results["slow"], ConnectionLost)
    assert trio.current_time() - started < 5  # not the 30 s timeout
    with pytest.raises(ConnectionLost):
        await client.call_tool("echo", {"message": "x"})
    await client.aclose()


async def test_hang_times_out_and_sends_cancelled(fake_entry, nursery, tmp_path):
    record = tmp_path / "received.jsonl"
    client = await McpClient.connect(fake_entry("--record", str(record)), nursery)
    with pytest.raises(TernTimeout, match="did not answer tools/call within 0.5 s"):
        await client.call_tool("hang", timeout_secs=0.5)
    assert (await client.call_tool("echo", {"message": "still here"})).text() == "still here"
    await client.aclose()
    received = [json.loads(line) for line in record.read_text().splitlines()]
    hang = next(m for m in received if m.get("params", {}).get("name") == "hang")
    cancelled = [m for m in received if m.get("method") == "notifications/cancelled"]
    assert cancelled and cancelled[0]["params"]["requestId"] == hang["id"]


async def test_a_short_deadline_behind_a_long_one_still_expires_on_time(fake_entry, nursery):
    """Deadlines are kept by the session's watchdog: a call with an earlier deadline than
    every waiting one must wake it, and a caller's own cancellation still ends its call."""
    client = await McpClient.connect(fake_entry(), nursery)
    outcome = {}

    async def long_call() -> None:
        try:
            await client.call_tool("hang", timeout_secs=30)
        except (TernTimeout, ConnectionLost) as exc:  # lost: when the client closes, at the end
            outcome["long"] = exc

    nursery.start_soon(long_call)
    await trio.sleep(0.1)
    started = trio.current_time()
    with pytest.raises(TernTimeout, match="within 0.3 s"):
        await client.call_tool("hang", timeout_secs=0.3)
    assert 0.25 < trio.current_time() - started < 2
    with trio.move_on_after(0.2) as scope:  # the caller gives up first
        await client.call_tool("hang", timeout_secs=30)
    assert scope.cancelled_caught and "long" not in outcome
    assert (await client.call_tool("echo", {"message": "still here"})).text() == "still here"
    await client.aclose()
    with trio.fail_after(5):  # real process, real time: wait for it rather than a fixed 0.1 s
        while "long" not in outcome:
            await trio.sleep(0.01)
    assert isinstance(outcome["long"], ConnectionLost)  # it waited, on its 30 s, until the end


async def test_garbage_and_a_20mb_line_are_skipped(fake_entry, nursery):
    client = await McpClient.connect(fake_entry("--garbage"), nursery)
    assert (await client.call_tool("echo", {"message": "ok"})).text() == "ok"
    await client.aclose()


async def test_stderr_flood_does_not_block(fake_entry, nursery):
    client = await McpClient.connect(fake_entry("--stderr-flood"), nursery)
    assert (await client.call_tool("echo", {"message": "ok"})).text() == "ok"
    await client.aclose()


async def test_notifications_before_the_initialize_result(fake_entry, nursery):
    seen = []
    client = await McpClient.connect(fake_entry("--notify-early"), nursery,
                                     on_notification=lambda method, params: seen.append(method))
    assert "notifications/tools/list_changed" in seen and "notifications/message" in seen
    await client.aclose()


async def test_server_that_exits_at_once(fake_entry, nursery):
    with pytest.raises(ConnectionLost, match="exited with code 3"):
        await McpClient.connect(fake_entry("--exit-now"), nursery)


async def test_missing_command_is_a_clear_error(nursery):
    from tests.mcp.conftest import stdio_entry

    with pytest.raises(ConnectionLost, match="cannot start MCP server 'fake'"):
        await McpClient.connect(stdio_entry("/nonexistent/tern-no-such-binary"), nursery)


async def test_server_requests_are_answered(fake_entry, nursery, tmp_path):
    record = tmp_path / "received.jsonl"
    client = await McpClient.connect(fake_entry("--record", str(record)), nursery)
    client.session.roots = [str(tmp_path)]
    await client.session.notify("roots/check")  # makes the fake send roots/list and sampling
    await trio.sleep(0.5)
    await client.aclose()
    answers = {m["id"]: m for m in map(json.loads, record.read_text().splitlines()) if m.get("id") in (900, 901)}
    assert answers[900]["result"]["roots"][0]["uri"] == tmp_path.as_uri()
    assert answers[901]["error"]["code"] == -32601 and "does not support" in answers[901]["error"]["message"]


async def test_environment_is_cleared(fake_entry, nursery, monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET", "do-not-leak")
    monkeypatch.setenv("TERN_TEST_PASSED", "visible")
    client = await McpClient.connect(fake_entry(env=["TERN_TEST_PASSED"]), nursery)
    env = json.loads((await client.call_tool("env")).text())
    await client.aclose()
    assert "TERN_TEST_SECRET" not in env
    assert env["TERN_TEST_PASSED"] == "visible"
    # tern's own spawn-depth marker is the one variable tern adds (runtime/config/itself.py), never one of its own
    assert env.pop("TERN_SPAWN_DEPTH") == "1"
    assert set(env) - {"PATH", "HOME", "TMP", "TEMP", "TMPDIR", "TERN_TEST_PASSED", "LC_CTYPE"} == set()


async def test_many_calls_in_flight_on_one_connection(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(), nursery)
    started = trio.current_time()
    async with trio.open_nursery() as calls:
        for _ in range(100):
            calls.start_soon(client.call_tool, "sleep", {"ms": 50})
    # Serialised, 100 x 50 ms would take 5 s; in flight together it is one sleep plus overhead.
    assert trio.current_time() - started < 3.0
    await client.aclose()


async def test_close_leaves_no_child(fake_entry, nursery):
    client = await McpClient.connect(fake_entry(), nursery)
    pid = client.session.transport.pid
    await client.aclose()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_server_outlives_the_thread_that_spawned_it(fake_entry, nursery, monkeypatch):
    """Regression: PR_SET_PDEATHSIG tied the server's life to trio's spawning worker
    thread, which exits after 10 idle seconds, so every server died at 10 s. The test
    shortens trio's idle timeout (a module constant its worker threads read at each
    wait) so the spawning thread is gone in 1 s instead of 10."""
    import trio
    from trio._core import _thread_cache

    from runtime.mcp.client.client import McpClient

    idle = 1.0 if hasattr(_thread_cache, "IDLE_TIMEOUT") else 10.0
    monkeypatch.setattr(_thread_cache, "IDLE_TIMEOUT", idle, raising=False)
    client = await McpClient.connect(fake_entry(), nursery)
    await trio.sleep(idle + 1.5)  # the worker thread that spawned the server has exited
    assert (await client.call_tool("echo", {"message": "still here"})).text() == "still here"
    await client.aclose()
