"""The supervisor and the kernel's tool registry, against misbehaving stdio servers."""

from __future__ import annotations

import sys

import pytest
import trio

from runtime.config import McpServerEntry, StdioTransport
from runtime.errors import ConnectionLost
from runtime.kernel.builtins import register_builtins
from runtime.kernel.registry import ToolRegistry
from runtime.errors import UnknownTool
from runtime.mcp.client.supervisor import McpSupervisor
from tests.mcp.conftest import FAKE


def fake(name, *flags, **options):
    return McpServerEntry(name=name, transport=StdioTransport(command=sys.executable, args=[FAKE, *flags]),
                          timeout_secs=options.pop("timeout_secs", 10.0), **options)


async def start(nursery, *entries, **options):
    supervisor = McpSupervisor(list(entries), backoff_base=options.pop("backoff_base", 0.05), **options)
    await nursery.start(supervisor.run)
    return supervisor


async def wait_state(supervisor, name, *states, timeout=10):
    with trio.fail_after(timeout):
        while supervisor.status(name).state not in states:
            await trio.sleep(0.01)
    return supervisor.status(name)


async def test_boot_does_not_wait_and_servers_connect_concurrently(nursery):
    entries = [fake(f"s{i}", "--init-delay", "0.5") for i in range(5)]
    # Real processes, so real time, with bounds a loaded machine meets: what proves each
    # point is the bound's meaning, not its tightness.
    before = trio.current_time()
    supervisor = await start(nursery, *entries)
    assert trio.current_time() - before < 0.5  # boot returned before any 0.5 s handshake could end
    assert {s.state for s in supervisor.statuses()} == {"connecting"}
    await supervisor.wait_settled()
    assert {s.state for s in supervisor.statuses()} == {"ready"}
    assert trio.current_time() - before < 5 * 0.5  # concurrent: one after another needs 2.5 s at least
    status = supervisor.status("s0")
    assert (status.tool_count, status.era, status.server_name) == (9, "handshake", "fake")


async def test_crash_mid_call_fails_the_call_at_once_and_restarts(nursery):
    supervisor = await start(nursery, fake("flaky", timeout_secs=30))
    await supervisor.wait_settled()
    with trio.fail_after(5):  # not the 30 s timeout
        with pytest.raises(ConnectionLost, match="exited with code 9"):
            await supervisor.call("mcp_flaky_crash")
    with trio.fail_after(5):
        while supervisor.status("flaky").restarts == 0 or supervisor.status("flaky").state != "ready":
            await trio.sleep(0.01)
    assert supervisor.status("flaky").restarts == 1 and supervisor.status("flaky").last_error == ""
    assert (await supervisor.call("mcp_flaky_echo", {"message": "back"})).text() == "back"


async def test_calls_to_a_server_that_is_not_ready_fail_with_its_state(nursery):
    supervisor = await start(nursery, fake("slow", "--init-delay", "1"))
    assert supervisor.tool("mcp_slow_echo") is None  # no tools until ready
    await supervisor.wait_settled()
    with pytest.raises(ConnectionLost):
        await supervisor.call("mcp_slow_crash")
    await wait_state(supervisor, "slow", "restarting", "connecting")
    with pytest.raises(ConnectionLost, match=r"MCP server 'slow' is restarting \(.*exited with code 9"):
        await supervisor.call("mcp_slow_echo", {"message": "x"})
    registry = ToolRegistry([supervisor.source()])
    with pytest.raises(ConnectionLost, match="is restarting"):
        await registry.call("mcp_slow_echo", {"message": "x"})
    with pytest.raises(UnknownTool):
        await registry.call("mcp_other_echo")


async def test_gives_up_after_max_restarts(nursery):
    supervisor = await start(nursery, fake("dead", "--exit-now", max_restarts=2))
    status = await wait_state(supervisor, "dead", "failed")
    assert status.restarts == 2
    assert "exited with code 3" in status.last_error or "closed" in status.last_error


async def test_restart_never(nursery):
    supervisor = await start(nursery, fake("once", restart="never"))
    await supervisor.wait_settled()
    with pytest.raises(ConnectionLost):
        await supervisor.call("mcp_once_crash")
    status = await wait_state(supervisor, "once", "failed")
    assert status.restarts == 0


async def test_missing_command_fails_clearly(nursery):
    entry = McpServerEntry(name="nope", transport=StdioTransport(command="/nonexistent/server"), max_restarts=0)
    supervisor = await start(nursery, entry)
    status = await wait_state(supervisor, "nope", "failed")
    assert "cannot start MCP server 'nope' (/nonexistent/server)" in status.last_error


async def test_disabled_server_is_not_started(nursery):
    supervisor = await start(nursery, fake("off", enabled=False))
    await supervisor.wait_settled(1)
    assert supervisor.status("off").state == "disabled" and supervisor.tools() == []


async def test_include_exclude_globs(nursery):
    supervisor = await start(nursery, fake("a", tools_include=["e*", "mcp_a_sleep"], tools_exclude=["env"]))
    await supervisor.wait_settled()
    assert sorted(t.name for t in supervisor.tools()) == ["mcp_a_echo", "mcp_a_sleep"]


async def test_collisions_across_servers_are_reported_not_shadowed(nursery):
    supervisor = await start(nursery, fake("a_b", "--extra-tool", "c"), fake("a", "--extra-tool", "b_c"))
    await supervisor.wait_settled()
    [group] = supervisor.collisions
    assert {(n.server, n.tool) for n in group} == {("a_b", "c"), ("a", "b_c")}
    names = {n.name for n in group}
    assert len(names) == 2 and "mcp_a_b_c" not in names
    results = {(await supervisor.call(name)).text() for name in names}
    assert results == {"c: {}", "b_c: {}"}


async def test_list_changed_refreshes_tools(nursery):
    supervisor = await start(nursery, fake("g"))
    await supervisor.wait_settled()
    assert supervisor.tool("mcp_g_grown") is None
    await supervisor.call("mcp_g_grow")
    with trio.fail_after(5):
        while supervisor.tool("mcp_g_grown") is None:
            await trio.sleep(0.02)
    assert supervisor.status("g").tool_count == 10


async def test_registry_merges_builtins_and_mcp_and_routes(nursery):
    supervisor = await start(nursery, fake("srv"))
    registry = ToolRegistry([supervisor.source()])
    register_builtins(registry)
    await supervisor.wait_settled()
    tools = {t.name: t for t in registry.tools()}
    assert tools["time_now"].source == "builtin"
    weird = tools["mcp_srv_weird_name_v2"]
    assert (weird.source, weird.server, weird.original_name) == ("mcp", "srv", "Weird-Name.v2")
    assert tools["mcp_srv_echo"].description == "[MCP:srv] Echo the message"
    assert (await registry.call("mcp_srv_echo", {"message": "routed"})).text == "routed"
    assert "T" in (await registry.call("time_now")).text
    failed = await registry.call("mcp_srv_fail")
    assert failed.is_error and failed.text == "it broke"
    with pytest.raises(UnknownTool, match="did you mean 'mcp_srv_echo'"):
        await registry.call("mcp_srv_ecko")
