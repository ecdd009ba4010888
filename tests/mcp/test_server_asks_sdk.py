"""Ask tools (``[[mcp_server.asks]]``) against the official Python SDK's ``Client``, in
both eras, over ``tern mcp`` (stdio) and ``POST /mcp`` of ``tern serve``.

``plan_trip`` asks a form (round 1, with the client's roots), then the client's own
model through sampling (round 2, quoting the form's answer), and sends the filled-in
plan to the echo agent, so the result shows every answer went through: the handshake
era as the server's own requests, 2026-07-28 as ``input_required`` results the SDK
answers and retries. Then what a hostile or broken client can do: a form answer that
violates the schema, a decline, a 1 MB model answer, a client that never answers, one
without the sampling capability; after each the server still serves.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, write_config, tern_serve

CLIENT = str(FIXTURES / "sdk_mcp_ask_client.py")
ASK_TIMEOUT = 3
EXTRA = f"""
[[mcp_server.asks]]
name = "plan_trip"
description = "Plans a trip with you, then hands the plan to the echo agent."
arguments = ["traveller"]
send_to = "tern_agent_echo"
reply = "Plan for {{traveller}}: {{trip.nights}} nights in {{trip.city}}; see {{sight}}; files in {{places}}"
timeout_secs = {ASK_TIMEOUT}
[[mcp_server.asks.questions]]
key = "trip"
kind = "form"
message = "Where are you going, {{traveller}}?"
[mcp_server.asks.questions.schema]
type = "object"
required = ["city"]
properties.city = {{ type = "string", minLength = 1 }}
properties.nights = {{ type = "integer", minimum = 1, maximum = 30, default = 2 }}
[[mcp_server.asks.questions]]
key = "places"
kind = "roots"
optional = true
[[mcp_server.asks.questions]]
key = "sight"
round = 2
kind = "sampling"
message = "Suggest one sight in {{trip.city}}."
max_tokens = 60

[[mcp_server.asks]]
name = "trip_brief"
prompt = true
description = "Asks where you are going, then writes the brief."
arguments = ["traveller"]
reply = "Write a packing list for {{traveller}}: {{trip.nights}} nights in {{trip.city}}."
timeout_secs = {ASK_TIMEOUT}
[[mcp_server.asks.questions]]
key = "trip"
kind = "form"
message = "Where are you going, {{traveller}}?"
[mcp_server.asks.questions.schema]
type = "object"
required = ["city"]
properties.city = {{ type = "string", minLength = 1 }}
properties.nights = {{ type = "integer", minimum = 1, maximum = 30, default = 2 }}

[[mcp_server.asks]]
name = "read_rules"
arguments = ["traveller"]
reply = "{{traveller}} on the rules: {{page.action}}"
[[mcp_server.asks.questions]]
key = "page"
kind = "url"
message = "Please read the travel rules, {{traveller}}."
url = "https://example.org/rules?lang=en"
"""
ERAS = [("legacy", "2025-11-25"), ("2026-07-28", "2026-07-28")]
PLAN = "Plan for Ana: 3 nights in Lyon; see the Basilica of Fourviere; files in file:///home/me/trips"


def run_client(sdk_python: str, mode: str, behaviour: str, *target: str, env: dict, tool: str = "plan_trip") -> dict:
    done = subprocess.run([sdk_python, CLIENT, mode, behaviour, tool, *target], capture_output=True,
                          text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def stdio(tmp: Path) -> list[str]:
    return ["--", sys.executable, "-m", "runtime", "--config", str(write_config(tmp, EXTRA)), "mcp"]


def check_good(seen: dict, version: str) -> None:
    assert seen["version"] == version
    assert "plan_trip" in seen["tools"]
    assert not seen["is_error"] and PLAN in seen["text"], seen
    *first_round, sampling = seen["asked"]  # round 1's two questions may be answered in either order
    roots, form = sorted(first_round, key=lambda asked: "form" in asked)
    assert form["form"] == "Where are you going, Ana?" and form["schema"]["properties"]["nights"]["default"] == 2
    assert roots == {"roots": True}
    assert sampling == {"sampling": "Suggest one sight in Lyon.", "max_tokens": 60}


@pytest.mark.parametrize("mode,version", ERAS)
def test_stdio_ask_goes_through_every_round(sdk_python, tmp_path, mode, version):
    check_good(run_client(sdk_python, mode, "good", *stdio(tmp_path), env=tern_env(tmp_path)), version)


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_form_answer_that_violates_the_schema_is_refused(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "badform", *stdio(tmp_path), env=tern_env(tmp_path))
    assert seen["is_error"] and "the answer to trip: nights is not an integer" in seen["text"], seen
    assert not any("sampling" in a for a in seen["asked"])  # round 2 never came
    assert seen["after"] == "still there"


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_declined_form_sends_nothing_on(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "decline", *stdio(tmp_path), env=tern_env(tmp_path))
    assert not seen["is_error"] and seen["text"] == "Nothing was sent to tern_agent_echo: the form trip was declined."
    assert not any("sampling" in a for a in seen["asked"])


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_huge_model_answer_is_refused(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "huge", *stdio(tmp_path), env=tern_env(tmp_path))
    assert seen["is_error"] and "is 1000000 characters; at most 16384 are taken" in seen["text"], seen
    assert seen["after"] == "still there"


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_client_without_sampling_is_told_what_is_missing(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "nosampling", *stdio(tmp_path), env=tern_env(tmp_path))
    assert "this tool needs the client capability 'sampling'" in seen["error"], seen
    assert seen["asked"] == []  # checked before anything is asked
    assert seen["after"] == "still there"


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
@pytest.mark.parametrize("behaviour,action", [("good", "accept"), ("decline", "decline")])
def test_stdio_url_mode_elicitation(sdk_python, tmp_path, mode, behaviour, action):
    seen = run_client(sdk_python, mode, behaviour, *stdio(tmp_path), env=tern_env(tmp_path), tool="read_rules")
    assert not seen["is_error"] and seen["text"] == f"Ana on the rules: {action}", seen
    (asked,) = seen["asked"]
    assert asked["url"] == "https://example.org/rules?lang=en"
    assert asked["message"] == "Please read the travel rules, Ana."
    assert asked["id"].startswith("page-") and len(asked["id"]) > 12


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_stdio_prompt_that_asks_first(sdk_python, tmp_path, mode):
    seen = run_client(sdk_python, mode, "good", *stdio(tmp_path), env=tern_env(tmp_path), tool="prompt:trip_brief")
    assert "trip_brief" in seen["prompts"] and "trip_brief" not in seen["tools"]
    assert seen["text"] == "Write a packing list for Ana: 3 nights in Lyon." and seen["role"] == "user", seen
    assert [asked["form"] for asked in seen["asked"]] == ["Where are you going, Ana?"]
    bad = run_client(sdk_python, mode, "badform", *stdio(tmp_path), env=tern_env(tmp_path), tool="prompt:trip_brief")
    assert "the answer to trip: nights is not an integer" in bad["error"] and bad["after"] == "still there", bad


def test_stdio_client_that_never_answers_times_out(sdk_python, tmp_path):
    started = time.monotonic()
    seen = run_client(sdk_python, "legacy", "hang", *stdio(tmp_path), env=tern_env(tmp_path))
    assert seen["is_error"] and f"the client did not answer trip within {ASK_TIMEOUT} s" in seen["text"], seen
    assert ASK_TIMEOUT <= time.monotonic() - started < ASK_TIMEOUT + 30


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("daemon")
    config = write_config(tmp, EXTRA)
    with tern_serve(tmp, config, tern_env(tmp)) as url:
        yield url + "/mcp", config, tmp


@pytest.mark.parametrize("mode,version", ERAS)
def test_http_ask_goes_through_every_round(sdk_python, daemon, mode, version):
    check_good(run_client(sdk_python, mode, "good", daemon[0], env=tern_env(Path("/nonexistent"))), version)


@pytest.mark.parametrize("mode,version", ERAS)
def test_tern_mcp_relaying_to_the_daemon_passes_the_questions_through(sdk_python, daemon, mode, version):
    url, config, tmp = daemon
    seen = run_client(sdk_python, mode, "good", "--", sys.executable, "-m", "runtime", "--config", str(config), "mcp",
                      env=tern_env(tmp))
    check_good(seen, version)
    audit = (tmp / "state" / "audit.jsonl").read_text()
    assert '"caller":"mcp:http:127.0.0.1"' in audit and "mcp:stdio" not in audit  # the daemon asked and answered


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_http_prompt_that_asks_first(sdk_python, daemon, mode):
    seen = run_client(sdk_python, mode, "good", daemon[0], env=tern_env(Path("/nonexistent")), tool="prompt:trip_brief")
    assert seen["text"] == "Write a packing list for Ana: 3 nights in Lyon.", seen


@pytest.mark.parametrize("mode", [mode for mode, _ in ERAS])
def test_http_huge_model_answer_is_refused(sdk_python, daemon, mode):
    seen = run_client(sdk_python, mode, "huge", daemon[0], env=tern_env(Path("/nonexistent")))
    assert seen["is_error"] and "is 1000000 characters" in seen["text"], seen
    assert seen["after"] == "still there"
