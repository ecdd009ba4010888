"""The rule for an interop peer that cannot be installed (``peers.require``): skip, but
fail in CI, where a skip would hide a whole interop suite; peers cloned from a local
repository snapshot may still skip there. And the end-of-run list of such skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import peers

pytest_plugins = ["pytester"]


def mcp_conformance():  # named like a real installer: the rule goes by the installer's name
    raise peers.PeerUnavailable("mcp-conformance: `npm install` exited 1\n(full log: /x/conformance.log)")


def a2a_tck():  # a peer cloned from a local repository snapshot
    raise peers.PeerUnavailable("tck-venv: no A2A TCK repository at /nowhere")


def test_an_installed_peer_is_returned_with_its_arguments():
    assert peers.require(lambda *a, **k: (a, k), 1, timeout=5) == ((1,), {"timeout": 5})


def test_outside_ci_a_missing_peer_skips_and_the_skip_carries_the_cause(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="peer mcp_conformance is unavailable: mcp-conformance: ") as info:
        peers.require(mcp_conformance)
    cause = peers.unavailable_skip(info.value)
    assert isinstance(cause, peers.PeerUnavailable) and "npm install" in str(cause)


@pytest.mark.parametrize("value", ["true", "TRUE"])
def test_in_ci_a_missing_peer_fails_the_test(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=r"peer mcp_conformance is unavailable, and CI=true: .*exited 1"):
        peers.require(mcp_conformance)


def test_in_ci_a_snapshot_peer_may_still_skip(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert "a2a_tck" in peers.SNAPSHOT_PEERS and "a2a_tck03" in peers.SNAPSHOT_PEERS
    with pytest.raises(pytest.skip.Exception, match="no A2A TCK repository"):
        peers.require(a2a_tck)


def test_ci_other_than_true_is_not_ci(monkeypatch):
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        peers.require(mcp_conformance)


def test_the_run_ends_with_the_list_of_missing_peers(pytester, monkeypatch):
    """A whole pytest run with the suite's conftest: the peer skips are listed at the
    end, once per cause, with the log line; a skip for another reason is not."""
    monkeypatch.delenv("CI", raising=False)
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_uses_peers="""
        import pytest
        from tests import peers
        from tests.test_peers import mcp_conformance

        @pytest.fixture(scope="module")
        def conformance():
            return peers.require(mcp_conformance)

        def test_one(conformance):
            pass

        def test_two(conformance):
            pass

        def test_other():
            pytest.skip("not about peers")
        """)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines([
        "*interop peers unavailable (their tests were skipped)*",
        "2 skipped, the first test_uses_peers.py::test_one:",
        "    mcp-conformance: `npm install` exited 1",
        "    ... (full log: /x/conformance.log)",
    ])
    assert "not about peers" not in result.stdout.str().split("interop peers unavailable")[1]

    monkeypatch.setenv("CI", "true")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2, skipped=1)  # a fixture that fails is an error of each test
    result.stdout.fnmatch_lines(["*peer mcp_conformance is unavailable, and CI=true*"])
    assert "interop peers unavailable" not in result.stdout.str()


def test_a_playwright_venv_of_another_python_is_refused_by_name(tmp_path, monkeypatch):
    """Its compiled greenlet would not load in this interpreter: say so, rather than fail on import."""
    venv = tmp_path / "playwright-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "lib" / "python3.99" / "site-packages").mkdir(parents=True)
    (venv / peers.MARKER).write_text(f"playwright=={peers.PLAYWRIGHT_VERSION}")
    monkeypatch.setattr(peers, "PEERS_DIR", tmp_path)
    monkeypatch.setattr(peers, "CHROMIUM", "/bin/sh")  # a browser is there
    with pytest.raises(peers.PeerUnavailable, match="made by another Python than this one"):
        peers.playwright_site_packages()
    monkeypatch.setattr(peers, "CHROMIUM", str(tmp_path / "no-chromium"))
    with pytest.raises(peers.PeerUnavailable, match="apt-get install chromium"):
        peers.playwright_site_packages()
