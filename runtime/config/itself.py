"""Whether a command runs tern itself: a config must never make tern start tern.

``tern setup`` writes an assistant's entry that starts ``tern mcp``; ``tern mcp import``
copied such an entry back into tern's own ``[[mcp_servers]]``, and then every tern that
booted a kernel started another ``tern mcp``, which booted a kernel that started the
next: a chain of processes that outlived the command. So an entry that starts tern on
the same config is refused at load (``itself``, from ``config.load``) and ``tern mcp
import`` skips every entry that runs tern. At spawn (``mcp.client.stdio``) every MCP
server tern starts gets ``DEPTH_ENV``, one more than tern's own: a tern started by a
tern starts no tern (a loop through two configs ends there), and a tern ``MAX_DEPTH``
deep (a wrapper that hides tern, ``sh -c "tern mcp"``) starts no stdio server at all.
Another tern on another config stays a fine MCP server of this one.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["runs_tern", "itself", "DEPTH_ENV", "MAX_DEPTH", "depth"]

DEPTH_ENV = "TERN_SPAWN_DEPTH"
MAX_DEPTH = 2  # tern -> a server -> a tern under it: that one starts no stdio server


def depth() -> int:
    """How many terns started this process through their MCP servers (0: a person did)."""
    value = os.environ.get(DEPTH_ENV, "")
    return int(value) if value.isdigit() and len(value) < 4 else 0


def _is_python(name: str) -> bool:
    name = name.lower().removesuffix(".exe")
    return name.startswith(("python", "pypy")) or name in ("py", "uv", "uvx", "pipx")


def runs_tern(command: str, args: list[str]) -> bool:
    """``command args`` starts tern: the ``tern`` command, a ``tern*.pyz``, ``python -m
    runtime``, or the very file this tern runs from."""
    base = os.path.basename(command).lower()
    if base.removesuffix(".exe") == "tern" or base.endswith(".pyz") and base.startswith("tern"):
        return True
    if not _is_python(base):
        return False
    if args[:2] == ["-m", "runtime"] or "tern" in args[:2] and base in ("uvx", "pipx"):
        return True
    first = next((arg for arg in args if not arg.startswith("-")), "")
    name = os.path.basename(first).lower()
    if name.endswith(".pyz") and name.startswith("tern"):
        return True
    own = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return bool(first) and bool(own) and own.endswith(".pyz") and os.path.abspath(first) == own


def itself(command: str, args: list[str], cwd: str, config: Path) -> bool:
    """``command args`` starts tern on the config ``config`` (the file being loaded): it
    names that file with ``--config``, or names none (so it would take its default, which
    is this file or one nobody named: name it to mean another tern)."""
    if not runs_tern(command, args):
        return False
    named = next((args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--config"), None)
    named = named or next((arg.split("=", 1)[1] for arg in args if arg.startswith("--config=")), None)
    if named is None:
        return True
    where = Path(cwd or os.getcwd())
    try:
        return (where / Path(named).expanduser()).resolve() == config.resolve()
    except OSError:
        return False
