"""``python3 tern.pyz install``: a ``tern`` command on the user's PATH for the single file,
with its shell completions; ``tern uninstall`` takes them away again.

Every later line of the README and every hint tern prints says ``tern ...``; a person who
copied one file should not have to type ``python3 dist/tern.pyz`` each time. The command
is a two-line shell script that runs this very file with this very Python (so nothing is
copied, and replacing the file upgrades it). It goes to ``$XDG_BIN_HOME`` or
``~/.local/bin`` (``--bin-dir`` for another), the completions where bash, zsh and fish look
for a user's own. A file already there that tern did not write is never overwritten, and
``uninstall`` removes only what carries tern's mark.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from runtime.cli.common import Commands
from runtime.errors import UsageError

__all__ = ["MARK", "add_commands"]

MARK = "# written by tern install"


def add_commands(commands: Commands) -> None:
    install = commands.add("install", cmd_install, "put a tern command on your PATH for this single file "
                                                   "(and its shell completions)")
    install.add_argument("--bin-dir", metavar="DIR", help="where the command goes (default: $XDG_BIN_HOME or "
                                                          "~/.local/bin)")
    uninstall = commands.add("uninstall", cmd_uninstall, "remove the tern command and completions tern install wrote")
    uninstall.add_argument("--bin-dir", metavar="DIR", help="where tern install put it")


def _bin_dir(args: argparse.Namespace) -> Path:
    if args.bin_dir:
        return Path(args.bin_dir).expanduser().absolute()
    return Path(os.environ.get("XDG_BIN_HOME") or Path.home() / ".local" / "bin")


def _completions() -> dict[str, Path]:
    data = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return {"bash": data / "bash-completion" / "completions" / "tern",
            "zsh": data / "zsh" / "site-functions" / "_tern",
            "fish": config / "fish" / "completions" / "tern.fish"}


def _this_file() -> Path:
    """The single file this tern runs from; UsageError when it runs from an install."""
    import runtime

    archive = Path(runtime.__file__).absolute().parent.parent
    if not archive.is_file():
        raise UsageError("tern install is for the single file (python3 tern.pyz install); this tern runs from "
                         f"{archive}, whose installer made its own tern command")
    return archive


def _ours(path: Path) -> bool:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as handle:
            return MARK in handle.read(4096)
    except OSError:
        return False


def _write(path: Path, text: str, mode: int) -> None:
    if path.exists() and not _ours(path):
        raise UsageError(f"{path} exists and tern did not write it: not replaced (move it, or use --bin-dir)")
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text, encoding="utf-8")
    os.chmod(temp, mode)
    os.replace(temp, path)


def cmd_install(args: argparse.Namespace) -> int:
    import shlex

    from runtime.cli import build_parser
    from runtime.cli.completion import script

    archive = _this_file()
    command = _bin_dir(args) / "tern"
    python = os.path.abspath(sys.executable)
    _write(command, f"#!/bin/sh\n{MARK} (remove with: tern uninstall)\n"
                    f"exec {shlex.quote(python)} {shlex.quote(str(archive))} \"$@\"\n", 0o755)
    print(f"tern: installed {command} (runs {archive} with {python})")
    parser = build_parser()
    for shell, path in _completions().items():
        body = script(shell, parser)
        lines = body.split("\n", 1)
        keep = lines[0] + "\n" if lines[0].startswith("#compdef") else ""  # zsh wants its tag first
        _write(path, keep + f"{MARK}\n" + (lines[1] if keep else body), 0o644)
        print(f"tern: {shell} completion in {path}")
    on_path = [Path(p).absolute() for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    if command.parent not in on_path:
        print(f"tern: {command.parent} is not on your PATH: add  export PATH=\"{command.parent}:$PATH\"  to your "
              "shell's startup file", file=sys.stderr)
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    removed = []
    for path in [_bin_dir(args) / "tern", *_completions().values()]:
        if path.exists() and _ours(path):
            path.unlink()
            removed.append(str(path))
    print(f"tern: removed {', '.join(removed)}" if removed else "tern: nothing tern install wrote was found")
    return 0
