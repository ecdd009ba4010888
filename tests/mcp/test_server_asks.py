"""Ask tools' protocol logic without I/O (``asks.py``, ``ask_call.py``): rounds, the
signed single-use ``requestState`` of 2026-07-28 (tampered, replayed, expired,
misapplied), answers checked against their schema, capability checks, templates, and
the config checks. The official SDK client against real processes is
tests/mcp/test_server_asks_sdk.py; the conformance suite's fixtures, test_conformance.py."""

from __future__ import annotations

import pytest

from runtime.config import McpAsk, McpAskQuestion
from runtime.config.checks import find_problems
from runtime.config.load import parse_config
from runtime.errors import ConfigError, RpcError
from runtime.mcp.protocol import MISSING_CAPABILITY
from runtime.mcp.server import ask_call
from runtime.mcp.server.ask_call import AskStates, ask_modern, conclude
from runtime.mcp.server.asks import MAX_ANSWER_CHARS, Ask, AskError, fill
from runtime.mcp.server.mrtr import INVALID_STATE, Mrtr
from runtime.wire.jsonrpc import INVALID_PARAMS

NAME_FORM = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}}, "required": ["name"]}
ALL = {"elicitation": {}, "sampling": {}, "roots": {}}
ASK = Ask(McpAsk(name="greet", arguments=["who"], reply="{step1.name} ({who}) likes {step2.color}; model: {hint}",
                 questions=[McpAskQuestion(key="step1", kind="form", message="Name, {who}?", schema=NAME_FORM),
                            McpAskQuestion(key="hint", kind="sampling", message="A hint for {who}", optional=True),
                            McpAskQuestion(key="step2", kind="form", round=2, message="Colour, {step1.name}?",
                                           schema={"type": "object", "properties": {"color": {
                                               "type": "string", "enum": ["red", "blue"]}}})]))
ARGS = {"who": "Ana"}


def accept(**content):
    return {"action": "accept", "content": content}


def sampled(text: str) -> dict:
    return {"role": "assistant", "content": {"type": "text", "text": text}, "model": "m", "stopReason": "endTurn"}


def leg(states: AskStates, caller: str = "mcp:http:127.0.0.1", ask: Ask = ASK, arguments=None, **params) -> dict:
    return ask_modern(ask, states, ARGS if arguments is None else arguments, params, ALL, caller)


@pytest.fixture
def states():
    return AskStates(Mrtr(keep_secs=60))


def refused(states: AskStates, **params) -> RpcError:
    with pytest.raises(RpcError) as caught:
        leg(states, **params)
    assert caught.value.code == INVALID_PARAMS and caught.value.message == INVALID_STATE
    return caught.value


def test_rounds_carry_their_answers_in_the_signed_state(states):
    first = leg(states)["result"]
    assert first["resultType"] == "input_required"
    assert first["inputRequests"]["step1"] == {"method": "elicitation/create", "params": {
        "mode": "form", "message": "Name, Ana?", "requestedSchema": NAME_FORM}}
    assert first["inputRequests"]["hint"]["params"]["messages"][0]["content"]["text"] == "A hint for Ana"
    second = leg(states, inputResponses={"step1": accept(name="Bo"), "hint": sampled("be kind")},
                 requestState=first["requestState"])["result"]
    assert list(second["inputRequests"]) == ["step2"]  # round 2 quotes round 1's answer
    assert second["inputRequests"]["step2"]["params"]["message"] == "Colour, Bo?"
    done = leg(states, inputResponses={"step2": accept(color="blue")}, requestState=second["requestState"])
    assert conclude(ASK, ARGS, done["answers"])["content"][0]["text"] == "Bo (Ana) likes blue; model: be kind"


def test_missing_answers_are_asked_again_and_extra_ones_ignored(states):
    first = leg(states, inputResponses={"step1": accept(name="Bo"), "nonsense": accept(x=1)})["result"]
    assert list(first["inputRequests"]) == ["hint"]  # step1 was answered on the first call already
    again = leg(states, inputResponses={"wrong": {}}, requestState=first["requestState"])["result"]
    assert list(again["inputRequests"]) == ["hint"]


@pytest.mark.parametrize("responses", [None, 12345, "x", [1]])
def test_input_responses_that_are_not_an_object_are_invalid_params(states, responses):
    with pytest.raises(RpcError) as caught:
        leg(states, inputResponses=responses)
    assert caught.value.code == INVALID_PARAMS


def test_an_answer_that_is_not_an_object_is_invalid_params(states):
    with pytest.raises(RpcError, match="inputResponses\\['step1'\\] must be an object"):
        leg(states, inputResponses={"step1": 12345})


def tampered(state: str) -> list[str]:
    body, _, mac = state.rpartition(".")
    flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    return [state + "-TAMPERED", f"{flipped}.{mac}", f"{body}.{mac[:-2]}", "t1.e30.AAAA", "", "x" * 300_000]


def test_a_tampered_state_is_refused(states):
    state = leg(states)["result"]["requestState"]
    for bad in tampered(state):
        refused(states, inputResponses={"step1": accept(name="Bo")}, requestState=bad)
    leg(states, inputResponses={"step1": accept(name="Bo")}, requestState=state)  # the real one still works


def test_a_replayed_state_is_refused(states):
    state = leg(states)["result"]["requestState"]
    leg(states, inputResponses={"step1": accept(name="Bo")}, requestState=state)
    refused(states, inputResponses={"step1": accept(name="Eve")}, requestState=state)


def test_a_state_is_bound_to_its_tool_arguments_and_caller(states):
    state = leg(states)["result"]["requestState"]
    refused(states, requestState=state, arguments={"who": "Eve"})
    refused(states, requestState=state, caller="mcp:stdio")
    other = Ask(McpAsk(name="other", arguments=["who"], questions=list(ASK.config.questions)))
    refused(states, requestState=state, ask=other)


def test_an_expired_state_is_refused(states, monkeypatch):
    state = leg(states)["result"]["requestState"]
    now = ask_call.time.time()
    monkeypatch.setattr(ask_call.time, "time", lambda: now + ask_call.STATE_SECS + 1)
    refused(states, requestState=state)


def test_approval_states_and_ask_states_are_not_interchangeable(states):
    approval_state = states.mrtr.seal({"c": "x", "n": 1, "ap": [], "t": "greet", "p": "mcp:http:127.0.0.1"})
    refused(states, requestState=approval_state)
    ask_state = leg(states)["result"]["requestState"]
    with pytest.raises(RpcError, match=INVALID_STATE):
        states.mrtr.resume(ask_state, "greet", ARGS, "mcp:http:127.0.0.1")


def test_spent_states_are_remembered_within_a_bound(states, monkeypatch):
    monkeypatch.setattr(ask_call, "MAX_SPENT", 3)
    for _ in range(5):
        leg(states, inputResponses={"step1": accept(name="Bo")}, requestState=leg(states)["result"]["requestState"])
    assert len(states.spent) == 3


@pytest.mark.parametrize("answer,problem", [
    (accept(), "lacks the required name"),
    (accept(name=7), "name is not a string"),
    (accept(name="x" * 21), "name has a length out of bounds"),
    ({"action": "maybe"}, "no valid action"),
    ({"action": "accept", "content": "Bo"}, "content is not an object"),
    ("accept", "is not an object"),
])
def test_a_form_answer_that_violates_the_schema_is_an_error(answer, problem):
    with pytest.raises(AskError, match=problem):
        ASK.take("step1", answer)


def test_a_form_answer_keeps_only_the_fields_the_schema_names():
    assert ASK.take("step1", accept(name="Bo", admin=True)) == {"action": "accept", "content": {"name": "Bo"}}
    assert ASK.take("step1", {"action": "decline", "content": {"x": 1}}) == {"action": "decline"}


@pytest.mark.parametrize("field,good,bad", [
    ({"type": "integer", "minimum": 1}, 3, [3.5, True, "3", 0, float("nan")]),
    ({"type": "number", "maximum": 10}, 9.5, [11, False, "9"]),
    ({"type": "boolean"}, False, [0, "true"]),
    ({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}, "a", ["b", 1]),
    ({"type": "array", "items": {"anyOf": [{"const": "a"}, {"const": "b"}]}}, ["a", "b"], [["c"], "a", [1]]),
    ({"type": "string", "enum": ["x"], "enumNames": ["X"]}, "x", ["y"]),
])
def test_each_field_kind_is_checked(field, good, bad):
    ask = Ask(McpAsk(name="f", questions=[McpAskQuestion(key="q", kind="form", message="m", schema={
        "type": "object", "properties": {"v": field}})]))
    assert ask.take("q", accept(v=good))["content"] == {"v": good}
    for value in bad:
        with pytest.raises(AskError):
            ask.take("q", accept(v=value))


def test_a_model_answer_must_be_bounded_text():
    assert ASK.take("hint", sampled("ok")) == "ok"
    assert ASK.take("hint", {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}) == "ab"
    for bad in ({"content": {"type": "image", "data": "AAAA"}}, {"content": None},
                sampled("x" * (MAX_ANSWER_CHARS + 1))):
        with pytest.raises(AskError):
            ASK.take("hint", bad)


def test_roots_must_be_a_short_list_of_file_uris():
    roots = Ask(McpAsk(name="r", questions=[McpAskQuestion(key="r", kind="roots")]))
    assert roots.take("r", {"roots": [{"uri": "file:///a", "name": "a"}]}) == [{"uri": "file:///a", "name": "a"}]
    for bad in ({"roots": [{"uri": "http://169.254.169.254/"}]}, {"roots": "file:///a"},
                {"roots": [{"uri": "file:///a"}] * 65}):
        with pytest.raises(AskError):
            roots.take("r", bad)


def test_capabilities_decide_what_is_asked():
    asked = ASK.requests(0, {"elicitation": {}}, ARGS, answers := {}, mode=True)
    assert list(asked) == ["step1"] and answers == {"hint": None}  # the optional model turn is left out
    with pytest.raises(RpcError) as caught:
        ASK.requests(0, {"sampling": {}}, ARGS, {}, mode=True)
    assert caught.value.code == MISSING_CAPABILITY
    assert caught.value.data == {"requiredCapabilities": {"elicitation": {}}}


def test_a_url_question_sends_the_configured_url_and_takes_only_an_action():
    ask = Ask(McpAsk(name="u", arguments=["who"], reply="{page}/{page.action}", questions=[
        McpAskQuestion(key="page", kind="url", message="Read this, {who}", url="https://example.org/{who}")]))
    with pytest.raises(RpcError):
        ask.check_capabilities({"elicitation": {"form": {}}})  # a form-only client cannot open URLs
    (asked,) = ask.requests(0, {"elicitation": {"url": {}}}, ARGS, {}, mode=True).values()
    params = asked["params"]
    assert params["mode"] == "url" and params["url"] == "https://example.org/{who}"  # never filled in
    assert params["message"] == "Read this, Ana" and params["elicitationId"].startswith("page-")
    assert ask.take("page", {"action": "accept", "content": {"x": 1}}) == {"action": "accept"}
    with pytest.raises(AskError):
        ask.take("page", {"action": "opened"})
    assert ask.reply(ARGS, {"page": {"action": "accept"}}) == "(accepted)/accept"


def test_a_url_only_client_cannot_answer_forms():
    with pytest.raises(RpcError):
        ASK.check_capabilities({"elicitation": {"url": {}}})
    ASK.check_capabilities({"elicitation": {"form": {}}})


def test_templates_fill_names_only_once_and_nothing_else():
    answers = {"step1": accept(name="{who} {0} {step1.__class__}")}
    assert fill("{step1.name}/{who}/{0}/{x.y}/{step1.__class__}", ARGS, answers) == \
        "{who} {0} {step1.__class__}/Ana/{0}/{x.y}/"


def test_a_declined_form_ends_the_ask_and_sends_nothing(states):
    sending = Ask(McpAsk(name="s", send_to="tern_agent_echo", reply="{q}",
                         questions=[McpAskQuestion(key="q", kind="form", message="m", schema=NAME_FORM),
                                    McpAskQuestion(key="later", kind="form", round=2, message="m", schema=NAME_FORM)]))
    done = ask_modern(sending, states, {}, {"inputResponses": {"q": {"action": "cancel"}}}, ALL, "c")
    assert done == {"answers": {"q": {"action": "cancel"}}}  # round 2 is not asked
    assert conclude(sending, {}, done["answers"])["content"][0]["text"] == \
        "Nothing was sent to tern_agent_echo: the form q was dismissed."
    assert conclude(sending, {}, {"q": accept(name="Bo")}) == ("tern_agent_echo", {"message": '{"name":"Bo"}'})


CONFIG = """
[[agents]]
name = "echo"
kind = "echo"

[[mcp_server.asks]]
name = "a"
{body}
"""


@pytest.mark.parametrize("body,problem", [
    ('', "an ask needs at least one question"),
    ('send_to = "tern_agent_nobody"\n[[mcp_server.asks.questions]]\nkey = "q"\nkind = "roots"',
     'no exposed agent or preset is named "tern_agent_nobody"'),
    ('[[mcp_server.asks.questions]]\nkey = "q"\nkind = "sampling"\nmessage = "{later}"\n'
     '[[mcp_server.asks.questions]]\nkey = "later"\nround = 2\nkind = "roots"',
     "{later} is neither an argument nor an answer of an earlier round"),
    ('reply = "{nope}"\n[[mcp_server.asks.questions]]\nkey = "q"\nkind = "roots"', "{nope} is neither"),
    ('[[mcp_server.asks.questions]]\nkey = "q"\nkind = "form"\nmessage = "m"', "a form needs an object schema"),
    ('[[mcp_server.asks.questions]]\nkey = "q q"\nkind = "roots"', 'must be a name'),
    ('[[mcp_server.asks.questions]]\nkey = "q"\nkind = "url"\nmessage = "m"\nurl = "http://169.254.169.254/"',
     "a url question needs an https:// URL"),
    ('[[mcp_server.asks.questions]]\nkey = "q"\nkind = "url"\nmessage = "m"\nurl = "https://x.org/{q}"',
     "a url question needs an https:// URL"),
    ('prompt = true\nsend_to = "tern_agent_echo"\n[[mcp_server.asks.questions]]\nkey = "q"\nkind = "roots"',
     "a prompt's reply is its message: it has no send_to and is no task"),
    ('prompt = true\ntask = "optional"\n[[mcp_server.asks.questions]]\nkey = "q"\nkind = "roots"',
     "a prompt's reply is its message"),
    ('task = "required"\nsend_to = "tern_agent_echo"\n[[mcp_server.asks.questions]]\nkey = "q"\nkind = "roots"',
     "an ask with send_to asks first"),
])
def test_config_checks_catch_broken_asks(body, problem):
    with pytest.raises(ConfigError, match=problem.replace("{", "\\{").replace("}", "\\}")):
        parse_config(CONFIG.format(body=body), "test.toml", None)


def test_the_conformance_fixture_config_is_valid():
    from tests.mcp.conftest import FAKE, FIXTURES
    fixture_server = ('\n[[mcp_servers]]\nname = "fx"\n'
                      f'transport = {{ type = "stdio", command = "python3", args = ["{FAKE}"] }}\n')
    config = parse_config((FIXTURES / "conformance.toml").read_text() + fixture_server, "conformance.toml", None)
    assert not find_problems(config)


def test_a_preset_placeholder_must_name_a_property_of_its_input_schema():
    text = ('[[agents]]\nname = "echo"\nkind = "echo"\n[[mcp_server.presets]]\nname = "p"\n'
            'tool = "tern_agent_echo"\n'
            'input_schema = { type = "object", properties = { word = { type = "string" } } }\n'
            'arguments = { message = "{word} {other}" }\n')
    with pytest.raises(ConfigError, match="arguments.message: \\{other\\} is not a property of its input_schema"):
        parse_config(text, "test.toml", None)
