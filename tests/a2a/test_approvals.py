"""Tool-call approvals as an A2A task shows them, in one process on trio's virtual clock:
the task engine and the runner over the real ``Approvals`` (in memory), with an agent
whose one tool call needs approval. The default (the task stays working, its status
names the request), ``caller_may_approve`` (input-required, the caller's answer decides),
decisions made elsewhere, expiry, unreadable answers, cancel, and a restart. The same
over HTTP in every dialect, and with the a2a-sdk client against ``tern serve``, are in
tests/a2a/test_approvals_http.py."""

from __future__ import annotations

import pytest
import trio

from runtime.a2a.model import Message, text_of
from runtime.a2a.server.asking import read_decision
from runtime.a2a.server.engine import InvalidTaskRequest, TaskEngine, UnsupportedOperation
from runtime.a2a.server.runner import agent_runner
from runtime.config import AgentConfig
from runtime.kernel.approvals import Approvals, args_digest
from runtime.ports import AgentReply


class AskingAgents:
    """An ``AgentPort`` whose agent makes one tool call the policy asks about: it waits in
    ``approvals`` as the pipeline would, then answers with how the request ended."""

    def __init__(self, approvals: Approvals) -> None:
        self.approvals = approvals

    def get(self, name: str) -> AgentConfig:
        return AgentConfig(name=name, kind="llm")

    def admit(self, name: str) -> None:
        pass

    async def send(self, name, message, *, context_id=None, on_text=None, on_log=None, env=None, ask=None, owner=None,
                   new_context=False):
        approval = await self.approvals.request(name, "shell_exec", {"argv": ["rm", message]}, "d-" + message,
                                                caller=f"agent:{name}", context_id=context_id or "", ask=ask)
        return AgentReply(name, context_id or "", f"{approval.state} by {approval.decided_by or '-'}: "
                                                  f"{approval.reason or '-'}")


def msg(text=None, task_id=None, data=None):
    parts = ([{"text": text}] if text is not None else []) + ([{"data": data}] if data is not None else [])
    return Message(role="user", parts=parts, task_id=task_id)


async def setup(nursery, *, caller_may_approve, timeout_secs=60.0, redact=None):
    approvals = Approvals(None, timeout_secs=timeout_secs, redact=redact)
    engine = TaskEngine(agent_runner(AskingAgents(approvals), approvals, caller_may_approve=caller_may_approve))
    await nursery.start(engine.run)
    return engine, approvals


async def finished(task):
    """Until the task ends (``engine.wait`` also returns while it asks)."""
    with trio.fail_after(60):
        while not task.terminal:
            await trio.sleep(0.05)


async def pending(approvals):
    """The one request that waits, once it does."""
    with trio.fail_after(5):
        while not await approvals.list():
            await trio.sleep(0.01)
    [approval] = await approvals.list()
    return approval


async def test_by_default_the_task_stays_working_and_names_the_approval(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=False)
    task = await engine.send("bot", msg("notes.txt"))
    approval = await pending(approvals)
    await trio.sleep(0.01)
    status = text_of(task.status_message.parts)
    assert task.state == "working" and approval.id in status and f"tern approve {approval.id}" in status
    assert "shell_exec" in status
    with pytest.raises(UnsupportedOperation, match="still working"):  # the caller does not decide
        await engine.send("bot", msg("approve", task_id=task.id))
    await approvals.decide(approval.id, True, by="api:127.0.0.1", channel="http")
    await engine.wait(task.id)
    assert task.state == "completed" and text_of(task.artifacts[0].parts) == "approved by api:127.0.0.1: -"
    assert [m.role for m in task.history] == ["user", "agent"]  # the waits were status only


async def test_a_stream_sees_the_wait_and_how_it_ended(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=False)
    task = await engine.send("bot", msg("a"))
    seen = []

    async def follow():
        async for event in engine.events(task.id):
            seen.append((getattr(event, "state", "artifact"), text_of(event.message.parts)
                         if getattr(event, "message", None) else ""))

    nursery.start_soon(follow)
    approval = await pending(approvals)
    await approvals.decide(approval.id, False, by="cli:ann", reason="not today", channel="cli")
    await engine.wait(task.id)
    await trio.sleep(0.01)
    states = [state for state, _ in seen]
    assert states[-2:] == ["artifact", "completed"] and "input-required" not in states
    texts = [text for _, text in seen]
    assert any(approval.id in text and "waiting for a person" in text for text in texts)
    assert any("denied by cli:ann" in text for text in texts)
    assert text_of(task.artifacts[0].parts) == "denied by cli:ann: not today"


@pytest.mark.parametrize("answer,approved", [
    (msg(data={"decision": "approve"}), True),
    (msg("Yes."), True),
    (msg(data={"decision": "deny", "reason": "too risky"}), False),
    (msg("no"), False),
])
async def test_the_caller_answers_an_input_required_task(nursery, autojump_clock, answer, approved):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("x.txt"))
    with trio.fail_after(5):
        await engine.wait(task.id)  # a blocking send returns here: the work asks
    approval = (await approvals.list())[0]
    assert task.state == "input-required" and task.asking
    text, data = task.status_message.parts
    assert approval.id in text["text"] and "shell_exec" in text["text"]
    assert data["data"]["approval"] == {"id": approval.id, "agent": "bot", "tool": "shell_exec",
                                        "arguments": {"argv": ["rm", "x.txt"]},
                                        "arguments_sha256": args_digest({"argv": ["rm", "x.txt"]}),
                                        "arguments_bytes": len(b'{"argv":["rm","x.txt"]}'),
                                        "expires": data["data"]["approval"]["expires"]}
    assert data["data"]["approval"]["expires"].endswith("Z")
    answer.task_id = task.id
    assert await engine.send("bot", answer, caller="a2a:10.0.0.7") is task
    assert task.state == "working" and not task.asking
    await engine.wait(task.id)
    assert task.state == "completed"
    decided = await approvals.get(approval.id)
    assert (decided.state, decided.decided_by, decided.channel) == (
        "approved" if approved else "denied", "a2a:10.0.0.7", "a2a")
    reply = text_of(task.artifacts[0].parts)
    assert reply.startswith(("approved" if approved else "denied") + " by a2a:10.0.0.7")
    if answer.parts[0].get("data", {}).get("reason"):
        assert reply.endswith("too risky")
    assert [m.role for m in task.history] == ["user", "agent", "user", "agent"]  # asked, answered, replied


async def test_an_a2a_approval_naming_other_arguments_is_refused(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("x.txt"))
    with trio.fail_after(5):
        await engine.wait(task.id)
    approval = (await approvals.list())[0]
    stale = msg(data={"decision": "approve", "digest": args_digest({"argv": ["rm", "y.txt"]})})
    stale.task_id = task.id
    with pytest.raises(InvalidTaskRequest, match=approval.arguments_sha256):
        await engine.send("bot", stale)
    assert task.state == "input-required" and (await approvals.get(approval.id)).state == "pending"
    right = msg(data={"decision": "approve", "digest": approval.arguments_sha256})
    right.task_id = task.id
    await engine.send("bot", right)
    await engine.wait(task.id)
    assert (await approvals.get(approval.id)).state == "approved" and task.state == "completed"


async def test_the_question_shows_the_arguments_redacted(nursery, autojump_clock):
    def redact(value):
        return {"argv": [word.replace("hunter2", "[redacted]") for word in value["argv"]]}

    engine, approvals = await setup(nursery, caller_may_approve=True, redact=redact)
    task = await engine.send("bot", msg("hunter2"))
    await engine.wait(task.id)
    text, data = task.status_message.parts
    assert data["data"]["approval"]["arguments"] == {"argv": ["rm", "[redacted]"]}
    assert "hunter2" not in text["text"] and '["rm","[redacted]"]' in text["text"]
    await engine.cancel(task.id)


async def test_an_unreadable_answer_is_refused_and_the_task_still_asks(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("y"))
    await engine.wait(task.id)
    size = engine.bytes
    for garbage in (msg("maybe later"), msg(data={"decision": "perhaps"}), msg(data={"decision": "approve",
                                                                                     "scope": "forever"}),
                    msg(data={"something": "else"})):
        garbage.task_id = task.id
        with pytest.raises(InvalidTaskRequest, match="waits for a decision on approval ap_"):
            await engine.send("bot", garbage)
        assert task.state == "input-required" and len(task.history) == 2 and engine.bytes == size
    assert (await approvals.list())[0].state == "pending"
    await engine.send("bot", msg(data={"decision": "approve", "scope": "always"}, task_id=task.id))
    await engine.wait(task.id)
    assert task.state == "completed"
    assert await approvals.remembered("bot", "shell_exec", "d-y") == "allow"  # the scope was the caller's


async def test_decided_elsewhere_the_task_works_again(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("z"))
    await engine.wait(task.id)
    approval = (await approvals.list())[0]
    receive = await engine.subscribe(task.id)  # a resubscribe: the stream of the ask ended at input-required
    await approvals.decide(approval.id, True, by="cli:ann", channel="cli")
    await finished(task)
    assert task.state == "completed" and text_of(task.artifacts[0].parts).startswith("approved by cli:ann")
    events = [event async for event in receive]
    first = events[0]
    assert first.state == "working" and not first.final
    assert text_of(first.message.parts) == f"shell_exec was approved by cli:ann (approval {approval.id}); working"
    assert events[-1].state == "completed" and events[-1].final
    said = [text_of(m.parts) for m in task.history]
    assert not any("approved by" in text for text in said[:-1])  # the resumed status is not history


async def test_an_answer_after_another_channel_decided_says_so(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("z"))
    await engine.wait(task.id)
    approval = (await approvals.list())[0]
    await approvals.decide(approval.id, False, by="cli:ann", channel="cli")
    with pytest.raises(UnsupportedOperation, match="already denied by cli:ann"):
        await engine.send("bot", msg("approve", task_id=task.id))  # before the run has woken up
    await finished(task)
    assert task.state == "completed" and text_of(task.artifacts[0].parts).startswith("denied by cli:ann")


async def test_expiry_reaches_the_agent_and_the_task_goes_on(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True, timeout_secs=30)
    started = trio.current_time()
    task = await engine.send("bot", msg("slow"))
    await engine.wait(task.id)
    assert task.state == "input-required"
    await finished(task)
    assert trio.current_time() - started == pytest.approx(30, abs=1)
    assert task.state == "completed" and text_of(task.artifacts[0].parts) == "expired by -: nobody answered in time"


async def test_cancel_while_asking_ends_the_wait(nursery, autojump_clock):
    engine, approvals = await setup(nursery, caller_may_approve=True)
    task = await engine.send("bot", msg("c"))
    await engine.wait(task.id)
    approval = (await approvals.list())[0]
    await engine.cancel(task.id)
    await trio.sleep(0.5)
    assert task.state == "canceled" and not task.asking
    assert (await approvals.get(approval.id)).state == "expired"  # the caller stopped waiting
    with pytest.raises(UnsupportedOperation, match="canceled"):
        await engine.send("bot", msg("approve", task_id=task.id))


def test_read_decision():
    assert read_decision([{"text": " APPROVE! "}]) == (True, "once", "", None, False, None)
    assert read_decision([{"text": "note"}, {"data": {"decision": "deny", "reason": "no"}}]) == (
        False, "once", "no", None, False, None)
    assert read_decision([{"data": {"decision": "approve", "scope": "args"}}]) == (True, "args", "", None, False,
                                                                                  None)
    assert read_decision([{"data": {"decision": "approve", "digest": "sha256:ab"}}]).digest == "sha256:ab"
    assert read_decision([{"data": {"decision": "approve", "answer": {"n": 2}}}]).answer == {"n": 2}
    assert read_decision([{"data": {"decision": "deny", "cancel": True}}]).cancel is True
    for parts in ([], [{"text": "approve, I guess"}], [{"data": {"decision": True}}],
                  [{"data": {"decision": "deny", "reason": 3}}], [{"url": "http://x"}],
                  [{"data": {"decision": "approve", "answer": ["n", 2]}}],
                  [{"data": {"decision": "deny", "cancel": "yes"}}],
                  [{"data": {"decision": "approve", "digest": 7}}]):
        with pytest.raises(InvalidTaskRequest):
            read_decision(parts)


async def test_a_restart_fails_a_task_whose_run_was_asking(tmp_path):
    from runtime.a2a.server.store import TaskStore

    store = TaskStore(tmp_path / "tasks.sqlite3")
    approvals = Approvals(None)
    async with trio.open_nursery() as nursery:
        await nursery.start(store.run)
        engine = TaskEngine(agent_runner(AskingAgents(approvals), approvals, caller_may_approve=True),
                            on_change=store.changed)
        await nursery.start(engine.run)
        task = await engine.send("bot", msg("r"))
        with trio.fail_after(5):
            await engine.wait(task.id)
        assert task.state == "input-required"
        await store.flush()
        nursery.cancel_scope.cancel()
    again = TaskEngine(agent_runner(AskingAgents(approvals)))
    again.load(TaskStore(tmp_path / "tasks.sqlite3").load(max_tasks=10, max_bytes=10**7, max_task_bytes=10**6))
    restored = await again.find(task.id)
    assert restored.state == "failed" and not restored.asking  # its question died with the run
    assert "restarted" in text_of(restored.status_message.parts)


FORM = {"mode": "form", "message": "How many copies?",
        "requestedSchema": {"type": "object", "required": ["copies"],
                            "properties": {"copies": {"type": "integer", "minimum": 1, "maximum": 9},
                                           "colour": {"type": "boolean", "default": False}}}}


class FormAgents(AskingAgents):
    """An agent whose MCP server asks a form question while its tool call runs; it answers
    with what the server would get."""

    async def send(self, name, message, *, context_id=None, on_text=None, on_log=None, env=None, ask=None, owner=None,
                   new_context=False):
        approval = await self.approvals.request("", "mcp_printer_elicitation", FORM, "form-digest",
                                                caller="mcp:printer", ask=ask, form=FORM)
        return AgentReply(name, context_id or "", repr(await self.approvals.take_answer(approval.id)))


async def test_an_a2a_caller_answers_a_server_form_with_typed_values(nursery, autojump_clock):
    approvals = Approvals(None, timeout_secs=60.0)
    engine = TaskEngine(agent_runner(FormAgents(approvals), approvals, caller_may_approve=True))
    await nursery.start(engine.run)
    task = await engine.send("bot", msg("print"))
    with trio.fail_after(5):
        await engine.wait(task.id)
    assert task.state == "input-required"
    text, data = task.status_message.parts
    assert "How many copies?" in text["text"] and '"answer"' in text["text"]
    assert data["data"]["approval"]["form"]["requestedSchema"]["required"] == ["copies"]
    for wrong in ({"decision": "approve"}, {"decision": "approve", "answer": {"copies": 12}},
                  {"decision": "approve", "answer": {"copies": "two"}}, {"decision": "approve", "answer": {"x": 1}}):
        with pytest.raises(InvalidTaskRequest, match="waits for an answer"):
            await engine.send("bot", msg(data=wrong, task_id=task.id))
        assert task.state == "input-required" and await approvals.list()  # still asking
    await engine.send("bot", msg(data={"decision": "approve", "answer": {"copies": 3}}, task_id=task.id),
                caller="a2a:10.0.0.7")
    await engine.wait(task.id)
    assert text_of(task.artifacts[0].parts) == repr({"action": "accept", "content": {"colour": False, "copies": 3}})


@pytest.mark.parametrize("decision,action", [({"decision": "deny"}, "decline"),
                                             ({"decision": "deny", "cancel": True}, "cancel")])
async def test_an_a2a_caller_declines_or_cancels_a_server_form(nursery, autojump_clock, decision, action):
    approvals = Approvals(None, timeout_secs=60.0)
    engine = TaskEngine(agent_runner(FormAgents(approvals), approvals, caller_may_approve=True))
    await nursery.start(engine.run)
    task = await engine.send("bot", msg("print"))
    with trio.fail_after(5):
        await engine.wait(task.id)
    await engine.send("bot", msg(data=decision, task_id=task.id))
    await engine.wait(task.id)
    assert text_of(task.artifacts[0].parts) == repr({"action": action})
