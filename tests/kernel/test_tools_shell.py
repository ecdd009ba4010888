"""shell_exec: off by default, allowlisted programs only, programs that run programs only
by rules that pin the whole argv, no shell, cleared environment, workspace containment,
the bubblewrap sandbox, timeouts that kill, bounded output."""

from __future__ import annotations

import functools
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import trio

from runtime.config import ApprovalRule, Config, GovernanceConfig, ShellRule, ToolsConfig
from runtime.kernel import tools_shell
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from tests.processes import gone, pid_in

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX programs and process groups")


def config(*allow: str, timeout: float = 60.0, rules: tuple[ShellRule, ...] = (), sandbox: str = "off",
           paths: tuple[str, ...] = ()) -> Config:
    """The process-lifecycle tests run unsandboxed (they read host PIDs); the sandbox has tests of its own."""
    return Config(tools=ToolsConfig(shell_exec_enabled=True, shell_allowlist=list(allow), timeout_secs=timeout,
                                    shell_rules=list(rules), shell_sandbox=sandbox, shell_sandbox_paths=list(paths)),
                  governance=ALLOW_SHELL)


def shell(*allow: str, timeout: float = 60.0, rules: tuple[ShellRule, ...] = (), sandbox: str = "off",
          paths: tuple[str, ...] = ()):
    return tools_shell.make_shell_exec(config(*allow, timeout=timeout, rules=rules, sandbox=sandbox, paths=paths))


# These tests are about shell_exec's own policy, not about approvals (tests/kernel/test_approvals.py).
ALLOW_SHELL = GovernanceConfig(rules=[ApprovalRule(tool="shell_exec", decision="allow")])
SH = ShellRule(program="sh", args=["-c", "*"], rest="*")  # the tests' own scripts: any `sh -c SCRIPT ARGS...`


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
    allowed = await shell(rules=(SH,))({"argv": ["sh", "-c", "echo \"$0\"", "$HOME; ls"]}, ctx)
    assert not allowed.is_error and "$HOME; ls\n" in allowed.text


async def test_environment_is_cleared(ctx, monkeypatch):
    monkeypatch.setenv("TERN_TEST_SECRET_TOKEN", "s3cr3t-value")
    result = await shell(rules=(ShellRule(program="env"),))({"argv": ["env"]}, ctx)
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
    result = await shell(rules=(SH,))({"argv": ["sh", "-c", "sleep 30 & echo started"], "timeout_secs": 20}, ctx)
    assert time.monotonic() - started < 5
    assert not result.is_error and "started" in result.text


async def test_output_is_capped(ctx):
    result = await shell("head")({"argv": ["head", "-c", str(3 * 1024 * 1024), "/dev/zero"]}, ctx)
    assert not result.is_error
    assert f"[cut at {tools_shell.STDOUT_CAP} bytes of {3 * 1024 * 1024}]" in result.text
    assert len(result.text) < tools_shell.STDOUT_CAP + 1000
    err = await shell(rules=(SH,))({"argv": ["sh", "-c", "head -c 200000 /dev/zero >&2"]}, ctx)
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
        await shell(rules=(SH,))({"argv": ["sh", "-c", "echo $$ > pid; exec sleep 30"]}, ctx)
    pid = int(open(os.path.join(ctx.workspace, "pid")).read())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


GRANDCHILD = ["sh", "-c", "sleep 300 & echo $! > pid; wait"]  # a sleep that would outlive sh


async def test_a_grandchild_dies_on_timeout(ctx):
    with trio.fail_after(5):
        result = await shell(rules=(SH,))({"argv": GRANDCHILD, "timeout_secs": 1}, ctx)
    assert result.is_error and result.text.startswith("timed out after 1 s; killed")
    assert await gone(await pid_in(os.path.join(ctx.workspace, "pid")))


async def test_a_grandchild_dies_on_cancel(ctx):
    async with trio.open_nursery() as nursery:
        nursery.start_soon(shell(rules=(SH,)), {"argv": GRANDCHILD}, ctx)
        grandchild = await pid_in(os.path.join(ctx.workspace, "pid"))
        nursery.cancel_scope.cancel()
    assert await gone(grandchild)


# --- programs that run other programs (the attack: an allowlisted name runs anything) ---------------------


async def call_through_pipeline(cfg: Config, workspace, arguments: dict):
    """The tool as an agent calls it: registered from the config, through the pipeline."""
    registry = ToolRegistry()
    tools_shell.register(registry, cfg)
    pipeline = ToolPipeline(registry, cfg)
    run = pipeline.run()
    run.context = ToolContext(workspace=str(workspace))
    return await pipeline.call("shell_exec", arguments, run=run)


ATTACKS = {
    "find": ["find", ".", "-maxdepth", "0", "-exec", "/bin/sh", "-c", "touch pwned", ";"],
    "git": ["git", "-c", "alias.x=!touch pwned", "x"],
    "tar": ["tar", "-cf", "/dev/null", "--checkpoint=1", "--checkpoint-action=exec=touch pwned", "."],
}


@pytest.mark.parametrize("program", sorted(ATTACKS))
async def test_a_program_that_runs_commands_is_refused_by_name_alone(program, tmp_path):
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data").write_text("x" * 100_000)  # something for tar to archive, past one checkpoint
    cfg = Config(tools=ToolsConfig(shell_exec_enabled=True, shell_allowlist=[program]), governance=ALLOW_SHELL)
    result = await call_through_pipeline(cfg, workspace, {"argv": ATTACKS[program]})
    assert not (workspace / "pwned").exists(), result.text
    assert result.is_error and "can run other programs" in result.text and "[[tools.shell_rules]]" in result.text


async def test_an_alias_of_a_shell_is_refused_by_its_real_name(ctx, tmp_path):
    alias = tmp_path / "bin" / "lister"  # an innocent name, listed verbatim, that is really a shell
    alias.parent.mkdir()
    alias.symlink_to(os.path.realpath(shutil.which("sh")))
    result = await shell(str(alias))({"argv": [str(alias), "-c", "touch pwned"]}, ctx)
    assert result.is_error and "can run other programs" in result.text and "(it is " in result.text
    assert not os.path.exists(os.path.join(ctx.workspace, "pwned"))


def test_runs_commands_is_checked_on_the_name_and_the_real_name():
    from runtime.config.shell_policy import why_refused

    assert why_refused("ls") is None and why_refused("/usr/bin/ls", real_name="ls") is None
    for entry, real in [("find", ""), ("/usr/bin/python3", "python3.11"), ("awk", "mawk"), ("view", "vim.basic"),
                        ("busybox", "busybox"), ("sort", "")]:
        assert "can run other programs" in why_refused(entry, real_name=real), entry
    assert "(it is 'dash')" in why_refused("lister", real_name="dash")
    assert why_refused("ls", real_name="busybox") is None  # argv[0] is pinned to "ls": busybox runs its ls applet


async def test_a_pinned_rule_allows_exactly_its_argv(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "a.txt").write_text("a")
    rule = ShellRule(program="find", args=[".", "-name", "*.txt"])
    cfg = Config(tools=ToolsConfig(shell_exec_enabled=True, shell_rules=[rule]), governance=ALLOW_SHELL)
    ok = await call_through_pipeline(cfg, workspace, {"argv": ["find", ".", "-name", "*.txt"]})
    assert not ok.is_error and "./a.txt" in ok.text
    for argv in (["find", ".", "-name", "*.txt", "-exec", "/bin/sh", "-c", "touch pwned", ";"],
                 ["find", ".", "-name", "*.txt", "-delete"],
                 ["find", "."],
                 ["find", "/", "-name", "*.txt"],
                 ["find", ".", "-exec", "/bin/sh", "-c", "touch pwned", ";"]):
        refused = await call_through_pipeline(cfg, workspace, {"argv": argv})
        assert refused.is_error and "are not allowed (allowed: find . -name *.txt)" in refused.text, argv
    assert (workspace / "a.txt").exists() and not (workspace / "pwned").exists()


async def test_a_rule_with_rest_allows_more_arguments_matching_it(ctx):
    rule = ShellRule(program="echo", args=["-n"], rest="[!-]*")
    run = shell(rules=(rule,))
    ok = await run({"argv": ["echo", "-n", "a", "b"]}, ctx)
    assert not ok.is_error and "--- stdout ---\na b\n" in ok.text
    assert not (await run({"argv": ["echo", "-n"]}, ctx)).is_error
    for argv in (["echo", "-n", "a", "-e"], ["echo", "a"], ["echo"]):
        assert (await run({"argv": argv}, ctx)).is_error, argv


async def test_a_rule_takes_stdin_only_when_it_says_so(ctx):
    script = {"argv": ["sh"], "stdin": "touch pwned\n"}  # sh reads its program from stdin
    refused = await shell(rules=(ShellRule(program="sh"),))(script, ctx)
    assert refused.is_error and "takes no stdin" in refused.text
    assert not os.path.exists(os.path.join(ctx.workspace, "pwned"))
    allowed = await shell(rules=(ShellRule(program="sh", stdin=True),))(script, ctx)
    assert not allowed.is_error and os.path.exists(os.path.join(ctx.workspace, "pwned"))


def test_the_description_lists_programs_and_pinned_commands():
    registry = ToolRegistry()
    tools_shell.register(registry, config("ls", rules=(ShellRule(program="git", args=["status"]),
                                                       ShellRule(program="git", args=["diff"], rest="[!-]*"))))
    description = registry.get("shell_exec").description
    assert "Allowed programs: ls." in description and "git status; git diff [more: [!-]*]" in description
    only_rules = ToolRegistry()
    tools_shell.register(only_rules, config(rules=(ShellRule(program="git", args=["status"]),)))
    assert only_rules.get("shell_exec") is not None  # a rule alone enables the tool


def tern_cli(*args: str, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=60)


def test_config_check_reports_a_program_allowed_by_name_that_runs_commands(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[tools]\nshell_exec_enabled = true\nshell_allowlist = ["ls", "git"]\n')
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "tools.shell_allowlist[1]: 'git' can run other programs" in done.stderr
    assert "[[tools.shell_rules]]" in done.stderr and 'program = "git"' in done.stderr
    path.write_text('[tools]\nshell_exec_enabled = true\nshell_allowlist = ["ls"]\nshell_sandbox = "bubblewrap"\n'
                    'shell_sandbox_paths = ["tools"]\n'
                    '[[tools.shell_rules]]\nprogram = "git"\nargs = ["status", "--short"]\n'
                    '[[tools.shell_rules]]\nprogram = "git"\nargs = ["diff"]\nrest = "[!-]*"\n')
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 0, done.stderr
    shown = tern_cli("--config", str(path), "config", "show")
    assert shown.returncode == 0 and "[[tools.shell_rules]]" in shown.stdout
    assert str(tmp_path / "tools") in shown.stdout  # relative paths resolve against the file
    path.write_text('[tools]\n[[tools.shell_rules]]\nprogram = "find"\nrest = "*"\n')  # name-only in disguise
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 2 and "tools.shell_rules[0].rest" in done.stderr and "pins nothing" in done.stderr
    path.write_text('[tools]\nshell_sandbox = "docker"\n')
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 2 and "tools.shell_sandbox" in done.stderr


# --- the bubblewrap sandbox ----------------------------------------------------------------------------------

BASH = ShellRule(program="bash", args=["-c", "*"])


@functools.cache
def bwrap_problem() -> str | None:
    """None when bwrap can build a sandbox on this machine, else why not (said in the skip)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (CI installs it)"
    done = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--", "true"],
                          capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"bwrap cannot build a sandbox here: {done.stderr.strip()[:300]}"


@pytest.fixture
def bwrap():
    if bwrap_problem() is not None:
        pytest.skip(bwrap_problem())


@pytest.fixture
def bwrap_broken():
    if bwrap_problem() is None:
        pytest.skip("bwrap runs here: the sandbox tests cover it")
    if shutil.which("bwrap") is None:
        pytest.skip(bwrap_problem())


async def test_required_sandbox_where_bwrap_cannot_run_refuses(bwrap_broken, ctx):
    """The other side of the sandbox tests: where bwrap is installed but cannot run (no user
    namespaces), "bubblewrap" refuses with bwrap's own reason and runs nothing."""
    refused = await shell("touch", sandbox="bubblewrap")({"argv": ["touch", "marker"]}, ctx)
    assert refused.is_error and "cannot build the sandbox here" in refused.text
    assert not os.path.exists(os.path.join(ctx.workspace, "marker"))


async def test_sandbox_workspace_writable_the_rest_not(bwrap, ctx, tmp_path):
    read_only = tmp_path / "tools"
    read_only.mkdir()
    outside = tmp_path / "outside.txt"
    script = (f"echo in > inside.txt; echo out > {outside}; echo ro > {read_only}/x; "
              "echo etc > /etc/tern-sandbox-probe; echo done")
    try:
        result = await shell(rules=(SH,), sandbox="bubblewrap", paths=(str(read_only),))(
            {"argv": ["sh", "-c", script]}, ctx)
    finally:
        etc_written = os.path.exists("/etc/tern-sandbox-probe")
        if etc_written:
            os.remove("/etc/tern-sandbox-probe")
    assert "done" in result.text, result.text
    assert (tmp_path / "ws" / "inside.txt").read_text() == "in\n"
    assert not outside.exists() and not (read_only / "x").exists() and not etc_written
    assert "Read-only file system" in result.text  # the bound directory and /etc are there, read-only


async def test_sandbox_hides_files_outside_the_workspace(bwrap, ctx, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    result = await shell("cat", sandbox="bubblewrap")({"argv": ["cat", str(secret)]}, ctx)
    assert result.is_error and "s3cr3t" not in result.text and "No such file" in result.text
    plain = await shell("cat", sandbox="off")({"argv": ["cat", str(secret)]}, ctx)
    assert "s3cr3t" in plain.text  # the same call without the sandbox reads it


@pytest.mark.parametrize("sandbox", ["bubblewrap", "auto"])
async def test_sandbox_has_no_network(bwrap, ctx, sandbox):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        script = f"echo hi > /dev/tcp/127.0.0.1/{port} && echo connected"
        boxed = await shell(rules=(BASH,), sandbox=sandbox)({"argv": ["bash", "-c", script]}, ctx)
        assert boxed.is_error and "connected" not in boxed.text.split("--- stderr")[0], boxed.text
        with pytest.raises(BlockingIOError):
            listener.accept()
        plain = await shell(rules=(BASH,), sandbox="off")({"argv": ["bash", "-c", script]}, ctx)
        assert not plain.is_error and "connected" in plain.text  # the probe itself works
        listener.accept()[0].close()


async def test_sandbox_timeout_kills_everything_inside(bwrap, ctx):
    # a background job in the sandbox's PID namespace must not outlive the call
    script = "(sleep 2; echo late > late.txt) & echo started; wait"
    with trio.fail_after(10):
        result = await shell(rules=(SH,), sandbox="bubblewrap")({"argv": ["sh", "-c", script], "timeout_secs": 0.5},
                                                               ctx)
    assert result.is_error and result.text.startswith("timed out after 0.5 s; killed")
    await trio.sleep(3.5)  # real time: past the moment the job would have written
    assert not os.path.exists(os.path.join(ctx.workspace, "late.txt"))


def path_with(tmp_path, *programs: str, bwrap: str | None = None) -> str:
    """A PATH of one directory holding ``programs`` (and a fake ``bwrap`` script, if given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for program in programs:
        (bin_dir / program).symlink_to(shutil.which(program))
    if bwrap is not None:
        (bin_dir / "bwrap").write_text(bwrap)
        (bin_dir / "bwrap").chmod(0o755)
    return str(bin_dir)


async def test_required_sandbox_refuses_when_bwrap_is_missing(ctx, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path, "touch"))
    refused = await shell("touch", sandbox="bubblewrap")({"argv": ["touch", "marker"]}, ctx)
    assert refused.is_error and 'shell_sandbox = "bubblewrap" but bwrap (bubblewrap) is not on PATH' in refused.text
    assert not os.path.exists(os.path.join(ctx.workspace, "marker"))
    ran = await shell("touch", sandbox="auto")({"argv": ["touch", "marker"]}, ctx)  # auto: unsandboxed, warned
    assert not ran.is_error and os.path.exists(os.path.join(ctx.workspace, "marker"))


async def test_required_sandbox_refuses_when_bwrap_fails(ctx, tmp_path, monkeypatch):
    failing = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    monkeypatch.setenv("PATH", path_with(tmp_path, "touch", bwrap=failing))
    refused = await shell("touch", sandbox="bubblewrap")({"argv": ["touch", "marker"]}, ctx)
    assert refused.is_error and "cannot build the sandbox here" in refused.text
    assert "No permissions to create new namespace" in refused.text
    assert not os.path.exists(os.path.join(ctx.workspace, "marker"))
