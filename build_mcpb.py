"""What ``build_pyz.py`` writes beside the pyz for MCP hosts: ``tern.mcpb`` and ``server.json``.

- ``tern.mcpb``: an MCP Bundle (the format once called DXT), a zip of ``manifest.json``
  and ``tern.pyz``, which a desktop host such as Claude Desktop installs with one click.
  Its ``mcp_config`` runs ``python3 ${__dirname}/tern.pyz mcp``; the two ``user_config``
  entries (a config file, the daemon's API key) reach tern as ``TERN_CONFIG`` and
  ``TERN_API_KEY``, both optional (empty means unset, which tern already treats so).
- ``server.json``: the MCP registry's description of that bundle (package type ``mcpb``,
  stdio, the same two variables), with the bundle's SHA-256 as the registry requires.

Both are reproducible like the pyz: fixed timestamps and modes, sorted entries, JSON
with a fixed key order. Stdlib only (``build_pyz.py`` runs before anything is installed).
The design is in docs/packaging.md.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from pathlib import Path

#: The bundle manifest spec version written (mcpb 2.x validates 0.1 to 0.4; 0.3 is the
#: newest that every current host reads).
MANIFEST_VERSION = "0.3"
#: The registry's server.json schema written.
SERVER_SCHEMA = "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json"
#: The registry name (reverse DNS of the publisher's namespace) unless --registry-name says.
REGISTRY_NAME = "io.github.tern-runtime/tern"
#: Where the bundle is published unless --bundle-url says; {version} is filled in.
BUNDLE_URL = "https://github.com/tern-runtime/tern/releases/download/v{version}/tern.mcpb"
PYZ_NAME = "tern.pyz"
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
DESCRIPTION_MAX = 100  # the registry's limit on server.json's description

CONFIG_HELP = ("A tern config file (config.toml). Leave empty for tern's usual search: "
               "./config.toml, then the user config directory, then the bundled default.")
KEY_HELP = ("The API key of a running tern daemon, passed as TERN_API_KEY (read when the config's [server] "
            "api_key_env names it, as the default config's does), so this server relays to the daemon and shares "
            "its kernel, audit log and MCP connections. Leave empty to serve from a kernel of its own.")


def read_version(root: Path) -> str:
    """``runtime.__version__``, read without importing the package."""
    text = (root / "runtime" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    if not match:
        raise ValueError("runtime/__init__.py has no __version__ line")
    return match.group(1)


def read_description(root: Path) -> str:
    """The one-line description in pyproject.toml (the registry shows it)."""
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^description = "([^"]+)"$', text, re.M)
    if not match:
        raise ValueError("pyproject.toml has no description line")
    return match.group(1)


def python_range(pythons: tuple[str, ...]) -> str:
    """``>=3.10 <3.15`` for the supported ``3.10`` to ``3.14``."""
    major, minor = pythons[-1].split(".")
    return f">={pythons[0]} <{major}.{int(minor) + 1}"


def manifest(version: str, description: str, pythons: tuple[str, ...], platforms: list[str]) -> dict:
    """The bundle's ``manifest.json``."""
    args = ["${__dirname}/" + PYZ_NAME, "mcp"]
    return {
        "manifest_version": MANIFEST_VERSION,
        "name": "tern",
        "display_name": "tern",
        "version": version,
        "description": description,
        "long_description": (
            "Every tern agent as an MCP tool (tern_agent_NAME: a message in, the reply and a context_id out), "
            "plus the kernel tools and presets your config exposes. If a tern daemon runs with the same "
            "config, this server relays to it; otherwise it runs a kernel of its own. Needs CPython "
            f"{pythons[0]} to {pythons[-1]} as python3 (python on Windows)."
        ),
        "author": {"name": "tern contributors"},
        "license": "MIT",
        "keywords": ["agents", "mcp", "a2a", "trio"],
        "server": {
            "type": "python",
            "entry_point": PYZ_NAME,
            "mcp_config": {
                "command": "python3",
                "args": args,
                "env": {"TERN_CONFIG": "${user_config.config}", "TERN_API_KEY": "${user_config.api_key}"},
                # The python.org installer for Windows puts python (and py), not python3, on PATH.
                "platform_overrides": {"win32": {"command": "python", "args": args}},
            },
        },
        "tools_generated": True,  # the tools are the config's agents: known only once it runs
        "compatibility": {"platforms": platforms, "runtimes": {"python": python_range(pythons)}},
        "user_config": {
            "config": {"type": "file", "title": "Config file", "description": CONFIG_HELP,
                       "required": False, "default": ""},
            "api_key": {"type": "string", "title": "Daemon API key", "description": KEY_HELP,
                        "required": False, "sensitive": True, "default": ""},
        },
    }


def bundle_bytes(manifest_data: dict, pyz: bytes) -> bytes:
    """The ``.mcpb`` zip: ``manifest.json`` and the pyz, sorted, fixed dates and modes."""
    members = {"manifest.json": (json_bytes(manifest_data), 0o644), PYZ_NAME: (pyz, 0o755)}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(members):
            data, mode = members[name]
            info = zipfile.ZipInfo(name, date_time=ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, so the mode below means what it says
            info.external_attr = (0o100000 | mode) << 16
            archive.writestr(info, data, compresslevel=9)
    return buffer.getvalue()


def server_json(version: str, description: str, *, name: str, bundle_url: str, bundle_sha256: str) -> dict:
    """The registry entry for the bundle (schema ``SERVER_SCHEMA``)."""
    if len(description) > DESCRIPTION_MAX:
        raise ValueError(f"the registry allows {DESCRIPTION_MAX} characters of description, not {len(description)}")
    if not re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", name):
        raise ValueError(f"registry name {name!r}: expected reverse-DNS namespace/name, e.g. io.github.you/tern")
    if not bundle_url.startswith("https://"):
        raise ValueError(f"bundle URL {bundle_url!r}: the registry wants an https download URL")
    return {
        "$schema": SERVER_SCHEMA,
        "name": name,
        "title": "tern",
        "description": description,
        "version": version,
        "packages": [{
            "registryType": "mcpb",
            "identifier": bundle_url.format(version=version),
            "version": version,
            "fileSha256": bundle_sha256,
            "runtimeHint": "python3",
            "transport": {"type": "stdio"},
            "environmentVariables": [
                {"name": "TERN_CONFIG", "description": CONFIG_HELP, "format": "filepath",
                 "isRequired": False, "isSecret": False},
                {"name": "TERN_API_KEY", "description": KEY_HELP, "isRequired": False, "isSecret": True},
            ],
        }],
    }


def json_bytes(data: dict) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write(path: Path, data: bytes) -> None:
    """Write ``data`` whole or not at all (a partial file, then a rename)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    partial.replace(path)


def write_for_hosts(root: Path, pyz: bytes, out_dir: Path, *, pythons: tuple[str, ...], platforms: list[str],
                    registry_name: str = REGISTRY_NAME, bundle_url: str = BUNDLE_URL) -> tuple[Path, Path]:
    """Write ``tern.mcpb`` and ``server.json`` into ``out_dir``; return their paths."""
    version, description = read_version(root), read_description(root)
    bundle = bundle_bytes(manifest(version, description, pythons, platforms), pyz)
    entry = server_json(version, description, name=registry_name, bundle_url=bundle_url,
                        bundle_sha256=hashlib.sha256(bundle).hexdigest())
    mcpb_path, server_path = out_dir / "tern.mcpb", out_dir / "server.json"
    write(mcpb_path, bundle)
    write(server_path, json_bytes(entry))
    return mcpb_path, server_path
