"""The official MCP conformance suite in client mode against the shipped CLI: every
non-auth client scenario of 2025-11-25 and 2026-07-28, done with ``tern tools`` and
``tern call`` (``tests/fixtures/conformance_cli_client.py``), standalone (each command
boots its own kernel) and through a running ``tern serve``.

A question the scenario server asks is answered only where ``tern call`` shows it, as a
person at that terminal would: the 2025-11-25 elicitation scenario sends its question on
the session's standalone GET stream with JSON-RPC id 0, which standalone ``tern call``
never showed before issue #32 (so the call timed out).

One check cannot apply to a CLI, and is listed with its reason in NOT_APPLICABLE; any
other failed check fails the test, and so does a scenario that checks nothing.
docs/conformance.md has the counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests import peers
from tests.mcp.test_conformance_client import SCENARIOS
from tests.test_cli import ROOT

RUNNER = ROOT / "tests" / "fixtures" / "conformance_cli_client.py"
#: (scenario, check id) -> why a CLI cannot pass it.
NOT_APPLICABLE = {
    ("http-custom-headers", "sep-2243-client-omit-null"):
        "the suite calls test_custom_headers_null with verbose: null where the tool's schema says boolean; tern "
        "checks a call's arguments against the tool's schema before sending it, so `tern call` refuses them "
        "(exit 1) and the request the check watches for is never sent",
}


@pytest.fixture(scope="module")
def conformance():
    return peers.require(peers.mcp_conformance)


def run_scenario(conformance: list, requirements: str, scenario: str, daemon: bool, out) -> list[tuple[str, str]]:
    """(check id, status) of each check of one scenario run against the CLI."""
    out.mkdir()
    command = f"{sys.executable} {RUNNER}"
    env = {**os.environ, "TERN_CLI_DAEMON": "1" if daemon else "0"}
    done = subprocess.run([*conformance, "client", "--command", command, "--scenario", scenario,
                           "--spec-version", requirements, "-o", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=out, env=env)
    found = list(out.glob("*/checks.json"))
    assert len(found) == 1, f"{scenario}: no checks.json\n{done.stdout[-3000:]}\n{done.stderr[-2000:]}"
    return [(check["id"], check["status"]) for check in json.loads(found[0].read_text())
            if check["status"] in ("SUCCESS", "FAILURE", "WARNING")]


@pytest.mark.slow
@pytest.mark.parametrize("daemon", [False, True], ids=["standalone", "daemon"])
@pytest.mark.parametrize("requirements", sorted(SCENARIOS))
def test_conformance_client_through_the_cli(conformance, requirements, daemon, tmp_path):
    passed = failed = excused = 0
    failing: dict[str, list[str]] = {}
    for scenario in sorted(SCENARIOS[requirements]):
        checks = run_scenario(conformance, requirements, scenario, daemon, tmp_path / scenario)
        assert any(status == "SUCCESS" for _, status in checks), f"{scenario} checked nothing: {checks}"
        for check, status in checks:
            if status == "FAILURE" and (scenario, check) in NOT_APPLICABLE:
                excused += 1
            elif status == "FAILURE":
                failing.setdefault(scenario, []).append(check)
            passed += status == "SUCCESS"
            failed += status == "FAILURE"
    print(f"conformance client via the CLI ({'daemon' if daemon else 'standalone'}) {requirements}: "
          f"{passed} passed, {failed} failed, of which {excused} not applicable")
    assert not failing, f"failed checks: {failing} (logs under {tmp_path})"
