"""POST /hooks/{name} over real HTTP against the daemon's router and server: signatures,
the timestamp window, replays, the key exemption (exactly the signed hooks, remote
callers included), body limits, the per-trigger rate limit under a flood, and logs that
never hold the secret or the body."""

from __future__ import annotations

import hashlib
import json
import hmac
import logging
import secrets
import time
from typing import Any

import httpx
import pytest
import trio

from runtime.config import AgentConfig, Config, ServerConfig, TriggerConfig
from runtime.errors import TriggerBusy, TriggerPaused
from runtime.host.api import build_router
from runtime.host.hooks import NOT_VALID
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.server import HttpServer

SECRET = "hook-secret-0123456789"
KEY = "api-key-for-hook-tests"
BODY = b'{"action":"opened","pull_request":{"number":7,"title":"Fix it"}}'


def sign(body: bytes, secret: str = SECRET, timestamp: str | None = None) -> str:
    signed = body if timestamp is None else timestamp.encode() + b"." + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def trigger(name: str, **fields: Any) -> TriggerConfig:
    values: dict[str, Any] = {"name": name, "agent": "echo", "message": "{{ body }}", "kind": "webhook"}
    values.update(fields)
    return TriggerConfig(**values)


TRIGGERS = [
    trigger("ci", secret_env="HOOK_SECRET"),
    trigger("stamped", secret_env="HOOK_SECRET", timestamp_header="X-Hook-Timestamp", replay_window_secs=60),
    trigger("keyed"),  # no secret: the API key
    trigger("small", secret_env="HOOK_SECRET", max_body_bytes=256),
    trigger("limited", secret_env="HOOK_SECRET", rate_limit_per_min=60),
    trigger("unset", secret_env="HOOK_SECRET_NOT_SET"),
    TriggerConfig(name="nightly", agent="echo", message="hi", kind="schedule", every="1h"),
]


class Triggers:
    """The daemon's triggers as the route sees them (``TriggerPort``): the configured
    webhooks, and a record of every run started; ``refuse`` makes ``fire`` raise."""

    def __init__(self, triggers: list[TriggerConfig]) -> None:
        self._triggers = {t.name: t for t in triggers}
        self.fired: list[tuple[str, dict[str, Any], str]] = []
        self.refuse: Exception | None = None
        self.callers: list = []  # who each run acts for (None: the trigger's own identity)

    def webhook(self, name: str) -> TriggerConfig | None:
        found = self._triggers.get(name)
        return found if found is not None and found.kind == "webhook" else None

    def fire(self, name: str, context: dict[str, Any], *, source: str, who=None) -> str:
        if self.refuse is not None:
            raise self.refuse
        self.fired.append((name, context, source))
        self.callers.append(who)
        return "run_" + secrets.token_hex(8)


@pytest.fixture
def hook_env(monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    monkeypatch.delenv("HOOK_SECRET_NOT_SET", raising=False)


async def start(nursery, *, key: str = KEY, **server: Any) -> tuple[Triggers, str]:
    cfg = Config(server=ServerConfig(**server), agents=[AgentConfig(name="echo", kind="echo")], triggers=TRIGGERS)
    node = Node(cfg)
    node.triggers = port = Triggers(TRIGGERS)
    http = HttpServer(cfg.server, build_router(node), Access(key),
                      limiter=RateLimiter(cfg.server.rate_limit_per_sec, cfg.server.rate_limit_burst))
    bound = await nursery.start(http.serve, "127.0.0.1", 0)
    return port, f"http://127.0.0.1:{bound[0][1]}"


def error(response: httpx.Response) -> str:
    return response.json()["error"]["message"]


async def test_a_signed_delivery_starts_a_run_and_is_answered_at_once(nursery, hook_env):
    port, url = await start(nursery)
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/hooks/ci", content=BODY, headers={"X-Hub-Signature-256": sign(BODY),
                                                                        "Content-Type": "application/json"})
    assert answer.status_code == 202
    run_id = answer.json()["run_id"]
    assert run_id.startswith("run_") and len(run_id) == 20
    assert port.fired == [("ci", {"body": {"action": "opened", "pull_request": {"number": 7, "title": "Fix it"}}},
                           "webhook")]


async def test_a_body_that_is_not_json_is_its_text(nursery, hook_env):
    port, url = await start(nursery)
    form = "payload=%7B%22a%22%3A1%7D&name=caf\u00e9".encode()
    async with httpx.AsyncClient(base_url=url) as client:
        for body in (form, b"", b"\xff\xfe not utf-8"):
            answer = await client.post("/hooks/ci", content=body, headers={"X-Hub-Signature-256": sign(body)})
            assert answer.status_code == 202
    assert [context["body"] for _, context, _ in port.fired] == [form.decode(), "", "\ufffd\ufffd not utf-8"]


@pytest.mark.parametrize(("headers", "reason"), [
    ({}, "header is missing"),
    ({"X-Hub-Signature-256": ""}, "header is missing"),
    ({"X-Hub-Signature-256": "sha1=" + "0" * 40}, "not sha256=<64 hex digits>"),
    ({"X-Hub-Signature-256": "sha256=" + "0" * 64}, "does not match"),
    ({"X-Hub-Signature-256": sign(BODY, "the wrong secret")}, "does not match"),
    ({"X-Hub-Signature-256": sign(BODY + b" ")}, "does not match"),
    ({"Authorization": f"Bearer {KEY}"}, "header is missing"),  # a signed hook takes no key instead
])
async def test_a_bad_signature_is_refused_with_its_reason_and_starts_nothing(nursery, hook_env, caplog, headers,
                                                                           reason):
    port, url = await start(nursery)
    with caplog.at_level(logging.INFO, logger="tern"):
        async with httpx.AsyncClient(base_url=url) as client:
            answer = await client.post("/hooks/ci", content=BODY, headers=headers)
    assert answer.status_code == 401 and error(answer) == NOT_VALID  # the reason is the log's, not a stranger's
    assert port.fired == []
    logged = caplog.text
    assert "webhook ci refused from 127.0.0.1" in logged and reason in logged
    assert SECRET not in logged and "pull_request" not in logged and "Fix it" not in logged


async def test_a_replayed_delivery_is_refused(nursery, hook_env):
    port, url = await start(nursery)
    headers = {"X-Hub-Signature-256": sign(BODY)}
    async with httpx.AsyncClient(base_url=url) as client:
        assert (await client.post("/hooks/ci", content=BODY, headers=headers)).status_code == 202
        again = await client.post("/hooks/ci", content=BODY, headers=headers)
        assert again.status_code == 409 and "replayed" in error(again)
        other = b'{"action":"closed"}'
        assert (await client.post("/hooks/ci", content=other, headers={"X-Hub-Signature-256": sign(other)})
                ).status_code == 202
    assert len(port.fired) == 2


async def test_the_timestamp_window(nursery, hook_env):
    port, url = await start(nursery)
    now = str(int(time.time()))
    stale = str(int(time.time()) - 3600)
    async with httpx.AsyncClient(base_url=url) as client:
        async def post(headers: dict[str, str]) -> httpx.Response:
            return await client.post("/hooks/stamped", content=BODY, headers=headers)

        good = await post({"X-Hub-Signature-256": sign(BODY, timestamp=now), "X-Hook-Timestamp": now})
        assert good.status_code == 202
        replay = await post({"X-Hub-Signature-256": sign(BODY, timestamp=now), "X-Hook-Timestamp": now})
        assert replay.status_code == 409
        old = await post({"X-Hub-Signature-256": sign(BODY, timestamp=stale), "X-Hook-Timestamp": stale})
        assert old.status_code == 401 and error(old) == NOT_VALID
        missing = await post({"X-Hub-Signature-256": sign(BODY, timestamp=now)})
        assert missing.status_code == 401
        unstamped = await post({"X-Hub-Signature-256": sign(BODY), "X-Hook-Timestamp": now})
        assert unstamped.status_code == 401  # the body alone is not what is signed
    assert len(port.fired) == 1


async def test_a_hook_without_a_secret_needs_the_api_key(nursery, hook_env):
    port, url = await start(nursery)
    async with httpx.AsyncClient(base_url=url) as client:
        bare = await client.post("/hooks/keyed", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
        assert bare.status_code == 401 and "API key is required" in error(bare)
        wrong = await client.post("/hooks/keyed", content=BODY, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        keyed = await client.post("/hooks/keyed", content=BODY, headers={"Authorization": f"Bearer {KEY}"})
        assert keyed.status_code == 202
        assert (await client.get("/api/status")).status_code == 401  # the exemption is the signed hooks only
    assert [name for name, _, _ in port.fired] == ["keyed"]


async def test_a_remote_sender_reaches_only_the_signed_hooks(nursery, hook_env, monkeypatch):
    """No key configured: tern serves its own user on loopback only, yet a remote webhook
    sender with the signature gets in (that is what a webhook is), and nothing else does."""
    monkeypatch.setattr("runtime.httpd.server.is_loopback", lambda host: False)  # every client is remote
    port, url = await start(nursery, key="", allowed_hosts=["127.0.0.1"])
    async with httpx.AsyncClient(base_url=url) as client:
        signed = await client.post("/hooks/ci", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
        assert signed.status_code == 202
        unsigned = await client.post("/hooks/ci", content=BODY)
        assert unsigned.status_code == 401
        keyed = await client.post("/hooks/keyed", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
        assert keyed.status_code == 403 and "loopback clients only" in error(keyed)
        assert (await client.get("/api/status")).status_code == 403
    assert len(port.fired) == 1


async def test_unknown_names_other_kinds_and_bad_signatures_are_one_answer(nursery, hook_env):
    """A stranger cannot tell a trigger's name from a name no trigger has: the same status
    and sentence as a bad signature on a real one."""
    port, url = await start(nursery)
    async with httpx.AsyncClient(base_url=url) as client:
        answers = [await client.post(f"/hooks/{name}", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
                   for name in ("ghost", "nightly", "%2e%2e", "a" * 300)]
        answers.append(await client.post("/hooks/ci", content=BODY, headers={"X-Hub-Signature-256": sign(b"x")}))
        assert {(a.status_code, error(a)) for a in answers} == {(401, NOT_VALID)}
        assert (await client.get("/hooks/ci")).status_code == 405
    assert port.fired == []


async def test_a_secret_that_is_not_set_refuses_every_delivery(nursery, hook_env):
    """Never an HMAC with an empty key: that would be a signature anyone can make."""
    port, url = await start(nursery)
    empty = "sha256=" + hmac.new(b"", BODY, hashlib.sha256).hexdigest()
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/hooks/unset", content=BODY, headers={"X-Hub-Signature-256": empty})
    assert answer.status_code == 503 and "HOOK_SECRET_NOT_SET" in error(answer)
    assert port.fired == []


async def test_an_oversized_body_is_refused_before_it_is_read(nursery, hook_env):
    port, url = await start(nursery, max_body_bytes=1 << 20)
    big = b'{"x":"' + b"a" * 300 + b'"}'
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/hooks/small", content=big, headers={"X-Hub-Signature-256": sign(big)})
        assert answer.status_code == 413 and "larger than 256 bytes" in error(answer)

        async def chunks():
            for _ in range(10):
                yield b"b" * 100

        chunked = await client.post("/hooks/small", content=chunks(), headers={"X-Hub-Signature-256": sign(BODY)})
        assert chunked.status_code == 413
    # A Content-Length of 100 MB and no body at all: the answer comes from the head alone.
    stream = await trio.open_tcp_stream("127.0.0.1", int(url.rsplit(":", 1)[1]))
    async with stream:
        await stream.send_all(b"POST /hooks/small HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n"
                              b"X-Hub-Signature-256: " + sign(BODY).encode() + b"\r\n\r\n")
        with trio.fail_after(5):
            head = await stream.receive_some(4096)
    assert head.startswith(b"HTTP/1.1 413")
    assert port.fired == []


async def test_json_nested_too_deep_is_refused(nursery, hook_env):
    port, url = await start(nursery)
    deep = b"[" * 100_000 + b"]" * 100_000
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/hooks/ci", content=deep, headers={"X-Hub-Signature-256": sign(deep)})
    assert answer.status_code == 400 and "nested more than" in error(answer)
    assert port.fired == []


@pytest.mark.parametrize(("refusal", "status"), [(TriggerBusy("ci is already running (overlap = skip)"), 409),
                                                 (TriggerPaused("ci is paused after 5 failed runs"), 503)])
async def test_a_run_the_trigger_refuses_is_answered_with_why(nursery, hook_env, refusal, status):
    port, url = await start(nursery)
    port.refuse = refusal
    async with httpx.AsyncClient(base_url=url) as client:
        answer = await client.post("/hooks/ci", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
    assert answer.status_code == status and error(answer) == str(refusal)


async def test_a_flood_meets_the_trigger_rate_limit_and_the_server_keeps_serving(nursery, hook_env):
    """60 a minute in bursts of 10: of 200 concurrent signed deliveries about 10 start runs,
    the rest get 429 with Retry-After once their signature holds; other hooks and routes answer."""
    port, url = await start(nursery, rate_limit_per_sec=10_000, rate_limit_burst=10_000, max_connections=300)
    statuses: list[int] = []
    retry_after: set[str] = set()
    started = time.monotonic()
    async with httpx.AsyncClient(base_url=url, limits=httpx.Limits(max_connections=20)) as client:
        async def deliver(i: int) -> None:
            body = b'{"n":%d}' % i
            answer = await client.post("/hooks/limited", content=body, headers={"X-Hub-Signature-256": sign(body)})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                retry_after.add(answer.headers["retry-after"])

        with trio.fail_after(30):
            async with trio.open_nursery() as flood:
                for i in range(200):
                    flood.start_soon(deliver, i)
            other = await client.post("/hooks/ci", content=BODY, headers={"X-Hub-Signature-256": sign(BODY)})
            health = await client.get("/health")
    elapsed = time.monotonic() - started
    allowed = 10 + int(elapsed) + 1  # the burst, and the refill while the flood ran
    assert statuses.count(202) <= allowed and statuses.count(202) >= 10
    assert statuses.count(429) == 200 - statuses.count(202), sorted(statuses)
    assert retry_after and all(value.isdigit() and 1 <= int(value) <= 60 for value in retry_after)
    assert other.status_code == 202 and health.status_code == 200
    assert len([f for f in port.fired if f[0] == "limited"]) == statuses.count(202)


async def test_a_signed_delivery_runs_the_agent_and_reaches_the_file_sink(nursery, hook_env, tmp_path):
    """The daemon's own runner: the run renders the hostile body literally, the echo
    agent answers, the reply lands in the workspace file and the run is recorded."""
    from runtime.config import StateConfig, TriggerSink

    report = trigger("report", secret_env="HOOK_SECRET",
                     message="PR {{ body.pull_request.number }}: {{ body.pull_request.title }}",
                     sink=TriggerSink(kind="file", path="reports/{{ trigger }}-{{ run_id }}.md"))
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state")), triggers=[report],
                 agents=[AgentConfig(name="echo", kind="echo", workspace=str(tmp_path / "ws"))])
    node = Node(cfg)
    await nursery.start(node.run)
    http = HttpServer(cfg.server, build_router(node), Access(KEY))
    bound = await nursery.start(http.serve, "127.0.0.1", 0)
    body = b'{"pull_request":{"number":7,"title":"{{ run_id }} \\u00fcber __class__"}}'
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bound[0][1]}") as client:
        answer = await client.post("/hooks/report", content=body, headers={"X-Hub-Signature-256": sign(body)})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["run_id"]
        replayed = await client.post("/hooks/report", content=body, headers={"X-Hub-Signature-256": sign(body)})
        assert replayed.status_code == 409
    written = tmp_path / "ws" / "reports" / f"report-{run_id}.md"
    with trio.fail_after(10):
        while not written.exists():
            await trio.sleep(0.02)
    assert written.read_text() == "PR 7: {{ run_id }} über __class__"
    with trio.fail_after(10):
        while (run := node.triggers.store.runs("report", 1)[0])["outcome"] in ("queued", "running"):
            await trio.sleep(0.02)
    assert run["id"] == run_id and run["source"] == "webhook" and run["outcome"] == "ok" and not run["sink_error"]


async def test_the_documented_curl_and_openssl_commands_are_accepted(nursery, monkeypatch):
    """docs/triggers-webhooks.md's shell examples, run as written (URL aside) against tern."""
    import re
    import shutil
    from pathlib import Path

    assert shutil.which("curl") and shutil.which("openssl"), "curl and openssl are needed (.ci/run installs them)"
    doc = (Path(__file__).resolve().parents[2] / "docs" / "triggers-webhooks.md").read_text(encoding="utf-8")
    plain, stamped = [block for block in re.findall(r"```sh\n(.*?)```", doc, re.S) if "openssl" in block]
    monkeypatch.setenv("HOOK_SECRET", "a long random secret")  # the value the example exports
    port, url = await start(nursery)
    script = (plain.replace("http://127.0.0.1:50051/hooks/ci", f"{url}/hooks/ci") + "echo\n"
              + stamped.replace("http://127.0.0.1:50051/hooks/ci", f"{url}/hooks/stamped"))
    with trio.fail_after(30):
        done = await trio.run_process(["sh", "-c", script], capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr
    answers = [json.loads(line) for line in done.stdout.decode().split()]
    assert [sorted(answer) for answer in answers] == [["run_id"], ["run_id"]]
    assert [(name, context["body"]["repository"]) for name, context, _ in port.fired] == [
        ("ci", {"full_name": "acme/api"}), ("stamped", {"full_name": "acme/api"})]
