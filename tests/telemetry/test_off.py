"""Telemetry off costs nothing: ``tern run`` and ``tern mcp`` (a tools/call through the
pipeline) import no ``runtime.telemetry`` module and no exporter, and the tracing API
hands out one shared no-op object; on, the same commands do import them (so the check
can fail)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from runtime import tracing
from tests.mcp.server_harness import initialize, request, tern_env
from tests.telemetry.collector import Collector
from tests.test_cli import ROOT

PROBE = """
import atexit, sys
atexit.register(lambda: print("LOADED", sorted(m for m in sys.modules if m.startswith("runtime.telemetry")
                                               or m == "runtime.net.telemetry_export"), file=sys.stderr))
from runtime.cli import main
main(sys.argv[1:])
"""


def loaded(tmp_path, telemetry: str, *argv: str, stdin: str = "") -> tuple[list[str], subprocess.CompletedProcess]:
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "echo"\nkind = "echo"\n' +
                       telemetry)
    done = subprocess.run([sys.executable, "-c", PROBE, "--config", str(config), *argv], input=stdin,
                          capture_output=True, text=True, timeout=60, env=tern_env(tmp_path), cwd=ROOT)
    line = next(line for line in done.stderr.splitlines() if line.startswith("LOADED "))
    return eval(line.removeprefix("LOADED ")), done  # a list literal printed by the probe


MCP_SESSION = "".join(json.dumps(m) + "\n" for m in (
    initialize(1), {"jsonrpc": "2.0", "method": "notifications/initialized"},
    request(2, "tools/call", {"name": "tern_agent_echo", "arguments": {"message": "hi"}})))


@pytest.mark.parametrize("argv, stdin", [(("run", "echo", "hi"), ""), (("mcp",), MCP_SESSION)])
def test_off_imports_no_telemetry_module(tmp_path, argv, stdin):
    modules, done = loaded(tmp_path, "", *argv, stdin=stdin)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hi" in done.stdout
    assert modules == []


@pytest.mark.parametrize("argv, stdin", [(("run", "echo", "hi"), ""), (("mcp",), MCP_SESSION)])
def test_on_imports_them_and_exports(tmp_path, argv, stdin):
    with Collector() as collector:
        modules, done = loaded(tmp_path, f'[telemetry]\notlp_endpoint = "{collector.url}"\n', *argv, stdin=stdin)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "runtime.net.telemetry_export" in modules and "runtime.telemetry.otlp" in modules
    assert collector.bodies  # flushed at exit


def test_the_off_api_is_one_no_op_object():
    assert not tracing.enabled()
    first = tracing.span("a", tracing.SERVER, {"k": "v"})
    assert first is tracing.span("b") and not first.recording
    with first as span:
        span.set("k", 1)
        span.error("x")
        headers: dict[str, str] = {}
        tracing.inject(headers)
        assert headers == {} and tracing.meta() is None and tracing.trace_id() == ""
    assert tracing.extract("00-" + "1" * 32 + "-" + "2" * 16 + "-01") is None  # off: not read


def test_the_built_pyz_exports_traces(pyz, tmp_path, decode_otlp):
    """The single file carries the tracing modules: ``tern.pyz run`` exports an agent run."""
    from tests.test_build_pyz import base_python, clean_env

    (tmp_path / "tmp").mkdir()
    with Collector() as collector:
        config = tmp_path / "config.toml"
        config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[[agents]]\nname = "echo"\nkind = "echo"\n'
                          f'[telemetry]\notlp_endpoint = "{collector.url}"\nservice_name = "pyz"\n')
        done = subprocess.run([base_python(), "-I", str(pyz), "--config", str(config), "run", "echo", "hi"],
                              env=clean_env(tmp_path / "cache", tmp_path / "tmp"), cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "hi\n", done.stderr
    names = [s["name"] for v in decode_otlp(*collector.bodies) for rs in v["resource_spans"]
             for ss in rs["scope_spans"] for s in ss["spans"]]
    assert names == ["invoke_agent echo"]
