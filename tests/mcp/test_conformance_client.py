"""The official MCP conformance suite in client mode: tern's MCP client (the supervisor's
``McpClient`` over Streamable HTTP, driven by ``tests/fixtures/conformance_client.py``)
against the suite's scenario servers, for both requirement sets.

Every non-auth client scenario of 2025-11-25 and 2026-07-28 must pass with no failed
check (the ``auth/*`` scenarios are the OAuth client's, with a runner of their own; the
suite runs them here too, and this test leaves their results alone). A scenario that
stops being run, or that stops checking anything, fails the test as well.
docs/conformance.md has the counts.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests import peers
from tests.mcp.test_conformance import SUMMARY
from tests.test_cli import ROOT

RUNNER = ROOT / "tests" / "fixtures" / "conformance_client.py"
SCENARIOS = {
    "2025-11-25": {"initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry",
                   "json-schema-2020-12-preservation"},
    "2026-07-28": {"tools_call", "request-metadata", "sep-2322-client-request-state", "http-standard-headers",
                   "http-custom-headers", "http-invalid-tool-headers", "json-schema-ref-no-deref",
                   "json-schema-2020-12-preservation"},
}


@pytest.fixture(scope="module")
def conformance():
    return peers.require(peers.mcp_conformance)


@pytest.mark.slow
@pytest.mark.parametrize("requirements", sorted(SCENARIOS))
def test_conformance_client(conformance, requirements, tmp_path):
    command = f"{sys.executable} {RUNNER}"
    done = subprocess.run([*conformance, "client", "--command", command, "--requirements", requirements,
                           "-o", str(tmp_path)], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    results = {name: (int(p), int(f)) for name, p, f in SUMMARY.findall(done.stdout)}
    ours = {name: counts for name, counts in results.items() if not name.startswith("auth/")}
    passed, failed = sum(p for p, _ in ours.values()), sum(f for _, f in ours.values())
    print(f"conformance client {requirements} (non-auth): {passed} passed, {failed} failed, {len(ours)} scenarios")
    assert set(ours) == SCENARIOS[requirements], done.stdout[-3000:]
    failing = {name: counts for name, counts in ours.items() if counts[1]}
    assert not failing, f"{failing}\n{done.stdout[-5000:]}"
    assert all(p > 0 for p, _ in ours.values()), ours
