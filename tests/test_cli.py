"""The tern command line, run as a real subprocess (``python -m runtime``)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import __version__

ROOT = Path(__file__).resolve().parent.parent


def tern(*args, cwd=None, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=60)


def test_version():
    done = tern("version")
    assert done.returncode == 0 and done.stdout == f"tern {__version__}\n" and done.stderr == ""


def test_version_imports_no_network_stack():
    code = (
        "import sys; from runtime.cli import main\n"
        "try: main(['version'])\nexcept SystemExit: pass\n"
        "heavy = [m for m in ('httpx', 'h11', 'wsproto', 'trio_websocket', 'trio', 'msgspec') if m in sys.modules]\n"
        "print(heavy, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0
    assert done.stderr.strip() == "[]"


def test_help_everywhere():
    for args in (
        ["--help"],
        ["config", "--help"],
        ["config", "check", "--help"],
        ["serve", "--help"],
        ["mcp", "--help"],
        ["mcp", "restart", "--help"],
        ["setup", "--help"],
        ["reload", "--help"],
        ["cache", "prune", "--help"],
        ["version", "--help"],
    ):
        done = tern(*args)
        assert done.returncode == 0, args
        assert "usage: tern" in done.stdout


def test_config_check_summarises(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(
        '[[agents]]\nname="e"\nkind="echo"\n[[mcp_servers]]\nname="fs"\n'
        '[mcp_servers.transport]\ntype="stdio"\ncommand="npx"\n'
        '[[a2a.external_agents]]\nname="peer"\nurl="http://127.0.0.1:9"\n'
    )
    done = tern("config", "check", str(path))
    assert done.returncode == 0, done.stderr
    assert f"{path}: OK" in done.stdout
    assert "agents (1): e" in done.stdout
    assert "MCP servers (1): fs (stdio)" in done.stdout
    assert "A2A peers (1): peer" in done.stdout


def test_bad_config_is_one_line_exit_2_no_traceback(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[[mcp_servers]]\nname="x"\n[mcp_servers.transport]\ntype="tcp"\n')
    for args in (
        ("config", "check", str(path)),
        ("--config", str(path), "config", "show"),
        ("config", "show", "--config", str(path)),
    ):
        done = tern(*args)
        assert done.returncode == 2
        assert done.stdout == ""
        assert done.stderr == (
            f'tern: {path}: mcp_servers[0].transport.type: expected "stdio", "http" or "sse", got "tcp"\n'
        )


def test_config_show_masks_secrets(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[server]\napi_key = "sk-live-123456789"\n')
    done = tern("config", "show", "--json", cwd=tmp_path, env_extra={"TERN_CONFIG": str(path)})
    assert done.returncode == 0, done.stderr
    assert "sk-live" not in done.stdout
    assert json.loads(done.stdout)["server"]["api_key"] == "********"


def test_tern_config_env_names_a_missing_file(tmp_path):
    done = tern("config", "check", cwd=tmp_path, env_extra={"TERN_CONFIG": str(tmp_path / "nope.toml")})
    assert done.returncode == 2
    assert done.stderr.startswith("tern: ") and "no such config file (from TERN_CONFIG)" in done.stderr


def test_missing_subcommand_is_a_usage_error():
    done = tern("config")
    assert done.returncode == 2 and "needs a subcommand" in done.stderr


def test_no_command_prints_help():
    done = tern()
    assert done.returncode == 2 and "usage: tern" in done.stderr


@pytest.mark.parametrize("level", ["debug", "info"])
def test_logs_go_to_stderr_only(tmp_path, level):
    done = tern(
        "config",
        "check",
        "--log-level",
        level,
        "--log-format",
        "json",
        cwd=tmp_path,
        env_extra={"XDG_CONFIG_HOME": str(tmp_path)},
    )
    assert done.returncode == 0
    assert "<bundled config.toml>: OK" in done.stdout


def test_a_reader_that_leaves_early_is_not_an_error():
    """``tern config show | head -c 1``: the pipe closes under tern's output. That is how a
    pipe ends: exit 0 and nothing on stderr, not ``internal error: BrokenPipeError`` and 70."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for _ in range(20):
        process = subprocess.Popen([sys.executable, "-m", "runtime", "config", "show"], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env)
        assert process.stdout.read(1)
        process.stdout.close()
        _, err = process.communicate(timeout=30)
        assert process.returncode == 0 and b"BrokenPipe" not in err, err
