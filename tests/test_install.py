"""``python3 tern.pyz install`` puts a ``tern`` command on PATH (#34 item 3): the README's
``tern ...`` lines then work as written; ``tern uninstall`` takes away only what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import __version__


def run(argv: list[str], home: Path, **extra: str) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TERN_CACHE_DIR": str(home / "cache"), **extra}
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, timeout=120)


@pytest.mark.pyz
def test_install_puts_tern_on_path_with_completions_and_uninstall_takes_them_away(pyz: Path, tmp_path: Path):
    home = tmp_path / "home"
    home.mkdir()
    done = run([sys.executable, "-I", str(pyz), "install"], home)
    assert done.returncode == 0, done.stderr
    command = home / ".local" / "bin" / "tern"
    assert f"installed {command}" in done.stdout and "is not on your PATH" in done.stderr
    assert os.access(command, os.X_OK)
    path = f"{command.parent}{os.pathsep}{os.environ['PATH']}"
    version = run(["tern", "version"], home, PATH=path)
    assert version.returncode == 0 and version.stdout == f"tern {__version__}\n", version
    completions = [home / ".local/share/bash-completion/completions/tern",
                   home / ".local/share/zsh/site-functions/_tern", home / ".config/fish/completions/tern.fish"]
    assert all(p.is_file() for p in completions)
    assert completions[1].read_text().startswith("#compdef tern\n")
    bash = subprocess.run(["bash", "-n", str(completions[0])], capture_output=True, text=True)
    assert bash.returncode == 0, bash.stderr
    again = run(["tern", "install"], home, PATH=path)  # idempotent: its own files are replaced
    assert again.returncode == 0 and "is not on your PATH" not in again.stderr, again
    gone = run(["tern", "uninstall"], home, PATH=path)
    assert gone.returncode == 0 and not command.exists() and not any(p.exists() for p in completions), gone


@pytest.mark.pyz
def test_install_never_replaces_a_file_it_did_not_write(pyz: Path, tmp_path: Path):
    home = tmp_path / "home"
    (home / "bin").mkdir(parents=True)
    theirs = home / "bin" / "tern"
    theirs.write_text("#!/bin/sh\necho another tern\n")
    done = run([sys.executable, "-I", str(pyz), "install", "--bin-dir", str(home / "bin")], home)
    assert done.returncode == 2 and "tern did not write it" in done.stderr
    assert theirs.read_text() == "#!/bin/sh\necho another tern\n"
    gone = run([sys.executable, "-I", str(pyz), "uninstall", "--bin-dir", str(home / "bin")], home)
    assert gone.returncode == 0 and theirs.exists()


def test_install_from_a_checkout_says_it_is_for_the_single_file(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "runtime", "install"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert done.returncode == 2 and "for the single file" in done.stderr
