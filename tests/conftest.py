"""Suite-wide hooks: at the end of a run, which interop peers were missing and why.

A peer that cannot be installed skips its tests (``peers.require``; in CI it fails them
instead). A skip is easy to miss among hundreds of passes, so every skip raised while
a ``PeerUnavailable`` was being handled is collected here and listed in a section of
its own at the end of the run.
"""

from __future__ import annotations

import pytest

from tests import peers

SKIPPED_PEERS = pytest.StashKey[dict]()  # the PeerUnavailable message -> the tests it skipped


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
