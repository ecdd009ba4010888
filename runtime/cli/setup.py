"""``tern setup claude|cursor|vscode``: write tern into a desktop assistant's MCP config.

Each assistant keeps its MCP servers in a JSON file of its own (``ASSISTANTS``): Claude
Desktop and Cursor under ``mcpServers``, VS Code under ``servers`` with
``"type": "stdio"``. The entry tern writes starts ``tern mcp`` the way this tern runs
now, with nothing left to the assistant's environment: the absolute interpreter path
(assistants start servers with a minimal ``PATH``), the absolute path of ``tern.pyz``
or ``-m runtime`` (with ``PYTHONPATH`` when the package is not installed for that
interpreter), and ``--config`` with the absolute path of the config file this tern
would use here (an assistant starts tern in a directory of its own choosing). That
config is loaded first, so an entry is never written for a tern that would not start,
and a config with an API key gets a note on passing it (``env``) to share a daemon;
tern never writes the key itself into another program's file.

The file is merged, never replaced: every other server is kept as it is, an existing
entry of that name has its ``command``, ``args`` (and ``type``) updated and keeps
the rest (an ``env`` the user added, say). A file that is not valid JSON (or not an
object) is refused and left alone: VS Code allows comments, which a JSON rewrite
would lose. Before a changed file is written, the old one is copied to a
time-stamped backup beside it; the new one is written to a temporary file and renamed
over it, with the old file's mode. ``--print`` shows the merged file and writes
nothing; ``--path`` names another file (a project's ``.cursor/mcp.json``, a VS Code
user profile's ``mcp.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from runtime.cli.common import Commands
from runtime.errors import UsageError

# assistant -> (its name, the key that holds servers, whether entries carry "type": "stdio")
ASSISTANTS = {
    "claude": ("Claude Desktop", "mcpServers", False),
    "cursor": ("Cursor", "mcpServers", False),
    "vscode": ("VS Code", "servers", True),
}
MAX_FILE_BYTES = 4 * 1024 * 1024


def add_commands(commands: Commands) -> None:
    setup = commands.add("setup", cmd_setup, "add tern (tern mcp) to a desktop assistant's MCP config file: "
                         "claude (Claude Desktop), cursor or vscode")
    setup.add_argument("assistant", choices=sorted(ASSISTANTS), help="whose config file to write")
    setup.add_argument("--path", metavar="FILE", help="the config file (default: the assistant's usual one; "
                       "vscode: .vscode/mcp.json here)")
    setup.add_argument("--print", dest="dry_run", action="store_true",
                       help="print the merged file and write nothing")
    setup.add_argument("--name", default="tern", help="the server's name in that file (default: tern)")
    setup.add_argument("--standalone", action="store_true",
                       help="start tern mcp --standalone (never relay to a running daemon)")


def default_path(assistant: str) -> Path:
    """Where each assistant reads its MCP servers, on this platform."""
    home = Path.home()
    if assistant == "claude":
        if sys.platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / "claude_desktop_config.json"
        if sys.platform == "win32":
            return Path(os.environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude" / \
                "claude_desktop_config.json"
        return Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude" / "claude_desktop_config.json"
    if assistant == "cursor":
        return home / ".cursor" / "mcp.json"
    return Path.cwd() / ".vscode" / "mcp.json"


def invocation(config_file: Path | None, standalone: bool = False) -> dict[str, Any]:
    """``command``, ``args`` (and ``env`` if needed) that start this tern's ``tern mcp``."""
    import runtime

    package_root = Path(runtime.__file__).absolute().parent.parent
    entry: dict[str, Any] = {"command": os.path.abspath(sys.executable)}  # a venv's python: not resolved
    if package_root.is_file():  # running from tern.pyz: the archive is the package's parent
        args = [str(package_root)]
    else:
        args = ["-m", "runtime"]
        if not _importable_without_pythonpath(package_root):
            entry["env"] = {"PYTHONPATH": str(package_root)}
    if config_file is not None:
        args += ["--config", str(config_file.absolute())]
    entry["args"] = [*args, "mcp", *(["--standalone"] if standalone else [])]
    return entry


def _importable_without_pythonpath(package_root: Path) -> bool:
    """Whether this interpreter imports this very package from anywhere, with no
    ``PYTHONPATH`` (an install, an editable one) as an assistant would start it."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        done = subprocess.run([sys.executable, "-c", "import runtime; print(runtime.__file__)"], env=env,
                              cwd=os.path.abspath(os.sep), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and Path(done.stdout.strip()).absolute().parent.parent == package_root


def merge(text: str, label: str, key: str, name: str, wanted: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The file's JSON with ``wanted`` as server ``name`` under ``key``, and what was done
    (``added``, ``updated`` or ``unchanged``). Raises UsageError for a file that is not a
    JSON object (nothing is written then)."""
    if text.strip():
        try:
            data = json.loads(text)
        except ValueError as exc:
            where = f"line {exc.lineno} column {exc.colno}: {exc.msg}" if hasattr(exc, "lineno") else str(exc)
            raise UsageError(f"{label} is not valid JSON ({where}); nothing was written (comments are not "
                             "kept by a JSON rewrite: remove them, or use --print and paste the entry)") from None
    else:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"{label} holds a JSON {type(data).__name__}, not an object; nothing was written")
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise UsageError(f"{label}: {key} is a JSON {type(servers).__name__}, not an object; nothing was written")
    current = servers.get(name)
    if isinstance(current, dict):
        merged = {**current, **wanted}
        if "env" in wanted and isinstance(current.get("env"), dict):
            merged["env"] = {**current["env"], **wanted["env"]}
        servers[name] = merged
        return data, "unchanged" if merged == current else "updated"
    servers[name] = wanted
    return data, "added"


def _backup(path: Path) -> Path:
    import shutil
    import time

    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(100):
        backup = path.with_name(f"{path.name}.{stamp}{f'-{n}' if n else ''}.bak")
        try:
            fd = os.open(backup, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out, open(path, "rb") as source:
            shutil.copyfileobj(source, out)
        return backup
    raise UsageError(f"cannot find a free backup name beside {path}")


def _write(path: Path, text: str, mode: int) -> None:
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def cmd_setup(args: argparse.Namespace) -> int:
    from runtime.config import load_config

    title, key, typed = ASSISTANTS[args.assistant]
    path = Path(args.path).expanduser() if args.path else default_path(args.assistant)
    loaded = load_config(getattr(args, "config", None))  # the assistant's tern must start: a bad file stops here
    wanted = invocation(loaded.path, args.standalone)
    if typed:
        wanted = {"type": "stdio", **wanted}
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise UsageError(f"{path} is over {MAX_FILE_BYTES // (1024 * 1024)} MiB: not an MCP config file")
        text = path.read_text(encoding="utf-8")
        exists = True
    except FileNotFoundError:
        text, exists = "", False
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    data, done = merge(text, str(path), key, args.name, wanted)
    out = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    if args.dry_run:
        print(out, end="")
        print(f"tern: dry run: {path} would have '{args.name}' {done}; nothing was written", file=sys.stderr)
        return 0
    if done == "unchanged":
        print(f"tern: {path} already starts tern as '{args.name}'; nothing to do", file=sys.stderr)
        return 0
    backup = None
    if exists:
        backup = _backup(path)
        mode = path.stat().st_mode & 0o777
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = 0o600
    try:
        _write(path, out, mode)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    print(f"tern: {done} '{args.name}' in {path}{f' (backup: {backup.name})' if backup else ''}: "
          f"{wanted['command']} {' '.join(wanted['args'])}", file=sys.stderr)
    print(f"tern: restart {title} (or reload its MCP servers) to start it", file=sys.stderr)
    _key_note(loaded.config, wanted)
    return 0


def _key_note(config: Any, entry: dict[str, Any]) -> None:
    """A keyed daemon refuses a ``tern mcp`` without the key (it then serves on its own):
    say how to share it, without writing the secret into the assistant's file."""
    import os

    variable = config.server.api_key_env
    keyed = config.server.api_key or variable and os.environ.get(variable)  # a variable that is unset is no key
    if keyed and variable not in entry.get("env", {}):
        shown = variable or "TERN_API_KEY"
        print(f'tern: this config has an API key: to let tern mcp share a running tern serve, add "env": '
              f'{{"{shown}": "<the key>"}} to the entry (without it, tern mcp serves from its own kernel)',
              file=sys.stderr)
