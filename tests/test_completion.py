"""``tern completion bash|zsh|fish``, run by the real shells: bash completes through a
simulated ``COMP_WORDS``, zsh's helpers run under ``compinit``, fish answers
``complete -C``. Each shell runs a ``tern`` on PATH that is this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli import build_parser
from runtime.cli.completion import spec
from tests.test_cli import ROOT, tern


@pytest.fixture
def shell_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose ``tern`` is this checkout, and a config with two agents."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "tern"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m runtime "$@"\n')
    wrapper.chmod(0o755)
    config = tmp_path / "agents.toml"
    config.write_text('[[agents]]\nname = "alpha"\nkind = "echo"\n[[agents]]\nname = "beta-2"\nkind = "echo"\n')
    (tmp_path / "notes.txt").write_text("")
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "CONFIG": str(config),
            "DIR": str(tmp_path)}


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


BASH_CASES = [
    # (the words, the cursor word last) -> what bash offers
    (["tern", ""], None),
    (["tern", "co"], ["config", "completion", "conversations"]),
    (["tern", "config", ""], ["check", "show"]),
    (["tern", "--log-level", ""], ["debug", "info", "warning", "error"]),
    (["tern", "a2a", "send", "--dialect", ""], ["0.1", "0.3", "1.0"]),
    (["tern", "approvals", "--state", "p"], ["pending"]),
    (["tern", "serve", "--li"], ["--listen"]),
    (["tern", "serve", "--listen", ""], []),  # a free value: nothing to offer
    (["tern", "--config", "$CONFIG", "run", ""], ["alpha", "beta-2"]),
    (["tern", "chat", "--config", "$CONFIG", "b"], ["beta-2"]),
    (["tern", "config", "check", "$DIR/no"], ["$DIR/notes.txt"]),
    (["tern", "mcp", ""], ["servers", "import", "lock", "restart"]),
]


def test_bash_registers_and_completes(shell_env):
    assert _run(["bash", "-c", "source <(tern completion bash); complete -p tern"], shell_env).strip() \
        == "complete -F _tern tern"
    lines = ["source <(tern completion bash)"]
    for words, _ in BASH_CASES:
        quoted = " ".join(f'"{w}"' for w in words)
        lines.append(f'COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=(); _tern; '
                     'echo "${COMPREPLY[*]}"')
    out = _run(["bash", "-c", "\n".join(lines)], shell_env).splitlines()
    assert len(out) == len(BASH_CASES)
    top = set(spec(build_parser())["tern"].subcommands)
    for (words, expected), got in zip(BASH_CASES, out):
        offered = got.split()
        if expected is None:
            assert set(offered) == top and {"serve", "completion", "config"} <= top
        else:
            wanted = [w.replace("$DIR", shell_env["DIR"]) for w in expected]
            assert sorted(offered) == sorted(wanted), (words, got)


def test_every_command_path_completes_its_subcommands_and_options(shell_env):
    """Generated from the parser: every path's subcommands and options come back."""
    specs = spec(build_parser())
    lines = ["source <(tern completion bash)"]
    paths = list(specs)
    for path in paths:
        words = path.split() + ["-"]
        quoted = " ".join(f'"{w}"' for w in words)
        lines.append(f'COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; COMPREPLY=(); _tern; '
                     'echo "${COMPREPLY[*]}"')
    out = _run(["bash", "-c", "\n".join(lines)], shell_env).splitlines()
    for path, got in zip(paths, out):
        assert set(got.split()) == set(specs[path].options) and "--help" in got, path
    assert {"tern a2a send", "tern audit tail", "tern mcp servers", "tern completion"} <= set(paths)


def test_zsh_script_parses_and_its_helpers_complete(shell_env):
    if shutil.which("zsh") is None:
        _missing("zsh")
    script = tern("completion", "zsh").stdout
    assert script.startswith("#compdef tern\n")
    assert subprocess.run(["zsh", "-n"], input=script, text=True, timeout=30).returncode == 0
    out = _run(["zsh", "-fc", "autoload -U compinit && compinit -u -D; source <(tern completion zsh); "
                "print -r -- ${_comps[tern]}; "
                "_tern_walk config; _tern_candidates ''; "
                "_tern_walk a2a get --dialect; _tern_candidates ''; "
                "_tern_walk --config $CONFIG run; _tern_candidates ''; _tern_agents"], shell_env)
    assert out.splitlines() == ["_tern", "check show", "0.1 0.3 1.0", "@agent", "alpha", "beta-2"]


def test_fish_script_parses_and_completes(shell_env):
    if shutil.which("fish") is None:
        _missing("fish")
    script = tern("completion", "fish").stdout
    assert subprocess.run(["fish", "--no-execute"], input=script, text=True, timeout=30).returncode == 0

    def offered(line: str) -> list[str]:
        out = _run(["fish", "--no-config", "-c", f"tern completion fish | source; complete -C '{line}'"], shell_env)
        return sorted(entry.split("\t")[0] for entry in out.splitlines())

    assert offered("tern config ") == ["check", "show"]
    assert offered("tern a2a cancel --dialect ") == ["0.1", "0.3", "1.0"]
    assert offered(f"tern --config {shell_env['CONFIG']} run ") == ["alpha", "beta-2"]
    assert offered("tern serve --l") == ["--listen", "--log-format", "--log-level"]
    assert f"{shell_env['DIR']}/notes.txt" in offered(f"tern config check {shell_env['DIR']}/n")
    described = _run(["fish", "--no-config", "-c", "tern completion fish | source; complete -C 'tern config '"],
                     shell_env)
    assert "check\tvalidate a config file and summarise it\n" in described  # fish shows each one's help


def test_unknown_shell_is_a_usage_error():
    done = tern("completion", "tcsh")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def _missing(shell: str) -> None:
    """A developer without the shell skips; CI (which installs it) fails."""
    message = f"{shell} is not installed (apt-get install {shell})"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
