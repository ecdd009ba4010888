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
from runtime.net import sandbox
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from tests.processes import gone, pid_in

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX programs and process groups")


def config(*allow: str, timeout: float = 60.0, rules: tuple[ShellRule, ...] = (), sandbox: str = "landlock",
           paths: tuple[str, ...] = ()) -> Config:
    """The process-lifecycle tests run under Landlock (no PID namespace: they read host PIDs); the sandbox
    has tests of its own."""
    return Config(tools=ToolsConfig(shell_exec_enabled=True, shell_allowlist=list(allow), timeout_secs=timeout,
                                    shell_rules=list(rules), shell_sandbox=sandbox, shell_sandbox_paths=list(paths)),
                  governance=ALLOW_SHELL)


def shell(*allow: str, timeout: float = 60.0, rules: tuple[ShellRule, ...] = (), sandbox: str = "landlock",
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
    path.write_text('[tools]\nshell_exec_enabled = true\nshell_allowlist = ["ls"]\nshell_sandbox = "auto"\n'
                    'shell_sandbox_paths = ["tools"]\n'
                    '[[tools.shell_rules]]\nprogram = "git"\nargs = ["status", "--short"]\n'
                    '[[tools.shell_rules]]\nprogram = "git"\nargs = ["diff"]\nrest = "[!-]*"\n')
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 0, done.stderr
    kind, _ = sandbox.choose("auto")  # the host's sandbox, and what it holds, in the summary
    said = {"bubblewrap": "sandbox: bubblewrap: ", "landlock": "sandbox: Landlock ABI "}[kind]
    assert said in done.stdout and str(tmp_path / "tools") in done.stdout and "no network" in done.stdout
    shown = tern_cli("--config", str(path), "config", "show")
    assert shown.returncode == 0 and "[[tools.shell_rules]]" in shown.stdout
    assert str(tmp_path / "tools") in shown.stdout  # relative paths resolve against the file
    path.write_text('[tools]\n[[tools.shell_rules]]\nprogram = "find"\nrest = "*"\n')  # name-only in disguise
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 2 and "tools.shell_rules[0].rest" in done.stderr and "pins nothing" in done.stderr
    path.write_text('[tools]\nshell_sandbox = "docker"\n')
    done = tern_cli("config", "check", str(path))
    assert done.returncode == 2 and "tools.shell_sandbox" in done.stderr


# --- the sandbox: bubblewrap, and Landlock with bwrap gone from PATH ------------------------------------------

BASH = ShellRule(program="bash", args=["-c", "*"])


@functools.cache
def bwrap_problem() -> str | None:
    """None when bwrap can build a sandbox on this machine, else why not (said in the skip)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    done = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--", "true"],
                          capture_output=True, text=True, timeout=30)
    return None if done.returncode == 0 else f"bwrap cannot build a sandbox here: {done.stderr.strip()[:300]}"


@pytest.fixture(autouse=True)
def fresh_probes():
    """Each test probes the host as it has made it (a PATH without bwrap...)."""
    sandbox.probe.cache_clear()
    yield
    sandbox.probe.cache_clear()


def path_without_bwrap(tmp_path) -> str:
    """A PATH of one directory that links every program of the real PATH but bwrap: the CI
    machine with bubblewrap uninstalled."""
    bin_dir = tmp_path / "no-bwrap-bin"
    bin_dir.mkdir()
    for directory in reversed([d for d in os.environ["PATH"].split(os.pathsep) if os.path.isabs(d)]):
        for name in os.listdir(directory) if os.path.isdir(directory) else ():
            path = os.path.join(directory, name)
            if name != "bwrap" and os.access(path, os.X_OK) and os.path.isfile(path):
                target = bin_dir / name
                if target.is_symlink():
                    target.unlink()
                target.symlink_to(os.path.realpath(path))
    return str(bin_dir)


@pytest.fixture(params=["bubblewrap", "landlock"])
def kind(request, tmp_path, monkeypatch):
    """The sandbox under test, as "auto" picks it: bubblewrap where it runs; Landlock with
    bwrap removed from PATH."""
    if request.param == "bubblewrap":
        if bwrap_problem() is not None:
            pytest.skip(bwrap_problem())
    else:
        if sandbox.probe("landlock") is not None:
            pytest.skip(sandbox.probe("landlock"))
        monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
        sandbox.probe.cache_clear()
    assert sandbox.choose("auto") == (request.param, "")
    return request.param


async def test_sandbox_workspace_writable_the_rest_not(kind, ctx, tmp_path):
    read_only = tmp_path / "ro"
    read_only.mkdir()
    (read_only / "tool.txt").write_text("tool")
    script = (f"echo inside > out.txt; cat {read_only}/tool.txt; echo x > {read_only}/x; "
              "echo etc > /etc/tern-sandbox-probe; echo done")
    try:
        result = await shell(rules=(SH,), sandbox="auto", paths=(str(read_only),))({"argv": ["sh", "-c", script]},
                                                                                   ctx)
    finally:
        etc_written = os.path.exists("/etc/tern-sandbox-probe")
        if etc_written:
            os.remove("/etc/tern-sandbox-probe")
    assert "tool" in result.text and "done" in result.text, result.text
    assert (tmp_path / "ws" / "out.txt").read_text() == "inside\n"
    assert not (read_only / "x").exists() and not etc_written


async def test_sandbox_hides_files_outside_the_workspace(kind, ctx, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    result = await shell("cat", sandbox="auto")({"argv": ["cat", str(secret)]}, ctx)
    assert result.is_error and "s3cr3t" not in result.text
    plain = await shell(rules=(ShellRule(program="cat", args=[str(secret)]),), sandbox="off")(
        {"argv": ["cat", str(secret)]}, ctx)
    assert "s3cr3t" in plain.text  # the same call without the sandbox reads it


class Listener:
    """A loopback TCP listener that counts who connects."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]

    def connected(self) -> bool:
        try:
            self.sock.accept()[0].close()
            return True
        except BlockingIOError:
            return False

    def close(self):
        self.sock.close()


async def test_sandbox_has_no_network(kind, ctx):
    listener = Listener()
    try:
        script = f"exec 3<>/dev/tcp/127.0.0.1/{listener.port} && echo connected"
        boxed = await shell(rules=(BASH,), sandbox="auto")({"argv": ["bash", "-c", script]}, ctx)
        assert "connected" not in boxed.text and not listener.connected()
        plain = await shell(rules=(ShellRule(program="bash", args=["-c", script]),), sandbox="off")(
            {"argv": ["bash", "-c", script]}, ctx)
        assert "connected" in plain.text and listener.connected()  # the same call without the sandbox connects
    finally:
        listener.close()


async def test_sandbox_timeout_kills_everything_inside(kind, ctx):
    # a background job in the sandbox must not outlive the call
    script = "sleep 300 & echo $! > bg.pid; wait"
    started = time.monotonic()
    result = await shell(rules=(SH,), sandbox="auto")({"argv": ["sh", "-c", script], "timeout_secs": 0.5}, ctx)
    assert result.is_error and "timed out" in result.text and time.monotonic() - started < 10
    with trio.fail_after(10):
        while subprocess.run(["pgrep", "-f", "sleep 300"], capture_output=True).stdout.strip():
            await trio.sleep(0.05)


async def test_landlock_asked_for_by_name(ctx, tmp_path):
    if sandbox.probe("landlock") is not None:
        pytest.skip(sandbox.probe("landlock"))
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    result = await shell("cat", sandbox="landlock")({"argv": ["cat", str(secret)]}, ctx)
    assert result.is_error and "Permission denied" in result.text and "s3cr3t" not in result.text


# --- where no sandbox can be had ------------------------------------------------------------------------------

@pytest.fixture
def no_sandbox(tmp_path, monkeypatch):
    """A host with neither: bwrap gone from PATH and a kernel without Landlock."""
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path))
    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 0)
    sandbox.probe.cache_clear()


@pytest.mark.parametrize("mode", ["auto", "bubblewrap", "landlock"])
def test_without_a_sandbox_shell_exec_is_refused_at_load(no_sandbox, mode):
    from runtime.errors import ConfigError

    for tools in (ToolsConfig(shell_exec_enabled=True, shell_allowlist=["ls"], shell_sandbox=mode),
                  ToolsConfig(shell_exec_enabled=True, shell_sandbox=mode,
                              shell_rules=[ShellRule(program="ls", args=["-l"])])):
        with pytest.raises(ConfigError) as refused:
            tools_shell.register(ToolRegistry(), Config(tools=tools))
        line = str(refused.value)
        assert "\n" not in line and f'shell_sandbox: "{mode}" but this host gives no sandbox' in line
        assert "install bubblewrap" in line and 'shell_sandbox = "off"' in line and "literal" in line


async def test_off_runs_only_literal_rules_unsandboxed(no_sandbox, ctx):
    registry = ToolRegistry()
    literal = ShellRule(program="echo", args=["hello"])
    tools_shell.register(registry, config(rules=(literal,), sandbox="off"))  # no sandbox needed, none asked for
    run = shell("echo", rules=(literal, ShellRule(program="echo", rest="*")), sandbox="off")
    assert "hello" in (await run({"argv": ["echo", "hello"]}, ctx)).text
    for argv in (["echo", "other"], ["echo", "hello", "more"]):  # the allowlist and the glob rule: not without a box
        refused = await run({"argv": argv}, ctx)
        assert refused.is_error and "not" in refused.text, argv


async def test_a_required_sandbox_that_stops_working_refuses_the_call(ctx, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", path_with(tmp_path, "touch"))
    refused = await shell("touch", sandbox="bubblewrap")({"argv": ["touch", "marker"]}, ctx)
    assert refused.is_error and 'shell_sandbox = "bubblewrap" but this host gives no sandbox' in refused.text
    assert "bwrap (bubblewrap) is not on PATH" in refused.text
    assert not os.path.exists(os.path.join(ctx.workspace, "marker"))  # never unsandboxed instead
    failing = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    monkeypatch.setenv("PATH", path_with(tmp_path / "b", "touch", bwrap=failing))
    sandbox.probe.cache_clear()
    refused = await shell("touch", sandbox="bubblewrap")({"argv": ["touch", "marker"]}, ctx)
    assert refused.is_error and "cannot build a sandbox here" in refused.text and "No permissions" in refused.text


def path_with(tmp_path, *programs: str, bwrap: str | None = None) -> str:
    """A PATH of one directory holding ``programs`` (and a fake ``bwrap`` script, if given)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for program in programs:
        (bin_dir / program).symlink_to(shutil.which(program))
    if bwrap is not None:
        (bin_dir / "bwrap").write_text(bwrap)
        (bin_dir / "bwrap").chmod(0o755)
    return str(bin_dir)


# --- programs that run a command from their arguments: contained, or refused -----------------------------------

# Each runs `bash payload.sh` (a file the model wrote into the workspace), which reads a
# secret outside the workspace, writes outside it and connects to a loopback listener.
# By name (not on the RUNS_COMMANDS list: only the sandbox stops them) ...
BY_NAME = {
    "setarch": ["setarch", os.uname().machine, "bash", "payload.sh"],
    "linux64": ["linux64", "bash", "payload.sh"],
    "logsave": ["logsave", "log.txt", "bash", "payload.sh"],
    "choom": ["choom", "-n", "0", "--", "bash", "payload.sh"],
    "cpp": ["cpp", "-wrapper", "bash,payload.sh", "empty.c"],
    "sotruss": ["sotruss", "bash", "payload.sh"],
    "memusage": ["memusage", "bash", "payload.sh"],
    "gpg-connect-agent": ["gpg-connect-agent", "-E", shutil.which("bash") or "/bin/bash", "payload.sh"],
    "scriptlive": ["scriptlive", "-c", "bash payload.sh", "-t", "timing", "typescript"],
    "debconf": ["debconf", "bash", "payload.sh"],
    "dbus-run-session": ["dbus-run-session", "--", "bash", "payload.sh"],
    "install": ["install", "-s", "--strip-program=bash", "payload.sh", "out.sh"],
}
# ... and by the glob the checker used to advise (rest = "[!-]*"), which each of these passes.
BY_GLOB = {
    "git": [["git", "init", "."], ["git", "config", "alias.x", "!bash payload.sh"], ["git", "x"]],
    "sed": [["sed", "1e bash payload.sh", "payload.sh"]],
    "tar": [["tar", "cfI", "out.tar", "bash payload.sh", "payload.sh"]],
    "xargs": [["xargs", "bash", "payload.sh"]],
    "env": [["env", "bash", "payload.sh"]],
}


FAILS_CLOSED = {
    ("bubblewrap", "debconf"), ("landlock", "debconf"),  # its frontend wants /var/cache/debconf, not there
    ("landlock", "choom"),  # writes /proc/PID/oom_score_adj: /proc is refused
    ("landlock", "dbus-run-session"),  # its bus is an AF_UNIX socket: refused by the seccomp filter
    ("landlock", "scriptlive"),  # opens /dev/ptmx: not among the devices allowed
}


def attack_workspace(workspace, secret, outside, port):
    (workspace / "payload.sh").write_text(
        f"touch ran\ncat {secret} > leaked.txt 2>&1\necho pwned > {outside}/written\n"
        f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected > net.txt\n"
        "echo OK\n")  # the Assuan greeting gpg-connect-agent -E waits for
    for name in ("empty.c", "timing", "typescript"):
        (workspace / name).write_text("")


def attack_calls(program):
    return BY_GLOB.get(program) or [BY_NAME[program]]


def leaked(workspace, outside, listener) -> list[str]:
    """What the payload got that it must not (after a run)."""
    found = []
    if "s3cr3t" in (workspace / "leaked.txt").read_text() if (workspace / "leaked.txt").exists() else False:
        found.append("read the secret")
    if (outside / "written").exists():
        found.append("wrote outside")
    if listener.connected():
        found.append("connected")
    return found


@pytest.mark.parametrize("program", sorted(BY_NAME) + sorted(BY_GLOB))
async def test_an_attack_through_arguments_is_contained(program, kind, tmp_path):
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed (its refusal without a sandbox is tested at config level)")
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.txt"
    secret.write_text("s3cr3t")
    listener = Listener()
    try:
        plain_ws = tmp_path / "plain"
        plain_ws.mkdir()
        attack_workspace(plain_ws, secret, outside, listener.port)
        for argv in attack_calls(program):  # the attack works: the same argv, run as tern's user
            subprocess.run(argv, cwd=plain_ws, capture_output=True, stdin=subprocess.DEVNULL, timeout=30)
        if not (plain_ws / "ran").exists():
            pytest.skip(f"{program}'s attack does not run its payload on this host")
        assert leaked(plain_ws, outside, listener) == ["read the secret", "wrote outside", "connected"]
        (outside / "written").unlink()

        workspace = tmp_path / "ws"
        workspace.mkdir()
        attack_workspace(workspace, secret, outside, listener.port)
        if program in BY_GLOB:
            tools = ToolsConfig(shell_exec_enabled=True, shell_rules=[ShellRule(program=program, rest="[!-]*")])
        else:
            tools = ToolsConfig(shell_exec_enabled=True, shell_allowlist=[program])
        cfg = Config(tools=tools, governance=ALLOW_SHELL)
        results = [await call_through_pipeline(cfg, workspace, {"argv": argv}) for argv in attack_calls(program)]
        assert leaked(workspace, outside, listener) == [], [r.text for r in results]
        assert not (workspace / "net.txt").exists()
        # the payload ran in the box (the containment held a running attack), but where the
        # program cannot work there at all: it fails closed
        assert (workspace / "ran").exists() == ((kind, program) not in FAILS_CLOSED), [r.text for r in results]
    finally:
        listener.close()


@pytest.mark.parametrize("program", sorted(BY_NAME) + sorted(BY_GLOB))
def test_an_attack_through_arguments_is_refused_without_a_sandbox(program, tmp_path):
    from runtime.config.load import parse_config
    from runtime.errors import ConfigError

    if program in BY_GLOB:
        text = f'[tools]\nshell_exec_enabled = true\nshell_sandbox = "off"\n' \
               f'[[tools.shell_rules]]\nprogram = "{program}"\nrest = "[!-]*"\n'
    else:
        text = f'[tools]\nshell_exec_enabled = true\nshell_sandbox = "off"\nshell_allowlist = ["{program}"]\n'
    with pytest.raises(ConfigError) as refused:
        parse_config(text, "config.toml", tmp_path)
    line = str(refused.value)
    assert "\n" not in line and 'shell_sandbox = "off" would run it unsandboxed' in line
    assert "[!-]" not in line.split("unsandboxed", 1)[1]  # the advice suggests no glob


def test_the_checker_never_advises_a_glob():
    from runtime.config.shell_policy import rule_problems, why_refused

    advice = [why_refused(p) for p in ("git", "sed", "tar", "xargs", "env", "find")]
    advice += rule_problems([], [ShellRule(program="git", rest="*")])
    advice += rule_problems(["ls"], [ShellRule(program="git", rest="[!-]*")], "off")
    assert advice and all(a and "literal" in a for a in advice)
    assert not any('"[!-]*"' in a or "rest = " in a for a in advice), advice
