"""Suite-wide hooks: at the end of a run, which interop peers were missing and why.

A peer that cannot be installed skips its tests (``peers.require``; in CI it fails them
instead). A skip is easy to miss among hundreds of passes, so every skip raised while
a ``PeerUnavailable`` was being handled is collected here and listed in a section of
its own at the end of the run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from trio.testing import MockClock

from tests import peers

SKIPPED_PEERS = pytest.StashKey[dict]()  # the PeerUnavailable message -> the tests it skipped


@pytest.fixture
def loopback_clock() -> MockClock:
    """trio's virtual clock for a test whose server and clients all run in this process
    but talk over real loopback sockets. As with pytest-trio's ``autojump_clock``, time
    only moves by jumping to the next timer once every task is blocked, so timeouts are
    asserted exactly and cost no real time. But a jump waits for the run loop to have
    been idle for 10 ms of real time: bytes the kernel is still delivering (on a loaded
    machine, loopback traffic can be deferred) arrive first, instead of a timer firing
    early. Not for real subprocesses or other processes' sockets: they live in real time."""
    return MockClock(autojump_threshold=0.01)


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL for the session (tests/pg.py); each test makes its own database."""
    import shutil
    import tempfile

    from tests.pg import PgServer, pg_bin

    peers.require(pg_bin)
    root = Path(tempfile.mkdtemp(prefix="tern-pg-"))  # not under pytest's 0700 tree: the postgres user reads it
    server = PgServer.start(root)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh, empty database of the session's PostgreSQL."""
    return pg_server.create_database()


@pytest.fixture(scope="session")
def pyz_built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``tern.pyz`` from one ``build_pyz.py --out`` run per session (``tern.mcpb`` and
    ``server.json`` beside it) and what the build printed: every test of the built
    files shares it, as a build takes ~20 s."""
    from tests.test_build_pyz import build

    out = tmp_path_factory.mktemp("pyz") / "tern.pyz"
    return out, build(out).stdout


@pytest.fixture(scope="session")
def pyz(pyz_built: tuple[Path, str]) -> Path:
    return pyz_built[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if call.excinfo is not None and call.excinfo.errisinstance(pytest.skip.Exception):
        cause = peers.unavailable_skip(call.excinfo.value)
        if cause is not None:
            item.config.stash.setdefault(SKIPPED_PEERS, {}).setdefault(str(cause), []).append(item.nodeid)
    return report


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    skipped = config.stash.get(SKIPPED_PEERS, {})
    if not skipped:
        return
    terminalreporter.section("interop peers unavailable (their tests were skipped)", yellow=True)
    for reason, nodeids in skipped.items():
        lines = reason.strip().splitlines()
        terminalreporter.write_line(f"{len(nodeids)} skipped, the first {nodeids[0]}:")
        terminalreporter.write_line(f"    {lines[0]}")
        if len(lines) > 1:  # the installer's message ends with where its full log is
            terminalreporter.write_line(f"    ... {lines[-1]}")
