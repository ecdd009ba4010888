"""tern against FastMCP-family peers that its other tests do not use (issue #32), all from
one venv (``peers.fastmcp_python``), installed once:

- pydantic-ai's MCP client with its task support (``pydantic-ai-slim[mcp-tasks]``,
  FastMCP 4 + fastmcp-tasks) calling a tern agent as a 2026-07-28 task over HTTP;
- a FastMCP server (which cannot subscribe) as the upstream whose resources ``tern mcp``
  re-exports: a client subscribes to one, in either era of the upstream, and hears of
  its changes because tern watches it;
- a FastMCP server over Streamable HTTP whose tool asks a question (handshake-era
  elicitation) that a person answers after the server's ``timeout_secs``: the call's
  clock stops while the question waits, so the call survives; a call that ends while its
  question waits takes the question with it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import httpx
import pytest
import trio

from runtime.config import load_config
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from tests import peers
from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import MODERN, TernMcp, request, tern_env, tern_serve, write_config
from tests.test_cli import ROOT

PYDANTIC_AI_CLIENT = str(ROOT / "tests" / "fixtures" / "pydantic_ai_tasks_client.py")
FASTMCP_SERVER = FIXTURES / "fastmcp_conformance_server.py"
FASTMCP_ELICIT = FIXTURES / "fastmcp_elicit_server.py"
WATCHED = "test://watched-resource"  # FastMCP's fixture: it reads differently every time
TASKS = "io.modelcontextprotocol/tasks"


@pytest.fixture(scope="module")
def fastmcp_python():
    return str(peers.require(peers.fastmcp_python))


async def serve_node(nursery, tmp_path, extra: str = "") -> str:
    """tern's HTTP server (``/mcp``) on loopback over an in-process node: its base URL."""
    config = load_config(str(write_config(tmp_path, "\n[a2a]\nenabled = true\n" + extra))).config
    node = Node(config)
    await nursery.start(node.run)
    bound = await nursery.start(HttpServer(config.server, build_router(node), Access("")).serve, "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}"


async def run_peer(argv: list[str], within: float = 120) -> dict:
    with trio.fail_after(within):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False,
                                      stdin=b"", env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def test_pydantic_ai_calls_a_tern_agent_as_a_task(fastmcp_python, nursery, tmp_path):
    """pydantic-ai polls ``tasks/get`` without ``Mcp-Name``: tern answers it (the body's taskId
    names the task) instead of -32020, and the call completes with the agent's reply."""
    base = await serve_node(nursery, tmp_path)
    seen = await run_peer([fastmcp_python, PYDANTIC_AI_CLIENT, base + "/mcp", "tern_agent_echo",
                           json.dumps({"message": "from pydantic-ai"})])
    assert "tern_agent_echo" in seen["tools"], seen
    assert "error" not in seen, seen["error"]
    assert seen["result"]["reply"] == "from pydantic-ai", seen


async def test_tasks_methods_without_mcp_name_but_never_a_wrong_one(nursery, tmp_path):
    """The leniency is only what pydantic-ai needs: tasks/* without Mcp-Name; a mismatch, or
    tools/call without it, is still -32020."""
    base = await serve_node(nursery, tmp_path)
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}}}

    async def post(client, method, params, **headers):
        sent = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": MODERN,
                "Mcp-Method": method, **headers}
        answer = await client.post(base + "/mcp", headers=sent, json=request(1, method, {**params, "_meta": meta}))
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            return [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")][-1]
        return answer.json()

    async with httpx.AsyncClient(timeout=30) as client:
        call = {"name": "tern_agent_echo", "arguments": {"message": "x"}}
        created = (await post(client, "tools/call", call, **{"Mcp-Name": "tern_agent_echo"}))["result"]
        task_id = created["taskId"]
        got = await post(client, "tasks/get", {"taskId": task_id})
        assert got["result"]["taskId"] == task_id, got
        wrong = await post(client, "tasks/get", {"taskId": task_id}, **{"Mcp-Name": "another-task"})
        assert wrong["error"]["code"] == -32020, wrong
        for method in ("tasks/get", "tasks/cancel"):
            unnamed = await post(client, method, {})
            assert unnamed["error"]["code"] == -32020, unnamed
        bare = await post(client, "tools/call", call)
        assert bare["error"]["code"] == -32020, bare


@pytest.mark.parametrize("era", ["auto", "2025-11-25"], ids=["upstream-2026", "upstream-2025"])
async def test_a_fastmcp_resource_can_be_subscribed_and_its_changes_are_heard(fastmcp_python, tmp_path, era):
    """FastMCP offers no resources/subscribe: tern accepts the subscription (it advertises
    ``resources.subscribe``) and watches the resource itself; an unknown URI is still
    -32002. A 2026-07-28 client's ``subscriptions/listen`` is honoured the same way."""
    config = write_config(tmp_path, f'\n[[mcp_servers]]\nname = "fx"\nprotocol = "{era}"\n[mcp_servers.transport]\n'
                                    f'type = "stdio"\ncommand = "{fastmcp_python}"\nargs = ["{FASTMCP_SERVER}"]\n',
                          mcp_server='upstream = ["fx"]')
    mcp = await TernMcp.start(config, tern_env(tmp_path), "--standalone")
    try:
        reply = await mcp.handshake()
        assert reply["result"]["capabilities"]["resources"]["subscribe"] is True
        listed = await mcp.call(1, "resources/list", {})
        assert WATCHED in [r["uri"] for r in listed["result"]["resources"]], listed
        assert (await mcp.call(2, "resources/subscribe", {"uri": WATCHED}))["result"] == {}
        assert (await mcp.call(3, "resources/subscribe", {"uri": "test://nothing-here"}))["error"]["code"] == -32002
        with trio.fail_after(20):
            while (heard := await mcp.receive(20)).get("method") != "notifications/resources/updated":
                pass
        assert heard["params"] == {"uri": WATCHED}
        assert (await mcp.call(4, "resources/unsubscribe", {"uri": WATCHED}))["result"] == {}
        meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
        await mcp.send(request("listen-1", "subscriptions/listen", {"_meta": meta, "notifications": {
            "resourceSubscriptions": [WATCHED, "test://nothing-here"]}}))
        acknowledged = await mcp.receive()
        assert acknowledged["params"]["notifications"] == {"resourceSubscriptions": [WATCHED]}, acknowledged
        with trio.fail_after(20):
            while (heard := await mcp.receive(20)).get("method") != "notifications/resources/updated":
                pass
        assert heard["params"]["uri"] == WATCHED
    finally:
        await mcp.close()


@pytest.fixture
async def fastmcp_elicit_url(fastmcp_python):
    """The FastMCP elicitation server on a free loopback port: its /mcp URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([fastmcp_python, str(FASTMCP_ELICIT), str(port)], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with trio.fail_after(30):
            while True:
                assert process.poll() is None, process.stderr.read().decode()[-2000:]
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    await trio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def test_a_fastmcp_question_answered_after_the_timeout(fastmcp_elicit_url, nursery, tmp_path):
    """timeout_secs = 5, the answer at 7 s: the handshake-era call waits for it (before
    issue #32 it died of the HTTP read timeout, its question left pending)."""
    from runtime.config import Config, GovernanceConfig, HttpTransport, McpServerEntry, StateConfig
    from runtime.kernel.kernel import Kernel

    entry = McpServerEntry(name="fm", transport=HttpTransport(url=fastmcp_elicit_url), timeout_secs=5,
                           protocol="2025-11-25")
    kernel = Kernel(Config(mcp_servers=[entry], state=StateConfig(dir=str(tmp_path / "state")),
                           governance=GovernanceConfig(approval_timeout_secs=60)))
    await nursery.start(kernel.run)
    with trio.fail_after(60):
        await kernel.mcp.wait_settled()
    assert kernel.mcp.status("fm").state == "ready", kernel.mcp.status("fm").last_error

    async def question():
        with trio.fail_after(30):
            while not (pending := await kernel.approvals.list()):
                await trio.sleep(0.05)
        return pending[0]

    async def answer_late() -> None:
        asked = await question()
        await trio.sleep(7 - (trio.current_time() - started))
        await kernel.approvals.decide(asked.id, True, answer={"name": "Ada"}, by="tester")

    started = trio.current_time()
    async with trio.open_nursery() as inner:
        inner.start_soon(answer_late)
        with trio.fail_after(40):
            result = await kernel.call_tool("mcp_fm_greet", {})
    assert trio.current_time() - started >= 7
    assert not result.is_error and result.text == "hello Ada", result

    with trio.move_on_after(2) as waited:  # a call that ends while its question waits ...
        await kernel.call_tool("mcp_fm_greet", {})
    assert waited.cancelled_caught
    with trio.fail_after(10):  # ... takes its question with it: nothing is left to answer in vain
        while await kernel.approvals.list():
            await trio.sleep(0.05)
    await kernel.mcp.aclose()


async def test_a_fastmcp_question_answered_late_through_the_daemon(fastmcp_elicit_url, tmp_path):
    """The same through ``tern serve``: ``tern call`` goes through the daemon, and a person
    answers with ``tern approve ID --set`` at 7 s, past ``timeout_secs = 5``."""
    config = write_config(tmp_path, f'\n[[mcp_servers]]\nname = "fm"\ntimeout_secs = 5\nprotocol = "2025-11-25"\n'
                                    f'[mcp_servers.transport]\ntype = "http"\nurl = "{fastmcp_elicit_url}"\n')
    env = tern_env(tmp_path)
    tern = [sys.executable, "-m", "runtime", "--config", str(config)]
    with tern_serve(tmp_path, config, env, servers_connected=True):
        async def person() -> None:
            with trio.fail_after(30):
                while True:
                    listed = await trio.run_process([*tern, "approvals", "--json"], capture_stdout=True, env=env,
                                                    cwd=ROOT)
                    pending = json.loads(listed.stdout)["approvals"]
                    if pending:
                        break
                    await trio.sleep(0.2)
            await trio.sleep(7 - (trio.current_time() - started))
            await trio.run_process([*tern, "approve", pending[0]["id"], "--set", "name=Grace"], env=env, cwd=ROOT,
                                   capture_stdout=True)

        started = trio.current_time()
        async with trio.open_nursery() as inner:
            inner.start_soon(person)
            with trio.fail_after(60):
                called = await trio.run_process([*tern, "call", "mcp_fm_greet"], capture_stdout=True,
                                                capture_stderr=True, check=False, env=env, cwd=ROOT)
        assert called.returncode == 0, called.stderr.decode()[-2000:]
        assert called.stdout.decode().strip() == "hello Grace"
        assert trio.current_time() - started >= 7
