"""Approvals that find a person who is not watching (issue 34): ``[[governance.notify]]``
against real peers. A real daemon node (kernel + HTTP server) runs a tool agent whose
call needs approval; tern's own HTTP server on loopback receives the webhook and the
ntfy publish (asserted as an ntfy server reads them: no ntfy server installs from PyPI),
and aiosmtpd, a real SMTP server, takes the mail over STARTTLS with a login. Then the
link is followed as a phone would: GET shows the page (the arguments' hash) and decides
nothing, POST approves and the waiting run goes on. A spent link, an expired one, a deny
link asked to approve, a forged token and one moved to another request are refused, each
audited; a client that keeps failing is slowed to 429."""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import json
import socket
import ssl

import httpx
import pytest
import trio

from runtime.config import AgentConfig, Config, ServerConfig, StateConfig
from runtime.config.schema import ApprovalRule, GovernanceConfig, NotifyChannel
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.messages import Request, Response
from runtime.httpd.router import Router
from runtime.httpd.server import HttpServer
from runtime.net.tls import ssl_context
from runtime.ports import Approval, Tool, ToolResult
from tests.net.pki import make_pki

aiosmtpd = pytest.importorskip("aiosmtpd.controller")  # in .ci/requirements.lock [test]

KEY = "api-key-for-notify-tests"
WORK = Tool("work", "does the work once a person says yes", {"type": "object", "properties": {
    "path": {"type": "string"}, "n": {"type": "integer"}}})
ARGS = {"path": "/srv/data", "n": 3}
PHONE = {"User-Agent": "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def jcs_sha256(value: dict) -> str:
    """RFC 8785 for this ASCII object: sorted keys, no spaces (computed here, not by tern)."""
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def receiver(nursery, fail_first: int = 0) -> tuple[str, list[tuple[str, dict, bytes]]]:
    """tern's HTTP server on loopback as the webhook's and the ntfy server's endpoint; the
    first ``fail_first`` deliveries are answered 503."""
    received: list[tuple[str, dict, bytes]] = []
    failing = [fail_first]

    async def take(request: Request) -> Response:
        if failing[0] > 0:
            failing[0] -= 1
            return Response(503, b"{}")
        received.append((request.path, {k.decode().lower(): v.decode() for k, v in request.headers}, request.body))
        return Response(200, b'{"id":"x"}')

    router = Router()
    router.add("POST", "/hook", take, auth=False, guard_origin=False)
    router.add("POST", "/ntfy/{topic}", take, auth=False, guard_origin=False)
    bound = await nursery.start(HttpServer(ServerConfig(rate_limit_per_sec=0), router, Access("")).serve,
                                "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}", received


class Mailbox:
    """aiosmtpd's handler: every mail, and whether its session was TLS and logged in."""

    def __init__(self) -> None:
        self.mails: list[tuple[str, list[str], str, bool, bool]] = []

    async def handle_DATA(self, server, session, envelope) -> str:
        self.mails.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content.decode(),
                           session.ssl is not None, bool(session.authenticated)))
        return "250 OK"


def smtp_server(pki) -> tuple[object, Mailbox, int]:
    from aiosmtpd.smtp import AuthResult

    def authenticate(server, session, envelope, mechanism, data) -> AuthResult:
        return AuthResult(success=data.login == b"tern" and data.password == b"mail-password-for-tests")

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki / "server.pem", pki / "server.key")
    mailbox, port = Mailbox(), free_port()
    controller = aiosmtpd.Controller(mailbox, hostname="127.0.0.1", port=port, tls_context=context,
                                     require_starttls=True, authenticator=authenticate, auth_require_tls=True)
    controller.start()
    return controller, mailbox, port


@pytest.fixture
async def served(nursery, tmp_path, monkeypatch):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    monkeypatch.setenv("SSL_CERT_FILE", str(pki / "ca.pem"))  # the mail server's CA, for STARTTLS
    ssl_context.cache_clear()
    monkeypatch.setenv("TEST_HOOK_SECRET", "hook-signing-secret-for-tests")
    monkeypatch.setenv("TEST_NTFY_TOKEN", "tk_ntfy-token-for-tests")
    monkeypatch.setenv("TEST_SMTP_PASSWORD", "mail-password-for-tests")
    peers, received = await receiver(nursery)
    controller, mailbox, smtp_port = await trio.to_thread.run_sync(smtp_server, pki)
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    channels = [
        NotifyChannel(name="hook", kind="webhook", url=f"{peers}/hook", secret_env="TEST_HOOK_SECRET",
                      allow_private=True),
        NotifyChannel(name="phone", kind="ntfy", url=f"{peers}/ntfy", topic="tern-approvals-x7",
                      token_env="TEST_NTFY_TOKEN", allow_private=True),
        NotifyChannel(name="mail", kind="smtp", host="127.0.0.1", port=smtp_port, username="tern",
                      password_env="TEST_SMTP_PASSWORD", mail_from="tern@example.org", to=["me@example.org"],
                      allow_private=True)]
    governance = GovernanceConfig(rules=[ApprovalRule(tool="work", agent="hasty", decision="ask", wait_secs=3),
                                         ApprovalRule(tool="work", decision="ask")],
                                  approval_timeout_secs=60, notify=channels, public_url=public)
    config = Config(server=ServerConfig(listen=f"127.0.0.1:{port}"),
                    agents=[AgentConfig(name="worker", kind="tool", tool="work"),
                            AgentConfig(name="hasty", kind="tool", tool="work")],
                    state=StateConfig(dir=str(tmp_path)), governance=governance)
    node = Node(config)

    async def work(arguments: dict, context) -> ToolResult:
        return ToolResult(f"worked on {arguments['path']}")

    node.kernel.registry.register(WORK, work)
    await nursery.start(node.run)
    await nursery.start(HttpServer(config.server, build_router(node), Access(KEY)).serve, "127.0.0.1", port)
    yield node, public, received, mailbox, tmp_path
    await trio.to_thread.run_sync(controller.stop)
    ssl_context.cache_clear()


async def notified(received, mailbox, count: int) -> None:
    with trio.fail_after(20):
        while len(received) < 2 * count or len(mailbox.mails) < count:
            await trio.sleep(0.02)


def audit(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


async def test_a_phone_follows_the_link_and_the_waiting_run_goes_on(served, nursery, caplog):
    import logging

    caplog.set_level(logging.INFO, logger="tern.http.access")
    node, public, received, mailbox, tmp_path = served
    replies: list[str] = []

    async def run() -> None:
        replies.append((await node.kernel.agents.send("worker", json.dumps(ARGS), caller="cron")).text)

    nursery.start_soon(run)
    await notified(received, mailbox, 1)
    pending = await node.kernel.approvals.list()
    assert len(pending) == 1 and not replies
    request = pending[0]

    hook = next((h, json.loads(b)) for p, h, b in received if p == "/hook")
    headers, body = hook
    raw = next(b for p, _, b in received if p == "/hook")
    assert headers["x-tern-signature-256"] == "sha256=" + hmac.new(b"hook-signing-secret-for-tests", raw,
                                                                   hashlib.sha256).hexdigest()
    assert (body["id"], body["tool"], body["agent"], body["caller"]) == (request.id, "work", "worker", request.caller)
    assert body["arguments"] == ARGS and body["arguments_sha256"] == jcs_sha256(ARGS)
    assert body["expires"] == request.expires and body["expires_at"].endswith("+00:00")
    assert body["approve_url"].startswith(f"{public}/approve/{request.id}.a.")
    assert body["deny_url"].startswith(f"{public}/approve/{request.id}.d.")

    path, ntfy, text = next(r for r in received if r[0].startswith("/ntfy/"))
    assert path == "/ntfy/tern-approvals-x7" and ntfy["authorization"] == "Bearer tk_ntfy-token-for-tests"
    assert ntfy["title"] == "tern: approve work?" and ntfy["priority"] == "high"
    phone_links = [part.split(", ")[2] for part in ntfy["actions"].split("; ")]
    assert ntfy["actions"].startswith(f"http, Approve, {public}/approve/{request.id}.a.")
    assert "method=POST" in ntfy["actions"] and jcs_sha256(ARGS) in text.decode()

    sender, rcpt, raw_mail, tls, logged_in = mailbox.mails[0]
    parsed = email.message_from_string(raw_mail, policy=email.policy.default)
    mail = f"Subject: {parsed['subject']}\n{parsed.get_content()}"  # as a mail client reads it
    assert (sender, rcpt, tls, logged_in) == ("tern@example.org", ["me@example.org"], True, True)
    mail_links = [line for line in mail.splitlines() if line.startswith(f"{public}/approve/")]
    assert len(mail_links) == 2 and jcs_sha256(ARGS) in mail and "Subject: tern: approve work" in mail
    assert "hook-signing-secret" not in mail and "mail-password" not in mail

    async with httpx.AsyncClient(headers=PHONE) as phone:
        page = await phone.get(phone_links[0])  # a phone, or a link-preview bot: nothing is decided
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert jcs_sha256(ARGS) in page.text and "/srv/data" in page.text and 'name="viewport"' in page.text
        assert page.headers["referrer-policy"] == "same-origin" and page.headers["cache-control"] == "no-store"
        assert '<form method="post">' in page.text and 'value="approve"' in page.text
        assert (await node.kernel.approvals.get(request.id)).state == "pending" and not replies
        done = await phone.post(phone_links[0], data={"decision": "approve"}, headers={"Origin": public})
        assert done.status_code == 200 and "Approved" in done.text
        with trio.fail_after(10):
            while not replies:
                await trio.sleep(0.02)
        assert replies == ["worked on /srv/data"]
        again = await phone.post(phone_links[0])
        assert again.status_code == 403 and "used already" in again.text
        assert (await phone.get(phone_links[0])).status_code == 403
        late = await phone.post(mail_links[1])  # the mail's deny link: its request is decided
        assert late.status_code == 403 and "already approved by notify:phone" in late.text

    decided = (await node.kernel.approvals.get(request.id))
    assert (decided.state, decided.decided_by, decided.channel) == ("approved", "notify:phone", "link")
    records = audit(tmp_path)
    resolved = [r for r in records if r["kind"] == "approval_resolved" and r.get("id") == request.id]
    assert [(r["outcome"], r["decided_by"], r["channel"]) for r in resolved] == [("approved", "notify:phone",
                                                                                   "link")]
    assert sorted((r["channel"], r["outcome"]) for r in records if r["kind"] == "approval_notified") == [
        ("notify:hook", "ok"), ("notify:mail", "ok"), ("notify:phone", "ok")]
    refusals = [r["reason"] for r in records if r["kind"] == "approval_link_refused"]
    assert any("used already" in r for r in refusals) and any("already approved" in r for r in refusals)
    log = (tmp_path / "audit.jsonl").read_text()
    assert "mail-password-for-tests" not in log and "tk_ntfy-token" not in log
    token = phone_links[0].rsplit("/", 1)[1]
    assert "POST /approve/{token} 200" in caplog.text and token not in caplog.text  # the access log keeps no link


async def test_deny_expired_forged_and_moved_links_are_refused(served, nursery):
    node, public, received, mailbox, tmp_path = served
    replies: list[str] = []

    async def run(agent: str) -> None:
        from runtime.errors import AgentError

        try:
            replies.append((await node.kernel.agents.send(agent, json.dumps(ARGS))).text)
        except AgentError as exc:  # a tool agent's refused call is its error
            replies.append(str(exc))

    nursery.start_soon(run, "worker")
    await notified(received, mailbox, 1)
    first = json.loads(next(b for p, _, b in received if p == "/hook"))
    nursery.start_soon(run, "hasty")  # its rule waits 3 s: its links expire with it
    with trio.fail_after(10):
        while len(hooks := [b for p, _, b in received if p == "/hook"]) < 2:
            await trio.sleep(0.02)
    second = json.loads(hooks[1])
    assert second["agent"] == "hasty" and second["expires"] - first["expires"] < 0
    async with httpx.AsyncClient() as phone:
        deny_link = first["deny_url"]
        page = await phone.get(deny_link)
        assert page.status_code == 200 and 'value="approve"' not in page.text  # a deny link shows Deny only
        refused = await phone.post(deny_link, data={"decision": "approve"})
        assert refused.status_code == 403 and "cannot approve" in refused.text
        token = first["approve_url"].rsplit("/", 1)[1]
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        assert "not valid" in (await phone.post(f"{public}/approve/{forged}")).text
        moved = second["id"] + token[len(first["id"]):]  # another request's id under this MAC
        assert "not valid" in (await phone.post(f"{public}/approve/{moved}")).text
        with trio.fail_after(10):
            while len(replies) < 1:
                await trio.sleep(0.05)
        assert "expired" in replies[0]  # hasty's request, nobody answered in 3 s
        expired = await phone.post(second["approve_url"])
        assert expired.status_code == 403 and "expired" in expired.text
        assert (await node.kernel.approvals.get(first["id"])).state == "pending"
        denied = await phone.post(deny_link)  # no body: the token's own decision
        assert denied.status_code == 200 and "Denied" in denied.text
        with trio.fail_after(10):
            while len(replies) < 2:
                await trio.sleep(0.02)
        assert "notify:hook denied it" in replies[1]
        statuses = [(await phone.post(f"{public}/approve/{forged}")).status_code for _ in range(12)]
        assert statuses[-1] == 429 and 403 in statuses  # failures from one address are slowed
    reasons = [r["reason"] for r in audit(tmp_path) if r["kind"] == "approval_link_refused"]
    assert any("cannot approve" in r for r in reasons) and any("expired" in r for r in reasons)
    assert sum("not valid" in r for r in reasons) >= 2


async def test_a_loopback_target_needs_allow_private_and_a_failure_is_audited(tmp_path, nursery):
    """Notify targets are outbound peers: the SSRF guard refuses loopback unless the
    channel says allow_private; the failure is logged and audited, the call still waits."""
    from runtime.kernel.kernel import Kernel

    peers, received = await receiver(nursery)
    channel = NotifyChannel(name="hook", kind="webhook", url=f"{peers}/hook")
    config = Config(state=StateConfig(dir=str(tmp_path)),
                    governance=GovernanceConfig(notify=[channel], public_url="https://tern.example.org"))
    kernel = Kernel(config)
    approval = Approval("ap_0123456789", "worker", "work", ARGS, "cron", "", 1.0, 2e9)
    assert not await kernel.approvals.notify.send(channel, approval, config)
    record = [r for r in audit(tmp_path) if r["kind"] == "approval_notified"][-1]
    assert record["outcome"] == "failed" and "loopback" in record["reason"] and not received
    allowed = NotifyChannel(name="hook", kind="webhook", url=f"{peers}/hook", allow_private=True)
    assert await kernel.approvals.notify.send(allowed, approval, config)
    assert json.loads(received[0][2])["approve_url"].startswith("https://tern.example.org/approve/ap_0123456789.a.")
    key = tmp_path / "approval-links.key"
    assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
    key.chmod(0o644)  # a key others may read signs nothing: a fresh kernel refuses it, and says so
    again = Kernel(config)
    assert not await again.approvals.notify.send(allowed, approval, config) and len(received) == 1
    record = [r for r in audit(tmp_path) if r["kind"] == "approval_notified"][-1]
    assert record["outcome"] == "failed" and "other users may read it" in record["reason"]


def test_notify_config_is_checked_and_its_secrets_masked():
    import msgspec

    from runtime.config.checks import find_problems, missing_key_warnings
    from runtime.config.dump import masked

    def problems(*channels: dict, **governance) -> list[str]:
        config = msgspec.convert({"governance": {"notify": list(channels), **governance}}, Config)
        return find_problems(config)

    assert problems({"name": "hook", "kind": "webhook", "url": "https://h.example/x", "secret_env": "S"}) == []
    assert problems({"name": "hook", "kind": "webhook", "url": "ftp://x"}) == [
        'governance.notify[0].url: expected an http:// or https:// URL, got "ftp://x"']
    assert problems({"name": "n", "kind": "ntfy", "topic": "a/b"})[0].startswith("governance.notify[0].topic:")
    assert problems({"name": "n", "kind": "ntfy", "topic": "t", "to": ["a@b"]}) == [
        "governance.notify[0].to: only used by kind = smtp"]
    assert 'tls = "none" would send the password in the clear' in " ".join(problems(
        {"name": "m", "kind": "smtp", "host": "mx", "mail_from": "a@b", "to": ["c@d"], "username": "u",
         "password_env": "P", "tls": "none"}))
    assert "is not a mail address" in " ".join(problems(
        {"name": "m", "kind": "smtp", "host": "mx", "mail_from": "a@b", "to": ["c@d\nBcc: x@y"]}))
    assert problems({"name": "a", "kind": "ntfy", "topic": "t"}, {"name": "a", "kind": "ntfy", "topic": "u"}) == [
        'governance.notify[1].name: "a" is already used by governance.notify[0]']
    assert problems(public_url="https://t.example/?x=1") == [
        "governance.public_url: a base URL takes no query or fragment"]
    config = msgspec.convert({"governance": {"notify": [
        {"name": "n", "kind": "ntfy", "topic": "secret-topic", "token_env": "UNSET_NTFY_TOKEN_FOR_TESTS"}]}}, Config)
    assert masked(config)["governance"]["notify"][0]["topic"] != "secret-topic"
    assert masked(config)["governance"]["notify"][0]["token_env"] == "UNSET_NTFY_TOKEN_FOR_TESTS"
    assert any("UNSET_NTFY_TOKEN_FOR_TESTS" in w and "is not set" in w for w in missing_key_warnings(config))


async def test_after_secs_tells_only_when_nobody_answered_in_time(tmp_path, nursery):
    """A channel with ``after_secs`` is cancelled with the wait: a request answered sooner
    is never sent; one still pending then is."""
    from runtime.kernel.kernel import Kernel

    peers, received = await receiver(nursery)
    channel = NotifyChannel(name="late", kind="webhook", url=f"{peers}/hook", after_secs=1, allow_private=True)
    kernel = Kernel(Config(state=StateConfig(dir=str(tmp_path)),
                           governance=GovernanceConfig(notify=[channel], approval_timeout_secs=30)))
    ended: list[str] = []

    async def ask(n: int) -> None:
        ended.append((await kernel.approvals.request("", "work", {"n": n}, f"sha256:{n}")).state)

    nursery.start_soon(ask, 1)
    with trio.fail_after(5):
        while not (pending := await kernel.approvals.list()):
            await trio.sleep(0.02)
    await kernel.approvals.decide(pending[0].id, True, by="me")
    nursery.start_soon(ask, 2)
    with trio.fail_after(10):
        while not received:
            await trio.sleep(0.02)
    await trio.sleep(0.5)
    assert ended == ["approved"] and [json.loads(b)["arguments"] for _, _, b in received] == [{"n": 2}]


async def test_a_failing_channel_is_tried_again_and_a_refusal_is_not(tmp_path, nursery):
    from runtime.kernel.kernel import Kernel

    peers, received = await receiver(nursery, fail_first=2)
    flaky = NotifyChannel(name="flaky", kind="webhook", url=f"{peers}/hook", allow_private=True)
    wrong = NotifyChannel(name="wrong", kind="webhook", url=f"{peers}/nowhere", allow_private=True)
    config = Config(state=StateConfig(dir=str(tmp_path)), governance=GovernanceConfig(notify=[flaky, wrong]))
    kernel = Kernel(config)
    approval = Approval("ap_0123456789", "worker", "work", ARGS, "cron", "", 1.0, 2e9)
    assert await kernel.approvals.notify.send(flaky, approval, config) and len(received) == 1  # 503, 503, 200
    assert not await kernel.approvals.notify.send(wrong, approval, config)  # 404: the same next time
    records = {r["channel"]: r for r in audit(tmp_path) if r["kind"] == "approval_notified"}
    assert (records["notify:flaky"]["outcome"], records["notify:flaky"]["attempts"]) == ("ok", 3)
    assert records["notify:wrong"]["attempts"] == 1 and records["notify:wrong"]["reason"] == "answered 404"
