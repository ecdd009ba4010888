"""``[agents.model] provider = "mcp-sampling"``: an llm agent whose model turns run on
the MCP client that called it, against the official Python SDK's ``Client`` with a
sampling callback, in both eras (the handshake's ``sampling/createMessage`` requests,
2026-07-28's ``input_required`` sampling requests), over ``tern mcp`` and ``POST /mcp``.

The agent has no endpoint and no key. Checked: what the client's model is sent (system
prompt, history, the model hint, ``maxTokens``), a tool call asked for through
sampling with tools (2025-11-25) and its result fed back, and what a hostile or absent
model does: a 2 MB answer, image content, a client without sampling. The server keeps
serving after each.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, write_config, tern_serve

CLIENT = str(FIXTURES / "sdk_mcp_sampling_client.py")
EXTRA = """
[[agents]]
name = "desk"
kind = "llm"
system_prompt = "You are terse."
tools = ["time_now"]
[agents.model]
provider = "mcp-sampling"
model = "claude-hint"
max_tokens = 200
"""
ERAS = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]


def run_client(sdk_python: str, mode: str, behaviour: str, *target: str, env: dict) -> dict:
    done = subprocess.run([sdk_python, CLIENT, mode, behaviour, "tern_agent_desk", *target], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stdio(tmp: Path) -> list[str]:
    return ["--", sys.executable, "-m", "runtime", "--config", str(write_config(tmp, EXTRA)), "mcp"]


def check_text(seen: dict, version: str) -> None:
    assert seen["version"] == version
    assert not seen["is_error"] and seen["text"] == "Sampled: what time is it?", seen
    (turn,) = seen["seen"]
    assert turn == {"system": "You are terse.", "max_tokens": 200, "hints": ["claude-hint"], "tools": [],
                    "messages": [["user", "what time is it?"]]}  # no tools: the client did not declare sampling.tools
    assert seen["after"] == "still there"


@pytest.mark.parametrize("mode,version", ERAS)
def test_stdio_agent_runs_on_the_clients_model(sdk_python, tmp_path, mode, version):
    check_text(run_client(sdk_python, mode, "text", *stdio(tmp_path), env=tern_env(tmp_path)), version)


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_agent_calls_a_tool_through_sampling_with_tools(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "tools", *stdio(tmp_path), env=tern_env(tmp_path))
    assert not seen["is_error"], seen
    first, second = seen["seen"]
    assert first["tools"] == ["time_now"] and second["tools"] == ["time_now"]
    assert second["messages"][0] == ["user", "what time is it?"]
    assert re.fullmatch(r"tool_result:\d{4}-\d\d-\d\dT[\d:]+\+00:00", second["messages"][-1][1]), second
    assert seen["text"].startswith("Sampled: tool_result:")


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
@pytest.mark.parametrize("behaviour,problem", [
    ("huge", "answered 2000000 characters; at most 1000000"),
    ("image", "answered with image content, which tern cannot use"),
    ("none", "was not called by an MCP client that offers sampling"),
])
def test_stdio_unusable_model_answers_are_errors(sdk_python, tmp_path, mode, behaviour, problem):
    seen = run_client(sdk_python, mode, behaviour, *stdio(tmp_path), env=tern_env(tmp_path))
    assert seen["is_error"] and problem in seen["text"], seen
    assert seen["after"] == "still there"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    config = write_config(tmp, EXTRA)
    with tern_serve(tmp, config, tern_env(tmp)) as url:
        yield url + "/mcp"


@pytest.mark.parametrize("mode,version", ERAS)
def test_http_agent_runs_on_the_clients_model(sdk_python, daemon, mode, version):
    check_text(run_client(sdk_python, mode, "text", daemon, env=tern_env(Path("/nonexistent"))), version)
