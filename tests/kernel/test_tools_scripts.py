"""Approved scripts: only content pinned in the config or approved runs, exactly the bytes
that were hashed, never through a link, in the caller's workspace, killed whole on
timeout, with bounded output; every bad input is a tool error."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
import trio

from runtime.config import AgentConfig, ApprovalRule, Config, GovernanceConfig, ScriptsConfig, StateConfig
from runtime.kernel.builtins import register_builtins
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.script_approvals import Approvals
from runtime.kernel.tools_scripts import Scripts
from runtime.ports import ToolContext
from tests.processes import alive, gone, pid_in

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX scripts, links, FIFOs and process groups")

PENDING = ("Error: Script '{}' is pending approval. An administrator must review and approve this script "
           "before it can be executed.")
AGENT = AgentConfig(name="a", kind="echo", tools=["*"])


class Box:
    """A scripts directory, a state directory and the pipeline an agent calls through."""

    def __init__(self, tmp_path, **scripts: object) -> None:
        self.dir = tmp_path / "scripts"
        self.state = tmp_path / "state"
        self.dir.mkdir(exist_ok=True)
        self.config = Config(scripts=ScriptsConfig(dir=str(self.dir), **scripts),
                             state=StateConfig(dir=str(self.state)),  # the tool's own gate is under test here:
                             governance=GovernanceConfig(rules=[ApprovalRule(tool="script_run", decision="allow")]))
        registry = ToolRegistry()
        register_builtins(registry, self.config)
        self.registry = registry
        self.pipeline = ToolPipeline(registry, self.config)
        self.workspace = self.state / "workspaces" / "a"

    def write(self, name: str, body: str, mode: int = 0o755) -> str:
        path = self.dir / name
        path.write_text(body)
        path.chmod(mode)
        return hashlib.sha256(body.encode()).hexdigest()

    def approve(self, name: str) -> str:
        sha256 = hashlib.sha256((self.dir / name).read_bytes()).hexdigest()
        Approvals(str(self.state)).approve(name, sha256, "test")
        return sha256

    async def call(self, tool: str, arguments: dict | None = None):
        return await self.pipeline.call(tool, arguments or {}, run=self.pipeline.run(AGENT))


@pytest.fixture
def box(tmp_path):
    return Box(tmp_path)


def test_the_tools_exist_only_with_a_scripts_dir(tmp_path):
    registry = ToolRegistry()
    register_builtins(registry, Config())
    assert not [t for t in registry.tools() if t.name.startswith("script_")]
    box = Box(tmp_path)
    assert box.registry.get("script_list").annotations == {"readOnlyHint": True}
    assert box.registry.get("script_run").annotations == {"destructiveHint": True, "openWorldHint": True}
    assert box.registry.get("script_reload").annotations == {"readOnlyHint": True, "idempotentHint": True}
    schema = box.registry.get("script_run").input_schema
    assert schema["properties"]["args"]["maxItems"] == 64 and schema["additionalProperties"] is False


async def test_an_approved_script_runs_in_the_workspace_with_a_cleared_environment(box, monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET", "s3cret-value-xyz")
    box.write("hello", '#!/bin/sh\necho "hi $1|$2"; pwd; echo "secret=${TERN_TEST_SECRET:-none}"\n')
    box.approve("hello")
    assert not box.workspace.exists()
    result = await box.call("script_run", {"name": "hello", "args": ["a b", "$HOME;x"]})
    assert not result.is_error, result.text
    assert result.text == f"hi a b|$HOME;x\n{os.path.realpath(box.workspace)}\nsecret=none\n"
    assert stat.S_IMODE(box.workspace.stat().st_mode) == 0o700


async def test_a_script_allowlisted_by_sha_in_the_config_runs(tmp_path):
    body = "#!/bin/sh\necho allowlisted\n"
    box = Box(tmp_path, allow={"pinned": hashlib.sha256(body.encode()).hexdigest().upper()})
    box.write("pinned", body)
    result = await box.call("script_run", {"name": "pinned"})
    assert not result.is_error and result.text == "allowlisted\n"
    listing = await box.call("script_list")
    assert listing.structured["scripts"][0]["status"] == "allowlisted"


async def test_a_new_script_is_pending_with_the_seeds_answer(box):
    sha256 = box.write("new_feature", "#!/bin/sh\ntouch ran\n")
    result = await box.call("script_run", {"name": "new_feature"})
    assert result.is_error
    lines = result.text.splitlines()
    assert lines[0] == PENDING.format("new_feature")
    assert f"sha256: {sha256}" in lines and lines[-1] == "To approve it: tern scripts approve new_feature"
    assert not (box.workspace / "ran").exists()


async def test_an_edit_after_approval_makes_it_pending_again(box):
    box.write("report", "#!/bin/sh\necho v1\n")
    approved = box.approve("report")
    assert (await box.call("script_run", {"name": "report"})).text == "v1\n"
    edited = box.write("report", "#!/bin/sh\necho v2\n")
    result = await box.call("script_run", {"name": "report"})
    assert result.is_error and result.text.startswith(PENDING.format("report"))
    assert f"sha256: {edited}" in result.text and f"approved content had sha256 {approved[:12]}" in result.text
    box.write("report", "#!/bin/sh\necho v1\n")  # the approved bytes again: approved again
    assert (await box.call("script_run", {"name": "report"})).text == "v1\n"


async def test_a_deleted_script_is_a_clear_error_with_close_names(box):
    box.write("backup", "#!/bin/sh\necho b\n")
    box.approve("backup")
    (box.dir / "backup").unlink()
    box.write("backup2", "#!/bin/sh\necho b\n")
    result = await box.call("script_run", {"name": "backup"})
    assert result.is_error and result.text == "there is no script named 'backup' (did you mean 'backup2'?)"
    result = await box.call("script_run", {"name": "zzz"})
    assert result.is_error and result.text == "there is no script named 'zzz' (see script_list)"


async def test_symlinks_are_refused_wherever_they_point(box, tmp_path):
    outside = tmp_path / "outside.sh"
    outside.write_text("#!/bin/sh\ntouch escaped\n")
    outside.chmod(0o755)
    (box.dir / "out").symlink_to(outside)
    box.write("real", "#!/bin/sh\ntouch ran-real\n")
    (box.dir / "inside").symlink_to("real")
    digest = hashlib.sha256(outside.read_bytes()).hexdigest()
    Approvals(str(box.state)).approve("out", digest, "test")  # even approved by hash, a link is no script
    Approvals(str(box.state)).approve("inside", box.approve("real"), "test")
    for name in ("out", "inside"):
        result = await box.call("script_run", {"name": name})
        assert result.is_error and result.text == (f"script '{name}' is a symlink: scripts run only from regular "
                                                   "files in the scripts directory, never through a link")
    assert not (box.workspace / "escaped").exists() and not (box.workspace / "ran-real").exists()
    listing = await box.call("script_list")
    assert [s["name"] for s in listing.structured["scripts"]] == ["real"]
    assert "not scripts: inside (a symlink), out (a symlink)" in listing.text


async def test_a_fifo_a_directory_and_a_non_executable_file_are_refused_without_blocking(box):
    os.mkfifo(box.dir / "pipe")
    (box.dir / "folder").mkdir()
    box.write("plain", "#!/bin/sh\necho x\n", mode=0o644)
    box.approve("plain")
    with trio.fail_after(5):  # opening a FIFO for reading would wait for a writer forever
        fifo = await box.call("script_run", {"name": "pipe"})
        folder = await box.call("script_run", {"name": "folder"})
        plain = await box.call("script_run", {"name": "plain"})
        listing = await box.call("script_list")
    assert fifo.is_error and fifo.text == "script 'pipe' is not a regular file"
    assert folder.is_error and folder.text == "script 'folder' is not a regular file"
    assert plain.is_error and plain.text == "script 'plain' is not executable (chmod u+x it)"
    assert "folder (not a regular file), pipe (not a regular file), plain (not executable)" in listing.text


async def test_it_runs_exactly_the_bytes_it_hashed(box):
    """sh reads its script as it goes: rewriting the approved file in place mid-run would
    change what runs if the original were executed; the private copy is what runs."""
    padding = "#" * 200 + "\n"
    head = '#!/bin/sh\necho "$0" > "$PWD/started"; sleep 1\n' + padding * 400
    box.write("slow", head + "echo approved-line\n")
    box.approve("slow")
    async with trio.open_nursery() as nursery:
        results = []

        async def run() -> None:
            results.append(await box.call("script_run", {"name": "slow"}))

        nursery.start_soon(run)
        with trio.fail_after(10):
            while not (box.workspace / "started").exists():
                await trio.sleep(0.02)
        with open(box.dir / "slow", "r+b") as original:  # same inode, same size, new tail
            original.seek(len(head))
            original.write(b"echo injected!!!!!\n")
    assert not results[0].is_error and results[0].text == "approved-line\n"
    ran = (box.workspace / "started").read_text().strip()
    assert ran.startswith(str(box.state / "scripts-run")) and ran.endswith("/slow")
    assert not os.path.exists(ran) and os.listdir(box.state / "scripts-run") == []  # the copy is gone


SPAWNS_A_CHILD = '#!/bin/sh\nsleep 300 &\necho $! > "$PWD/child"\necho $$ > "$PWD/parent"\nwait\n'


async def test_a_timeout_kills_the_script_and_the_child_it_left(tmp_path):
    box = Box(tmp_path, timeout_secs=1.0)
    box.write("spawner", SPAWNS_A_CHILD)
    box.approve("spawner")
    with trio.fail_after(10):
        result = await box.call("script_run", {"name": "spawner"})
    assert result.is_error and result.text.startswith("script 'spawner' failed: timed out after 1 s; killed")
    parent, child = await pid_in(box.workspace / "parent"), await pid_in(box.workspace / "child")
    assert await gone(parent) and await gone(child)
    for pid in (parent, child):
        assert not alive(pid)  # os.kill(pid, 0): no such process (or a zombie reaped soon after)


async def test_a_child_left_behind_by_a_finished_script_does_not_hold_the_call(box):
    box.write("daemonish", '#!/bin/sh\nsleep 300 &\necho $! > "$PWD/child"\necho done\n')
    box.approve("daemonish")
    with trio.fail_after(10):
        result = await box.call("script_run", {"name": "daemonish"})
    assert not result.is_error and result.text == "done\n"
    assert await gone(await pid_in(box.workspace / "child"))


async def test_a_cancelled_call_kills_the_script(box):
    box.write("spawner", SPAWNS_A_CHILD)
    box.approve("spawner")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.call, "script_run", {"name": "spawner"})
        child = await pid_in(box.workspace / "child")
        nursery.cancel_scope.cancel()
    assert await gone(child) and await gone(await pid_in(box.workspace / "parent"))


async def test_output_over_the_cap_is_cut_with_a_note(tmp_path):
    box = Box(tmp_path, max_output_bytes=1000)
    box.write("loud", "#!/bin/sh\nhead -c 200000 /dev/zero | tr '\\0' x\n")
    box.approve("loud")
    result = await box.call("script_run", {"name": "loud"})
    assert not result.is_error
    assert result.text == "x" * 1000 + "\n[output cut at 1000 bytes of 200000]"


async def test_a_failing_script_is_a_tool_error_with_its_exit_code_and_stderr_tail(box):
    box.write("fails", "#!/bin/sh\necho partial\nhead -c 20000 /dev/zero | tr '\\0' e >&2\necho LAST >&2\nexit 3\n")
    box.approve("fails")
    result = await box.call("script_run", {"name": "fails"})
    assert result.is_error and result.text.startswith("script 'fails' failed: exit code 3\n--- stderr ---\n")
    stderr, stdout = result.text.split("\n--- stderr ---\n")[1].split("\n--- stdout ---\n")
    assert stderr.startswith("[11813 earlier bytes cut]\n") and stderr.endswith("eeeLAST\n")
    assert stdout == "partial\n"


async def test_many_runs_at_once_each_run_their_own_copy(box):
    box.write("echoer", '#!/bin/sh\necho "$1"\n')
    box.approve("echoer")
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        result = await box.call("script_run", {"name": "echoer", "args": [str(i)]})
        results[i] = result.text if not result.is_error else "error: " + result.text

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for i in range(12):
                nursery.start_soon(one, i)
    assert results == {i: f"{i}\n" for i in range(12)}


async def test_list_and_reload_show_each_status(tmp_path):
    pinned = "#!/bin/sh\necho p\n"
    box = Box(tmp_path, allow={"pinned": hashlib.sha256(pinned.encode()).hexdigest()})
    box.write("pinned", pinned)
    box.write("ok", "#!/bin/sh\necho ok\n")
    box.approve("ok")
    box.write("new", "#!/bin/sh\necho new\n")
    (box.dir / ".hidden").write_text("not a script name")
    first = await box.call("script_list")
    statuses = {s["name"]: s["status"] for s in first.structured["scripts"]}
    assert statuses == {"new": "pending", "ok": "approved", "pinned": "allowlisted"}
    ok_sha = hashlib.sha256(b"#!/bin/sh\necho ok\n").hexdigest()
    assert f"ok  sha256:{ok_sha[:12]}  approved" in first.text.splitlines()
    (box.dir / "new").unlink()
    box.write("ok", "#!/bin/sh\necho edited\n")
    box.write("later", "#!/bin/sh\necho later\n")
    reloaded = await box.call("script_reload")
    assert {s["name"]: s["status"] for s in reloaded.structured["scripts"]} == {
        "later": "pending", "ok": "pending", "pinned": "allowlisted"}


async def test_an_empty_directory_lists_nothing(box):
    result = await box.call("script_list")
    assert not result.is_error and result.text == "no scripts in the scripts directory"


@pytest.mark.parametrize("arguments", [
    {"name": "../x"}, {"name": ""}, {"name": "a" * 300}, {"name": ".hidden"}, {"name": "a/b"}, {"name": 7},
    {"name": "ok", "args": ["x"] * 65}, {"name": "ok", "args": [1]}, {"name": "ok", "args": "x"},
    {"name": "ok", "args": ["x" * 4097]}, {"name": "ok", "extra": True}, {},
])
async def test_bad_input_is_a_tool_error_never_a_crash(box, arguments):
    box.write("ok", "#!/bin/sh\ntouch ran\n")
    box.approve("ok")
    result = await box.call("script_run", arguments)
    assert result.is_error and "internal error" not in result.text, result.text
    assert not (box.workspace / "ran").exists()


@pytest.mark.parametrize("arguments, expected", [
    ({"name": "../x"}, "'../x' is not a script name"),
    ({"name": "a" * 300}, "'" + "a" * 57 + "...' is not a script name"),
    ({"name": None}, "a script name is needed"),
    ({"name": "ok", "args": ["x"] * 65}, "at most 64 args, got 65"),
    ({"name": "ok", "args": ["x", 2]}, "args[1] must be a string"),
    ({"name": "ok", "args": "x"}, "args must be a list of strings"),
    ({"name": "ok", "args": ["x" * 4097]}, "args[0] is longer than 4096 characters"),
    ({"name": "ok", "args": ["a\x00b"]}, "args[0] contains a NUL byte"),
])
async def test_the_handler_checks_its_own_input(box, arguments, expected):
    """The same checks without the pipeline's schema (a direct call must not crash either)."""
    box.write("ok", "#!/bin/sh\ntouch ran\n")
    box.approve("ok")
    result = await Scripts(box.config).script_run(arguments, ToolContext(workspace=str(box.workspace)))
    assert result.is_error and expected in result.text, result.text
    assert not (box.workspace / "ran").exists()


async def test_a_caller_without_a_workspace_is_refused(box):
    box.write("ok", "#!/bin/sh\necho ok\n")
    box.approve("ok")
    result = await box.pipeline.call("script_run", {"name": "ok"})  # the operator: no agent, no workspace
    assert result.is_error and result.text == "this caller has no workspace to run scripts in"


async def test_a_missing_scripts_directory_is_a_tool_error(tmp_path):
    box = Box(tmp_path)
    box.dir.rmdir()
    for tool, arguments in (("script_list", {}), ("script_run", {"name": "x"})):
        result = await box.call(tool, arguments)
        assert result.is_error and result.text == "the scripts directory cannot be opened: No such file or directory"
