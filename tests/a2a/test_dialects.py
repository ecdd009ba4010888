"""The three A2A dialects: every part kind read from each, written to each, and the
mistakes that must be refused rather than guessed at."""

from __future__ import annotations

import pytest

from runtime.a2a import dialects
from runtime.a2a.dialects import BadMessage, parse_event, parse_message, render_event, render_message, render_task
from runtime.a2a.model import Artifact, ArtifactEvent, Message, StatusEvent, Task

PNG = "iVBORw0KGgo="
WIRE = {
    "0.1": {
        "role": "user",
        "parts": [
            {"type": "text", "text": "hi"},
            {"type": "file", "file": {"name": "a.png", "mimeType": "image/png", "bytes": PNG}},
            {"type": "file", "file": {"uri": "https://x.example/b.txt"}},
            {"type": "data", "data": {"n": 1}},
        ],
    },
    "0.3": {
        "kind": "message",
        "messageId": "m1",
        "role": "user",
        "parts": [
            {"kind": "text", "text": "hi"},
            {"kind": "file", "file": {"name": "a.png", "mimeType": "image/png", "bytes": PNG}},
            {"kind": "file", "file": {"uri": "https://x.example/b.txt"}},
            {"kind": "data", "data": {"n": 1}},
        ],
    },
    "1.0": {
        "messageId": "m1",
        "role": "ROLE_USER",
        "parts": [
            {"text": "hi"},
            {"raw": PNG, "mediaType": "image/png", "filename": "a.png"},
            {"url": "https://x.example/b.txt"},
            {"data": {"n": 1}},
        ],
    },
}
FLAT = [
    {"text": "hi"},
    {"raw": PNG, "mediaType": "image/png", "filename": "a.png"},
    {"url": "https://x.example/b.txt"},
    {"data": {"n": 1}},
]


@pytest.mark.parametrize("dialect", ["0.1", "0.3", "1.0"])
def test_every_part_kind_reads_and_writes_in_each_dialect(dialect):
    message = parse_message(WIRE[dialect])
    assert message.role == "user" and message.parts == FLAT
    message.message_id = "m1"
    assert render_message(message, dialect) == WIRE[dialect]


@pytest.mark.parametrize(
    "bad,why",
    [
        ({"role": "user", "parts": [{"kind": "video", "video": "x"}]}, "does not know"),
        ({"role": "user", "parts": []}, "non-empty"),
        ({"role": "boss", "parts": [{"text": "x"}]}, "role"),
        ({"role": "user", "parts": [{"kind": "file", "file": {"bytes": "not base64!!"}}]}, "base64"),
        ({"role": "user", "parts": [{"text": 5}]}, "string"),
        ({"role": "user", "parts": [{"text": "x"}] * 1001}, "at most"),
        ({"role": "user", "parts": [{"text": "x"}], "taskId": ""}, "taskId"),
        ("a string", "object"),
    ],
)
def test_bad_messages_are_refused_with_a_reason(bad, why):
    with pytest.raises(BadMessage, match=why):
        parse_message(bad)


def test_task_and_events_in_each_dialect():
    task = Task(
        id="t1",
        context_id="c1",
        agent="echo",
        state="input-required",
        history=[Message(role="user", parts=[{"text": "a"}]), Message(role="agent", parts=[{"text": "b"}])],
        artifacts=[Artifact(parts=[{"text": "out"}], artifact_id="a1", name="reply")],
    )
    v01, v03, v10 = (render_task(task, d) for d in ("0.1", "0.3", "1.0"))
    assert v01["sessionId"] == "c1" and v01["status"]["state"] == "input-required" and v01["artifacts"][0]["index"] == 0
    assert v03["kind"] == "task" and v03["contextId"] == "c1" and v03["history"][0]["kind"] == "message"
    assert v10["status"]["state"] == "TASK_STATE_INPUT_REQUIRED" and "kind" not in v10
    assert v10["status"]["timestamp"].endswith("Z")
    assert len(render_task(task, "1.0", history_length=1)["history"]) == 1
    assert "history" not in render_task(task, "1.0", history_length=0)
    status = StatusEvent(task_id="t1", context_id="c1", state="completed", final=True)
    assert render_event(status, "0.1") == {"id": "t1", "status": render_event(status, "0.1")["status"], "final": True}
    assert render_event(status, "0.3")["kind"] == "status-update" and render_event(status, "0.3")["final"] is True
    assert "final" not in render_event(status, "1.0")["statusUpdate"]
    artifact = ArtifactEvent(task_id="t1", context_id="c1", artifact=task.artifacts[0])
    assert render_event(artifact, "1.0")["artifactUpdate"]["artifact"]["artifactId"] == "a1"


@pytest.mark.parametrize("dialect", ["0.1", "0.3", "1.0"])
def test_what_tern_writes_its_client_reads_back(dialect):
    task = Task(
        id="t1",
        context_id="c1",
        agent="echo",
        state="completed",
        artifacts=[Artifact(parts=[{"text": "out"}], artifact_id="a1")],
    )
    back = parse_event(dialects.wrap_result(render_task(task, dialect), "task", dialect))
    assert isinstance(back, Task) and back.id == "t1" and back.state == "completed"
    assert back.artifacts[0].parts == [{"text": "out"}]
    event = parse_event(render_event(StatusEvent(task_id="t1", context_id="c1", state="working"), dialect))
    assert isinstance(event, StatusEvent) and event.state == "working" and event.task_id == "t1"
    message = parse_event(
        dialects.wrap_result(render_message(Message(role="agent", parts=[{"text": "m"}]), dialect), "message", dialect)
    )
    assert isinstance(message, (Message, Task))


def test_state_spellings():
    assert dialects.parse_state("TASK_STATE_CANCELLED") == "canceled"
    assert dialects.parse_state("cancelled") == "canceled"
    assert dialects.parse_state("TASK_STATE_AUTH_REQUIRED") == "auth-required"
    assert dialects.parse_state("nonsense") == "unknown"


def test_artifact_flags_index_and_timestamps_survive_a_round_trip():
    event = ArtifactEvent(
        task_id="t", context_id="c", artifact=Artifact(parts=[{"text": "x"}]), append=True, last_chunk=False, index=2
    )
    for dialect in ("0.1", "0.3", "1.0"):
        back = parse_event(render_event(event, dialect))
        assert (back.append, back.last_chunk) == (True, False), dialect
    assert render_event(event, "0.1")["artifact"]["index"] == 2
    status = StatusEvent(task_id="t", context_id="c", state="working", timestamp=1_700_000_000.25)
    assert abs(parse_event(render_event(status, "1.0")).timestamp - 1_700_000_000.25) < 0.001
    task = dialects.parse_task({"id": "t", "artifacts": [{"index": 0, "parts": [{"type": "text", "text": "a"}]}]})
    assert task.artifacts[0].artifact_id == "0"
