"""tern's MCP server driven by the real MCP Inspector CLI (npm @modelcontextprotocol/inspector
under Node 24): ``tern mcp --standalone`` over stdio and ``POST /mcp`` on a running daemon, in
the legacy (handshake) and modern (2026-07-28, ``server/discover``) protocol eras.

The Inspector is the reference client most users point at a server first, so these check the
exact JSON it prints (``--format json``) and its exit codes: 0 for a result, 5 when the tool
answered ``isError: true`` (the error envelope then goes to stderr, the result still to stdout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests import peers
from tests.test_cli import ROOT

TIMEOUT = 120  # seconds, per Inspector run
AGENT_TOOLS = {"tern_agent_echo", "tern_agent_files", "tern_agent_assistant"}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"  # result _meta key, modern era only


def _clean_env() -> dict:
    """The parent environment without tern's own knobs (a TERN_CONFIG or TERN_API_KEY from
    the developer's shell must not change what the spawned processes do)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}


@pytest.fixture(scope="module")
def inspector() -> list:
    return peers.require(peers.mcp_inspector)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One scratch directory per module: the Inspector's HOME (its catalog, client config and
    secrets live under ~/.mcp-inspector), tern's XDG state and config dirs, and the cwd of
    every tern process (so no ./config.toml is picked up: tern runs its bundled default)."""
    root = tmp_path_factory.mktemp("inspector")
    for sub in ("home", "state", "config", "cwd", "daemon-state"):
        (root / sub).mkdir()
    return root


def tern_stdio_entry(home: Path, era: str | None = None) -> dict:
    """An Inspector ``mcpServers`` entry that spawns ``tern mcp --standalone``."""
    entry = {"command": sys.executable, "args": ["-m", "runtime", "mcp", "--standalone"],
             "env": {"PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(home / "state"),
                     "XDG_CONFIG_HOME": str(home / "config")},
             "cwd": str(home / "cwd")}
    if era is not None:
        entry["protocolEra"] = era
    return entry


def run_inspector(inspector: list, home: Path, *args: str, entry: dict | None = None,
                  expect: int = 0) -> tuple[dict, str]:
    """Run ``inspector --cli ... --format json``; with ``entry``, through a ``--config`` file
    naming it ``tern``. Checks the exit code and returns (stdout JSON, stderr)."""
    argv = [*inspector, "--cli"]
    if entry is not None:
        config = home / f"inspector-{time.monotonic_ns()}.json"
        config.write_text(json.dumps({"mcpServers": {"tern": entry}}))
        argv += ["--config", str(config), "--server", "tern"]
    argv += [*args, "--format", "json"]
    env = _clean_env()
    env.update(MCP_INSPECTOR_SECRET_STORE="memory", HOME=str(home / "home"))
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TIMEOUT, env=env, cwd=home / "cwd")
    shown = f"argv: {argv[2:]}\nexit {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    assert done.returncode == expect, shown
    try:
        return json.loads(done.stdout), done.stderr
    except ValueError:
        raise AssertionError(f"the Inspector's stdout is not one JSON object\n{shown}") from None


def call_echo(inspector, home, *tool_args: str, entry=None, target=(), expect=0):
    args = [*target, "--method", "tools/call", "--tool-name", "tern_agent_echo"]
    if tool_args:
        args += ["--tool-arg", *tool_args]
    out, err = run_inspector(inspector, home, *args, entry=entry, expect=expect)
    assert set(out) == {"result"}, out
    return out["result"], err


def assert_echo(result: dict, text: str, era: str) -> str:
    """The echo agent's reply, checked in full; returns its context_id."""
    assert result["isError"] is False, result
    assert result["content"] == [{"type": "text", "text": text}], result
    structured = result["structuredContent"]
    assert set(structured) == {"reply", "context_id"}, structured
    assert structured["reply"] == text
    assert isinstance(structured["context_id"], str) and structured["context_id"], structured
    assert_era(result, era)
    return structured["context_id"]


def assert_era(result: dict, era: str) -> None:
    """A modern-era result names its server in ``_meta`` (there was no initialize to do it);
    a legacy one has no such key. "auto" against tern, which answers server/discover, is modern."""
    if era in ("modern", "auto"):
        info = result.get("_meta", {}).get(SERVER_INFO)
        assert info and info["name"] == "tern", f"expected the modern era, got {result}"
    else:
        assert SERVER_INFO not in result.get("_meta", {}), f"expected the legacy era, got {result}"


def assert_tools(out: dict) -> None:
    assert set(out) == {"result"}, out
    tools = {t["name"]: t for t in out["result"]["tools"]}
    assert set(tools) == AGENT_TOOLS, sorted(tools)
    echo = tools["tern_agent_echo"]
    assert "Replies with the message it was sent" in echo["description"]
    schema = echo["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["message"]
    assert schema["properties"]["message"]["type"] == "string"
    assert schema["properties"]["context_id"]["type"] == "string"  # optional: not required
    assert schema.get("additionalProperties") is False
    assert echo["outputSchema"]["required"] == ["reply", "context_id"]


def assert_tool_error(result: dict, stderr: str, era: str, *words: str) -> None:
    """Exit 5: the result (isError true, tern's message, no structuredContent) on stdout and
    the Inspector's ``tool_is_error`` envelope on stderr."""
    assert result["isError"] is True, result
    assert "structuredContent" not in result, result
    [item] = result["content"]
    assert item["type"] == "text" and item["text"].startswith("invalid arguments: "), result
    for word in words:
        assert word in item["text"], result
    assert_era(result, era)
    envelopes = [json.loads(line) for line in stderr.splitlines() if line.startswith('{"error"')]
    assert envelopes == [{"error": {"code": "tool_is_error",
                                    "message": "Tool 'tern_agent_echo' returned isError:true."}}], stderr


# --- stdio: tern mcp --standalone ----------------------------------------------------------


def stdio_target(home: Path) -> list:
    """The ad-hoc form: the command after --cli, its environment with -e (legacy by default)."""
    entry = tern_stdio_entry(home)
    env = [arg for key, value in entry["env"].items() for arg in ("-e", f"{key}={value}")]
    return [*env, "--cwd", entry["cwd"], entry["command"], *entry["args"]]


def test_stdio_legacy_tools_list(inspector, home):
    out, _ = run_inspector(inspector, home, *stdio_target(home), "--method", "tools/list")
    assert_tools(out)


def test_stdio_legacy_echo_ad_hoc(inspector, home):
    result, _ = call_echo(inspector, home, "message=hello", target=stdio_target(home))
    assert_echo(result, "hello", "legacy")


@pytest.mark.parametrize("era", ["legacy", "auto", "modern"])
def test_stdio_echo_in_each_era(inspector, home, era):
    entry = tern_stdio_entry(home, era)
    out, _ = run_inspector(inspector, home, "--method", "tools/list", entry=entry)
    assert_tools(out)
    result, _ = call_echo(inspector, home, f"message=hello {era}", entry=entry)
    assert_echo(result, f"hello {era}", era)


def test_stdio_protocol_era_flag_overrides_the_file(inspector, home):
    result, _ = call_echo(inspector, home, "message=flag", entry=tern_stdio_entry(home, "legacy"),
                          target=["--protocol-era", "modern"])
    assert_echo(result, "flag", "modern")


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_stdio_missing_message_is_a_tool_error(inspector, home, era):
    result, err = call_echo(inspector, home, entry=tern_stdio_entry(home, era), expect=5)
    assert_tool_error(result, err, era, "message", "required")


# --- HTTP: POST /mcp on a running daemon ---------------------------------------------------


@pytest.fixture(scope="module")
def daemon(home):
    """``tern serve`` on a loopback port picked by the OS, with the bundled default config."""
    env = _clean_env()
    env.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(home / "daemon-state"),
               XDG_CONFIG_HOME=str(home / "config"))
    process = subprocess.Popen([sys.executable, "-m", "runtime", "serve", "--listen", "127.0.0.1:0"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=home / "cwd")
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:  # keep reading so the daemon never blocks on a full stderr pipe
        for line in process.stderr:
            lines.append(line)
            if "serving on " in line:
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    try:
        ready.wait(30)
        served = [line for line in lines if "serving on " in line]
        assert served, f"the daemon did not start (exit {process.poll()}):\n{''.join(lines)}"
        url = served[0].split("serving on ", 1)[1].strip()
        assert httpx.get(url + "/health", timeout=10).json() == {"status": "ok"}
        yield url + "/mcp", lines
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def http_entry(url: str, era: str | None = None, kind: str = "streamable-http") -> dict:
    entry = {"type": kind, "url": url}
    if era is not None:
        entry["protocolEra"] = era
    return entry


def test_http_legacy_ad_hoc(inspector, home, daemon):
    url, _ = daemon
    target = [url, "--transport", "http"]
    out, _ = run_inspector(inspector, home, *target, "--method", "tools/list")
    assert_tools(out)
    result, _ = call_echo(inspector, home, "message=hello", target=target)
    assert_echo(result, "hello", "legacy")


@pytest.mark.parametrize("era", ["legacy", "auto", "modern"])
def test_http_echo_in_each_era(inspector, home, daemon, era):
    url, log = daemon
    entry = http_entry(url, era)
    out, _ = run_inspector(inspector, home, "--method", "tools/list", entry=entry)
    assert_tools(out)
    result, _ = call_echo(inspector, home, f"message=hello over http {era}", entry=entry)
    assert_echo(result, f"hello over http {era}", era)
    assert not any("Traceback" in line for line in log), "".join(log)


def test_http_type_alias_and_context_id_continues(inspector, home, daemon):
    """``"type": "http"`` is the Inspector's alias for streamable-http; a context_id from one
    call, passed to the next (a separate Inspector process), continues that conversation."""
    url, _ = daemon
    first, _ = call_echo(inspector, home, "message=one", entry=http_entry(url, kind="http"))
    context = assert_echo(first, "one", "legacy")
    again, _ = call_echo(inspector, home, "message=two", f"context_id={context}",
                         entry=http_entry(url, "modern"))
    assert assert_echo(again, "two", "modern") == context


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_stdio_relays_to_the_running_daemon(inspector, home, daemon, era):
    """Without --standalone, ``tern mcp`` finds the daemon through XDG_STATE_HOME and relays:
    the call lands in the daemon's audit log as an HTTP caller, never as ``mcp:stdio`` (which
    is what an in-process kernel sharing that state directory would have written)."""
    entry = tern_stdio_entry(home, era)
    entry["args"].remove("--standalone")
    entry["env"]["XDG_STATE_HOME"] = str(home / "daemon-state")
    result, _ = call_echo(inspector, home, f"message=relayed {era}", entry=entry)
    context = assert_echo(result, f"relayed {era}", era)
    audit = home / "daemon-state" / "tern" / "audit.jsonl"
    deadline = time.monotonic() + 10
    while True:
        records = [json.loads(line) for line in audit.read_text().splitlines() if line.strip()]
        if any(r.get("context_id") == context for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert any(r["kind"] == "agent_message" and r.get("context_id") == context for r in records), records
    callers = {r["caller"] for r in records if r["kind"] == "tool_call"}
    assert callers and all(c.startswith("mcp:http:") for c in callers), callers


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_http_bad_arguments_are_tool_errors(inspector, home, daemon, era):
    url, _ = daemon
    entry = http_entry(url, era)
    result, err = call_echo(inspector, home, entry=entry, expect=5)
    assert_tool_error(result, err, era, "message", "required")
    # the CLI JSON-decodes "42", so the server gets a number where the schema says string
    result, err = call_echo(inspector, home, "message=42", entry=entry, expect=5)
    assert_tool_error(result, err, era, "message", "string")
    result, err = call_echo(inspector, home, "message=hi", "extra=x", entry=entry, expect=5)
    assert_tool_error(result, err, era, "extra")
