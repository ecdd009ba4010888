"""shell_exec: off by default, allowlisted programs only, no shell, cleared environment,
workspace containment, timeouts that kill, bounded output."""

from __future__ import annotations

import os
import shutil
import time

import pytest
import trio

from runtime.config import Config, ToolsConfig
from runtime.kernel import tools_shell
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from tests.processes import gone, pid_in

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX programs and process groups")


def config(*allow: str, timeout: float = 60.0) -> Config:
    return Config(tools=ToolsConfig(shell_exec_enabled=True, shell_allowlist=list(allow), timeout_secs=timeout))


def shell(*allow: str, timeout: float = 60.0):
    return tools_shell.make_shell_exec(config(*allow, timeout=timeout))


@pytest.fixture
def ctx(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return ToolContext(agent="a", workspace=str(workspace), state_dir=str(tmp_path))


def test_disabled_by_default_registers_nothing():
    registry = ToolRegistry()
    tools_shell.register(registry, Config())
    assert registry.get("shell_exec") is None
    tools_shell.register(registry, Config(tools=ToolsConfig(shell_allowlist=["echo"])))  # listed, not enabled
    assert registry.get("shell_exec") is None
    tools_shell.register(registry, Config(tools=ToolsConfig(shell_exec_enabled=True)))  # enabled, nothing allowed
    assert registry.get("shell_exec") is None
    tools_shell.register(registry, config("echo"))
    tool = registry.get("shell_exec")
    assert tool is not None and "echo" in tool.description
    assert tool.input_schema["required"] == ["argv"] and tool.input_schema["additionalProperties"] is False


async def test_allowed_program_runs(ctx):
    result = await shell("echo")({"argv": ["echo", "hello", "world"]}, ctx)
    assert not result.is_error
    assert result.text == "exit code 0\n--- stdout ---\nhello world\n\n--- stderr ---\n"


async def test_allowlist_refusals(ctx, tmp_path):
    run = shell("echo")
    for argv0, words in [("rm", "not an allowed program"), ("/bin/../bin/rm", "'..'"),
                         ("/bin/../bin/echo", "'..'"), ("./echo", "bare program name or an absolute path"),
                         ("bin/echo", "bare program name"), ("/bin/rm", "not an allowed program"),
                         ("sh", "not an allowed program")]:
        result = await run({"argv": [argv0, "-rf", str(tmp_path / "ws")]}, ctx)
        assert result.is_error and words in result.text, (argv0, result.text)
    assert (tmp_path / "ws").is_dir()


async def test_absolute_path_by_basename_only_from_path_dirs(ctx, tmp_path):
    echo = shutil.which("echo")
    result = await shell("echo")({"argv": [echo, "abs"]}, ctx)
    assert not result.is_error and "abs" in result.text
    fake = tmp_path / "ws" / "echo"  # a program the model dropped in its workspace
    fake.write_text("#!/bin/sh\necho pwned\n")
    fake.chmod(0o755)
    result = await shell("echo")({"argv": [str(fake), "x"]}, ctx)
    assert result.is_error and "PATH directory" in result.text
    listed = await shell(str(fake))({"argv": [str(fake)]}, ctx)  # listed verbatim: the operator chose it
    assert not listed.is_error and "pwned" in listed.text


async def test_no_shell_interpretation_even_when_sh_is_allowed(ctx):
    result = await shell("echo")({"argv": ["echo", "$HOME; ls", "*", "`id`"]}, ctx)
    assert "$HOME; ls * `id`\n" in result.text
    refused = await shell("echo")({"argv": ["sh", "-c", "echo hi"]}, ctx)
    assert refused.is_error and "not an allowed program" in refused.text
    allowed = await shell("sh")({"argv": ["sh", "-c", "echo \"$0\"", "$HOME; ls"]}, ctx)
    assert not allowed.is_error and "$HOME; ls\n" in allowed.text


async def test_environment_is_cleared(ctx, monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET_TOKEN", "s3cr3t-value")
    result = await shell("env")({"argv": ["env"]}, ctx)
    assert not result.is_error
    assert "TERN_TEST_SECRET_TOKEN" not in result.text and "s3cr3t-value" not in result.text
    names = {
        line.split("=", 1)[0]
        for line in result.text.split("--- stdout ---\n")[1].split("\n--- stderr")[0].splitlines()
        if "=" in line
    }
    assert names <= {"PATH", "HOME", "TMP", "TEMP", "TMPDIR", "PWD", "SHLVL", "_"}


async def test_cwd_is_the_workspace_and_stays_inside(ctx, tmp_path):
    ws = os.path.realpath(ctx.workspace)
    run = shell("pwd")
    result = await run({"argv": ["pwd"]}, ctx)
    assert result.text.split("--- stdout ---\n")[1].startswith(ws + "\n")
    os.mkdir(os.path.join(ws, "sub"))
    result = await run({"argv": ["pwd"], "cwd": "sub"}, ctx)
    assert not result.is_error and os.path.join(ws, "sub") + "\n" in result.text
    (tmp_path / "ws-x").mkdir()
    os.symlink(str(tmp_path), os.path.join(ws, "link"))
    for cwd in ["..", "../ws-x", str(tmp_path), "/", "sub/../..", "link"]:
        result = await run({"argv": ["pwd"], "cwd": cwd}, ctx)
        assert result.is_error and "escapes the workspace" in result.text, cwd
    missing = await run({"argv": ["pwd"], "cwd": "nope"}, ctx)
    assert missing.is_error and "not a directory" in missing.text
    no_ws = await run({"argv": ["pwd"]}, ToolContext())
    assert no_ws.is_error and "no workspace" in no_ws.text


async def test_timeout_kills_the_process_group(ctx):
    started = time.monotonic()
    result = await shell("sleep")({"argv": ["sleep", "30"], "timeout_secs": 0.3}, ctx)
    assert time.monotonic() - started < 5
    assert result.is_error and result.text.startswith("timed out after 0.3 s; killed")


async def test_timeout_is_capped_by_config(ctx):
    started = time.monotonic()
    result = await shell("sleep", timeout=0.3)({"argv": ["sleep", "30"], "timeout_secs": 1000}, ctx)
    assert time.monotonic() - started < 5 and result.is_error and "timed out" in result.text


async def test_leftover_children_do_not_hold_the_call(ctx):
    # sh exits at once; its background sleep keeps the pipes open until the group is killed
    started = time.monotonic()
    result = await shell("sh")({"argv": ["sh", "-c", "sleep 30 & echo started"], "timeout_secs": 20}, ctx)
    assert time.monotonic() - started < 5
    assert not result.is_error and "started" in result.text


async def test_output_is_capped(ctx):
    result = await shell("head")({"argv": ["head", "-c", str(3 * 1024 * 1024), "/dev/zero"]}, ctx)
    assert not result.is_error
    assert f"[cut at {tools_shell.STDOUT_CAP} bytes of {3 * 1024 * 1024}]" in result.text
    assert len(result.text) < tools_shell.STDOUT_CAP + 1000
    err = await shell("sh")({"argv": ["sh", "-c", "head -c 200000 /dev/zero >&2"]}, ctx)
    assert f"[cut at {tools_shell.STDERR_CAP} bytes of 200000]" in err.text


async def test_stdin_is_passed(ctx):
    result = await shell("cat")({"argv": ["cat"], "stdin": "line one\nline two\n"}, ctx)
    assert not result.is_error and "line one\nline two\n" in result.text
    # a program that never reads its stdin does not block the call
    ignored = await shell("true")({"argv": ["true"], "stdin": "x" * 500_000}, ctx)
    assert not ignored.is_error


async def test_nonzero_exit_is_a_tool_error(ctx):
    result = await shell("ls")({"argv": ["ls", "/definitely/not/here"]}, ctx)
    assert result.is_error and result.text.startswith("exit code ") and not result.text.startswith("exit code 0")
    assert "/definitely/not/here" in result.text.split("--- stderr ---\n")[1]
    failing = await shell("false")({"argv": ["false"]}, ctx)
    assert failing.is_error and failing.text.startswith("exit code 1\n")


async def test_through_the_pipeline(tmp_path):
    registry = ToolRegistry()
    cfg = config("echo")
    tools_shell.register(registry, cfg)
    pipeline = ToolPipeline(registry, cfg)
    run = pipeline.run()
    run.context = ToolContext(workspace=str(tmp_path))
    ok = await pipeline.call("shell_exec", {"argv": ["echo", "hi"]}, run=run)
    assert not ok.is_error and "hi" in ok.text
    for bad in [{"argv": []}, {"argv": "echo hi"}, {"argv": ["echo"], "shell": True}, {}]:
        result = await pipeline.call("shell_exec", bad, run=run)
        assert result.is_error and "invalid arguments" in result.text, bad


async def test_cancellation_kills_the_program(ctx):
    with trio.move_on_after(1):
        await shell("sh")({"argv": ["sh", "-c", "echo $$ > pid; exec sleep 30"]}, ctx)
    pid = int(open(os.path.join(ctx.workspace, "pid")).read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


GRANDCHILD = ["sh", "-c", "sleep 300 & echo $! > pid; wait"]  # a sleep that would outlive sh


async def test_a_grandchild_dies_on_timeout(ctx):
    with trio.fail_after(5):
        result = await shell("sh")({"argv": GRANDCHILD, "timeout_secs": 1}, ctx)
    assert result.is_error and result.text.startswith("timed out after 1 s; killed")
    assert await gone(await pid_in(os.path.join(ctx.workspace, "pid")))


async def test_a_grandchild_dies_on_cancel(ctx):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shell("sh"), {"argv": GRANDCHILD}, ctx)
        grandchild = await pid_in(os.path.join(ctx.workspace, "pid"))
        nursery.cancel_scope.cancel()
    assert await gone(grandchild)
