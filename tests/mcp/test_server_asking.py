"""Asking an MCP client's user to approve a tool call, over ``tern mcp``'s stdio server
on memory streams: fake tool ports around the kernel's real ``Approvals`` (in memory),
trio's virtual clock. The server's own requests to the client (``elicitation/create``)
and the routing of the client's answers by id (unknown ids, floods, timeouts); the
2026-07-28 multi-round-trip (``input_required``, the signed ``requestState``); and the
notices for a client that can do neither. The official SDK client against real
processes is tests/mcp/test_server_approvals_sdk.py."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio
import trio.testing

from runtime.config import Config, GovernanceConfig, McpServerExposure
from runtime.kernel.approvals import Approvals
from runtime.mcp.server.asking import NOTICE_SECS, decision_of
from runtime.mcp.server.dispatch import McpServer
from runtime.mcp.server.mrtr import INVALID_STATE
from runtime.mcp.server.outbound import MAX_PENDING
from runtime.mcp.server.stdio import LocalBackend, StdioServer
from runtime.ports import Tool, ToolResult
from tests.mcp.test_server_memory import Client, FakeEvents, request, tool_call

OBJECT = {"type": "object"}
TIMEOUT = 60.0  # [governance] approval_timeout_secs for these tests (virtual seconds)
MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
          "io.modelcontextprotocol/clientInfo": {"name": "modern-client"}}


class GuardedRun:
    """A pipeline Run as the MCP server sees one: callbacks, and cancel()."""

    def __init__(self, progress: Any, log: Any, ask: Any) -> None:
        self.progress, self.log, self.ask = progress, log, ask
        self.cancelled = False
        self.scopes: set[trio.CancelScope] = set()

    def cancel(self) -> None:
        self.cancelled = True
        for scope in self.scopes:
            scope.cancel()


class GuardedTools:
    """A ToolPort whose ``guarded`` tool waits for approval as the pipeline's stage does
    (the real ``Approvals.request`` with the run's ``ask``), and counts how often it
    really ran; ``echo`` needs no approval."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals
        self.list = [Tool("guarded", "", OBJECT), Tool("echo", "", OBJECT)]
        self.ran: list[Any] = []
        self.runs: list[GuardedRun] = []

    def tools(self) -> list[Tool]:
        return list(self.list)

    def get(self, name: str) -> Tool | None:
        return next((tool for tool in self.list if tool.name == name), None)

    async def wait_for(self, name: str) -> Tool | None:
        return self.get(name)

    def run(self, agent: Any = None, *, progress: Any = None, log: Any = None, ask: Any = None,
            sample: Any = None, owner: Any = None) -> GuardedRun:
        self.runs.append(GuardedRun(progress, log, ask))
        return self.runs[-1]

    async def call(self, name: str, arguments: Any = None, *, run: Any = None, timeout_secs: Any = None,
                   caller: str = "") -> ToolResult:
        if name == "echo":
            return ToolResult(arguments.get("text", ""))
        with trio.CancelScope() as scope:
            run.scopes.add(scope)
            approval = await self.approvals.request("", name, arguments, "digest", caller=caller, ask=run.ask)
        if run.cancelled:
            return ToolResult(f"{name} was cancelled by its caller while it waited for approval", is_error=True)
        if approval.state != "approved":
            return ToolResult(f"{name} was not run: approval {approval.id} {approval.state} ({approval.reason})",
                              is_error=True)
        with trio.CancelScope() as scope:  # a slow tool: {"secs": n}
            run.scopes.add(scope)
            await trio.sleep(arguments.get("secs", 0))
        if run.cancelled:
            return ToolResult(f"{name} was cancelled by its caller", is_error=True)
        self.ran.append(arguments)
        return ToolResult(f"ran with {arguments}")


class Served:
    def __init__(self, client: Client, tools: GuardedTools, approvals: Approvals, server: McpServer,
                 backend: LocalBackend) -> None:
        self.client, self.tools, self.approvals, self.server = client, tools, approvals, server
        self.peer = backend.peer  # the one stdio client, as the server sees it

    async def pending(self) -> list:
        return await self.approvals.list("pending")


@pytest.fixture
async def served(nursery) -> Served:
    approvals = Approvals(None, timeout_secs=TIMEOUT, max_pending_per_agent=50)
    tools = GuardedTools(approvals)
    config = Config(mcp_server=McpServerExposure(tools=["guarded", "echo"]),
                    governance=GovernanceConfig(approval_timeout_secs=TIMEOUT))
    server = McpServer(config, tools, FakeEvents(), approvals=approvals)
    await nursery.start(server.run)
    client_end, server_end = trio.testing.memory_stream_pair()
    backend = LocalBackend(server)
    nursery.start_soon(StdioServer(backend, server_end, server_end).serve)
    return Served(Client(client_end), tools, approvals, server, backend)


async def handshake(client: Client, *, elicitation: bool = True, version: str = "2025-11-25") -> None:
    capabilities = {"elicitation": {"form": {}}} if elicitation else {}
    reply = await client.call(0, "initialize", {"protocolVersion": version, "capabilities": capabilities,
                                                "clientInfo": {"name": "test-client", "version": "1"}})
    assert reply["result"]["protocolVersion"] == version
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def answer(msg_id: Any, result: Any) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def approve(scope: str = "once", reason: str = "") -> dict:
    return {"action": "accept", "content": {"decision": "approve", "scope": scope, "reason": reason}}


def text_of(reply: dict) -> str:
    return reply["result"]["content"][0]["text"]


# --- what an answer means ----------------------------------------------------------------

@pytest.mark.parametrize("result,decision", [
    (approve(), (True, "once", "")),
    (approve("always", "fine"), (True, "always", "fine")),
    ({"action": "accept", "content": {"decision": "approve", "scope": "forever"}}, (True, "once", "")),
    ({"action": "accept", "content": {"decision": "deny", "reason": "no"}}, (False, "once", "no")),
    ({"action": "accept", "content": {}}, (False, "once", "the answer named no decision")),
    ({"action": "accept"}, (False, "once", "the answer named no decision")),
    ({"action": "decline"}, (False, "once", "declined")),
    ({"action": "cancel"}, (False, "once", "dismissed")),
    ({"action": "shrug"}, (False, "once", "the client's answer was not understood")),
    ("accept", (False, "once", "the client's answer was not understood")),
])
def test_an_elicitation_answer_decides_yes_only_when_it_clearly_says_so(result, decision):
    assert tuple(decision_of(result)) == decision


# --- handshake era: elicitation/create ----------------------------------------------------

async def test_an_approved_elicitation_runs_the_call(served, autojump_clock):
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "guarded", {"path": "a.txt"}))
    asked = await client.receive()
    assert asked["method"] == "elicitation/create" and isinstance(asked["id"], str)
    pending = await served.pending()
    assert [p.tool for p in pending] == ["guarded"]
    params = asked["params"]
    assert params["mode"] == "form" and pending[0].id in params["message"] and '"path":"a.txt"' in params["message"]
    schema = params["requestedSchema"]
    assert schema["required"] == ["decision"] and schema["properties"]["decision"]["enum"] == ["approve", "deny"]
    assert schema["properties"]["scope"]["enum"] == ["once", "always", "args"]
    await client.send(answer(asked["id"], approve(reason="looks fine")))
    reply = await client.receive()
    assert reply["id"] == 1 and not reply["result"]["isError"] and served.tools.ran == [{"path": "a.txt"}]
    decided = await served.approvals.get(pending[0].id)
    assert (decided.state, decided.channel, decided.decided_by, decided.reason) == (
        "approved", "mcp", "mcp:stdio (test-client)", "looks fine")


async def test_a_2025_06_18_client_gets_a_form_without_the_mode_field(served, autojump_clock):
    client = served.client
    await handshake(client, version="2025-06-18")
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    assert "mode" not in asked["params"] and asked["params"]["requestedSchema"]["type"] == "object"
    await client.send(answer(asked["id"], approve()))
    assert not (await client.receive())["result"]["isError"]


@pytest.mark.parametrize("result,reason", [({"action": "decline"}, "declined"), ({"action": "cancel"}, "dismissed"),
                                           ({"action": "accept", "content": {"decision": "deny"}}, "")])
async def test_a_declined_dismissed_or_denied_elicitation_denies_the_call(served, result, reason, autojump_clock):
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    start = trio.current_time()
    await client.send(answer(asked["id"], result))
    reply = await client.receive()
    assert reply["result"]["isError"] and "denied" in text_of(reply) and served.tools.ran == []
    assert trio.current_time() - start < 1  # at once: a dismissed dialog does not leave the call hanging
    denied = (await served.approvals.list("denied"))[0]
    assert (denied.channel, denied.reason) == ("mcp", reason)


async def test_a_client_that_never_answers_gets_cancelled_and_the_call_expires(served, autojump_clock):
    """The server's request times out with the approval: the client is told to close its
    dialog (notifications/cancelled naming our request), and the call answers with the
    pipeline's error, TIMEOUT (virtual) seconds after it was asked."""
    client = served.client
    await handshake(client)
    start = trio.current_time()
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    cancelled = await client.receive()
    assert cancelled["method"] == "notifications/cancelled" and cancelled["params"]["requestId"] == asked["id"]
    reply = await client.receive()
    assert reply["id"] == 1 and reply["result"]["isError"] and "expired" in text_of(reply)
    assert trio.current_time() - start == pytest.approx(TIMEOUT, abs=0.5)
    await client.send(answer(asked["id"], approve()))  # too late: dropped, nothing runs
    assert (await client.call(2, "ping"))["result"] == {} and served.tools.ran == []
    assert served.server.mrtr.parked == {}


async def test_a_decision_made_elsewhere_withdraws_the_question(served, autojump_clock):
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    await served.approvals.decide((await served.pending())[0].id, True, channel="test")
    cancelled = await client.receive()
    assert cancelled == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": asked["id"], "reason": "the server no longer needs the answer"}}
    assert not (await client.receive())["result"]["isError"]
    await client.send(answer(asked["id"], {"action": "decline"}))  # the dialog's late answer changes nothing
    assert (await client.call(2, "ping"))["result"] == {}
    assert (await served.approvals.list("approved"))[0].channel == "test" and len(served.tools.ran) == 1


async def test_answers_to_nothing_are_dropped_even_a_flood(served, autojump_clock, caplog):
    """Responses with ids the server never used (numbers, unknown strings, a null id),
    ten thousand of them: each is dropped, the log says so a few times, not ten thousand,
    and a question asked meanwhile still gets its own answer."""
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    caplog.set_level(logging.INFO, logger="tern")
    flood = [answer(i, approve()) for i in range(5000)] + [answer(f"tern-{i + 100}", approve()) for i in range(5000)]
    flood.append({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "what?"}})
    await client.send(*flood)
    assert (await client.call(2, "ping"))["result"] == {}
    assert served.peer.requests.unmatched == 10_001 and len(served.peer.requests) == 1
    assert served.tools.ran == [] and await served.pending()
    lines = [r for r in caplog.records if "not waiting for" in r.getMessage() or "answers to nothing" in r.getMessage()]
    assert 1 <= len(lines) <= 10
    await client.send(answer(asked["id"], approve()))
    assert not (await client.receive())["result"]["isError"] and len(served.tools.ran) == 1
    assert len(served.peer.requests) == 0


async def test_a_refused_elicitation_falls_back_to_a_notice(served, autojump_clock):
    """A client that declared elicitation but answers it with an error: its user is told
    which approval waits (a log message, there being no progressToken)."""
    client = served.client
    await handshake(client)
    await client.send(tool_call(1, "guarded"))
    asked = await client.receive()
    await client.send({"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -32601, "message": "not here"}})
    notice = await client.receive()
    approval_id = (await served.pending())[0].id
    assert notice["method"] == "notifications/message" and notice["params"]["level"] == "warning"
    assert notice["params"]["data"] == f"waiting for approval {approval_id}: run tern approve {approval_id}, or deny it"
    await served.approvals.decide(approval_id, True, channel="test")
    assert not (await client.receive())["result"]["isError"]


async def test_at_most_max_pending_questions_wait_per_client(served, autojump_clock):
    """MAX_PENDING elicitations are out; the next call's approval is announced instead."""
    client = served.client
    await handshake(client)
    for i in range(MAX_PENDING + 1):
        await client.send(tool_call(i + 1, "guarded", {"n": i}))
    messages = [await client.receive() for _ in range(MAX_PENDING + 1)]
    asked = [m for m in messages if m.get("method") == "elicitation/create"]
    notices = [m for m in messages if m.get("method") == "notifications/message"]
    assert len(asked) == MAX_PENDING and len(notices) == 1
    for question in asked:
        await client.send(answer(question["id"], approve()))
    replies = [await client.receive() for _ in range(MAX_PENDING)]
    assert all(not r["result"]["isError"] for r in replies) and len(served.tools.ran) == MAX_PENDING


# --- a client without elicitation: notices ---------------------------------------------------

async def test_without_elicitation_progress_names_the_approval_every_ten_seconds(served, autojump_clock):
    client = served.client
    await handshake(client, elicitation=False)
    start = trio.current_time()
    await client.send(tool_call(1, "guarded", _meta={"progressToken": "p1"}))
    first, second, third = [await client.receive() for _ in range(3)]
    approval_id = (await served.pending())[0].id
    assert first["params"]["message"] == "started"
    wanted = f"waiting for approval {approval_id}: run tern approve {approval_id}, or deny it"
    assert second["params"]["message"] == third["params"]["message"] == wanted
    assert third["params"]["progress"] > second["params"]["progress"]
    assert trio.current_time() - start == pytest.approx(NOTICE_SECS, abs=0.2)
    await served.approvals.decide(approval_id, True, channel="test")
    reply = await client.receive()
    assert reply["id"] == 1 and not reply["result"]["isError"]


async def test_without_elicitation_or_progress_a_warning_names_the_approval(served, autojump_clock):
    client = served.client
    await handshake(client, elicitation=False)
    await client.send(tool_call(1, "guarded"))
    notice = await client.receive()
    approval_id = (await served.pending())[0].id
    assert notice["params"] == {"level": "warning", "logger": "tern",
                                "data": f"waiting for approval {approval_id}: run tern approve {approval_id}, "
                                        "or deny it"}
    assert await client.nothing_within(30)  # once, not every ten seconds
    await served.approvals.decide(approval_id, False, reason="not today", by="ops", channel="test")
    reply = await client.receive()
    assert reply["result"]["isError"] and "denied" in text_of(reply)


async def test_a_client_logging_only_errors_gets_no_warning(served, autojump_clock):
    client = served.client
    await handshake(client, elicitation=False)
    assert (await client.call(1, "logging/setLevel", {"level": "error"}))["result"] == {}
    await client.send(tool_call(2, "guarded"))
    assert await client.nothing_within(5)
    await served.approvals.decide((await served.pending())[0].id, True, channel="test")
    assert not (await client.receive())["result"]["isError"]


# --- 2026-07-28: input_required and the signed requestState -----------------------------------

def modern_call(msg_id: Any, name: str, arguments: Any, **params: Any) -> dict:
    return request(msg_id, "tools/call", {"name": name, "arguments": arguments, "_meta": MODERN, **params})


async def first_leg(client: Client, arguments: Any = None) -> dict:
    arguments = {"path": "b.txt"} if arguments is None else arguments
    reply = await client.call(1, "tools/call", {"name": "guarded", "arguments": arguments, "_meta": MODERN})
    result = reply["result"]
    assert result["resultType"] == "input_required" and set(result) >= {"inputRequests", "requestState"}
    return result


async def test_modern_input_required_then_the_retry_decides_and_runs_once(served, autojump_clock):
    client = served.client
    result = await first_leg(client)
    (approval_id, asked), = result["inputRequests"].items()
    assert approval_id == (await served.pending())[0].id and asked["method"] == "elicitation/create"
    assert asked["params"]["mode"] == "form" and approval_id in asked["params"]["message"]
    assert served.tools.ran == []  # parked: waiting for the answer
    retry = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "inputResponses": {approval_id: approve("args")},
                                                "requestState": result["requestState"]})
    assert retry["result"]["resultType"] == "complete" and text_of(retry) == "ran with {'path': 'b.txt'}"
    decided = await served.approvals.get(approval_id)
    assert (decided.state, decided.scope, decided.decided_by) == ("approved", "args", "mcp:stdio (modern-client)")
    replay = await client.call(3, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                 "inputResponses": {approval_id: approve()},
                                                 "requestState": result["requestState"]})
    assert replay["error"]["code"] == -32602 and replay["error"]["message"] == INVALID_STATE
    assert served.tools.ran == [{"path": "b.txt"}] and served.server.mrtr.parked == {}


def tamper(state: str) -> list[str]:
    body, mac = state[3:].split(".")
    flipped = mac[:5] + ("A" if mac[5] != "A" else "B") + mac[6:]
    return [state[:-2], "t1." + body + "." + flipped, "t1." + body[::-1] + "." + mac, "x" * 5000, "", "t1..",
            "t2." + body + "." + mac]


async def test_a_forged_or_misapplied_request_state_decides_nothing(served, autojump_clock):
    """An altered state, one used for other arguments or another tool, or junk: -32602
    with the frozen message, the approval still pending, and the honest retry still works."""
    client = served.client
    result = await first_leg(client)
    (approval_id, _), = result["inputRequests"].items()
    state = result["requestState"]
    attempts = [("guarded", {"path": "b.txt"}, bad) for bad in tamper(state)]
    attempts += [("guarded", {"path": "/etc/passwd"}, state), ("echo", {"path": "b.txt"}, state), ("guarded", {}, 7)]
    for msg_id, (name, arguments, bad) in enumerate(attempts, start=10):
        reply = await client.call(msg_id, "tools/call", {"name": name, "arguments": arguments, "_meta": MODERN,
                                                         "inputResponses": {approval_id: approve("always")},
                                                         "requestState": bad})
        assert reply["error"]["code"] == -32602 and reply["error"]["message"] == INVALID_STATE, (name, bad)
    assert (await served.approvals.get(approval_id)).state == "pending" and served.tools.ran == []
    retry = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "inputResponses": {approval_id: approve()}, "requestState": state})
    assert not retry["result"]["isError"] and len(served.tools.ran) == 1


async def test_a_state_cannot_decide_another_approval(served, autojump_clock):
    """The state names the approvals its call was asked about: answers for any other
    approval id (another call's, still pending) are ignored."""
    client = served.client
    result = await first_leg(client)
    (mine, _), = result["inputRequests"].items()
    other = await first_leg(client, {"path": "other.txt"})
    (theirs, _), = other["inputRequests"].items()
    retry = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "inputResponses": {theirs: approve(), mine: {"action": "decline"}},
                                                "requestState": result["requestState"]})
    assert retry["result"]["isError"] and (await served.approvals.get(theirs)).state == "pending"
    assert (await served.approvals.get(mine)).state == "denied" and served.tools.ran == []


async def test_modern_decline_denies_and_a_retry_without_answers_asks_again(served, autojump_clock):
    client = served.client
    result = await first_leg(client)
    (approval_id, _), = result["inputRequests"].items()
    again = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "requestState": result["requestState"]})
    assert list(again["result"]["inputRequests"]) == [approval_id]
    stale = await client.call(3, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "inputResponses": {approval_id: approve()},
                                                "requestState": result["requestState"]})
    assert stale["error"]["message"] == INVALID_STATE  # superseded by the newer state
    declined = await client.call(4, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                   "inputResponses": {approval_id: {"action": "decline"}},
                                                   "requestState": again["result"]["requestState"]})
    assert declined["result"]["isError"] and "denied" in text_of(declined) and served.tools.ran == []


async def test_modern_decided_elsewhere_before_the_retry(served, autojump_clock):
    """Approved with `tern approve` while the client's user still looked at the form:
    the call ran in its parked task, and the retry collects that one result."""
    client = served.client
    result = await first_leg(client)
    (approval_id, _), = result["inputRequests"].items()
    await served.approvals.decide(approval_id, True, channel="test")
    await trio.sleep(1)
    assert len(served.tools.ran) == 1
    retry = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                                "inputResponses": {approval_id: {"action": "decline"}},
                                                "requestState": result["requestState"]})
    assert not retry["result"]["isError"] and len(served.tools.ran) == 1
    assert (await served.approvals.get(approval_id)).state == "approved"


async def test_modern_client_that_never_comes_back(served, autojump_clock):
    """The parked call waits for its approval until it expires, is kept a minute more
    for a late retry, then dropped: a retry after that is refused."""
    client = served.client
    result = await first_leg(client)
    (approval_id, _), = result["inputRequests"].items()
    await trio.sleep(TIMEOUT + 1)
    assert (await served.approvals.get(approval_id)).state == "expired"
    assert len(served.server.mrtr.parked) == 1
    await trio.sleep(TIMEOUT + 60 + 10)
    assert served.server.mrtr.parked == {}
    late = await client.call(2, "tools/call", {"name": "guarded", "arguments": {"path": "b.txt"}, "_meta": MODERN,
                                               "inputResponses": {approval_id: approve()},
                                               "requestState": result["requestState"]})
    assert late["error"]["message"] == INVALID_STATE and served.tools.ran == []


async def test_modern_cancelled_retry_gives_up_the_call(served, autojump_clock):
    """notifications/cancelled for the leg that waits for a slow tool: the call stops
    and gets no answer, and the parked call is gone."""
    client = served.client
    result = await first_leg(client, {"secs": 100})
    (approval_id, _), = result["inputRequests"].items()
    await client.send(modern_call(2, "guarded", {"secs": 100}, requestState=result["requestState"],
                                  inputResponses={approval_id: approve()}))
    await trio.sleep(1)
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}})
    assert await client.nothing_within(200)
    assert (await served.approvals.get(approval_id)).state == "approved" and served.tools.ran == []
    assert served.server.mrtr.parked == {} and served.tools.runs[-1].cancelled


async def test_modern_calls_that_need_nothing_answer_at_once(served, autojump_clock):
    client = served.client
    reply = await client.call(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}, "_meta": MODERN})
    assert reply["result"]["resultType"] == "complete" and text_of(reply) == "hi"
    assert served.server.mrtr.parked == {}


async def test_modern_protocol_errors_of_a_parked_call_are_still_errors(served, autojump_clock):
    """A tool this server does not expose is -32602 whether or not the call was parked."""
    client = served.client
    reply = await client.call(1, "tools/call", {"name": "hidden", "arguments": {}, "_meta": MODERN})
    assert reply["error"]["code"] == -32602 and "Unknown tool: hidden" in reply["error"]["message"]
    assert served.server.mrtr.parked == {}


async def test_modern_client_without_elicitation_gets_progress_notices(served, autojump_clock):
    client = served.client
    meta = {**MODERN, "io.modelcontextprotocol/clientCapabilities": {}, "progressToken": 5}
    await client.send(request(1, "tools/call", {"name": "guarded", "arguments": {}, "_meta": meta}))
    started, waiting = await client.receive(), await client.receive()
    assert started["params"]["message"] == "started"
    approval_id = (await served.pending())[0].id
    assert waiting["params"]["message"].startswith(f"waiting for approval {approval_id}")
    assert served.server.mrtr.parked == {}  # not parked: nothing to ask it
    await served.approvals.decide(approval_id, True, channel="test")
    reply = await client.receive()
    assert reply["result"]["resultType"] == "complete" and not reply["result"]["isError"]


async def test_modern_progress_reaches_the_leg_that_waits(served, autojump_clock):
    """Each leg has its own progressToken; the waiting notice goes to the leg attached."""
    client = served.client
    meta = {**MODERN, "progressToken": "leg1"}
    await client.send(request(1, "tools/call", {"name": "guarded", "arguments": {}, "_meta": meta}))
    messages = []
    while "id" not in (message := await client.receive()):
        messages.append(message)
    assert message["result"]["resultType"] == "input_required"
    assert {m["params"]["progressToken"] for m in messages} == {"leg1"}


async def test_modern_calls_beyond_max_parked_are_announced_instead(served, autojump_clock, monkeypatch):
    """With MAX_PARKED calls parked, the next one runs in its own request and its
    approval is named in progress, as for a client without elicitation."""
    monkeypatch.setattr("runtime.mcp.server.mrtr.MAX_PARKED", 1)
    client = served.client
    await first_leg(client)
    meta = {**MODERN, "progressToken": "second"}
    await client.send(request(2, "tools/call", {"name": "guarded", "arguments": {"n": 2}, "_meta": meta}))
    started, waiting = await client.receive(), await client.receive()
    assert started["params"]["message"] == "started" and waiting["params"]["message"].startswith("waiting for approval")
    assert len(served.server.mrtr.parked) == 1


async def test_modern_client_with_sampling_but_no_forms_sees_the_approval_named(served, autojump_clock):
    """Parked for the client's model, but it answers no forms: the approval is named
    in the leg's progress and decided elsewhere; no form is put to the client."""
    client = served.client
    meta = {**MODERN, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}, "progressToken": "p1"}
    await client.send(request(1, "tools/call", {"name": "guarded", "arguments": {"path": "c.txt"}, "_meta": meta}))
    started = await client.receive()
    assert started["params"]["message"] == "started"
    named = await client.receive()
    approval_id = (await served.pending())[0].id
    wanted = f"waiting for approval {approval_id}: run tern approve {approval_id}, or deny it"
    assert named["params"]["message"] == wanted
    await served.approvals.decide(approval_id, True, channel="test")
    reply = await client.receive()
    assert reply["id"] == 1 and reply["result"]["resultType"] == "complete"
    assert served.tools.ran == [{"path": "c.txt"}]
