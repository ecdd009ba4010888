"""The official MCP conformance suite in client mode, every ``auth/*`` scenario, against
tern's own MCP client with its OAuth session (``tests/fixtures/conformance_auth_client.py``:
the real ``McpClient`` and Streamable HTTP transport, configured as a user would).

Each scenario runs at every requirement set it belongs to among 2025-03-26 (the
back-compat ones), 2025-11-25 and 2026-07-28, and the client-credentials extension
scenarios (client credentials, DPoP with and without nonces, enterprise-managed
authorization, workload identity federation) once. Every check must pass, with no
warning: nothing is expected to fail. The list of scenarios comes from the suite itself
(``conformance list``), so a scenario a newer suite adds is run too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests import peers

RUNNER = Path(__file__).resolve().parents[1] / "fixtures" / "conformance_auth_client.py"
VERSIONS = ("2025-03-26", "2025-11-25", "2026-07-28")
NOT_RUN: dict[str, str] = {}  # scenario -> why it is not run (none)
LISTED = re.compile(r"^\s*- (auth/\S+) \[([^\]]+)\]", re.M)
#: What the suite issues or hands over: access tokens, the registered, pre-registered,
#: client-credentials and enterprise client secrets, the private key's PEM armour, and
#: every JWT (DPoP-bound tokens, DPoP proofs, workload JWTs, ID tokens, ID-JAGs: a JSON
#: header always encodes to "eyJ").
SECRETS = ("test-token-", "cc-token-", "test-client-secret", "pre-registered-secret", "conformance-test-secret",
           "conformance-test-xaa-secret", "PRIVATE KEY", "eyJ")
RESULT = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings")


@pytest.fixture(scope="module")
def conformance():
    return peers.require(peers.mcp_conformance)


def runs(conformance: list) -> list[tuple[str, str]]:
    listed = subprocess.run([*conformance, "list"], capture_output=True, text=True, timeout=60).stdout
    found: list[tuple[str, str]] = []
    for name, tags in LISTED.findall(listed):
        if name in NOT_RUN:
            continue
        tags = [t.strip() for t in tags.split(",")]
        if tags == ["extension"]:
            found.append((name, ""))
        found.extend((name, version) for version in VERSIONS if version in tags)
    return found


def leaked(out: Path) -> list[str]:
    """Secrets in what tern's client printed (its log at debug level, wire lines included):
    tokens the suite issued, and the credentials it handed over."""
    found = []
    for path in out.rglob("std*.txt"):
        text = path.read_text(errors="replace")
        for secret in SECRETS:
            if secret in text:
                found.append(f"{path}: {secret[:20]}")
    return found


def run(conformance: list, name: str, version: str, out: Path) -> tuple[str, str, tuple[int, ...], str]:
    argv = [*conformance, "client", "--command", f"{sys.executable} {RUNNER}", "--scenario", name,
            "-o", str(out / f"{name.replace('/', '_')}-{version or 'ext'}")]
    if version:
        argv += ["--spec-version", version]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=out)
    text = done.stdout + done.stderr
    match = RESULT.search(text)
    return name, version, tuple(int(g) for g in match.groups()) if match else (), text


def test_every_auth_scenario_passes(conformance, tmp_path):
    todo = runs(conformance)
    assert len(todo) >= 40, todo  # the suite lists them: a parsing slip must not pass quietly
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda nv: run(conformance, nv[0], nv[1], tmp_path), todo))
    bad = []
    passed = 0
    for name, version, counts, text in results:
        if not counts or counts[2] or counts[3] or counts[0] != counts[1]:
            bad.append(f"{name} @ {version or 'extension'}: {counts or 'no result'}\n{text[-2500:]}")
        else:
            passed += counts[0]
    print(f"auth client conformance: {len(results)} runs, {passed} checks passed")
    assert not bad, "\n\n".join(bad)
    assert not leaked(tmp_path), leaked(tmp_path)
