"""``tern.mcpb`` and ``server.json``, written by ``build_pyz.py`` beside the pyz, checked with
the official MCP Bundle CLI (npm ``@anthropic-ai/mcpb``: validate, info, unpack, clean), and
the unpacked bundle run the way a desktop host runs it: the command comes from the mcpb
library's own ``getMcpConfigForManifest`` (``${__dirname}`` and ``${user_config.*}``
substituted), then the official MCP Python SDK talks to it over stdio."""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest

import build_mcpb
import build_pyz
from tests import peers
from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, write_config
from tests.mcp.test_server_sdk import check, sdk_client

HOST_CONFIG = str(FIXTURES / "mcpb_host_config.mjs")
CLI_TIMEOUT_SECS = 120


@pytest.fixture(scope="module")
def built(pyz: Path) -> Path:
    """The directory holding tern.pyz, tern.mcpb and server.json from the session's build."""
    return pyz.parent


@pytest.fixture(scope="module")
def mcpb() -> list[str]:
    return peers.require(peers.mcpb_cli)


def run_mcpb(mcpb: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*mcpb, *args], capture_output=True, text=True, timeout=CLI_TIMEOUT_SECS, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def host_config(mcpb: list[str], extension: Path, user_config: dict) -> dict:
    """The command, args and env a host would run for the bundle unpacked at ``extension``."""
    index = Path(mcpb[1]).parents[1] / "index.js"  # dist/cli/cli.js -> dist/index.js
    done = subprocess.run([mcpb[0], HOST_CONFIG, str(index), str(extension), json.dumps(user_config)],
                          capture_output=True, text=True, timeout=CLI_TIMEOUT_SECS, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def unpack(mcpb: list[str], built: Path, into: Path) -> Path:
    done = run_mcpb(mcpb, "unpack", str(built / "tern.mcpb"), str(into), cwd=built)
    assert done.returncode == 0, done.stdout + done.stderr
    return into


# --- what the build writes ----------------------------------------------------------


def test_the_bundle_holds_the_manifest_and_the_very_pyz(built: Path) -> None:
    with zipfile.ZipFile(built / "tern.mcpb") as bundle:
        infos = bundle.infolist()
        assert [i.filename for i in infos] == ["manifest.json", "tern.pyz"]
        assert all(i.date_time == build_mcpb.ZIP_DATE for i in infos)
        assert [(i.external_attr >> 16) & 0o777 for i in infos] == [0o644, 0o755]
        assert bundle.read("tern.pyz") == (built / "tern.pyz").read_bytes()
        manifest = json.loads(bundle.read("manifest.json"))
    server = manifest["server"]
    assert server["type"] == "python" and server["entry_point"] == "tern.pyz"
    assert server["mcp_config"]["command"] == "python3"
    assert server["mcp_config"]["args"] == ["${__dirname}/tern.pyz", "mcp"]
    assert server["mcp_config"]["env"] == {"TERN_CONFIG": "${user_config.config}",
                                           "TERN_API_KEY": "${user_config.api_key}"}
    assert server["mcp_config"]["platform_overrides"]["win32"]["command"] == "python"
    assert manifest["user_config"]["api_key"]["sensitive"] is True
    assert manifest["user_config"]["config"]["type"] == "file"
    assert not any(entry.get("required") for entry in manifest["user_config"].values())
    assert manifest["compatibility"] == {"platforms": ["darwin", "linux", "win32"],
                                         "runtimes": {"python": ">=3.10 <3.15"}}
    assert manifest["version"] == build_mcpb.read_version(build_pyz.ROOT)


def test_server_json_describes_the_bundle_as_the_registry_wants(built: Path) -> None:
    entry = json.loads((built / "server.json").read_text())
    assert entry["$schema"] == build_mcpb.SERVER_SCHEMA
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", entry["name"])  # the schema's pattern
    assert 1 <= len(entry["description"]) <= 100
    assert re.fullmatch(r"\d+\.\d+\.\d+", entry["version"])  # a version, never a range
    (package,) = entry["packages"]
    assert package["registryType"] == "mcpb" and package["transport"] == {"type": "stdio"}
    assert package["identifier"].startswith("https://") and entry["version"] in package["identifier"]
    assert package["fileSha256"] == hashlib.sha256((built / "tern.mcpb").read_bytes()).hexdigest()
    variables = {v["name"]: v for v in package["environmentVariables"]}
    assert set(variables) == {"TERN_CONFIG", "TERN_API_KEY"}
    assert variables["TERN_API_KEY"]["isSecret"] is True and variables["TERN_CONFIG"]["format"] == "filepath"
    assert not any(v["isRequired"] for v in variables.values())


def test_registry_inputs_are_checked() -> None:
    args = {"name": "io.github.x/tern", "bundle_url": "https://example.org/tern.mcpb", "bundle_sha256": "0" * 64}
    with pytest.raises(ValueError, match="reverse-DNS"):
        build_mcpb.server_json("1.0.0", "d", **{**args, "name": "tern"})
    with pytest.raises(ValueError, match="https"):
        build_mcpb.server_json("1.0.0", "d", **{**args, "bundle_url": "http://example.org/tern.mcpb"})
    with pytest.raises(ValueError, match="100 characters"):
        build_mcpb.server_json("1.0.0", "x" * 101, **args)


def test_bundle_and_server_json_rebuild_byte_identical(built: Path, tmp_path: Path) -> None:
    done = subprocess.run([shutil.which("python3") or "python3", str(build_pyz.ROOT / "build_pyz.py"), "--offline",
                           "--out", str(tmp_path / "tern.pyz")], capture_output=True, text=True, timeout=600,
                          cwd=build_pyz.ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("tern.pyz", "tern.mcpb", "server.json"):
        assert (tmp_path / name).read_bytes() == (built / name).read_bytes(), name


# --- the official mcpb CLI ----------------------------------------------------------


def test_mcpb_validate_passes_the_manifest_and_fails_a_broken_one(built: Path, mcpb: list[str],
                                                                   tmp_path: Path) -> None:
    with zipfile.ZipFile(built / "tern.mcpb") as bundle:
        manifest = json.loads(bundle.read("manifest.json"))
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    done = run_mcpb(mcpb, "validate", str(tmp_path / "manifest.json"), cwd=tmp_path)
    assert done.returncode == 0 and "validation passes" in done.stdout, done.stdout + done.stderr
    broken = {**manifest, "server": {**manifest["server"], "type": "ruby"}}  # the check can fail
    (tmp_path / "manifest.json").write_text(json.dumps(broken))
    done = run_mcpb(mcpb, "validate", str(tmp_path / "manifest.json"), cwd=tmp_path)
    assert done.returncode != 0 and "server.type" in done.stdout, done.stdout + done.stderr


def test_mcpb_info_unpack_and_clean_take_the_bundle(built: Path, mcpb: list[str], tmp_path: Path) -> None:
    done = run_mcpb(mcpb, "info", str(built / "tern.mcpb"), cwd=tmp_path)
    assert done.returncode == 0 and "tern.mcpb" in done.stdout, done.stdout + done.stderr
    extension = unpack(mcpb, built, tmp_path / "unpacked")
    assert sorted(os.listdir(extension)) == ["manifest.json", "tern.pyz"]
    assert (extension / "tern.pyz").read_bytes() == (built / "tern.pyz").read_bytes()
    done = run_mcpb(mcpb, "validate", str(extension), cwd=tmp_path)  # the directory form, as `pack` checks it
    assert done.returncode == 0, done.stdout + done.stderr
    copy = tmp_path / "copy.mcpb"
    shutil.copyfile(built / "tern.mcpb", copy)
    done = run_mcpb(mcpb, "clean", str(copy), cwd=tmp_path)  # unpacks, validates, repacks
    assert done.returncode == 0 and "validation passes" in done.stdout, done.stdout + done.stderr


# --- run as a host runs it ----------------------------------------------------------


def test_the_unpacked_bundle_serves_mcp_to_the_sdk_with_a_config_chosen_in_the_host(
        built: Path, mcpb: list[str], sdk_python: str, tmp_path: Path) -> None:
    extension = unpack(mcpb, built, tmp_path / "Claude Extensions" / "tern")  # a host's path has spaces
    config = write_config(tmp_path)
    launch = host_config(mcpb, extension, {"config": str(config), "api_key": "not-the-daemons-key"})
    assert launch["args"] == [str(extension / "tern.pyz"), "mcp"]
    assert launch["env"] == {"TERN_CONFIG": str(config), "TERN_API_KEY": "not-the-daemons-key"}
    env = {**tern_env(tmp_path), "PYTHONPATH": "", "SDK_PASS_ENV": "1", **launch["env"]}
    seen = sdk_client(sdk_python, "auto", "--", launch["command"], *launch["args"], env=env)
    check(seen, "2026-07-28")


def test_the_unpacked_bundle_with_nothing_configured_serves_the_bundled_default(
        built: Path, mcpb: list[str], tmp_path: Path) -> None:
    extension = unpack(mcpb, built, tmp_path / "ext")
    launch = host_config(mcpb, extension, {})  # the user filled in nothing: both variables empty
    assert launch["env"] == {"TERN_CONFIG": "", "TERN_API_KEY": ""}
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_STATE_HOME": str(home / ".state"), "TERN_CACHE_DIR": str(home / ".cache"), **launch["env"]}
    process = subprocess.Popen([launch["command"], *launch["args"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=env, cwd=home)
    try:
        for message in ({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "host", "version": "0"}}},
                        {"jsonrpc": "2.0", "method": "notifications/initialized"},
                        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
            process.stdin.write(json.dumps(message).encode() + b"\n")
        process.stdin.flush()
        replies = {}
        buffer = b""
        deadline = time.monotonic() + 60
        while len(replies) < 2:  # raw reads: a buffered readline could hold a reply select() cannot see
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "no reply within 60 s"
            chunk = os.read(process.stdout.fileno(), 65536)
            assert chunk, "tern mcp closed stdout"
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                reply = json.loads(line)
                replies[reply["id"]] = reply
    finally:
        process.kill()
        _, stderr = process.communicate(timeout=10)
    assert replies[1].get("result"), stderr.decode(errors="replace")
    assert replies[1]["result"]["serverInfo"]["name"] == "tern"
    names = [tool["name"] for tool in replies[2]["result"]["tools"]]
    assert names[:3] == ["tern_agent_echo", "tern_agent_files", "tern_agent_assistant"]
