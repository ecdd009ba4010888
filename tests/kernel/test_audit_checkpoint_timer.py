"""The kernel signs the audit log's head on trio's clock: within ``CHECKPOINT_EVERY_SECS``
of a record on a quiet daemon, never again while nothing new was written, and once more
as it stops, so the last records of a run are signed too."""

from __future__ import annotations

import json

import trio

from runtime.config import Config, StateConfig
from runtime.kernel.audit import CHECKPOINT_EVERY_SECS, verify_log
from runtime.kernel.kernel import Kernel


def marks(tmp_path) -> list[int]:
    path = tmp_path / "audit.checkpoints"
    return [json.loads(line)["seq"] for line in path.read_bytes().splitlines()] if path.exists() else []


async def test_a_quiet_daemon_signs_its_head_each_period_and_at_the_end(tmp_path, autojump_clock):
    kernel = Kernel(Config(state=StateConfig(dir=str(tmp_path))))
    async with trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        assert not (await kernel.call_tool("time_now", {})).is_error
        assert marks(tmp_path) == []  # one record: not yet due
        await trio.sleep(CHECKPOINT_EVERY_SECS + 1)
        assert marks(tmp_path) == [1]
        await kernel.call_tool("time_now", {})
        await trio.sleep(CHECKPOINT_EVERY_SECS)
        assert marks(tmp_path) == [1, 2]
        await trio.sleep(10 * CHECKPOINT_EVERY_SECS)
        assert marks(tmp_path) == [1, 2]  # nothing new: nothing signed again
        await kernel.call_tool("time_now", {})
        nursery.cancel_scope.cancel()
    assert marks(tmp_path) == [1, 2, 3]  # at the end
    report = verify_log(tmp_path / "audit.jsonl")
    assert report.ok and report.signed_seq == 3, report.summary()
