"""Resources, prompts and completion of ``tern mcp``'s server over in-memory streams: the
real dispatcher and the kernel's real ``ContentPort`` (the file tools' safe open, on a
real temporary workspace), with a scripted upstream MCP server for the gateway. The real
fake server behind a real tern, and the official SDK client, are
tests/mcp/test_server_resources_sdk.py; the conformance suite is test_conformance.py.

Not on the virtual clock: workspace files are read in worker threads, which trio's
autojump clock would not wait for."""

from __future__ import annotations

import base64
import re
import os
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from runtime.config import AgentConfig, AgentPrompt, Config, McpAsk, McpAskQuestion, McpServerExposure
from runtime.config.schema import PromptArgument, PromptMessage
from runtime.errors import RpcError
from runtime.kernel.content import KernelContent
from runtime.mcp.server.catalog import MAX_SUBSCRIPTIONS, POLL_SECS
from runtime.mcp.server.dispatch import McpServer
from runtime.mcp.server.stdio import LocalBackend, StdioServer
from tests.mcp.test_server_memory import Client, FakeEvents, FakeTools

MODERN = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
          "io.modelcontextprotocol/clientCapabilities": {}}
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))


class Upstream:
    """A connected MCP server as the supervisor shows it (``ContentPort``'s upstream half):
    one text resource, a resources/list whose cursor never ends, a prompt."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []
        self.events: Any = None

    async def wait_settled(self) -> None:
        pass

    def capabilities(self, server: str) -> dict[str, Any] | None:
        return {"resources": {"subscribe": True}, "prompts": {}} if server == "up" else None

    async def request(self, server: str, method: str, params: Any = None) -> Any:
        self.requests.append((method, params))
        if method == "resources/list":  # a hostile server: the same cursor forever
            return {"resources": [{"uri": "up://one", "name": "one"}, "junk"], "nextCursor": "again"}
        if method == "resources/templates/list":
            return {"resourceTemplates": [{"uriTemplate": "up://item/{id}", "name": "item"}]}
        if method == "resources/read":
            if params["uri"] == "up://one":
                return {"contents": [{"uri": "up://one", "mimeType": "text/plain", "text": "from upstream"}]}
            raise RpcError(-32002, "Resource not found")
        if method == "resources/subscribe":
            if params["uri"] != "up://one":
                raise RpcError(-32002, "Resource not found")
            return {}
        if method == "prompts/list":
            return {"prompts": [{"name": "up_prompt", "description": "upstream's"},
                                {"name": "a/review", "description": "shadowed by tern's own"}]}
        if method == "prompts/get":
            return {"messages": [{"role": "user", "content": {"type": "text", "text": repr(params["arguments"])}}]}
        raise RpcError(-32601, "no")


@pytest.fixture
def workspaces(tmp_path):
    a, b, outside = tmp_path / "a", tmp_path / "b", tmp_path / "outside"
    for directory in (a / "docs", b, outside):
        directory.mkdir(parents=True)
    (a / "notes.md").write_text("# notes\nhello")
    (a / "secret.txt").write_text("not offered")
    (a / "docs" / "x.md").write_text("x")
    (a / "big.md").write_bytes(b"y" * 5000)
    (a / "image.png").write_bytes(PNG)
    (outside / "stolen.md").write_text("outside the workspace")
    os.symlink(outside / "stolen.md", a / "link.md")
    os.symlink(outside, a / "docs" / "out")
    (b / "notes.md").write_text("agent b's")
    return a, b


def make_config(a, b, **exposure: Any) -> Config:
    review = AgentPrompt(name="review", description="Review a file", arguments=[
        PromptArgument(name="lang", required=True, values=["python", "perl", "rust"]),
        PromptArgument(name="many", values=[f"v{i:03}" for i in range(150)]),
        PromptArgument(name="tone")],
        messages=[PromptMessage(text="Review this {lang} code, {tone}. {unknown} stays."),
                  PromptMessage(role="assistant", resource="notes.md"), PromptMessage(image="image.png")])
    broken = AgentPrompt(name="broken", messages=[PromptMessage(resource="link.md")])
    return Config(agents=[AgentConfig(name="a", kind="echo", workspace=str(a), resources=["*.md", "*.png"],
                                      prompts=[review, broken]),
                          AgentConfig(name="b", kind="echo", workspace=str(b))],
                  mcp_server=McpServerExposure(max_resource_bytes=4096, **exposure))


async def serve(nursery, config: Config) -> tuple[Client, Upstream]:
    upstream = Upstream()
    client_end, server_end = trio.testing.memory_stream_pair()
    upstream.events = FakeEvents()  # the kernel's bus, where the supervisor relays upstream notifications
    server = McpServer(config, FakeTools(), upstream.events, content=KernelContent(upstream))
    nursery.start_soon(StdioServer(LocalBackend(server), server_end, server_end).serve)
    client = Client(client_end)
    reply = await client.call(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    assert reply["result"]["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
    assert "prompts" in reply["result"]["capabilities"] and "completions" in reply["result"]["capabilities"]
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    return client, upstream


def uri(path: str, agent: str = "a") -> str:
    return f"tern://agent/{agent}/{path}"


async def test_list_pages_through_files_and_the_upstream_servers(nursery, workspaces):
    client, upstream = await serve(nursery, make_config(*workspaces, page_size=2, upstream=["up"]))
    listed, cursor, msg_id = [], None, 1
    while True:
        reply = await client.call(msg_id := msg_id + 1, "resources/list", {"cursor": cursor} if cursor else {})
        listed += reply["result"]["resources"]
        cursor = reply["result"].get("nextCursor")
        if cursor is None:
            break
    # only a's files its globs match; no symlink, no secret.txt, nothing of b's; then upstream's
    assert [entry["uri"] for entry in listed] == [uri("big.md"), uri("docs/x.md"), uri("image.png"),
                                                  uri("notes.md"), "up://one"]
    assert listed[3]["mimeType"] == "text/markdown" and listed[3]["name"] == "notes.md"
    # each page is listed afresh; the upstream's endless cursor was followed once per listing, then dropped
    assert sum(1 for method, _ in upstream.requests if method == "resources/list") == 2 * (msg_id - 1)
    reply = await client.call(50, "resources/list", {"cursor": "not-a-cursor"})
    assert reply["error"]["code"] == -32602


async def test_read_text_blob_and_upstream(nursery, workspaces):
    client, _ = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    text = (await client.call(1, "resources/read", {"uri": uri("notes.md")}))["result"]["contents"]
    assert text == [{"uri": uri("notes.md"), "mimeType": "text/markdown", "text": "# notes\nhello"}]
    blob = (await client.call(2, "resources/read", {"uri": uri("image.png")}))["result"]["contents"][0]
    assert base64.b64decode(blob["blob"]) == PNG and blob["mimeType"] == "image/png"
    assert (await client.call(3, "resources/read", {"uri": "up://one"}))["result"]["contents"][0]["text"] == \
        "from upstream"
    templates = (await client.call(4, "resources/templates/list"))["result"]["resourceTemplates"]
    assert [t["uriTemplate"] for t in templates] == ["tern://agent/a/{+path}", "up://item/{id}"]


@pytest.mark.parametrize("hostile", [
    uri("secret.txt"),  # not matched by a's globs
    uri("notes.md", agent="b"),  # another agent, which offers nothing
    uri("notes.md", agent="nobody"),
    uri("%2e%2e/b/notes.md"), uri("../b/notes.md"), uri("docs/..%2f..%2fb%2fnotes.md"),
    uri("/etc/passwd.md"), uri("./notes.md"), uri("notes.md%00.md"),
    uri("missing.md"),
    "up://nothing-here", "file:///etc/passwd",
])
async def test_what_is_not_offered_is_not_found(nursery, workspaces, hostile):
    client, _ = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    reply = await client.call(1, "resources/read", {"uri": hostile})
    assert reply["error"]["code"] == -32002 and reply["error"]["data"] == {"uri": hostile}
    modern = await client.call(2, "resources/read", {"uri": hostile, "_meta": MODERN})
    assert modern["error"]["code"] == -32602 and modern["error"]["data"] == {"uri": hostile}


@pytest.mark.parametrize("path, why", [("link.md", "symlink"), ("docs/out/stolen.md", "symlink"),
                                       ("big.md", "too large")])
async def test_symlinks_out_and_huge_files_are_refused(nursery, workspaces, path, why):
    client, _ = await serve(nursery, make_config(*workspaces))
    reply = await client.call(1, "resources/read", {"uri": uri(path)})
    assert reply["error"]["code"] == -32602 and why in reply["error"]["message"]
    assert "outside the workspace" not in str(reply) and str(workspaces[0]) not in str(reply)


async def test_bad_params_get_errors_and_the_server_goes_on(nursery, workspaces):
    client, _ = await serve(nursery, make_config(*workspaces))
    for msg_id, params in enumerate([{}, {"uri": 5}, {"uri": "x" * 5000}], 1):
        assert (await client.call(msg_id, "resources/read", params))["error"]["code"] == -32602
    assert (await client.call(9, "ping"))["result"] == {}


async def test_2026_lists_and_reads_carry_caching_hints_and_have_no_subscribe(nursery, workspaces):
    client, _ = await serve(nursery, make_config(*workspaces))
    for method, params in (("resources/list", {}), ("resources/templates/list", {}), ("prompts/list", {}),
                           ("resources/read", {"uri": uri("notes.md")})):
        result = (await client.call(1, method, {**params, "_meta": MODERN}))["result"]
        assert result["cacheScope"] == "private" and result["ttlMs"] >= 0 and result["resultType"] == "complete"
    reply = await client.call(2, "resources/subscribe", {"uri": uri("notes.md"), "_meta": MODERN})
    assert reply["error"]["code"] == -32601


async def test_subscriptions_are_checked_and_bounded(nursery, workspaces):
    client, upstream = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    assert (await client.call(1, "resources/subscribe", {"uri": uri("notes.md")}))["result"] == {}
    assert (await client.call(2, "resources/subscribe", {"uri": "up://one"}))["result"] == {}
    assert ("resources/subscribe", {"uri": "up://one"}) in upstream.requests
    assert (await client.call(3, "resources/subscribe", {"uri": uri("secret.txt")}))["error"]["code"] == -32002
    assert (await client.call(4, "resources/unsubscribe", {"uri": uri("notes.md")}))["result"] == {}
    # 10,000 subscriptions: the first ones up to the bound are taken, the rest refused, and it keeps serving
    refused = 0
    for i in range(10_000):
        reply = await client.call(10 + i, "resources/subscribe", {"uri": uri(f"n{i}.md")})
        refused += "error" in reply
    assert refused == 10_000 - (MAX_SUBSCRIPTIONS - 1)
    assert (await client.call(99_999, "ping"))["result"] == {}


async def test_prompts_list_get_and_arguments(nursery, workspaces):
    client, upstream = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    prompts = (await client.call(1, "prompts/list"))["result"]["prompts"]
    assert [p["name"] for p in prompts] == ["a/review", "a/broken", "up_prompt"]
    assert prompts[0]["arguments"][0] == {"name": "lang", "description": "", "required": True}
    got = (await client.call(2, "prompts/get", {"name": "a/review", "arguments": {"lang": "rust"}}))["result"]
    assert got["description"] == "Review a file"
    first, second, third = got["messages"]
    assert first == {"role": "user", "content": {"type": "text", "text": "Review this rust code, . {unknown} stays."}}
    assert second["role"] == "assistant" and second["content"] == {"type": "resource", "resource": {
        "uri": uri("notes.md"), "mimeType": "text/markdown", "text": "# notes\nhello"}}
    assert third["content"]["type"] == "image" and base64.b64decode(third["content"]["data"]) == PNG
    for msg_id, params in enumerate([{"name": "a/review"}, {"name": "a/review", "arguments": {"lang": "x", "no": "y"}},
                                     {"name": "a/review", "arguments": {"lang": 5}},
                                     {"name": "a/review", "arguments": {"lang": "x" * 70_000}},
                                     {"name": "a/broken"}, {"name": "nope"}, {}], 10):
        assert (await client.call(msg_id, "prompts/get", params))["error"]["code"] == -32602, params
    forwarded = await client.call(20, "prompts/get", {"name": "up_prompt", "arguments": {"k": "v"}})
    assert forwarded["result"]["messages"][0]["content"]["text"] == "{'k': 'v'}"


async def test_completion_of_prompt_arguments_and_template_paths(nursery, workspaces):
    client, _ = await serve(nursery, make_config(*workspaces))

    async def complete(ref: dict, name: str, value: str) -> dict:
        reply = await client.call(1, "completion/complete", {"ref": ref, "argument": {"name": name, "value": value}})
        return reply.get("result", {}).get("completion") or reply["error"]

    prompt = {"type": "ref/prompt", "name": "a/review"}
    assert await complete(prompt, "lang", "p") == {"values": ["python", "perl"], "total": 2, "hasMore": False}
    many = await complete(prompt, "many", "")
    assert len(many["values"]) == 100 and many["total"] == 150 and many["hasMore"] is True
    assert (await complete(prompt, "nope", ""))["code"] == -32602
    template = {"type": "ref/resource", "uri": "tern://agent/a/{+path}"}
    assert (await complete(template, "path", "d"))["values"] == ["docs/x.md"]
    assert (await complete(template, "path", "secret"))["values"] == []
    assert (await complete({"type": "ref/resource", "uri": "tern://agent/b/{+path}"}, "path", ""))["values"] == []
    assert (await complete({"type": "ref/other"}, "x", ""))["code"] == -32602


async def test_subscribers_hear_of_changed_files_and_upstream_updates(nursery, workspaces):
    client, upstream = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    for msg_id, subscribed in enumerate([uri("notes.md"), uri("docs/x.md"), "up://one"], 1):
        assert (await client.call(msg_id, "resources/subscribe", {"uri": subscribed}))["result"] == {}
    assert (await client.call(5, "resources/unsubscribe", {"uri": uri("docs/x.md")}))["result"] == {}
    await trio.sleep(POLL_SECS + 0.5)  # the watcher has looked at the files once
    (workspaces[0] / "notes.md").write_text("changed, and longer than before")
    (workspaces[0] / "docs" / "x.md").write_text("changed too, but nobody is subscribed")
    with trio.fail_after(3 * POLL_SECS):
        assert await client.receive() == {"jsonrpc": "2.0", "method": "notifications/resources/updated",
                                          "params": {"uri": uri("notes.md")}}
    upstream.events.publish("mcp.resource", {"server": "elsewhere", "uri": "up://one"})  # not re-exported
    upstream.events.publish("mcp.resource", {"server": "up", "uri": "up://other"})  # not subscribed
    upstream.events.publish("mcp.resource", {"server": "up", "uri": "up://one"})
    with trio.fail_after(1):
        assert (await client.receive())["params"] == {"uri": "up://one"}
    assert await client.nothing_within(POLL_SECS + 1)


async def test_2026_listen_acknowledges_what_it_honours_and_streams_updates(nursery, workspaces):
    client, upstream = await serve(nursery, make_config(*workspaces, upstream=["up"]))
    sid = {"io.modelcontextprotocol/subscriptionId": "listen-1"}
    await client.send({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen", "params": {
        "_meta": MODERN, "notifications": {"toolsListChanged": True, "promptsListChanged": True, "other": True,
                                           "resourceSubscriptions": [uri("notes.md"), uri("secret.txt"), "up://one"]}}})
    honored = {"toolsListChanged": True, "promptsListChanged": True,
               "resourceSubscriptions": [uri("notes.md"), "up://one"]}
    with trio.fail_after(5):
        assert await client.receive() == {"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                                          "params": {"notifications": honored, "_meta": sid}}
    assert (await client.call(2, "ping"))["result"] == {}  # the stream holds no other request up
    upstream.events.publish("mcp.resource", {"server": "up", "uri": "up://one"})
    with trio.fail_after(5):
        assert (await client.receive())["params"] == {"uri": "up://one", "_meta": sid}
    upstream.events.publish("mcp.catalog", {"server": "up", "list": "prompts"})
    with trio.fail_after(5):  # on the listen stream; and (this connection also did the handshake) without an id
        got = [await client.receive(), await client.receive()]
    assert {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed", "params": {"_meta": sid}} in got
    assert {"jsonrpc": "2.0", "method": "notifications/prompts/list_changed"} in got
    await trio.sleep(POLL_SECS + 0.5)
    (workspaces[0] / "notes.md").write_text("new notes, longer")
    with trio.fail_after(3 * POLL_SECS):
        assert (await client.receive())["params"] == {"uri": uri("notes.md"), "_meta": sid}
    await client.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "listen-1"}})
    assert (await client.call(4, "ping"))["result"] == {}  # read after the cancellation
    await trio.sleep(0.1)
    upstream.events.publish("mcp.resource", {"server": "up", "uri": "up://one"})
    assert await client.nothing_within(1)  # ended, and unanswered
    bad = await client.call(3, "subscriptions/listen", {"_meta": MODERN, "notifications": {
        "resourceSubscriptions": [uri(f"n{i}.md") for i in range(MAX_SUBSCRIPTIONS + 1)]}})
    assert bad["error"]["code"] == -32602


async def test_lists_changed_on_reload_and_when_an_upstream_server_says_so(nursery, workspaces):
    config = make_config(*workspaces, upstream=["up"])
    upstream = Upstream()
    upstream.events = FakeEvents()
    client_end, server_end = trio.testing.memory_stream_pair()
    server = McpServer(config, FakeTools(), upstream.events, content=KernelContent(upstream))
    nursery.start_soon(StdioServer(LocalBackend(server), server_end, server_end).serve)
    client = Client(client_end)
    await client.call(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    await client.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert (await client.call(1, "ping"))["result"] == {}

    async def changed() -> set[str]:
        seen = set()
        with trio.move_on_after(0.5):
            while True:
                seen.add((await client.receive())["method"])
        return seen

    a, b = config.agents
    reloaded = Config(agents=[a, AgentConfig(name="b", kind="echo", workspace=b.workspace, prompts=[AgentPrompt(
        name="new", messages=[PromptMessage(text="hi")])])], mcp_server=config.mcp_server)
    server.catalog.reconfigure(reloaded)  # as Node.reload does, after the kernel published config.reloaded
    upstream.events.publish("config.reloaded", {})
    assert await changed() == {"notifications/prompts/list_changed"}
    upstream.events.publish("mcp.catalog", {"server": "up", "list": "resources"})
    upstream.events.publish("mcp.catalog", {"server": "elsewhere", "list": "prompts"})  # not re-exported
    assert await changed() == {"notifications/resources/list_changed"}
    upstream.events.publish("mcp.server", {"name": "up", "state": "ready"})
    assert await changed() == {"notifications/prompts/list_changed", "notifications/resources/list_changed"}
    upstream.events.publish("mcp.server", {"name": "up", "state": "ready"})  # no change of state
    upstream.events.publish("config.reloaded", {})  # nothing changed
    assert await changed() == set()
    asking = McpAsk(name="brief", prompt=True, questions=[McpAskQuestion(key="q", kind="roots")])
    server.catalog.reconfigure(msgspec.structs.replace(reloaded, mcp_server=msgspec.structs.replace(
        reloaded.mcp_server, asks=[asking])))  # a prompt that asks is a prompt too
    upstream.events.publish("config.reloaded", {})
    assert await changed() == {"notifications/prompts/list_changed"}


@pytest.mark.parametrize("toml, problem", [
    ('[mcp_server]\nupstream = ["docs"]\n', 'mcp_server.upstream[0]: no [[mcp_servers]] entry is named "docs"'),
    ('[mcp_server]\nmax_resource_bytes = 0\n', "mcp_server.max_resource_bytes: expected a number above 0"),
    ('[[agents]]\nname = "a"\nkind = "echo"\n[[agents.prompts]]\nname = "bad name"\nmessages = [{ text = "x" }]\n',
     'agents[0].prompts[0].name: expected 1-64'),
    ('[[agents]]\nname = "a"\nkind = "echo"\n[[agents.prompts]]\nname = "p"\n', "agents[0].prompts[0].messages"),
    ('[[agents]]\nname = "a"\nkind = "echo"\n[[agents.prompts]]\nname = "p"\narguments = [{ name = "a b" }]\n'
     'messages = [{ role = "user" }]\n', "agents[0].prompts[0].arguments[0].name"),
    ('[[agents]]\nname = "a"\nkind = "echo"\n[[agents.prompts]]\nname = "p"\nmessages = [{ role = "user" }]\n',
     "agents[0].prompts[0].messages[0]: expected text, resource or image"),
    ('[[agents]]\nname = "a"\nkind = "echo"\n[[agents.prompts]]\nname = "p"\nmessages = [{ text = "x" }]\n'
     '[[agents.prompts]]\nname = "p"\nmessages = [{ text = "y" }]\n', 'agents[0].prompts[1].name: "p" is already used'),
])
def test_config_problems_are_named(toml, problem):
    from runtime.config import parse_config
    from runtime.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config(toml, "config.toml", None)
