"""The supervisor and the kernel's tool registry, against misbehaving stdio servers."""

from __future__ import annotations

import os
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


async def test_a_call_waits_for_a_server_still_connecting(nursery):
    """Right after boot the tool is not listed yet; a call waits for the handshake
    instead of failing with "is connecting"."""
    supervisor = await start(nursery, fake("late", "--init-delay", "1"))
    assert supervisor.status("late").state == "connecting" and supervisor.tool("mcp_late_echo") is None
    registry = ToolRegistry([supervisor.source()])
    started = trio.current_time()
    assert (await registry.call("mcp_late_echo", {"message": "waited"})).text == "waited"
    assert trio.current_time() - started >= 0.9  # it did wait for the 1 s handshake
    assert (await registry.wait_for("mcp_late_sleep")).server == "late"


async def test_the_wait_is_bounded_by_the_servers_timeout(nursery):
    supervisor = await start(nursery, fake("stuck", "--init-delay", "30", timeout_secs=1.0))
    started = trio.current_time()
    with pytest.raises(ConnectionLost, match="MCP server 'stuck' is"):
        await supervisor.call("mcp_stuck_echo", {"message": "x"})
    assert trio.current_time() - started < 10  # about its 1 s timeout, not the 30 s init delay


async def test_a_crashed_servers_stderr_is_in_its_last_error(nursery):
    script = ("import sys; print('starting up', file=sys.stderr); "
              "print('fatal: GITHUB_TOKEN is not set', file=sys.stderr); sys.exit(1)")
    entry = McpServerEntry(name="dies", transport=StdioTransport(command=sys.executable, args=["-c", script]),
                           max_restarts=0)
    supervisor = await start(nursery, entry)
    status = await wait_state(supervisor, "dies", "failed")
    assert "exited with code 1" in status.last_error
    assert "stderr: starting up | fatal: GITHUB_TOKEN is not set" in status.last_error


async def test_restart_revives_a_failed_server_with_a_fresh_budget(nursery, tmp_path):
    flag = tmp_path / "broken"
    flag.write_text("")
    script = (f"import os, sys, runpy\nif os.path.exists({str(flag)!r}):\n    print('broken', file=sys.stderr); "
              f"sys.exit(4)\nsys.argv = [{FAKE!r}]\nrunpy.run_path({FAKE!r}, run_name='__main__')\n")
    entry = McpServerEntry(name="phoenix", transport=StdioTransport(command=sys.executable, args=["-c", script]),
                           max_restarts=1)
    supervisor = await start(nursery, entry)
    status = await wait_state(supervisor, "phoenix", "failed")
    assert status.restarts == 1 and "code 4; stderr: broken" in status.last_error
    flag.unlink()  # fixed: now a restart can work
    supervisor.restart("phoenix")
    status = await wait_state(supervisor, "phoenix", "ready")
    assert status.restarts == 1 and status.last_error == "" and status.pid
    assert (await supervisor.call("mcp_phoenix_echo", {"message": "alive"})).text() == "alive"
    pid = status.pid
    supervisor.restart("phoenix")  # a running server: closed and connected again
    status = await wait_state(supervisor, "phoenix", "ready")
    assert status.pid and status.pid != pid
    from runtime.mcp.client.supervisor import UnknownServer

    with pytest.raises(UnknownServer, match="no MCP server named 'nope' \\(servers: phoenix\\)"):
        supervisor.restart("nope")


async def test_reconcile_keeps_unchanged_servers_and_replaces_the_rest(nursery):
    keep, change, drop = fake("keep"), fake("change"), fake("drop")
    supervisor = await start(nursery, keep, change, drop)
    await supervisor.wait_settled()
    pids = {s.name: s.pid for s in supervisor.statuses()}
    assert all(pids.values())
    report = supervisor.reconcile([keep, fake("change", timeout_secs=5.0), fake("new")])
    assert report == {"added": ["new"], "removed": ["drop"], "changed": ["change"], "kept": ["keep"]}
    assert [s.name for s in supervisor.statuses()] == ["keep", "change", "new"]
    assert supervisor.status("keep").pid == pids["keep"] and supervisor.status("keep").state == "ready"
    assert supervisor.tool("mcp_drop_echo") is None
    assert (await supervisor.call("mcp_new_echo", {"message": "hi"})).text() == "hi"  # waits for it to connect
    await wait_state(supervisor, "change", "ready")
    assert supervisor.status("change").pid not in (None, pids["change"])
    with trio.fail_after(10):  # the dropped server's process is gone
        while True:
            try:
                os.kill(pids["drop"], 0)
            except ProcessLookupError:
                break
            await trio.sleep(0.05)
