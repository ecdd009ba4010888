"""``tern mcp``'s stdio server over in-memory streams, with fake kernel ports: no kernel
booted, no process, no pipe, and trio's virtual clock (``autojump_clock``), so the
framing, bad-input, cancellation and EOF rules are tested exactly and at once. The real
process over real pipes is tests/mcp/test_server_stdio.py."""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import pytest
import trio
import trio.testing

from runtime.config import AgentConfig, Config, McpServerExposure
from runtime.mcp.server.dispatch import McpServer
from runtime.mcp.server.stdio import EOF_GRACE_SECS, LocalBackend, StdioServer
from runtime.ports import Tool, ToolResult
from runtime.wire import jsonrpc

OBJECT = {"type": "object"}


class FakeRun:
    """What ``ToolPort.run`` returns: the caller may cancel it, and a call in it stops."""

    def __init__(self, progress: Callable[[str], None] | None) -> None:
        self.cancelled = False
        self.progress = progress
        self.stopped = trio.Event()

    def cancel(self) -> None:
        self.cancelled = True
        self.stopped.set()


class FakeTools:
    """A ToolPort with a few tools: ``echo`` answers, ``fail`` is a tool error, ``block``
    waits until its run is cancelled, ``sleep`` takes ``secs`` (virtual) seconds,
    ``chatty`` reports progress; ``agent_send`` answers for the agent ``helper``.
    ``hidden`` exists but is not in the server's allowlist."""

    def __init__(self) -> None:
        self.list = [Tool(name, "", OBJECT) for name in ("echo", "fail", "block", "sleep", "chatty", "hidden")]
        self.calls: list[tuple[str, Any, str]] = []  # (name, arguments, caller)
        self.ended: dict[str, str] = {}  # name -> how its call ended
        self.runs: list[FakeRun] = []
        self.blocking = trio.Event()  # set when ``block`` has started

    def tools(self) -> list[Tool]:
        return list(self.list)

    def get(self, name: str) -> Tool | None:
        return next((tool for tool in self.list if tool.name == name), None)

    async def wait_for(self, name: str) -> Tool | None:
        return self.get(name)

    def run(self, agent: Any = None, *, progress: Any = None, log: Any = None, ask: Any = None,
            sample: Any = None, owner: Any = None) -> FakeRun:
        self.runs.append(FakeRun(progress))
        return self.runs[-1]

    async def call(self, name: str, arguments: Any = None, *, run: Any = None, timeout_secs: Any = None,
                   caller: str = "") -> ToolResult:
        self.calls.append((name, arguments, caller))
        if name == "echo":
            return ToolResult(arguments.get("text", ""))
        if name == "fail":
            return ToolResult("it broke", is_error=True)
        if name == "agent_send":
            return ToolResult(f"re: {arguments['message']}", structured={"reply": f"re: {arguments['message']}",
                                                                         "context_id": "ctx-1"})
        if name == "sleep":
            await trio.sleep(arguments["secs"])
            self.ended[name] = "finished"
            return ToolResult("slept")
        if name == "chatty":
            for step in range(3):
                run.progress(f"step {step}")
                await trio.sleep(0.1)
            return ToolResult("chatted")
        if name == "block":
            self.blocking.set()
            try:
                await run.stopped.wait()
            except trio.Cancelled:
                self.ended[name] = "cancelled by trio"
                raise
            self.ended[name] = "stopped by its run"
            return ToolResult("block was cancelled by its caller", is_error=True)
        raise AssertionError(f"the server called a tool it should not have: {name}")


class FakeEvents:
    """An EventPort whose subscribers get what ``publish`` sends."""

    def __init__(self) -> None:
        self.subscribers: list[trio.MemorySendChannel] = []

    @contextmanager
    def subscribe(self, size: int = 100, *, kinds: Any = None) -> Iterator[Any]:
        send, receive = trio.open_memory_channel[dict](size)
        self.subscribers.append(send)

        class Subscription:
            async def next(self) -> dict:
                return await receive.receive()

            def close(self) -> None:
                send.close()

        yield Subscription()
        self.subscribers.remove(send)

    def publish(self, kind: str, data: dict | None = None) -> None:
        for send in self.subscribers:
            send.send_nowait({"type": kind, **(data or {})})


class Client:
    """The other end of the memory stream, speaking newline-delimited JSON."""

    def __init__(self, stream: trio.testing.StapledStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def send(self, *messages: Any) -> None:
        await self.stream.send_all(b"".join(m if isinstance(m, bytes) else json.dumps(m).encode() + b"\n"
                                            for m in messages))

    async def receive(self) -> dict:
        """The next message. On the virtual clock a message that never comes costs
        nothing to wait for: it fails at once, with TooSlowError, instead of hanging."""
        with trio.fail_after(600):
            while b"\n" not in self.buffer:
                data = await self.stream.receive_some(65536)
                assert data, f"the server closed its end; unread: {self.buffer!r}"
                self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    async def nothing_within(self, secs: float) -> bool:
        """True if the server sends nothing more in ``secs`` (virtual) seconds."""
        with trio.move_on_after(secs):
            message = await self.receive()
            raise AssertionError(f"the server sent {message}")
        return True

    async def call(self, msg_id: Any, method: str, params: Any = None) -> dict:
        await self.send(request(msg_id, method, params))
        return await self.receive()


def request(msg_id: Any, method: str, params: Any = None) -> dict:
    message = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def tool_call(msg_id: Any, name: str, arguments: Any = None, **params: Any) -> dict:
    return request(msg_id, "tools/call", {"name": name, "arguments": arguments or {}, **params})


class Served:
    def __init__(self, client: Client, tools: FakeTools, events: FakeEvents, done: trio.Event) -> None:
        self.client, self.tools, self.events, self.done = client, tools, events, done


@pytest.fixture
async def served(nursery) -> Served:
    """A StdioServer on one end of a memory stream pair, in the test's nursery. (Each
    test asks for ``autojump_clock`` itself: pytest-trio takes the clock from the test
    function's own arguments, not from its fixtures'.)"""
    tools, events = FakeTools(), FakeEvents()
    config = Config(agents=[AgentConfig(name="helper", kind="echo")],
                    mcp_server=McpServerExposure(tools=["echo", "fail", "block", "sleep", "chatty"]))
    client_end, server_end = trio.testing.memory_stream_pair()
    server = StdioServer(LocalBackend(McpServer(config, tools, events)), server_end, server_end)
    done = trio.Event()

    async def serve() -> None:
        await server.serve()
        done.set()

    nursery.start_soon(serve)
    return Served(Client(client_end), tools, events, done)


async def handshake(client: Client) -> dict:
    reply = await client.call(0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return reply


async def test_initialize_and_tools_list(served, autojump_clock):
    """The handshake, and the list: the agent first, then only the allowlisted tools."""
    reply = await handshake(served.client)
    assert reply["id"] == 0 and reply["result"]["protocolVersion"] == "2025-06-18"
    assert reply["result"]["serverInfo"]["name"] == "tern"
    tools = (await served.client.call(1, "tools/list"))["result"]["tools"]
    assert [t["name"] for t in tools] == ["tern_agent_helper", "echo", "fail", "block", "sleep", "chatty"]
    assert (await served.client.call(2, "ping"))["result"] == {}


async def test_requests_before_initialize_are_refused(served, autojump_clock):
    reply = await served.client.call(1, "tools/list")
    assert reply["error"]["code"] == jsonrpc.INVALID_REQUEST and "initialize" in reply["error"]["message"]


async def test_tools_call_ok_tool_error_and_protocol_errors(served, autojump_clock):
    """A tool's result is content; a tool's failure is isError (not a JSON-RPC error); a
    tool not exposed, even one the kernel has, is -32602."""
    client = served.client
    await handshake(client)
    ok = await client.call(1, "tools/call", {"name": "echo", "arguments": {"text": "héllo"}})
    assert ok["result"] == {"content": [{"type": "text", "text": "héllo"}], "isError": False}
    failed = await client.call(2, "tools/call", {"name": "fail"})
    assert failed["result"] == {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    agent = await client.call(3, "tools/call", {"name": "tern_agent_helper", "arguments": {"message": "hi"}})
    assert agent["result"]["structuredContent"] == {"reply": "re: hi", "context_id": "ctx-1"}
    for msg_id, name in [(4, "hidden"), (5, "nope")]:
        unknown = await client.call(msg_id, "tools/call", {"name": name})
        assert unknown["error"]["code"] == jsonrpc.INVALID_PARAMS and name in unknown["error"]["message"]
    bad = await client.call(6, "tools/call", {"name": "echo", "arguments": [1]})
    assert bad["error"]["code"] == jsonrpc.INVALID_PARAMS
    assert served.tools.calls == [("echo", {"text": "héllo"}, "mcp:stdio"), ("fail", {}, "mcp:stdio"),
                                  ("agent_send", {"agent": "helper", "message": "hi"}, "mcp:stdio")]


async def test_notifications_cancelled_stops_the_call_and_it_gets_no_answer(served, autojump_clock):
    """The call's run is cancelled, the tool stops, no reply ever comes for it, and the
    server goes on answering."""
    client = served.client
    await handshake(client)
    await client.send(tool_call(7, "block"))
    await served.tools.blocking.wait()
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}})
    assert (await client.call(8, "ping")) == {"jsonrpc": "2.0", "id": 8, "result": {}}
    assert await client.nothing_within(60)
    assert served.tools.runs[-1].cancelled and served.tools.ended == {"block": "stopped by its run"}
    assert (await client.call(9, "tools/call", {"name": "echo", "arguments": {"text": "on"}}))["result"]["content"][0][
        "text"] == "on"


async def test_a_call_in_flight_does_not_hold_up_other_requests(served, autojump_clock):
    """tools/call runs beside the reader: a ping sent after a 5 s call is answered at
    once, and the call's answer comes when it is done, 5 s later to the (virtual) tick."""
    client = served.client
    await handshake(client)
    start = trio.current_time()
    await client.send(tool_call(1, "sleep", {"secs": 5}), request(2, "ping"))
    assert (await client.receive())["id"] == 2
    assert trio.current_time() == start
    assert (await client.receive())["result"]["content"][0]["text"] == "slept"
    assert trio.current_time() - start == pytest.approx(5)


async def test_progress_notifications_come_before_the_answer(served, autojump_clock):
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "chatty", _meta={"progressToken": "tok"}))
    messages = [await client.receive() for _ in range(5)]
    progress = [m["params"] for m in messages[:-1]]
    assert all(m["method"] == "notifications/progress" for m in messages[:-1])
    assert [p["progress"] for p in progress] == [1, 2, 3, 4] and {p["progressToken"] for p in progress} == {"tok"}
    assert [p["message"] for p in progress] == ["started", "step 0", "step 1", "step 2"]
    assert messages[-1]["id"] == 1 and messages[-1]["result"]["content"][0]["text"] == "chatted"


@pytest.mark.parametrize("junk,code,msg_id", [
    (b"{not json\n", jsonrpc.PARSE_ERROR, None),
    (b"[1, 2\n", jsonrpc.PARSE_ERROR, None),
    (b'"a string"\n', jsonrpc.INVALID_REQUEST, None),
    (b'{"jsonrpc": "2.0", "id": 3}\n', jsonrpc.INVALID_REQUEST, 3),  # the id is kept when it can be read
])
async def test_garbage_gets_an_error_and_the_server_goes_on(served, junk, code, msg_id, autojump_clock):
    client = served.client
    await client.send(junk)
    reply = await client.receive()
    assert (reply["id"], reply["error"]["code"]) == (msg_id, code)
    assert (await client.call(1, "ping"))["result"] == {}


async def test_content_length_framing_is_answered_in_kind(served, autojump_clock):
    """LSP-style framing, when the client's first bytes are a header."""
    body = json.dumps(request(1, "ping")).encode()
    await served.client.send(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    with trio.fail_after(60):
        data = b""
        while not data.endswith(b"}"):
            data += await served.client.stream.receive_some(65536)
    head, _, answer = data.partition(b"\r\n\r\n")
    assert head == b"Content-Length: %d" % len(answer) and json.loads(answer)["result"] == {}


async def test_eof_ends_the_server_at_once_when_nothing_runs(served, autojump_clock):
    await handshake(served.client)
    start = trio.current_time()
    await served.client.stream.send_eof()
    await served.done.wait()
    assert trio.current_time() == start


async def test_eof_gives_calls_in_flight_the_grace_then_cancels_them(served, autojump_clock):
    """``printf ... | tern mcp``: a call shorter than the grace is still answered; one
    that outlives it is cancelled, and the server ends EOF_GRACE_SECS after EOF."""
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "sleep", {"secs": EOF_GRACE_SECS / 2}), tool_call(2, "block"))
    await served.tools.blocking.wait()
    start = trio.current_time()
    await client.stream.send_eof()
    assert (await client.receive())["result"]["content"][0]["text"] == "slept"
    await served.done.wait()
    assert trio.current_time() - start == pytest.approx(EOF_GRACE_SECS)
    assert served.tools.ended == {"sleep": "finished", "block": "cancelled by trio"}
    assert await client.nothing_within(60)  # no answer for the cancelled call


async def test_list_changed_follows_a_change_of_the_exposed_tools(served, autojump_clock):
    client = served.client
    await handshake(client)
    served.events.publish("mcp.tools")  # nothing exposed changed: no notification
    assert await client.nothing_within(1)
    served.tools.list.append(Tool("echo2", "", OBJECT))  # not allowlisted: still nothing
    served.events.publish("mcp.tools")
    assert await client.nothing_within(1)
    served.tools.list.remove(served.tools.get("fail"))
    served.events.publish("mcp.tools")
    assert (await client.receive()) == {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
