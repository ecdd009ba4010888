"""The engine's byte accounting on its own (virtual clock): whatever path a task grows by
(a message, a continued turn, streamed artifact chunks, a status, the final answer), the
engine's count never falls below what it really holds and never passes its budgets."""

from __future__ import annotations

import msgspec
import pytest
import trio

from runtime.a2a.model import Artifact, Message, text_of
from runtime.a2a.server.engine import Outcome, StoreFull, TaskEngine, TaskTooLarge

KB = 1000


def msg(text, task_id=None):
    return Message(role="user", parts=[{"text": text}], task_id=task_id)


async def runner(task, message, report):
    """'ask' waits for input; 'chunks N' streams N artifact chunks of 10 kB; 'status'
    reports a 30 kB status; 'hang' runs until cancelled; else echo."""
    text = text_of(message.parts)
    if text == "ask":
        return Outcome(state="input-required", text="more?")
    if text.startswith("chunks"):
        for _ in range(int(text.split()[1])):
            report.artifact(Artifact(parts=[{"text": "c" * 10 * KB}], artifact_id="a"), append=True)
            await trio.sleep(0)
        return Outcome(state="completed", status_text=True)
    if text == "status":
        report.status("working", "s" * 30 * KB)
        return Outcome(state="completed", text="ok")
    if text.startswith("hang"):
        await trio.sleep_forever()
    return Outcome(state="completed", text=text)


async def held(engine: TaskEngine) -> int:
    return sum(len(msgspec.json.encode(task)) for task in (await engine.list())[0])


@pytest.fixture
async def engine(nursery):
    engine = TaskEngine(runner, max_task_bytes=100 * KB, max_store_bytes=250 * KB)
    await nursery.start(engine.run)
    return engine


async def check(engine: TaskEngine) -> None:
    assert (await held(engine)) <= engine.bytes <= engine.max_store_bytes


async def test_every_path_is_counted(engine, autojump_clock):
    for text in ("x" * 20 * KB, "chunks 3", "status", "ask"):
        task = await engine.send("a", msg(text))
        await engine.wait(task.id)
        await check(engine)
    asked = (await engine.list(state="input-required"))[0][0]
    await engine.send("a", msg("y" * 10 * KB, task_id=asked.id))
    await engine.wait(asked.id)
    await check(engine)


async def test_streamed_chunks_past_the_task_budget_fail_the_task(engine, autojump_clock):
    task = await engine.send("a", msg("chunks 50"))  # 500 kB against 100 kB
    await engine.wait(task.id)
    assert task.state == "failed" and "max_task_bytes" in text_of(task.status_message.parts)
    await check(engine)


async def test_a_message_past_the_task_budget_is_refused_new_or_continued(engine, autojump_clock):
    with pytest.raises(TaskTooLarge, match="max_task_bytes"):
        await engine.send("a", msg("z" * 120 * KB))
    task = await engine.send("a", msg("ask"))
    await engine.wait(task.id)
    with pytest.raises(TaskTooLarge):
        await engine.send("a", msg("z" * 99 * KB, task_id=task.id))
    assert task.state == "input-required" and len(task.history) == 2  # nothing half-added
    await check(engine)


async def test_terminal_tasks_are_evicted_by_bytes_and_live_ones_refuse_new_work(engine, autojump_clock):
    first = await engine.send("a", msg("x" * 40 * KB))
    await engine.wait(first.id)
    for i in range(10):  # 10 x ~80 kB through a 250 kB store
        done = await engine.send("a", msg(f"{i}" + "x" * 40 * KB))
        await engine.wait(done.id)
        await check(engine)
    assert first.id not in {t.id for t in (await engine.list())[0]}  # the oldest went first
    for task in (await engine.list())[0]:
        assert task.terminal
    with pytest.raises(StoreFull, match="unfinished tasks"):
        for _ in range(100):  # live tasks of ~20 kB each push every terminal one out, then fill the store
            await engine.send("a", msg("hang" + " " * 20 * KB))
    assert all(not task.terminal for task in (await engine.list())[0])
    await check(engine)
