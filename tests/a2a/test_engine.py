"""The task engine on its own: life cycle, multi-turn, cancel that stops the work,
ordered events, slow subscribers, and the bounded store."""

from __future__ import annotations

import pytest
import trio

from runtime.a2a.server.engine import (
    TRANSITIONS,
    IllegalTransition,
    InvalidTaskRequest,
    Outcome,
    StoreFull,
    TaskEngine,
    TaskNotCancelable,
    TaskNotFound,
    UnsupportedOperation,
)
from runtime.a2a.model import TERMINAL, ArtifactEvent, Message, StatusEvent, text_of
from runtime.errors import TernError


def msg(text, task_id=None, context_id=None):
    return Message(role="user", parts=[{"text": text}], task_id=task_id, context_id=context_id)


async def scripted(task, message, report):
    """'ask' waits for input, 'hang' runs until cancelled, 'boom' fails, else echo."""
    report.working()
    text = text_of(message.parts)
    if text == "ask":
        return Outcome(state="input-required", text="which one?")
    if text == "hang":
        await trio.sleep_forever()
    if text == "boom":
        raise RuntimeError("kaput")
    return Outcome(state="completed", text=f"echo: {text}")


@pytest.fixture
async def engine(nursery):
    engine = TaskEngine(scripted, max_tasks=5)
    await nursery.start(engine.run)
    return engine


async def test_life_cycle_and_events_in_order(engine):
    task = await engine.send("a", msg("hi"))
    assert task.state == "submitted" and task.history[0].task_id == task.id
    events = []
    async for event in engine.events(task.id):
        events.append(event)
    assert [e.state if isinstance(e, StatusEvent) else "artifact" for e in events] == [
        "working",
        "artifact",
        "completed",
    ]
    assert isinstance(events[1], ArtifactEvent) and events[1].artifact.parts == [{"text": "echo: hi"}]
    assert events[-1].final and task.state == "completed" and task.history[-1].role == "agent"


async def test_multi_turn_through_input_required(engine):
    task = await engine.send("a", msg("ask"))
    await engine.wait(task.id)
    assert task.state == "input-required" and text_of(task.status_message.parts) == "which one?"
    with pytest.raises(InvalidTaskRequest):
        await engine.send("a", msg("x", task_id=task.id, context_id="another-context"))
    again = await engine.send("a", msg("the red one", task_id=task.id))
    assert again is task
    await engine.wait(task.id)
    assert task.state == "completed" and task.artifacts[-1].parts == [{"text": "echo: the red one"}]
    assert [m.role for m in task.history] == ["user", "agent", "user", "agent"]
    with pytest.raises(UnsupportedOperation):
        await engine.send("a", msg("more", task_id=task.id))  # terminal
    with pytest.raises(TaskNotFound):
        await engine.send("a", msg("x", task_id="nope"))


async def test_cancel_stops_the_work(engine):
    task = await engine.send("a", msg("hang"))
    await trio.sleep(0.05)
    assert task.state == "working"
    await engine.cancel(task.id)
    assert task.state == "canceled"
    await trio.sleep(0.05)
    assert task.state == "canceled"  # the work was cancelled, not left to finish later
    with pytest.raises(TaskNotCancelable):
        await engine.cancel(task.id)
    with pytest.raises(TaskNotFound):
        await engine.cancel("nope")


async def test_a_failing_agent_fails_its_task_only(engine):
    task = await engine.send("a", msg("boom"))
    await engine.wait(task.id)
    assert task.state == "failed" and "RuntimeError" in text_of(task.status_message.parts)
    ok = await engine.send("a", msg("fine"))
    await engine.wait(ok.id)
    assert ok.state == "completed"


def test_the_transition_table_names_every_state():
    from typing import get_args

    from runtime.a2a.model import State

    assert set(TRANSITIONS) == set(get_args(State)) - {"unknown"}
    assert all(not TRANSITIONS[state] for state in TERMINAL)  # a terminal task never moves again
    assert all(after in TRANSITIONS for targets in TRANSITIONS.values() for after in targets)


async def test_an_illegal_transition_is_a_bug_and_changes_nothing(nursery):
    reports = []

    async def keeps_its_report(task, message, report):
        reports.append(report)
        return Outcome(text="done")

    engine = TaskEngine(keeps_its_report)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("go"))
    await engine.wait(task.id)
    assert task.state == "completed"
    with pytest.raises(IllegalTransition, match="from completed to working") as caught:
        reports[0].working()  # a runner that reports after its task ended
    assert isinstance(caught.value, TernError) and task.state == "completed"


async def test_work_that_ends_after_its_cancel_leaves_it_canceled(nursery):
    async def late(task, message, report):
        await engine.cancel(task.id)  # the work goes on a moment after its cancel (a race)
        return Outcome(text="too late")

    engine = TaskEngine(late)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("go"))
    await engine.wait(task.id)
    await trio.sleep(0.01)
    assert task.state == "canceled" and not task.artifacts  # cancel wins; the late outcome is dropped


async def test_slow_subscriber_is_dropped_not_waited_for(nursery):
    gate = trio.Event()

    async def chatty(task, message, report):
        report.working()
        await gate.wait()
        return Outcome(text="x")

    engine = TaskEngine(chatty)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("go"))
    receive = await engine.subscribe(task.id)
    entry = engine._tasks[task.id]
    for _ in range(300):  # more than the subscriber's buffer, never read
        engine._emit(entry, StatusEvent(task_id=task.id, context_id=task.context_id, state="working"))
    assert entry.subscribers == []
    gate.set()
    await engine.wait(task.id)
    assert task.state == "completed"
    await receive.aclose()


async def test_store_is_bounded_evicting_terminal_tasks_in_insertion_order(engine):
    done = []
    for i in range(5):
        task = await engine.send("a", msg(f"t{i}"))
        await engine.wait(task.id)
        done.append(task.id)
    newest = await engine.send("a", msg("six"))
    with pytest.raises(TaskNotFound):
        await engine.find(done[0])  # the oldest went first
    assert await engine.find(done[1]) and await engine.find(newest.id)


async def test_full_of_live_tasks_refuses_new_work(engine):
    live = [await engine.send("a", msg("hang")) for _ in range(5)]
    with pytest.raises(StoreFull, match="unfinished"):
        await engine.send("a", msg("one more"))
    await engine.cancel(live[0].id)
    assert (await engine.send("a", msg("now fits"))).state == "submitted"
    assert sum(engine.counts().values()) == 5


async def test_tasks_survive_a_restart_with_persist_tasks(tmp_path):
    from runtime.config import A2aConfig, AgentConfig, Config, StateConfig
    from runtime.host.node import Node

    config = Config(
        agents=[
            AgentConfig(name="echo", kind="echo"),
            AgentConfig(name="sleepy", kind="command", command=["sh", "-c", "sleep 30"]),
        ],
        state=StateConfig(dir=str(tmp_path)),
        a2a=A2aConfig(enabled=True, persist_tasks=True, max_tasks=3),
    )
    kernel = Node(config)
    async with trio.open_nursery() as nursery:
        await nursery.start(kernel.run)
        done = await kernel.a2a.engine.send("echo", msg("keep me"))
        await kernel.a2a.engine.wait(done.id)
        running = await kernel.a2a.engine.send("sleepy", msg("zz"))
        await trio.sleep(0.1)
        nursery.cancel_scope.cancel()  # the daemon stops; the store flushes on the way out
    again = Node(config)
    restored = await again.a2a.engine.find(done.id)
    assert restored.state == "completed" and restored.artifacts[0].parts == [{"text": "keep me"}]
    assert [m.role for m in restored.history] == ["user", "agent"]
    cut_off = await again.a2a.engine.find(running.id)
    assert cut_off.state == "failed" and "restarted" in text_of(cut_off.status_message.parts)
    async with trio.open_nursery() as nursery:  # eviction reaches the file too
        await nursery.start(again.run)
        for i in range(3):
            task = await again.a2a.engine.send("echo", msg(f"n{i}"))
            await again.a2a.engine.wait(task.id)
        await again.a2a.store.flush()
        nursery.cancel_scope.cancel()
    third = Node(config)
    with pytest.raises(TaskNotFound):
        await third.a2a.engine.find(done.id)
    assert sum(third.a2a.engine.counts().values()) == 3


async def test_running_work_asks_its_client_and_takes_the_answer(nursery):
    """``TaskReport.ask``: input-required while the work runs; the next message is the
    answer (refused: nothing changes), and the task works again without new work."""
    from runtime.a2a.server.engine import A2aError

    answered = trio.Event()
    got = []

    def answer(message, caller):
        if text_of(message.parts) != "blue":
            raise InvalidTaskRequest("say a colour")
        got.append((text_of(message.parts), caller))
        answered.set()
        return "thanks"

    async def asks(task, message, report):
        report.working()
        assert report.ask(Message(role="agent", parts=[{"text": "which colour?"}]), answer)
        assert not report.ask(Message(role="agent", parts=[{"text": "again?"}]), answer)  # one at a time
        await answered.wait()
        report.resume("moot")  # the answer closed it already: nothing happens
        return Outcome(text=f"picked {got[0][0]}")

    engine = TaskEngine(asks)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("paint"))
    with trio.fail_after(5):
        await engine.wait(task.id)
    assert task.state == "input-required" and task.asking and text_of(task.status_message.parts) == "which colour?"
    size = engine.bytes
    with pytest.raises(A2aError, match="say a colour"):
        await engine.send("a", msg("red", task_id=task.id))
    assert task.state == "input-required" and len(task.history) == 2 and engine.bytes == size
    assert await engine.send("a", msg("blue", task_id=task.id), caller="a2a:1.2.3.4") is task
    assert task.state == "working" and text_of(task.status_message.parts) == "thanks" and not task.asking
    with trio.fail_after(5):
        await engine.wait(task.id)
    assert task.state == "completed" and got == [("blue", "a2a:1.2.3.4")]
    assert [text_of(m.parts) for m in task.history] == ["paint", "which colour?", "blue", "picked blue"]


async def test_an_answer_whose_decision_resumes_the_work_before_it_returns_is_taken(nursery):
    """The race behind an answer forwarded across nodes: the answer's decision wakes the
    waiting call, which resumes the task (closing the question) before ``answer`` has
    returned. The answer was taken: the client gets the task, not an error."""
    resumed = trio.Event()
    reports = []

    async def answer(message, caller):
        reports[0].resume("approved by the caller; working")  # what the woken call does
        resumed.set()
        await trio.sleep(0)
        return "thanks"

    async def asks(task, message, report):
        reports.append(report)
        report.working()
        assert report.ask(Message(role="agent", parts=[{"text": "may I?"}]), answer)
        await resumed.wait()
        await trio.sleep(1)
        return Outcome(text="did it")

    engine = TaskEngine(asks)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("go"))
    with trio.fail_after(5):
        await engine.wait(task.id)
    assert await engine.send("a", msg("approve", task_id=task.id)) is task
    assert task.state == "working" and not task.asking
    assert text_of(task.status_message.parts) == "approved by the caller; working"
    with trio.fail_after(5):
        await engine.wait(task.id)
    assert task.state == "completed"
    assert [text_of(m.parts) for m in task.history] == ["go", "may I?", "approve", "did it"]


async def test_work_that_ends_with_its_question_open_still_finishes(nursery):
    async def forgets(task, message, report):
        report.ask(Message(role="agent", parts=[{"text": "?"}]), lambda message, caller: None)
        return Outcome(text="done anyway")

    engine = TaskEngine(forgets)
    await nursery.start(engine.run)
    task = await engine.send("a", msg("go"))
    with trio.fail_after(5):
        while not task.terminal:
            await trio.sleep(0.01)
    assert task.state == "completed" and not task.asking


async def test_only_a_context_minted_with_the_task_is_new(nursery):
    """``TaskReport.new_context`` (the runner skips the conversation's owner look-up on
    it): the first turn of a task whose context tern minted, never a context the client
    named, nor a later turn."""
    seen = []

    async def notes(task, message, report):
        seen.append(report.new_context)
        return Outcome(state="input-required", text="more?")

    engine = TaskEngine(notes)
    await nursery.start(engine.run)
    minted = await engine.send("a", msg("one"))
    with trio.fail_after(5):
        await engine.wait(minted.id)
    await engine.send("a", msg("two", task_id=minted.id))
    with trio.fail_after(5):
        await engine.wait(minted.id)
    named = await engine.send("a", msg("three", context_id="ctx-given"))
    with trio.fail_after(5):
        await engine.wait(named.id)
    assert seen == [True, False, False]
