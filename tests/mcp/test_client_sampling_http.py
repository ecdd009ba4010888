"""Sampling over Streamable HTTP, through a real ``tern serve``: server-everything
(``streamableHttp``, in a loopback-only network namespace) asks for sampling during a
tool call made with ``POST /api/tools/{name}/call``; the request waits in the approval
store, a person approves it with ``POST /api/approvals/{id}`` (scope ``always``: the next
request of that server is not asked again), and tern's scripted model answers."""

from __future__ import annotations

import json

import httpx
import trio

from tests.mcp.server_harness import tern_env, tern_serve
from tests.netns import isolated_server
from tests.scripted_llm import whole


def config_text(tmp_path, llm_url: str, base: str) -> str:
    return (f'[server]\nlisten = "127.0.0.1:0"\nrate_limit_per_sec = 0\n[state]\ndir = "{tmp_path / "state"}"\n'
            '[[agents]]\nname = "helper"\nkind = "llm"\n'
            f'[agents.model]\nbase_url = "{llm_url}"\nmodel = "scripted-1"\n'
            '[[mcp_servers]]\nname = "everything"\ntimeout_secs = 20\n'
            f'transport = {{ type = "http", url = "{base}/mcp" }}\n'
            'sampling = { agent = "helper", max_tokens = 30 }\n')


def result_of(stream: str) -> dict:
    """The ``result`` event of a tool call's SSE answer."""
    event = ""
    for line in stream.splitlines():
        if line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:") and event in ("result", "error"):
            return {"event": event, **json.loads(line[5:])}
    raise AssertionError(f"no result in {stream[:500]!r}")


async def test_everything_http_sampling_approved_through_the_api(npm, node, llm, tmp_path):
    llm.script += [whole("first answer"), whole("second answer")]
    async with isolated_server([node, npm["server-everything"], "streamableHttp"], 3001,
                               env={"PORT": "3001"}) as base:
        config = tmp_path / "config.toml"
        config.write_text(config_text(tmp_path, llm.url, base))
        with tern_serve(tmp_path, config, tern_env(tmp_path)) as url:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                with trio.fail_after(30):
                    while not (await http.get("/api/mcp/servers")).json()["connected"][0]["connected"]:
                        await trio.sleep(0.1)
                call = "/api/tools/mcp_everything_trigger_sampling_request/call"
                answers: list[dict] = []

                async def call_tool(prompt: str) -> None:
                    response = await http.post(call, json={"arguments": {"prompt": prompt, "maxTokens": 500}})
                    answers.append(result_of(response.text))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call_tool, "first")
                    with trio.fail_after(30):
                        while not (pending := (await http.get("/api/approvals")).json()["approvals"]):
                            await trio.sleep(0.05)
                    [asked] = pending
                    assert asked["tool"] == "mcp_everything_sampling" and asked["caller"] == "mcp:everything"
                    shown = asked["arguments"]
                    assert shown["max_tokens"] == 30 and shown["server"] == "everything"
                    assert "context: first" in shown["conversation"]
                    decided = await http.post(f"/api/approvals/{asked['id']}",
                                              json={"decision": "approve", "scope": "always"})
                    assert decided.status_code == 200, decided.text
                [first] = answers
                assert first["event"] == "result" and '"text": "first answer"' in first["text"], first

                await call_tool("second")  # remembered: not asked again
                assert '"text": "second answer"' in answers[1]["text"], answers[1]
                assert [r["max_tokens"] for r in llm.requests] == [30, 30]
                records = [json.loads(r) for r in (await http.get("/api/audit", params={"n": 100})).json()["records"]]
                sampled = [r for r in records if r["kind"] == "mcp_sampling"]
                assert [(r["outcome"], r.get("approval", "")[:3]) for r in sampled] == [("ok", "ap_"), ("ok", "")]
                assert "context: first" not in json.dumps(records)
