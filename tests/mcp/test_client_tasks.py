"""tern's MCP client calling tools that run as tasks on the server.

Real peers: tern's own MCP server (the 2026-07-28 tasks extension over the A2A engine,
in process, over real HTTP) and server-everything (2025-11-25's experimental tasks,
over stdio). The official Python SDK 2.3.0 speaks neither, so it is not one of them.
Hostile servers are a scripted HTTP server on loopback (virtual time): a task id that
is no id, a task that never ends, a status that goes back, a huge result, poll
intervals of 0 and 10^9 ms, a task lost by the server, a tool that must be a task on
a server without tasks.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio

from runtime.config import HttpTransport, McpServerEntry, load_config
from runtime.errors import ProtocolError, RpcError, TernTimeout
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.mcp.client import tasks
from runtime.mcp.client.client import McpClient
from runtime.mcp.client.streamable_http import StreamableHttpTransport
from runtime.mcp.client.supervisor import McpSupervisor, McpToolSource
from runtime.mcp.protocol import MODERN_VERSION, ServerInfo
from runtime.net.guard import AddressPolicy
from tests import peers
from tests.mcp.conftest import stdio_entry
from tests.mcp.server_harness import write_config
from tests.mcp.test_http_hostile import body, rpc, serve

EXT = tasks.EXTENSION


# --- The sans-IO core ---------------------------------------------------------------------

def info(era: str = "modern", **capabilities: Any) -> ServerInfo:
    return ServerInfo(version=MODERN_VERSION if era == "modern" else "2025-11-25", era=era,  # type: ignore[arg-type]
                      capabilities=capabilities)


def test_the_dialect_is_what_the_server_offers():
    assert tasks.dialect(info(extensions={EXT: {}})) == "extension"
    assert tasks.dialect(info(extensions={EXT: True})) is None
    assert tasks.dialect(info(tasks={"requests": {"tools": {"call": {}}}})) is None  # 2025-11-25's slot, modern era
    assert tasks.dialect(info("handshake", tasks={"requests": {"tools": {"call": {}}}})) == "experimental"
    assert tasks.dialect(info("handshake", tasks={"list": {}})) is None
    assert tasks.declare({"roots": {}}, info(extensions={EXT: {}, "other/x": {}})) == \
        {"roots": {}, "extensions": {EXT: {}}}
    assert tasks.declare({"roots": {}}, info()) == {"roots": {}}


def test_task_params_and_a_server_that_lies_about_support():
    assert tasks.support({"taskSupport": "required"}) == "required"
    assert tasks.support({"taskSupport": "maybe"}) == tasks.support(None) == "forbidden"
    assert tasks.task_params("s", "t", "optional", "experimental", 2.5) == {"task": {"ttl": 2500}}
    assert tasks.task_params("s", "t", "forbidden", "experimental", 2.5) == {}
    assert tasks.task_params("s", "t", "required", "extension", 2.5) == {}  # the server decides
    with pytest.raises(ProtocolError, match="runs only as a task, but it does not offer tasks"):
        tasks.task_params("s", "t", "required", None, 2.5)


@pytest.mark.parametrize("task_id", [None, "", 7, "x" * 257, "a\nb", "tab\there", ["t"]])
def test_a_task_id_that_is_no_id_is_refused(task_id):
    with pytest.raises(ProtocolError, match="without a usable taskId"):
        tasks.Task("s", "extension", {"taskId": task_id, "status": "working"})


def test_polling_follows_the_server_within_bounds_and_backs_off():
    task = tasks.Task("s", "extension", {"taskId": "t", "status": "working", "pollIntervalMs": 0})
    assert task.next_poll() == tasks.MIN_POLL_SECS
    task.update({"taskId": "t", "status": "working"})  # nothing new: back off
    assert task.next_poll() == tasks.MIN_POLL_SECS * tasks.BACKOFF
    for _ in range(40):
        task.update({"taskId": "t", "status": "working"})
    assert task.next_poll() == tasks.BACKOFF_LIMIT_SECS
    task.update({"taskId": "t", "status": "working", "pollIntervalMs": 10**9})
    assert task.next_poll() == tasks.MAX_POLL_SECS
    task.update({"taskId": "t", "status": "working", "pollIntervalMs": float("nan")})  # ignored
    assert task.interval == tasks.MAX_POLL_SECS
    legacy = tasks.Task("s", "experimental", {"taskId": "t", "status": "working", "pollInterval": 2000,
                                              "pollIntervalMs": 1})
    assert legacy.next_poll() == 2.0


@pytest.mark.parametrize("answer, text", [
    ({"taskId": "t", "status": "done"}, "not one of working"),
    ({"taskId": "other", "status": "working"}, "about another task"),
    ([], "not an object"),
    ({"taskId": "t", "status": "input_required", "inputRequests": {"k": {"method": "tools/call"}}}, "tools/call"),
])
def test_a_bad_tasks_get_answer_is_refused(answer, text):
    task = tasks.Task("s", "extension", {"taskId": "t", "status": "working"})
    with pytest.raises(ProtocolError, match=text):
        task.update(answer)


def test_questions_are_answered_once_and_bounded():
    ask = {"method": "elicitation/create", "params": {"message": "ok?"}}
    task = tasks.Task("s", "extension", {"taskId": "t", "status": "input_required", "inputRequests": {"a": ask}})
    assert list(task.questions) == ["a"]
    task.asked(["a"])
    task.update({"taskId": "t", "status": "input_required", "inputRequests": {"a": ask, "b": ask}})
    assert list(task.questions) == ["b"]  # "a" was answered: not asked again
    task.asked([f"q{i}" for i in range(tasks.MAX_QUESTIONS - 1)])
    with pytest.raises(ProtocolError, match=f"more than {tasks.MAX_QUESTIONS} questions"):
        task.update({"taskId": "t", "status": "input_required", "inputRequests": {"z": ask}})


def test_a_task_that_failed_or_was_cancelled_is_a_tool_error():
    failed = tasks.Task("s", "extension", {"taskId": "t", "status": "failed",
                                           "error": {"code": -32603, "message": "disk on fire"}})
    assert failed.result() == {"content": [{"type": "text", "text": "the task t on MCP server 's' failed: disk on fire "
                                                                    "(code -32603)"}], "isError": True}
    cancelled = tasks.Task("s", "experimental", {"taskId": "t", "status": "cancelled", "statusMessage": "by admin"})
    assert cancelled.result()["content"][0]["text"] == "the task t on MCP server 's' was cancelled upstream: by admin"
    with pytest.raises(ProtocolError, match="without its result"):
        tasks.Task("s", "extension", {"taskId": "t", "status": "completed"}).result()
    assert tasks.Task("s", "experimental", {"taskId": "t", "status": "completed"}).result() is None  # tasks/result


# --- tern's own MCP server as the upstream (the extension, over the A2A engine) ----------

UPSTREAM = """
[a2a]
enabled = true

[[agents]]
name = "writer"
kind = "tool"
tool = "file_write"
"""


class Upstream:
    def __init__(self, node: Node, base: str) -> None:
        self.node, self.base = node, base

    def entry(self, timeout_secs: float = 10.0) -> McpServerEntry:
        return McpServerEntry(name="up", transport=HttpTransport(url=self.base + "/mcp"), timeout_secs=timeout_secs)

    async def a2a_state(self, task_id: str) -> str:
        async with httpx.AsyncClient(timeout=10) as client:
            response = await client.post(self.base + "/a2a", headers={"A2A-Version": "1.0"}, json={
                "jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}})
        return response.json()["result"]["status"]["state"]


@pytest.fixture
async def upstream(nursery, tmp_path):
    config = load_config(str(write_config(tmp_path, UPSTREAM))).config
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return Upstream(node, f"http://127.0.0.1:{bound[0][1]}")


async def connect(entry: McpServerEntry, nursery, **kwargs: Any) -> McpClient:
    client = await McpClient.connect(entry, nursery, policy=AddressPolicy(), **kwargs)
    await client.list_tools()
    return client


async def test_a_long_agent_call_is_a_task_polled_to_its_result(upstream, nursery):
    client = await connect(upstream.entry(), nursery)
    assert client.info.capabilities["extensions"] == {EXT: {}}
    assert client.session.connection.capabilities["extensions"] == {EXT: {}}  # declared back
    seen: list[dict] = []
    with trio.fail_after(20):
        result = await client.call_tool("tern_agent_counter", {"message": "go"}, timeout_secs=15,
                                        on_task=seen.append)
    assert not result.is_error and result.text().split() == ["step", "1", "step", "2", "step", "3", "step", "4"]
    assert seen[0]["status"] == "working" and seen[-1]["status"] == "completed"
    assert len({s["task"] for s in seen}) == 1
    assert await upstream.a2a_state(seen[0]["task"]) == "TASK_STATE_COMPLETED"  # the same task, seen over A2A
    plain = await client.call_tool("time_now", {})  # a tool that is no task stays a call
    assert not plain.is_error


async def test_a_call_past_its_timeout_cancels_the_task_upstream(upstream, nursery):
    client = await connect(upstream.entry(), nursery)
    seen: list[dict] = []
    with trio.fail_after(20), pytest.raises(TernTimeout, match=r"did not finish task \S+ \(tern_agent_slow_poke\)"):
        await client.call_tool("tern_agent_slow_poke", {"message": "go"}, timeout_secs=1.5, on_task=seen.append)
    assert seen[-1] == {"task": seen[0]["task"], "status": "cancelled", "by": "tern"}
    assert await upstream.a2a_state(seen[0]["task"]) == "TASK_STATE_CANCELED"


async def test_a_cancelled_caller_cancels_the_task_upstream(upstream, nursery):
    client = await connect(upstream.entry(), nursery)
    seen: list[dict] = []
    with trio.move_on_after(1.0) as scope:  # Ctrl-C in chat, an A2A cancel: the turn's scope is cancelled
        await client.call_tool("tern_agent_slow_poke", {"message": "go"}, timeout_secs=60, on_task=seen.append)
    assert scope.cancelled_caught and seen[-1]["by"] == "tern"
    assert await upstream.a2a_state(seen[0]["task"]) == "TASK_STATE_CANCELED"


async def test_an_approval_inside_the_task_is_answered_through_on_input(upstream, nursery, tmp_path):
    asked: list[tuple[str, dict]] = []

    async def person(method: str, params: dict) -> dict:
        asked.append((method, params))
        return {"action": "accept", "content": {"decision": "approve"}}

    client = await connect(upstream.entry(), nursery, on_input=person)
    seen: list[dict] = []
    with trio.fail_after(20):
        message = json.dumps({"path": "t.txt", "content": "hi"})
        result = await client.call_tool("tern_agent_writer", {"message": message}, timeout_secs=15, on_task=seen.append)
    assert not result.is_error, result.text()
    assert [m for m, _ in asked] == ["elicitation/create"] and "file_write" in json.dumps(asked[0][1])
    assert "input_required" in [s["status"] for s in seen] and seen[-1]["status"] == "completed"
    approvals = await upstream.node.kernel.approvals.list(None)
    assert [a.state for a in approvals] == ["approved"]


async def test_the_supervisor_shows_the_task_and_the_result_names_it(upstream, nursery):
    events: list[tuple[str, dict]] = []
    supervisor = McpSupervisor([upstream.entry()], on_event=lambda kind, data: events.append((kind, data)),
                               policy=AddressPolicy())
    await nursery.start(supervisor.run)
    await supervisor.wait_settled(20)
    with trio.fail_after(20):
        result = await McpToolSource(supervisor).call("mcp_up_tern_agent_counter", {"message": "go"}, timeout_secs=15)
    assert not result.is_error and result.task
    moves = [data for kind, data in events if kind == "mcp.task"]
    assert moves[0] == {"server": "up", "tool": "mcp_up_tern_agent_counter", "task": result.task, "status": "working"}
    assert moves[-1]["status"] == "completed"


async def downstream(upstream: Upstream, tmp_path, nursery):
    """A second tern whose kernel has the upstream as an MCP server."""
    from runtime.config import ApprovalRule, Config, GovernanceConfig, StateConfig
    from runtime.kernel.kernel import Kernel

    state = tmp_path / "down"
    allowed = GovernanceConfig(rules=[ApprovalRule(tool="mcp_up_*", decision="allow")])  # agents are destructive
    kernel = Kernel(Config(mcp_servers=[upstream.entry()], state=StateConfig(dir=str(state)), governance=allowed))
    await nursery.start(kernel.run)
    await kernel.mcp.wait_settled(20)
    return kernel, state / "audit.jsonl"


async def test_through_the_pipeline_the_task_is_an_event_and_in_the_audit_record(upstream, nursery, tmp_path):
    kernel, audit = await downstream(upstream, tmp_path, nursery)
    with kernel.events.subscribe(kinds=["mcp.task", "tool.call"]) as events:
        with trio.fail_after(20):
            result = await kernel.call_tool("mcp_up_tern_agent_counter", {"message": "go"}, timeout_secs=15)
        assert not result.is_error and result.task
        *seen, event = drained(events)
    assert seen[0]["status"] == "working" and seen[-1]["status"] == "completed"
    assert {e["task"] for e in seen} == {result.task} and event["type"] == "tool.call" and event["task"] == result.task
    record = json.loads(audit.read_text().splitlines()[-1])
    assert record["tool"] == "mcp_up_tern_agent_counter" and record["task"] == result.task


def drained(events) -> list[dict]:
    moves = []
    while True:
        try:
            moves.append(events.receive.receive_nowait())
        except trio.WouldBlock:
            return moves


async def test_a_cancelled_agent_turn_cancels_the_task_upstream(upstream, nursery, tmp_path):
    kernel, _ = await downstream(upstream, tmp_path, nursery)
    run = kernel.pipeline.run()
    outcome: list = []
    with kernel.events.subscribe(kinds=["mcp.task"]) as events, trio.fail_after(20):
        async with trio.open_nursery() as inner:
            async def call() -> None:
                outcome.append(await kernel.call_tool("mcp_up_tern_agent_slow_poke", {"message": "go"}, run=run,
                                                      timeout_secs=60))
            inner.start_soon(call)
            first = await events.next()  # the task runs upstream: now the person presses Ctrl-C
            run.cancel()
        moves = [first, *drained(events)]
    assert moves[-1] == {**moves[-1], "task": first["task"], "status": "cancelled", "by": "tern"}
    assert outcome[0].is_error and "cancelled by its caller" in outcome[0].text
    assert await upstream.a2a_state(first["task"]) == "TASK_STATE_CANCELED"


async def test_the_pipeline_timeout_cancels_the_task_upstream(upstream, nursery, tmp_path):
    kernel, _ = await downstream(upstream, tmp_path, nursery)
    with kernel.events.subscribe(kinds=["mcp.task"]) as events:
        with trio.fail_after(20):
            result = await kernel.call_tool("mcp_up_tern_agent_slow_poke", {"message": "go"}, timeout_secs=1.5)
        moves = drained(events)
    assert result.is_error and "did not finish within 1.5 s" in result.text
    assert moves[-1]["by"] == "tern" and await upstream.a2a_state(moves[0]["task"]) == "TASK_STATE_CANCELED"


# --- server-everything: 2025-11-25's experimental tasks ---------------------------------

@pytest.fixture
def npm():
    return peers.require(peers.npm_servers)


@pytest.fixture
def node():
    return peers.require(peers.node)


async def test_server_everything_research_as_an_experimental_task(npm, node, nursery):
    asked: list[dict] = []

    async def person(method: str, params: dict) -> dict:
        asked.append(params)
        return {"action": "accept", "content": {"interpretation": "technical"}}

    entry = stdio_entry(node, npm["server-everything"], "stdio", name="everything")
    client = await McpClient.connect(entry, nursery, on_input=person)
    with trio.fail_after(20):
        while "simulate-research-query" not in {t.name for t in await client.list_tools()}:  # listed once initialized
            await trio.sleep(0.1)
    assert tasks.dialect(client.info) == "experimental"
    seen: list[dict] = []
    with trio.fail_after(30):
        result = await client.call_tool("simulate-research-query", {"topic": "tern", "ambiguous": True},
                                        timeout_secs=25, on_task=seen.append)
    assert not result.is_error and "Research Report: tern (technical)" in result.text()
    assert asked and "multiple interpretations" in asked[0]["message"]
    assert seen[0]["status"] == "working" and seen[-1]["status"] in ("input_required", "working")
    with trio.fail_after(10):  # cancelled mid-way: tasks/cancel reaches it
        with trio.move_on_after(1.5):
            await client.call_tool("simulate-research-query", {"topic": "again"}, timeout_secs=25,
                                   on_task=seen.append)
    assert seen[-1]["by"] == "tern"
    await client.aclose()


# --- Hostile servers (scripted HTTP on loopback, virtual time) ---------------------------

DISCOVER = {"supportedVersions": [MODERN_VERSION], "capabilities": {"tools": {}, "extensions": {EXT: {}}},
            "serverInfo": {"name": "hostile", "version": "0"}}
TOOLS = {"tools": [{"name": "job", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}]}


def created(task_id: Any = "t1", **extra: Any) -> dict:
    return {"resultType": "task", "taskId": task_id, "status": "working", "createdAt": "2026-01-01T00:00:00Z",
            "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttlMs": None, "pollIntervalMs": 500, **extra}


class Hostile:
    """A modern server whose ``job`` tool is a task; ``gets(n)`` scripts the n-th tasks/get."""

    def __init__(self, gets: Any, *, create: dict | None = None, discover: dict = DISCOVER,
                 tools: dict = TOOLS) -> None:
        self.gets, self.create, self.discover, self.tools = gets, create or created(), discover, tools
        self.log: list[tuple[float, str, dict]] = []  # (virtual time, method, params)

    def methods(self, name: str) -> list[float]:
        return [at for at, method, _ in self.log if method == name]

    async def __call__(self, method: str, headers: dict, message: Any):
        if method != "POST":
            return 405, {}, body()
        if "id" not in message:
            return 202, {}, body()
        name, params = message["method"], message.get("params") or {}
        self.log.append((trio.current_time(), name, params))
        json_ = {"Content-Type": "application/json"}
        if name == "server/discover":
            return 200, json_, body(rpc(message, self.discover))
        if name == "tools/list":
            return 200, json_, body(rpc(message, self.tools))
        if name == "tools/call":
            return 200, json_, body(rpc(message, self.create))
        if name == "tasks/cancel":
            return 200, json_, body(rpc(message, {"resultType": "complete"}))
        if name == "tasks/get":
            answer = self.gets(len(self.methods("tasks/get")))
            if isinstance(answer, bytes):
                return 200, json_, body(answer)
            if "code" in answer:
                return 200, json_, body(json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": answer}).encode())
            return 200, json_, body(rpc(message, {"resultType": "complete", "taskId": "t1", **answer}))
        return 200, json_, body(json.dumps({"jsonrpc": "2.0", "id": message["id"],
                                            "error": {"code": -32601, "message": "no"}}).encode())


async def hostile_client(server: Hostile, nursery, *, max_message_bytes: int | None = None) -> McpClient:
    url = await serve(server, nursery)
    entry = McpServerEntry(name="h", transport=HttpTransport(url=url), timeout_secs=5)
    transport = StreamableHttpTransport("h", entry.transport, policy=AddressPolicy(),
                                        timeout_secs=5, **({"max_message_bytes": max_message_bytes}
                                                           if max_message_bytes else {}))
    return await connect(entry, nursery, transport=transport)


DONE = {"status": "completed", "result": {"content": [{"type": "text", "text": "done"}]}}


async def test_a_task_that_never_ends_times_out_and_is_cancelled(nursery, loopback_clock):
    server = Hostile(lambda n: {"status": "working", "pollIntervalMs": 1000})
    client = await hostile_client(server, nursery)
    started = trio.current_time()
    with pytest.raises(TernTimeout, match=r"did not finish task t1 \(job\)"):
        await client.call_tool("job", timeout_secs=20)
    assert trio.current_time() - started == pytest.approx(20, abs=0.1)
    assert len(server.methods("tasks/cancel")) == 1
    gets = server.methods("tasks/get")
    assert 6 <= len(gets) <= 10  # backed off from 1 s towards 5 s: not 20 polls, and never none


@pytest.mark.parametrize("interval_ms, first_gap", [(0, tasks.MIN_POLL_SECS), (10**9, tasks.MAX_POLL_SECS)])
async def test_poll_intervals_of_zero_and_forever_are_bounded(nursery, loopback_clock, interval_ms, first_gap):
    server = Hostile(lambda n: DONE if n >= 2 else {"status": "working", "pollIntervalMs": interval_ms},
                     create=created(pollIntervalMs=interval_ms))
    client = await hostile_client(server, nursery)
    started = trio.current_time()
    result = await client.call_tool("job", timeout_secs=120)
    assert result.text() == "done"
    gets = server.methods("tasks/get")
    assert gets[0] - started == pytest.approx(first_gap, abs=0.05)
    assert server.methods("tasks/cancel") == []


async def test_a_status_that_goes_back_is_never_asked_for(nursery, loopback_clock):
    server = Hostile(lambda n: DONE if n == 1 else {"status": "working"})
    client = await hostile_client(server, nursery)
    assert (await client.call_tool("job", timeout_secs=60)).text() == "done"
    await trio.sleep(30)
    assert len(server.methods("tasks/get")) == 1 and server.methods("tasks/cancel") == []


@pytest.mark.parametrize("task_id", ["", "x" * 300, "evil\r\nX-Injected: 1", None])
async def test_a_bogus_task_id_is_a_clear_error(nursery, loopback_clock, task_id):
    server = Hostile(lambda n: DONE, create=created(task_id))
    client = await hostile_client(server, nursery)
    with pytest.raises(ProtocolError, match="created a task without a usable taskId"):
        await client.call_tool("job", timeout_secs=60)
    assert server.methods("tasks/get") == []


async def test_a_huge_result_is_refused_and_the_task_cancelled(nursery, loopback_clock):
    huge = {"status": "completed", "result": {"content": [{"type": "text", "text": "x" * 200_000}]}}
    server = Hostile(lambda n: huge)
    client = await hostile_client(server, nursery, max_message_bytes=100_000)
    with pytest.raises(RpcError, match="larger than 100000 bytes"):
        await client.call_tool("job", timeout_secs=60)
    assert len(server.methods("tasks/cancel")) == 1


async def test_a_task_the_server_lost_is_a_clear_error(nursery, loopback_clock):
    server = Hostile(lambda n: {"code": -32602, "message": "unknown task t1"})
    client = await hostile_client(server, nursery)
    with pytest.raises(ProtocolError, match=r"no longer knows task t1 \(job\).*unknown task t1"):
        await client.call_tool("job", timeout_secs=60)
    assert server.methods("tasks/cancel") == []  # nothing left to cancel


async def test_a_failed_task_is_a_tool_error(nursery, loopback_clock):
    server = Hostile(lambda n: {"status": "failed", "error": {"code": -32603, "message": "worker died"}})
    client = await hostile_client(server, nursery)
    result = await client.call_tool("job", timeout_secs=60)
    assert result.is_error and result.text() == "the task t1 on MCP server 'h' failed: worker died (code -32603)"
    assert server.methods("tasks/cancel") == []


async def test_a_tool_that_must_be_a_task_on_a_server_without_tasks(nursery, loopback_clock):
    server = Hostile(lambda n: DONE, discover={**DISCOVER, "capabilities": {"tools": {}}})
    client = await hostile_client(server, nursery)
    with pytest.raises(ProtocolError, match="runs only as a task, but it does not offer tasks"):
        await client.call_tool("job", timeout_secs=60)
    assert server.methods("tools/call") == []
    assert "extensions" not in client.session.connection.capabilities  # not declared to a server without it


async def test_a_task_answer_to_a_client_that_declared_none(nursery, loopback_clock):
    server = Hostile(lambda n: DONE, discover={**DISCOVER, "capabilities": {"tools": {}}},
                     tools={"tools": [{"name": "job", "inputSchema": {"type": "object"}}]})
    client = await hostile_client(server, nursery)
    with pytest.raises(ProtocolError, match="answered job with a task, but it offers no tasks"):
        await client.call_tool("job", timeout_secs=60)


async def test_status_notifications_poll_sooner_but_a_flood_is_not_a_flood_of_polls(nursery, loopback_clock):
    """The server asks for a poll every 10 s but says on its listen stream, 100 times a
    second, that the task moved: tern polls at once, and never more often than
    MIN_POLL_SECS."""
    server = Hostile(lambda n: DONE if n >= 4 else {"status": "working", "pollIntervalMs": 10_000},
                     create=created(pollIntervalMs=10_000),
                     discover={**DISCOVER, "capabilities": {"tools": {"listChanged": True}, "extensions": {EXT: {}}}})

    async def flood():
        for _ in range(5000):
            note = {"jsonrpc": "2.0", "method": "notifications/tasks", "params": {"taskId": "t1", "status": "working"}}
            yield b"data: " + json.dumps(note).encode() + b"\n\n"
            await trio.sleep(0.01)

    async def with_listen(method: str, headers: dict, message: Any):
        if method == "POST" and isinstance(message, dict) and message.get("method") == "subscriptions/listen":
            return 200, {"Content-Type": "text/event-stream"}, flood()
        return await server(method, headers, message)

    url = await serve(with_listen, nursery)
    entry = McpServerEntry(name="h", transport=HttpTransport(url=url), timeout_secs=5)
    client = await connect(entry, nursery)
    nursery.start_soon(client.listen)
    await trio.sleep(0.1)
    started = trio.current_time()
    assert (await client.call_tool("job", timeout_secs=60)).text() == "done"
    gets = [at - started for at in server.methods("tasks/get")]
    assert len(gets) == 4 and gets[-1] < 2  # woken, not 4 x 10 s
    assert all(b - a >= tasks.MIN_POLL_SECS - 1e-9 for a, b in zip(gets, gets[1:]))
