"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``, server
mode) against ``tern serve``'s ``POST /mcp``, for the 2025-11-25 and the 2026-07-28
requirement sets.

tern runs ``tests/fixtures/conformance.toml``: the suite's fixture tools are presets
over ordinary tern agents, and the content fixtures (image, audio, embedded resource)
are the fake MCP server's ``content`` tool re-exported through tern, so rich content
passing through tern's MCP gateway is what those scenarios check.

The resource, prompt and completion fixtures are the fake MCP server's too, re-exported
by ``[mcp_server] upstream``; the sampling, elicitation and 2026 MRTR fixtures are
``[[mcp_server.asks]]`` tools (and one ask published as a prompt); the tasks
extension's are presets over agents, run as A2A tasks, and an ask run as a task. No
scenario is expected to fail, in either set. docs/conformance.md has the counts.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests import peers
from tests.mcp.conftest import FAKE, FIXTURES
from tests.mcp.server_harness import tern_env, tern_serve

#: Served through tern's gateway: the fake MCP server's fixtures re-exported ([mcp_server] upstream).
RESOURCES_AND_PROMPTS = (
    "resources-list", "resources-read-text", "resources-read-binary", "resources-templates-read",
    "resources-subscribe", "resources-unsubscribe", "prompts-list", "prompts-get-simple", "prompts-get-with-args",
    "prompts-get-embedded-resource", "prompts-get-with-image", "completion-complete")
SUMMARY = re.compile(r"^[✓✗] (\S+): (\d+) passed, (\d+) failed", re.M)


@pytest.fixture(scope="module")
def conformance():
    return peers.require(peers.mcp_conformance)


@pytest.fixture(scope="module")
def tern_url(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("conformance")
    config = tmp / "conformance.toml"
    fixture_tools = "".join(f'\n[[mcp_server.presets]]\nname = "{name}"\ntool = "mcp_fx_content"\n' for name in (
        "test_image_content", "test_audio_content", "test_embedded_resource", "test_multiple_content_types"))
    config.write_text((FIXTURES / "conformance.toml").read_text() + f'\n[state]\ndir = "{tmp / "state"}"\n'
                      f'\n[[mcp_servers]]\nname = "fx"\ntransport = {{ type = "stdio", command = "{sys.executable}", '
                      f'args = ["{FAKE}"] }}\n' + fixture_tools)
    with tern_serve(tmp, config, tern_env(tmp), servers_connected=True) as url:
        yield url + "/mcp"


def run_suite(conformance: list, url: str, requirements: str, out: Path) -> dict[str, tuple[int, int]]:
    done = subprocess.run([*conformance, "server", "--url", url, "--requirements", requirements, "-o", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=out)
    results = {name: (int(p), int(f)) for name, p, f in SUMMARY.findall(done.stdout)}
    assert results, f"no summary from the suite:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    total = sum(p for p, _ in results.values()), sum(f for _, f in results.values())
    print(f"conformance {requirements}: {total[0]} passed, {total[1]} failed, {len(results)} scenarios")
    return results


def failing(results: dict[str, tuple[int, int]]) -> set[str]:
    return {name for name, (_, failed) in results.items() if failed}


def test_conformance_2025_11_25(conformance, tern_url, tmp_path):
    results = run_suite(conformance, tern_url, "2025-11-25", tmp_path)
    assert failing(results) == set()  # zero failures: no scenario is expected to fail
    for scenario in ("server-initialize", "server-session-lifecycle", "ping", "logging-set-level", "tools-list",
                     "tools-call-simple-text", "tools-call-error", "tools-call-with-progress",
                     "tools-call-with-logging", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
                     "tools-call-mixed-content", "dns-rebinding-protection", "server-sse-multiple-streams",
                     *RESOURCES_AND_PROMPTS, "tools-call-sampling", "tools-call-elicitation",
                     "elicitation-sep1034-defaults", "elicitation-sep1330-enums"):
        assert results[scenario][0] > 0 and results[scenario][1] == 0, scenario


def test_conformance_2026_07_28(conformance, tern_url, tmp_path):
    results = run_suite(conformance, tern_url, "2026-07-28", tmp_path)
    assert failing(results) == set()
    for scenario in ("tools-list", "tools-call-simple-text", "tools-call-error", "tools-call-with-progress",
                     "tools-call-image", "http-header-validation", "dns-rebinding-protection",
                     "sep-2164-resource-not-found", "input-required-result-unsupported-methods",
                     "input-required-result-validate-input", "server-stateless", "caching",
                     "input-required-result-basic-elicitation", "input-required-result-basic-sampling",
                     "input-required-result-tampered-state", "input-required-result-multi-round",
                     "input-required-result-multiple-input-requests", "input-required-result-capability-check",
                     "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
                     "tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-required-task-error",
                     "tasks-mrtr-composition", "tasks-lifecycle", "tasks-mrtr-input",
                     "input-required-result-non-tool-request",
                     *(name for name in RESOURCES_AND_PROMPTS if name in results)):
        assert results[scenario][0] > 0 and results[scenario][1] == 0, scenario

