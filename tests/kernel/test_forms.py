"""An MCP server's form as a person answers it (``kernel.forms``), the terminal's field
by field dialogue and ``--set`` (``cli.form_prompt``), and the approvals store that
carries the form: hostile forms refused, answers that break the form refused with the
field named (the request stays pending), two people at once, and answers kept out of
events and the audit log."""

from __future__ import annotations

import json

import pytest
import trio

from runtime.cli.form_prompt import dialogue, field_lines, from_args
from runtime.errors import ApprovalClosed, UsageError
from runtime.kernel.approvals import Approvals
from runtime.kernel.audit import AuditLog
from runtime.kernel.forms import FormRefused, check_form, parse_value, sensitive, validate

SCHEMA = {"type": "object", "required": ["name", "age"], "properties": {
    "name": {"type": "string", "title": "Name", "maxLength": 40},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "score": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.5},
    "ok": {"type": "boolean", "default": False},
    "email": {"type": "string", "format": "email"},
    "color": {"type": "string", "enum": ["red", "green"], "enumNames": ["Red", "Green"], "default": "green"},
    "hero": {"type": "string", "oneOf": [{"const": "h1", "title": "Superman"}, {"const": "h2", "title": "Batman"}]},
    "fish": {"type": "array", "minItems": 1, "maxItems": 2,
             "items": {"anyOf": [{"const": "f1", "title": "Tuna"}, {"const": "f2", "title": "Trout"},
                                 {"const": "f3", "title": "Eel"}]}},
    "pin": {"type": "string"},
}}
FORM = {"mode": "form", "message": "Who are you?", "requestedSchema": SCHEMA}


def test_a_good_answer_passes():
    answer = {"name": "Ada", "age": 36, "score": 0.9, "ok": True, "email": "ada@example.org", "color": "red",
              "hero": "h2", "fish": ["f1", "f3"][:2]}
    assert validate(FORM, answer) == answer
    assert check_form({"message": "Who are you?", "requestedSchema": SCHEMA}) == FORM


@pytest.mark.parametrize("answer, text", [
    ({"name": "Ada"}, "field 'age' is required"),
    ({"name": 7, "age": 3}, "field 'name': must be text"),
    ({"name": "Ada", "age": "3"}, "field 'age': must be a whole number"),
    ({"name": "Ada", "age": 3.5}, "field 'age': must be a whole number"),
    ({"name": "Ada", "age": True}, "field 'age': must be a whole number"),
    ({"name": "Ada", "age": 151}, "field 'age': must be between 0 and 150"),
    ({"name": "Ada", "age": 3, "score": -1}, "field 'score': must be between 0 and 1"),
    ({"name": "Ada", "age": 3, "score": float("nan")}, "field 'score': must be a number"),
    ({"name": "Ada", "age": 3, "ok": "yes"}, "field 'ok': must be true or false"),
    ({"name": "Ada", "age": 3, "color": "blue"}, "field 'color': must be one of red, green"),
    ({"name": "Ada", "age": 3, "hero": "Superman"}, "field 'hero': must be one of h1, h2"),
    ({"name": "Ada", "age": 3, "fish": []}, "field 'fish': choose between 1 and 2"),
    ({"name": "Ada", "age": 3, "fish": ["f1", "f1"]}, "field 'fish': each choice once"),
    ({"name": "Ada", "age": 3, "fish": ["f9"]}, "field 'fish': each choice once"),
    ({"name": "Ada", "age": 3, "email": "not-an-address"}, "field 'email': is not a valid email"),
    ({"name": "x" * 41, "age": 3}, "field 'name': must be 0 to 40 characters"),
    ({"name": "Ada", "age": 3, "pin": "x" * 9000}, "field 'pin': must be 0 to 8192 characters"),
    ({"name": "Ada", "age": 3, "pin": "x" * 1_000_000}, "over 65536 bytes"),
    ({"name": "Ada", "age": 3, "extra": 1}, "no field 'extra'"),
    (["Ada"], "must be an object"),
])
def test_answers_that_break_the_form_are_refused_with_the_field_named(answer, text):
    with pytest.raises(UsageError, match=text.replace("(", r"\(").replace(")", r"\)")):
        validate(FORM, answer)


@pytest.mark.parametrize("params, text", [
    ({"message": "x" * 2001}, "at most 2000 characters"),
    ({"message": 5}, "at most 2000 characters"),
    ({"message": "?", "mode": "telepathy"}, "'telepathy' mode"),
    ({"message": "?", "mode": "url", "url": "javascript:alert(1)"}, "http"),
    ({"message": "?", "requestedSchema": {"properties": {f"f{i}": {"type": "string"} for i in range(10_000)}}},
     "over 32768 bytes"),
    ({"message": "?", "requestedSchema": {"properties": {f"f{i}": {"type": "string"} for i in range(65)}}},
     "65 fields"),
    ({"message": "?", "requestedSchema": {"properties": {"d": {"type": "string", "description": "x" * 40000}}}},
     "over 32768 bytes"),
    ({"message": "?", "requestedSchema": {"properties": {"o": {"type": "object"}}}}, "is not a string"),
    ({"message": "?", "requestedSchema": {"properties": {"a": {"type": "array", "items": {"type": "string"}}}}},
     "not a multi-select"),
    ({"message": "?", "requestedSchema": {"properties": {"e": {"type": "string", "enum": list(range(201))}}}},
     "more than 200 choices"),
    ({"message": "?", "requestedSchema": {"properties": {}, "required": ["ghost"]}}, "required list"),
    ({"message": "?", "requestedSchema": "nope"}, "no properties object"),
])
def test_hostile_forms_are_refused(params, text):
    with pytest.raises(FormRefused, match=text):
        check_form(params)


def test_a_url_question_keeps_its_url():
    form = check_form({"mode": "url", "message": "Log in", "url": "https://example.com/a", "elicitationId": "e1"})
    assert form == {"mode": "url", "message": "Log in", "url": "https://example.com/a", "elicitationId": "e1"}
    assert field_lines(form) == ["  open this URL yourself: https://example.com/a"]


def test_typed_text_is_read_in_the_field_type():
    properties = SCHEMA["properties"]
    assert parse_value(properties["age"], "42") == 42
    assert parse_value(properties["score"], "0.25") == 0.25
    assert parse_value(properties["ok"], "yes") is True and parse_value(properties["ok"], "off") is False
    assert parse_value(properties["color"], "Red") == "red"  # by its label
    assert parse_value(properties["hero"], "Batman") == "h2"
    assert parse_value(properties["fish"], "Tuna, f3") == ["f1", "f3"]
    for field, text in ((properties["age"], "forty"), (properties["ok"], "maybe")):
        with pytest.raises(UsageError):
            parse_value(field, text)
    assert sensitive("pin", properties["pin"]) and sensitive("x", {"type": "string", "format": "password"})
    assert not sensitive("name", properties["name"])


def test_set_and_answer_make_one_answer():
    assert from_args(FORM, '{"name": "Ada"}', ["age=36", "fish=Tuna"]) == {"name": "Ada", "age": 36, "fish": ["f1"]}
    assert from_args(FORM, None, []) is None
    for bad, text in (((FORM, None, ["nope"]), "name=value"), ((FORM, None, ["ghost=1"]), "no field 'ghost'"),
                      ((FORM, "[1]", []), "JSON object"), ((FORM, "{", []), "not JSON"),
                      ((None, None, ["a=1"]), "not a question")):
        with pytest.raises(UsageError, match=text):
            from_args(*bad)


def drive(form, lines):
    steps = dialogue(form)
    asked = [next(steps)]
    try:
        for line in lines:
            asked.append(steps.send(line))
    except StopIteration as done:
        return asked, done.value
    raise AssertionError(f"the dialogue wants more after {asked}")


def test_the_terminal_asks_each_field_and_enter_takes_the_default(capsys):
    asked, decision = drive(FORM, ["maybe", "y", "", "Ada", "abc", "36", "", "", "", "", "", "Tuna,Eel", "1234"])
    assert decision == (True, {"name": "Ada", "age": 36, "fish": ["f1", "f3"], "pin": "1234"}, False)
    prompts = [prompt for prompt, _ in asked]
    assert prompts[0].startswith("answer? [y]es") and prompts[1] == prompts[0]  # "maybe" is asked again
    assert "  score [0.5]: " in prompts and "  color [green]: " in prompts and "  email (Enter: leave out): " in prompts
    assert dict(asked)["  pin (Enter: leave out): "] is True  # not echoed
    err = capsys.readouterr().err
    assert "name is required" in err and "not a whole number" in err
    assert drive(FORM, ["n"])[1] == (False, None, False) and drive(FORM, ["c"])[1] == (False, None, True)
    url = {"mode": "url", "message": "Log in", "url": "https://example.com"}
    assert drive(url, ["y"])[1] == (True, {}, False)


async def test_a_form_request_is_answered_once_and_checked(tmp_path, autojump_clock):
    audit = AuditLog(tmp_path / "audit.jsonl")
    events: list = []
    approvals = Approvals(tmp_path / "approvals.sqlite3", timeout_secs=30, audit=audit,
                          publish=lambda kind, data: events.append(data))
    outcome: dict = {}

    async def ask() -> None:
        outcome["approval"] = await approvals.request("", "mcp_sdk_elicitation", {"question": "Who?"}, "d",
                                                      caller="mcp:sdk", form=FORM)
        outcome["answer"] = await approvals.take_answer(outcome["approval"].id)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(1)
        (pending,) = await approvals.list()
        assert pending.form == FORM
        with pytest.raises(UsageError, match="field 'age' is required"):
            await approvals.decide(pending.id, True, answer={"name": "Ada"}, by="a")
        with pytest.raises(UsageError, match="answered once"):
            await approvals.decide(pending.id, True, scope="always", answer={"name": "Ada", "age": 3}, by="a")
        assert (await approvals.get(pending.id)).state == "pending"  # a wrong answer changes nothing
        await approvals.decide(pending.id, True, answer={"name": "Ada", "age": 36}, by="first", channel="cli")
        with pytest.raises(ApprovalClosed, match="already approved by first"):  # the second person loses
            await approvals.decide(pending.id, True, answer={"name": "Eve", "age": 1}, by="second")
    assert outcome["answer"] == {"action": "accept", "content": {"name": "Ada", "age": 36, "score": 0.5,
                                                                 "ok": False, "color": "green"}}
    assert await approvals.take_answer(pending.id) is None  # taken once: wiped
    text = (tmp_path / "audit.jsonl").read_text()
    assert "Ada" not in text and '"answer":"sha256:' in text
    assert "Ada" not in json.dumps(events)


async def test_a_tool_call_takes_no_answer(tmp_path, autojump_clock):
    approvals = Approvals(tmp_path / "approvals.sqlite3", timeout_secs=30)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: approvals.request("agent", "file_write", {}, "d"))
        await trio.sleep(1)
        (pending,) = await approvals.list()
        for extra in ({"answer": {"a": 1}}, {"cancel": True}):
            with pytest.raises(UsageError, match="tool call, not a question"):
                await approvals.decide(pending.id, True, **extra)
        await approvals.decide(pending.id, True)


@pytest.mark.parametrize("deny, expected", [({"cancel": False}, {"action": "decline"}),
                                            ({"cancel": True}, {"action": "cancel"})])
async def test_a_form_is_declined_or_cancelled(tmp_path, autojump_clock, deny, expected):
    approvals = Approvals(tmp_path / "approvals.sqlite3", timeout_secs=30)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: approvals.request("", "t", {}, "d", form=FORM))
        await trio.sleep(1)
        (pending,) = await approvals.list()
        await approvals.decide(pending.id, False, by="a", **deny)
    assert await approvals.take_answer(pending.id) == expected
