"""One caller, checked once: the attacks that composed features into holes, each through
the public surface (HTTP with a narrow key, POST /mcp, a webhook, a model's web_fetch),
failing on the code before the kernel's door (``kernel.door``) and passing now."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import trio

from runtime.config import (A2aConfig, AgentConfig, Config, GovernanceConfig, McpServerEntry, ModelConfig,
                            ServerConfig, StateConfig, TriggerConfig)
from runtime.config.keys import Caller
from runtime.config.schema import AgentPrompt, ApprovalRule, HttpTransport, KeyConfig, StdioTransport
from runtime.errors import Forbidden
from runtime.kernel.approvals import Approvals
from tests.http.keyed import ADMIN, start

KEYS = {"echo-msg": "echo-msg-key-0123456789", "echo-mcp": "echo-mcp-key-0123456789",
        "relay-only": "relay-only-key-01234567", "reader": "reader-key-0123456789ab",
        "asker": "asker-key-0123456789abc"}
DB_PASSWORD = "hunter2-db-password-XYZ"
URL_TOKEN = "tok3nInTheUrlPath0123456789abc"


def door_config(tmp_path, **extra) -> Config:
    """Agents ``echo`` and ``other`` (echo), ``relay`` (a tool agent whose one tool is
    ``agent_send``), ``asking`` (calls ``time_now``, which a rule says to ask about); a
    webhook trigger without a secret on ``other``; MCP servers whose args and URL hold
    secrets; keys limited to one agent and one scope each."""
    agents = [AgentConfig(name="echo", kind="echo", prompts=[AgentPrompt(name="hi")]),
              AgentConfig(name="other", kind="echo", resources=["*.md"], prompts=[AgentPrompt(name="secret")],
                          workspace=str(tmp_path / "ws-other")),
              AgentConfig(name="relay", kind="tool", tool="agent_send"),
              AgentConfig(name="asking", kind="tool", tool="time_now")]
    keys = [KeyConfig(name="echo-msg", key=KEYS["echo-msg"], scopes=["message"], agents=["echo"]),
            KeyConfig(name="echo-mcp", key=KEYS["echo-mcp"], scopes=["mcp"], agents=["echo"]),
            KeyConfig(name="relay-only", key=KEYS["relay-only"], scopes=["message"], agents=["relay"]),
            KeyConfig(name="reader", key=KEYS["reader"], scopes=["tasks"]),
            KeyConfig(name="asker", key=KEYS["asker"], scopes=["message"], agents=["asking"])]
    servers = [McpServerEntry(name="db", transport=StdioTransport(
                   command="/nonexistent/server-postgres",
                   args=[f"postgresql://tern:{DB_PASSWORD}@db/app", "--password", DB_PASSWORD])),
               McpServerEntry(name="remote", transport=HttpTransport(
                   url=f"http://127.0.0.1:9/hooks/{URL_TOKEN}/mcp?api_key={DB_PASSWORD}"))]
    return Config(agents=agents, state=StateConfig(dir=str(tmp_path / "state")),
                  server=ServerConfig(keys=keys), a2a=A2aConfig(enabled=True, default_agent="echo"),
                  mcp_servers=servers,
                  governance=GovernanceConfig(rules=[ApprovalRule(tool="time_now", decision="ask")],
                                              approval_timeout_secs=30),
                  triggers=[TriggerConfig(name="nightly-other", agent="other", message="{{ body }}",
                                          kind="webhook")], **extra)


def keyed(url: str, name: str) -> httpx.AsyncClient:
    key = ADMIN if name == "admin" else KEYS[name]
    return httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def audit(node) -> list[dict]:
    return [json.loads(line) for line in node.kernel.pipeline.audit.path.read_text().splitlines()]


@pytest.fixture
async def served(nursery, tmp_path):
    return await start(nursery, tmp_path, cfg=door_config(tmp_path))


async def test_a_key_limited_to_one_agent_cannot_run_another_through_a_webhook(served):
    """Attack 1a: an unsigned webhook needs only ``message``; its run acts for the key
    that posted it, so a key limited to ``echo`` cannot run ``other`` with its own text."""
    node, url = served
    async with keyed(url, "echo-msg") as narrow, keyed(url, "admin") as admin:
        refused = await narrow.post("/hooks/nightly-other", json={"text": "do it"})
        assert refused.status_code == 403 and "'other'" in refused.json()["error"]["message"]
        assert (await admin.post("/hooks/nightly-other", json={"text": "mine"})).status_code == 202
    with trio.fail_after(5):
        while not [r for r in audit(node) if r.get("kind") == "agent_message"]:
            await trio.sleep(0.05)
    runs = [r for r in audit(node) if r.get("kind") == "agent_message"]
    assert [(r["agent"], r["key"], r["caller"]) for r in runs] == [("other", "admin", "trigger:nightly-other")]


async def test_an_agent_acts_for_its_caller_never_above_it(served):
    """Attack 1b: a key limited to ``relay`` reaches no other agent through relay's agent_send."""
    node, url = served
    async with keyed(url, "relay-only") as narrow:
        relayed = await narrow.post("/api/agents/relay/message",
                                    json={"message": json.dumps({"agent": "other", "message": "hi"})})
    assert relayed.status_code == 502
    assert "may not message the agent 'other'" in relayed.json()["error"]["message"]
    sent = [r for r in audit(node) if r.get("kind") == "agent_message"]
    assert [r["agent"] for r in sent] == ["relay"]  # other never ran


async def _session(client: httpx.AsyncClient) -> dict:
    headers = {"MCP-Protocol-Version": "2025-11-25", "Accept": "application/json, text/event-stream"}
    init = await client.post("/mcp", headers=headers, json={
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
    await client.post("/mcp", headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    return headers


async def test_an_mcp_key_lists_and_calls_only_its_agents(served):
    """Attack 1c: ``mcp`` with ``agents = ["echo"]`` sees and calls tern_agent_echo alone."""
    node, url = served
    workspace = Path(node.config.agents[1].workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    (workspace / "notes.md").write_text("other's notes")
    async with keyed(url, "admin") as admin:  # the owner sees them: what the narrow key misses is there
        owners = await _session(admin)
        assert "notes.md" in (await admin.post("/mcp", headers=owners, json={
            "jsonrpc": "2.0", "id": 2, "method": "resources/list", "params": {}})).text
    async with keyed(url, "echo-mcp") as narrow:
        headers = await _session(narrow)
        listed = (await narrow.post("/mcp", headers=headers,
                                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).json()
        assert [t["name"] for t in listed["result"]["tools"]] == ["tern_agent_echo"]
        for tool in ("tern_agent_other", "tern_agent_relay", "tern_agent_asking"):
            call = await narrow.post("/mcp", headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": tool},
                                     json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                           "params": {"name": tool, "arguments": {"message": "x"}}})
            assert call.status_code == 200 and "-32602" in call.text, call.text
        async def rpc(method: str, params: dict, name: str = "") -> str:
            extra = {"Mcp-Method": method, **({"Mcp-Name": name} if name else {})}
            answer = await narrow.post("/mcp", headers={**headers, **extra},
                                       json={"jsonrpc": "2.0", "id": 9, "method": method, "params": params})
            return answer.text

        other_file = "tern://agent/other/notes.md"
        assert "notes.md" not in await rpc("resources/list", {})
        assert "Resource not found" in await rpc("resources/read", {"uri": other_file}, other_file)
        listed_prompts = await rpc("prompts/list", {})
        assert "echo/hi" in listed_prompts and "other/secret" not in listed_prompts
        assert "no prompt named" in await rpc("prompts/get", {"name": "other/secret"}, "other/secret")
        ok = await narrow.post("/mcp", headers={**headers, "Mcp-Method": "tools/call", "Mcp-Name": "tern_agent_echo"},
                               json={"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                     "params": {"name": "tern_agent_echo", "arguments": {"message": "x"}}})
        assert ok.status_code == 200 and '"reply":"x"' in ok.text.replace(" ", ""), ok.text


async def test_a_key_without_the_approvals_scope_does_not_answer_its_own_requests(served):
    """Attack 2: with no switch letting callers decide for themselves, the key whose run
    waits sees its request but cannot approve it, ``always`` least of all."""
    node, url = served
    async with keyed(url, "asker") as narrow, keyed(url, "admin") as admin:
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                await narrow.post("/api/agents/asking/message", json={"message": ""})

            nursery.start_soon(run)
            with trio.fail_after(5):
                while not (pending := (await narrow.get("/api/approvals")).json()["approvals"]):
                    await trio.sleep(0.05)
            request_id = pending[0]["id"]
            answered = await narrow.post(f"/api/approvals/{request_id}",
                                         json={"decision": "approve", "scope": "always"})
            assert answered.status_code == 403 and "'approvals'" in answered.json()["error"]["message"]
            decided = await admin.post(f"/api/approvals/{request_id}", json={"decision": "approve"})
            assert decided.status_code == 200
    assert await node.kernel.approvals.rules() == []  # nothing remembered for anyone


async def test_a_callers_always_reaches_no_other_caller(autojump_clock):
    """Attack 2: a rule a caller makes for itself answers its own runs only; a deny for
    everyone still wins over a caller's own yes; every rule says who made it."""
    approvals = Approvals(None, timeout_secs=60, self_approval=lambda origin: origin == "mcp")
    mallory = Caller("mallory", frozenset({"message", "mcp"}))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: approvals.request("bot", "shell_exec", {}, "d1", key="mallory", origin="mcp"))
        while not (pending := await approvals.list()):
            await trio.sleep(0.01)
        with pytest.raises(Forbidden):
            await approvals.decide(pending[0].id, True, scope="always", rule_for="everyone", who=mallory)
        await approvals.decide(pending[0].id, True, scope="always", who=mallory, by="mcp:test")
    assert await approvals.remembered("bot", "shell_exec", "d2", "mallory") == "allow"
    assert await approvals.remembered("bot", "shell_exec", "d2", "alice") is None
    assert await approvals.remembered("bot", "shell_exec", "d2", "admin") is None
    [rule] = await approvals.rules()
    assert (rule["caller"], rule["made_by"]) == ("mallory", "mallory")


async def test_no_read_route_shows_an_mcp_servers_secrets(served, caplog):
    """Attack 3: args and URLs are masked in every view (and in the log's errors);
    ``tern config show --secrets`` is the owner's way."""
    node, url = served
    caplog.set_level("INFO", logger="tern")
    with trio.fail_after(10):
        while not any(s.last_error for s in node.kernel.mcp.statuses() if s.name == "remote"):
            await trio.sleep(0.05)
    async with keyed(url, "reader") as reader, keyed(url, "admin") as admin:
        for client, path in ((reader, "/api/mcp/servers"), (reader, "/api/status"), (admin, "/api/config"),
                             (admin, "/api/mcp/servers")):
            body = (await client.get(path)).text
            assert DB_PASSWORD not in body and URL_TOKEN not in body, (path, body[:300])
        shown = (await admin.get("/api/mcp/servers")).json()["configured"]
        assert shown[0]["transport"]["args"][1:] == ["--password", "********"]
    assert DB_PASSWORD not in caplog.text and URL_TOKEN not in caplog.text


async def test_a_hostile_client_cannot_spend_a_webhooks_budget_or_learn_its_name(served):
    """Attack 6: unknown names and bad keys answer alike and spend nothing of the trigger."""
    node, url = served
    async with httpx.AsyncClient(base_url=url) as stranger:
        unknown = await stranger.post("/hooks/no-such-hook", json={})
        assert unknown.status_code == 401
        for _ in range(80):  # far more than the trigger's burst of 10: refused, and none spends it
            assert (await stranger.post("/hooks/nightly-other", json={})).status_code == 401
        for _ in range(40):  # failures past its own bucket (30): the stranger alone is slowed down
            last = await stranger.post("/hooks/no-such-hook", json={})
        assert last.status_code == 429
    # The trigger's own budget is untouched: its owner, from another address, is served at once.
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"},
                                 transport=httpx.AsyncHTTPTransport(local_address="127.0.0.2")) as admin:
        for n in range(10):  # the trigger's whole burst
            assert (await admin.post("/hooks/nightly-other", json={"n": n})).status_code == 202


async def test_a_token_budget_holds_under_concurrency(nursery, tmp_path, mock_clock):
    """Attack 4: 20 messages at once against tokens_per_hour = 1000 use at most 1000 plus
    one turn's reserve (before: every turn checked, none reserved, all 20 ran)."""
    from runtime.kernel.kernel import Kernel
    from tests.scripted_llm import ScriptedLLM, whole

    replies = []
    for _ in range(20):
        reply = whole("ok")
        reply["json"]["usage"] = {"prompt_tokens": 12, "completion_tokens": 80, "total_tokens": 92}
        replies.append(reply)
    llm = ScriptedLLM(*replies)
    await nursery.start(llm.serve)
    bot = AgentConfig(name="bot", kind="llm", tokens_per_hour=1000,
                      model=ModelConfig(base_url=llm.url, model="m", max_tokens=80, timeout_secs=30))
    kernel = Kernel(Config(agents=[bot], state=StateConfig(dir=str(tmp_path))))
    answered = []

    async def one(i: int) -> None:
        try:
            answered.append(await kernel.agents.send("bot", f"message {i}"))
        except Exception:  # BudgetExceeded, the refusal we want for the rest
            pass

    async with trio.open_nursery() as many:
        for i in range(20):
            many.start_soon(one, i)
    from runtime.kernel.agents import _turn_reserve

    used = kernel.agents.budgets.status()["bot"]["tokens_per_hour"]["used"]
    reserve = _turn_reserve(bot, [{"role": "user", "content": "message 10"}], [])  # one turn's
    assert used == 92 * len(answered) and used <= 1000 + reserve, (used, reserve)
    assert len(llm.requests) == len(answered) < 20


async def test_approval_requests_are_bounded_per_caller(autojump_clock):
    """Attack 5: a key's requests are pruned to its own bound; another's are kept."""
    approvals = Approvals(None, timeout_secs=0.001, max_kept_per_caller=50)
    await approvals.request("bot", "t", {}, "d", key="owner-run")
    for _ in range(300):
        await approvals.request("bot", "t", {}, "d", key="mallory", bounded=True)
    listed = await approvals.list(None)
    assert sum(a.key == "mallory" for a in listed) <= 51
    assert [a.key for a in listed if a.key == "owner-run"] == ["owner-run"]


async def test_a_models_web_fetch_of_tern_itself_is_not_the_owner(nursery, tmp_path):
    """Attack 7: with no key, tern's own outbound socket (web_fetch) reads nothing as the owner."""
    from runtime.config import SecurityConfig
    from runtime.host.api import build_router
    from runtime.host.node import Node
    from runtime.httpd.access import Access
    from runtime.httpd.server import HttpServer

    cfg = Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path / "s")),
                 security=SecurityConfig(web_fetch_allow_private=True))
    node = Node(cfg)
    await nursery.start(node.run)
    server = HttpServer(cfg.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}"
    async with httpx.AsyncClient(base_url=url) as owner:  # this test's own client: tern's user, not tern
        assert (await owner.get("/api/status")).status_code == 200
    fetched = await node.kernel.call_tool("web_fetch", {"url": url + "/api/conversations"})
    assert "Status: 401" in fetched.text and "no API key configured" in fetched.text


async def test_one_keys_traffic_does_not_evict_anothers_tasks(nursery, tmp_path):
    """Attack 8: a key sending many tasks evicts only its own finished ones."""
    from tests.http.keyed import client, config

    cfg = config(tmp_path)
    import msgspec

    cfg = msgspec.structs.replace(cfg, a2a=msgspec.structs.replace(cfg.a2a, max_tasks=20, max_tasks_per_caller=4))
    node, url = await start(nursery, tmp_path, cfg=cfg)

    def send(text: str) -> dict:
        return {"jsonrpc": "2.0", "id": 1, "method": "message/send",
                "params": {"message": {"kind": "message", "messageId": text, "role": "user",
                                       "parts": [{"kind": "text", "text": text}]}}}

    async with client(url, "bob") as bob, client(url, "alice") as alice:
        kept = (await bob.post("/a2a/echo", json=send("bob's"))).json()["result"]["id"]
        for i in range(40):
            assert (await alice.post("/a2a/echo", json=send(f"alice {i}"))).json()["result"]["status"]["state"] \
                == "completed"
        got = await bob.post("/a2a/echo", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get",
                                                "params": {"id": kept}})
        assert got.json()["result"]["id"] == kept
    counts: dict[str, int] = {}
    for entry in node.a2a.engine._tasks.values():
        counts[entry.task.owner] = counts.get(entry.task.owner, 0) + 1
    assert counts == {"bob": 1, "alice": 4}


async def test_one_keys_conversations_do_not_push_out_anothers(tmp_path):
    from runtime.kernel.conversations import Conversations

    store = Conversations(tmp_path / "c.sqlite3", max_contexts=20)
    await store.append("bobs", Conversations.message("user", "a", "hi"), owner="bob")
    for i in range(60):
        await store.append(f"alice-{i}", Conversations.message("user", "a", "hi"), owner="alice")
    await store._housekeeping()
    assert await store.owner("bobs") == "bob"
    alices = [c for c in await store.list(who=Caller("admin", frozenset({"admin"}))) if c["context_id"] != "bobs"]
    assert len(alices) == 2 and {c["context_id"] for c in alices} == {"alice-58", "alice-59"}


async def test_every_way_in_stops_a_narrow_key_at_its_one_agent(served):
    """A key with the scope ``message`` and the agent ``echo`` walks every way in that can
    start agent work: each reaches ``echo`` and nothing else; no approval, secret or
    record of anyone else is readable to it."""
    node, url = served
    one = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}
    old = {"message": {"kind": "message", "messageId": "m2", "role": "user", "parts": [{"kind": "text", "text": "x"}]}}
    rest_body = {"message": {"messageId": "m3", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}

    def ways(agent: str) -> list[tuple[str, str, dict, dict]]:
        return [("POST", f"/api/agents/{agent}/message", {"message": "hi"}, {}),
                ("POST", f"/api/agents/{agent}/stream", {"message": "hi"}, {}),
                ("POST", f"/a2a/{agent}", {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": one},
                 {"A2A-Version": "1.0"}),
                ("POST", f"/a2a/{agent}", {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": old}, {}),
                ("POST", f"/a2a/{agent}", {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": old}, {}),
                ("POST", f"/a2a/{agent}/rest/message:send", rest_body, {"A2A-Version": "1.0"})]

    async with keyed(url, "echo-msg") as narrow:
        for agent in ("other", "relay", "asking"):
            for method, path, body, headers in ways(agent):
                answer = await narrow.request(method, path, json=body, headers=headers)
                assert answer.status_code == 403, (path, body.get("method"), answer.status_code, answer.text[:200])
        for method, path, body, headers in ways("echo"):
            answer = await narrow.request(method, path, json=body, headers=headers)
            assert answer.status_code == 200, (path, answer.text[:200])
        relayed = await narrow.post("/api/agents/echo/message", json={"message": "hi", "context_id": "c" * 32})
        assert relayed.status_code == 200
        assert (await narrow.post("/hooks/nightly-other", json={})).status_code == 403
        assert (await narrow.post("/mcp", json={})).status_code == 403  # no mcp scope
        assert (await narrow.get("/api/approvals")).json()["approvals"] == []
        for path in ("/api/conversations", "/api/tasks", "/api/audit", "/api/config", "/api/triggers"):
            assert (await narrow.get(path)).status_code == 403, path
        for path in ("/api/mcp/servers", "/api/status", "/api/tools", "/api/agents"):
            text = (await narrow.get(path)).text
            assert DB_PASSWORD not in text and URL_TOKEN not in text, path
    sent = [r for r in audit(node) if r.get("kind") == "agent_message"]
    assert {r["agent"] for r in sent} == {"echo"} and {r["key"] for r in sent} == {"echo-msg"}


async def test_adding_a_scoped_key_does_not_lock_the_owner_out(nursery, tmp_path):
    """#34 item 7: with a named key and no api_key, the owner's own curl (tern's OS user on
    loopback, no key) is still the owner; the scoped key keeps its scope; nobody else gets in."""
    from runtime.config.keys import KeyTable
    from runtime.host.api import build_router
    from runtime.host.node import Node
    from runtime.httpd.access import Access
    from runtime.httpd.server import HttpServer

    cfg = Config(agents=[AgentConfig(name="echo", kind="echo")], state=StateConfig(dir=str(tmp_path / "s")),
                 server=ServerConfig(keys=[KeyConfig(name="ci", key=KEYS["echo-msg"], scopes=["message"])]))
    node = Node(cfg)
    await nursery.start(node.run)
    server = HttpServer(cfg.server, build_router(node), Access("", keys=KeyTable.build("", cfg.server.keys)))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bound[0][1]}"
    async with httpx.AsyncClient(base_url=url) as owner, keyed(url, "echo-msg") as ci:
        assert (await owner.get("/api/conversations")).status_code == 200
        assert (await ci.get("/api/conversations")).status_code == 403
        wrong = await owner.get("/api/status", headers={"Authorization": "Bearer not-a-key-at-all"})
        assert wrong.status_code == 401  # a key that is presented must be a key
