"""``tern scripts list|approve|revoke`` as real subprocesses, and what the tool then does
with the same state directory."""

import hashlib
import json
import os
import pwd

import pytest

from runtime.config import load_config
from runtime.kernel.builtins import register_builtins
from runtime.kernel.pipeline import ToolPipeline
from runtime.kernel.registry import ToolRegistry
from tests.test_cli import tern

PENDING = "Error: Script 'hello' is pending approval."


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "scripts").mkdir()
    script = tmp_path / "scripts" / "hello"
    script.write_text('#!/bin/sh\necho "hello $1"\n')
    script.chmod(0o755)
    path = tmp_path / "config.toml"
    # The tool's own gate is under test here, not the approval of each call (tests/test_approvals.py).
    path.write_text('[state]\ndir = "state"\n[scripts]\ndir = "scripts"\n'
                    '[[governance.rules]]\ntool = "script_run"\ndecision = "allow"\n'
                    '[[agents]]\nname = "a"\nkind = "echo"\ntools = ["script_*"]\n')
    return tmp_path, str(path), hashlib.sha256(script.read_bytes()).hexdigest()


async def run_script(config_path: str, name: str = "hello"):
    """The tool as agent ``a`` calls it, in this process, on the state the CLI wrote."""
    config = load_config(config_path).config
    registry = ToolRegistry()
    register_builtins(registry, config)
    pipeline = ToolPipeline(registry, config)
    return await pipeline.call("script_run", {"name": name, "args": ["world"]}, run=pipeline.run(config.agents[0]))


def audit_records(tmp_path) -> list[dict]:
    path = tmp_path / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_approve_lets_the_tool_run_and_revoke_makes_it_pending(setup):
    tmp_path, config, sha256 = setup
    assert (await run_script(config)).text.startswith(PENDING)

    done = tern("scripts", "approve", "hello", "--config", config, env_extra={"USER": "mallory"})
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"approved hello: sha256 {sha256}\n"
    result = await run_script(config)
    assert not result.is_error and result.text == "hello world\n"

    listed = tern("scripts", "list", "--json", "--config", config)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["scripts"]
    assert row["name"] == "hello" and row["sha256"] == sha256 and row["status"] == "approved"
    assert row["approved_by"] == pwd.getpwuid(os.getuid()).pw_name and row["approved_at"] > 0

    done = tern("scripts", "revoke", "hello", "--config", config)
    assert done.returncode == 0 and done.stdout == f"revoked hello: sha256 {sha256} is no longer approved\n"
    assert (await run_script(config)).text.startswith(PENDING)
    kinds = [(r["kind"], r["script"], r["sha256"]) for r in audit_records(tmp_path)]
    assert kinds == [("script_approved", "hello", sha256), ("script_revoked", "hello", sha256)]


async def test_an_edit_after_a_cli_approval_is_pending_again(setup):
    tmp_path, config, sha256 = setup
    assert tern("scripts", "approve", "hello", "--config", config).returncode == 0
    (tmp_path / "scripts" / "hello").write_text('#!/bin/sh\necho "pwned $1"\n')
    result = await run_script(config)
    assert result.is_error and result.text.startswith(PENDING) and sha256[:12] in result.text
    listed = tern("scripts", "list", "--config", config)
    assert listed.returncode == 0 and listed.stdout.split()[:2] == ["hello", "pending"]


def test_approve_refuses_a_symlink_and_a_missing_script_in_one_line(setup):
    tmp_path, config, _ = setup
    (tmp_path / "scripts" / "alias").symlink_to("hello")
    (tmp_path / "scripts" / "out").symlink_to("/bin/sh")
    for name, words in [("alias", "script 'alias' is a symlink"), ("out", "script 'out' is a symlink"),
                        ("helo", "there is no script named 'helo' (did you mean 'hello'?)"),
                        ("../hello", "'../hello' is not a script name")]:
        done = tern("scripts", "approve", name, "--config", config)
        assert done.returncode == 1 and done.stdout == "", name
        assert done.stderr.startswith(f"tern: {words}") and done.stderr.count("\n") == 1, done.stderr
    assert audit_records(tmp_path) == []
    done = tern("scripts", "revoke", "hello", "--config", config)
    assert done.returncode == 1 and done.stderr == "tern: no approval of script 'hello' is recorded\n"


async def test_approve_with_sha256_approves_only_the_content_reviewed(setup):
    tmp_path, config, sha256 = setup
    other = "0" * 64
    done = tern("scripts", "approve", "hello", "--sha256", other, "--config", config)
    assert done.returncode == 1 and "nothing approved" in done.stderr and sha256 in done.stderr
    assert (await run_script(config)).text.startswith(PENDING)
    done = tern("scripts", "approve", "hello", "--sha256", sha256.upper(), "--config", config)
    assert done.returncode == 0, done.stderr
    assert not (await run_script(config)).is_error


def test_scripts_are_off_without_a_dir(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[state]\ndir = "state"\n')
    done = tern("scripts", "list", "--config", str(path))
    assert done.returncode == 2 and done.stderr == f"tern: scripts are off: set [scripts] dir in {path}\n"
