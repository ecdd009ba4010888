"""Prompts that ask first (``[[mcp_server.asks]]`` with ``prompt = true``) on ``POST /mcp``
of an in-process node, over real HTTP and raw JSON-RPC, so what a hostile client can
send is what is tested: in 2026-07-28 the ``input_required`` result of ``prompts/get``
and its signed single-use ``requestState`` (tampered, replayed, moved to another prompt
or other arguments), an answer missing one of two questions, a bad answer, a client
without elicitation; in the handshake era the same prompt refused to a client that
cannot answer forms. The official SDK client in both eras, over stdio and HTTP, is
tests/mcp/test_server_asks_sdk.py; the conformance scenario, test_conformance.py."""

from __future__ import annotations

import json

import httpx
import pytest

from runtime.config import load_config
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.mcp.server.mrtr import INVALID_STATE
from tests.mcp.server_harness import MODERN, initialize, request, write_config

BOTH = "application/json, text/event-stream"
FORMS = {"elicitation": {}}
EXTRA = """
[[mcp_server.asks]]
name = "brief"
prompt = true
arguments = ["topic"]
reply = "Brief on {topic} for {who.name}, due {when.date}."
[[mcp_server.asks.questions]]
key = "who"
kind = "form"
message = "Who reads the brief on {topic}?"
schema = { type = "object", properties = { name = { type = "string", maxLength = 40 } }, required = ["name"] }
[[mcp_server.asks.questions]]
key = "when"
kind = "form"
message = "By when?"
schema = { type = "object", properties = { date = { type = "string" } }, required = ["date"] }

[[mcp_server.asks]]
name = "other"
prompt = true
arguments = ["topic"]
reply = "{who.name}"
[[mcp_server.asks.questions]]
key = "who"
kind = "form"
message = "Who?"
schema = { type = "object", properties = { name = { type = "string" } }, required = ["name"] }
"""


@pytest.fixture
async def post(nursery, tmp_path):
    config = load_config(str(write_config(tmp_path, EXTRA))).config
    node = Node(config)
    await nursery.start(node.run)
    server = HttpServer(config.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}/mcp"
    async with httpx.AsyncClient(timeout=30) as client:

        async def send(method: str, params: dict, *, capabilities: dict | None = None, name: str = "brief") -> dict:
            meta = {"io.modelcontextprotocol/protocolVersion": MODERN,
                    "io.modelcontextprotocol/clientCapabilities": FORMS if capabilities is None else capabilities}
            headers = {"Accept": BOTH, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
            if method == "prompts/get":
                headers["Mcp-Name"] = name
            response = await client.post(url, headers=headers, json=request(1, method, {**params, "_meta": meta}))
            return _last(response)

        send.client, send.url = client, url  # type: ignore[attr-defined]
        yield send


def _last(response: httpx.Response) -> dict:
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")][-1]
    return response.json()


def get(name: str = "brief", topic: str = "tides", **params) -> dict:
    return {"name": name, "arguments": {"topic": topic}, **params}


def accept(**content) -> dict:
    return {"action": "accept", "content": content}


ANSWERS = {"who": accept(name="Ada"), "when": accept(date="Friday")}


async def test_listed_asked_and_answered(post):
    listed = (await post("prompts/list", {}))["result"]["prompts"]
    assert {"name": "brief", "description": "Asks you (form) first.",
            "arguments": [{"name": "topic", "required": True}]} in listed
    asked = (await post("prompts/get", get()))["result"]
    assert asked["resultType"] == "input_required" and set(asked["inputRequests"]) == {"who", "when"}
    assert asked["inputRequests"]["who"]["params"]["message"] == "Who reads the brief on tides?"
    done = (await post("prompts/get", get(inputResponses=ANSWERS, requestState=asked["requestState"])))["result"]
    assert done["resultType"] == "complete"
    text = "Brief on tides for Ada, due Friday."
    assert done["messages"] == [{"role": "user", "content": {"type": "text", "text": text}}]
    completed = (await post("completion/complete", {"ref": {"type": "ref/prompt", "name": "brief"},
                                                    "argument": {"name": "topic", "value": "t"}}))["result"]
    assert completed["completion"]["values"] == []


async def test_an_answer_missing_one_of_two_is_asked_again(post):
    first = (await post("prompts/get", get()))["result"]
    again = (await post("prompts/get", get(inputResponses={"who": ANSWERS["who"]},
                                           requestState=first["requestState"])))["result"]
    assert again["resultType"] == "input_required" and set(again["inputRequests"]) == {"when"}
    done = (await post("prompts/get", get(inputResponses={"when": ANSWERS["when"]},
                                          requestState=again["requestState"])))["result"]
    assert done["messages"][0]["content"]["text"] == "Brief on tides for Ada, due Friday."


async def test_tampered_replayed_and_moved_states_are_refused(post):
    state = (await post("prompts/get", get()))["result"]["requestState"]
    payload, _, mac = state.rpartition(".")
    flipped = payload[:-1] + ("A" if payload[-1] != "A" else "B")
    for bad in (flipped + "." + mac, state + "x", "t1.e30.AAAA", 7):
        refused = await post("prompts/get", get(inputResponses=ANSWERS, requestState=bad))
        assert refused["error"]["code"] == -32602 and refused["error"]["message"] == INVALID_STATE, bad
    moved = await post("prompts/get", get(name="other", inputResponses=ANSWERS, requestState=state), name="other")
    assert moved["error"]["message"] == INVALID_STATE
    other_topic = await post("prompts/get", get(topic="storms", inputResponses=ANSWERS, requestState=state))
    assert other_topic["error"]["message"] == INVALID_STATE
    assert (await post("prompts/get", get(inputResponses=ANSWERS, requestState=state)))["result"]["messages"]
    replayed = await post("prompts/get", get(inputResponses=ANSWERS, requestState=state))
    assert replayed["error"]["code"] == -32602 and replayed["error"]["message"] == INVALID_STATE


async def test_bad_answers_arguments_and_clients_are_refused(post):
    state = (await post("prompts/get", get()))["result"]["requestState"]
    too_long = await post("prompts/get", get(inputResponses={"who": accept(name="x" * 41)}, requestState=state))
    assert too_long["error"] == {"code": -32602, "message": "the answer to who: name has a length out of bounds"}
    not_object = await post("prompts/get", get(inputResponses={"who": "Ada"}))
    assert not_object["error"]["code"] == -32602
    for arguments in ({}, {"topic": 3}, {"topic": "x", "more": "y"}):
        wrong = await post("prompts/get", {"name": "brief", "arguments": arguments})
        assert wrong["error"]["code"] == -32602 and wrong["error"]["message"].startswith("invalid arguments")
    no_forms = await post("prompts/get", get(), capabilities={})
    assert no_forms["error"]["code"] == -32021
    assert (await post("prompts/list", {}))["result"]["prompts"]  # still serving


async def test_handshake_era_client_without_elicitation_is_told(post):
    client, url = post.client, post.url
    opened = await client.post(url, headers={"Accept": BOTH}, json=initialize(0))
    session = {"Accept": BOTH, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
    await client.post(url, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    refused = _last(await client.post(url, headers=session, json=request(1, "prompts/get", get())))
    assert refused["error"]["code"] == -32021 and "elicitation" in refused["error"]["message"]
