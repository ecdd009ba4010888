"""Reply sinks: a workspace file (beneath the workspace, never through a link, atomic,
bounded), a webhook URL (a real loopback server; the SSRF guard, no redirects, a
deadline) and an agent (a local one, and another tern over A2A)."""

from __future__ import annotations

import functools
import json
import os

import pytest
import trio

from runtime.config import (A2aConfig, AgentConfig, Config, ExternalAgent, SecurityConfig, StateConfig,
                            TriggerConfig, TriggerSink)
from runtime.kernel.kernel import Kernel
from runtime.kernel.triggers.sinks import MAX_REPLY_BYTES, SinkError, deliver

RUN = {"id": "run_0123456789abcdef", "trigger": "ci", "source": "webhook", "outcome": "ok"}
TRIGGER = TriggerConfig(name="ci", agent="echo", message="{{ body }}", kind="webhook")


def make_kernel(tmp_path, *, workspace="ws", security=SecurityConfig()):
    agent = AgentConfig(name="echo", kind="echo", workspace=str(tmp_path / workspace) if workspace else "")
    return Kernel(Config(agents=[agent], security=security))


@pytest.fixture
def kernel(tmp_path):
    return make_kernel(tmp_path)


async def send(kernel, sink, reply="the reply", *, run=RUN, timeout_secs=10.0):
    await deliver(sink, reply=reply, run=run, trigger=TRIGGER, kernel=kernel, timeout_secs=timeout_secs)


async def to_file(kernel, path, reply="the reply", **extra):
    """Write to the file sink of the agent whose workspace is ``tmp_path / "ws"``."""
    await send(kernel, TriggerSink(kind="file", path=path), reply, run={**RUN, **extra})


# --- file ---------------------------------------------------------------------------------


async def test_the_file_sink_writes_the_rendered_path_atomically(kernel, tmp_path):
    ws = tmp_path / "ws"
    await to_file(kernel, "reports/{{ trigger }}-{{ run_id }}.md", "# Report\nall good")
    written = ws / "reports" / "ci-run_0123456789abcdef.md"
    assert written.read_text() == "# Report\nall good"
    assert oct(written.stat().st_mode & 0o777) == "0o600"
    await to_file(kernel, "reports/{{ trigger }}-{{ run_id }}.md", "replaced")
    assert written.read_text() == "replaced"
    assert sorted(p.name for p in (ws / "reports").iterdir()) == [written.name]  # no temp file left


async def test_the_path_never_sees_a_webhook_body(kernel, tmp_path):
    ws = tmp_path / "ws"
    await to_file(kernel, "out/{{ body.name }}{{ trigger }}.md", body={"name": "../../escape"})
    assert (ws / "out" / "ci.md").exists()


@pytest.mark.parametrize("path", ["../outside.md", "reports/../../outside.md", "/etc/tern-sink-test", "a\x00b"])
async def test_a_path_out_of_the_workspace_is_refused(kernel, tmp_path, path):
    with pytest.raises(SinkError, match="the file sink could not write"):
        await to_file(kernel, path)
    assert not (tmp_path / "outside.md").exists() and not os.path.exists("/etc/tern-sink-test")


async def test_links_out_of_the_workspace_are_never_followed(kernel, tmp_path):
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "target.md").write_text("precious")
    os.symlink(outside, ws / "reports")
    with pytest.raises(SinkError, match="symlink"):
        await to_file(kernel, "reports/x.md")
    os.symlink(outside / "target.md", ws / "file.md")
    with pytest.raises(SinkError, match="symlink"):
        await to_file(kernel, "file.md")
    os.link(outside / "target.md", ws / "linked.md")
    with pytest.raises(SinkError, match="hard links"):
        await to_file(kernel, "linked.md")
    assert (outside / "target.md").read_text() == "precious" and sorted(os.listdir(outside)) == ["target.md"]


async def test_a_huge_reply_is_cut_to_the_bound(kernel, tmp_path):
    ws = tmp_path / "ws"
    await to_file(kernel, "big.md", "é" * MAX_REPLY_BYTES)
    data = (ws / "big.md").read_bytes()
    assert MAX_REPLY_BYTES <= len(data) <= MAX_REPLY_BYTES + 100 and data.endswith(b"[... truncated by tern]")
    data.decode("utf-8")  # not cut inside a character


async def test_the_time_in_a_path_is_safe_in_a_file_name(kernel, tmp_path):
    await to_file(kernel, "{{ time }}.md")
    [written] = os.listdir(tmp_path / "ws")
    assert len(written) == len("2026-11-25T07-00-05Z.md") and ":" not in written


async def test_no_workspace_is_a_clear_error(tmp_path):
    with pytest.raises(SinkError, match="no workspace"):
        await to_file(make_kernel(tmp_path, workspace=""), "x.md")


# --- webhook ------------------------------------------------------------------------------


class Receiver:
    """A loopback HTTP server: records each request; answers by path ("/never": no answer)."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        while len(body) < int(headers.get("content-length", "0")):
            body += await stream.receive_some(65536)
        path = lines[0].split(" ")[1]
        self.requests.append((path, headers, body))
        if path == "/never":
            await trio.sleep_forever()
        status, extra = {"/ok": (204, ""), "/fail": (500, ""),
                         "/moved": (302, "Location: http://169.254.169.254/latest/meta-data\r\n")}.get(path, (404, ""))
        await stream.send_all(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n{extra}Connection: close\r\n\r\n".encode())
        await stream.aclose()


@pytest.fixture
async def receiver(nursery):
    server = Receiver()
    listeners = await nursery.start(functools.partial(trio.serve_tcp, server.handle, 0, host="127.0.0.1"))
    server.port = listeners[0].socket.getsockname()[1]
    return server


async def to_url(kernel, url, *, timeout_secs=10.0, reply="done"):
    await send(kernel, TriggerSink(kind="webhook", url=url), reply, timeout_secs=timeout_secs)


async def test_the_webhook_sink_posts_the_run_as_json(kernel, receiver):
    await to_url(kernel, receiver.url("/ok"), reply="all good ✓")
    [(path, headers, body)] = receiver.requests
    assert path == "/ok" and headers["content-type"] == "application/json"
    assert json.loads(body) == {"trigger": "ci", "run_id": RUN["id"], "outcome": "ok", "reply": "all good ✓"}


async def test_an_error_answer_is_the_sink_error(kernel, receiver):
    with pytest.raises(SinkError, match=r"answered 500$"):
        await to_url(kernel, receiver.url("/fail"))


async def test_a_redirect_is_not_followed(kernel, receiver):
    with pytest.raises(SinkError, match="answered 302: redirects are not followed"):
        await to_url(kernel, receiver.url("/moved"))
    assert [path for path, _, _ in receiver.requests] == ["/moved"]


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data", "http://[fe80::1]/hook",
                                 "http://169.254.10.20/hook", "http://[::ffff:169.254.169.254]/", "file:///etc/passwd",
                                 "http://metadata.google.internal/"])
async def test_metadata_and_link_local_are_refused(kernel, url):
    with pytest.raises(SinkError, match="blocked|metadata|link-local|only http"):
        await to_url(kernel, url)


async def test_loopback_is_refused_when_the_config_says_so(tmp_path, receiver):
    kernel = make_kernel(tmp_path, security=SecurityConfig(block_loopback=True))
    with pytest.raises(SinkError, match="loopback"):
        await to_url(kernel, receiver.url("/ok"))
    assert receiver.requests == []


async def test_a_sink_that_never_answers_meets_the_deadline(kernel, receiver):
    with trio.fail_after(10):
        with pytest.raises(SinkError, match="took longer than 0.5 s"):
            await to_url(kernel, receiver.url("/never"), timeout_secs=0.5)


async def test_a_refused_connection_names_no_query_token(kernel):
    with pytest.raises(SinkError) as caught:
        await to_url(kernel, "http://127.0.0.1:9/hook?token=tok-secret-123")
    assert "tok-secret-123" not in str(caught.value) and "127.0.0.1:9/hook" in str(caught.value)


# --- agent --------------------------------------------------------------------------------


async def test_the_agent_sink_sends_a_local_agent_the_reply(kernel):
    seen = []
    kernel.agents.publish = lambda kind, data: seen.append((kind, data))
    await send(kernel, TriggerSink(kind="agent", agent="echo"), "triage this")
    assert [(data["agent"], data.get("caller")) for kind, data in seen if kind == "agent.message"] == [
        ("echo", "trigger:ci")]


async def test_an_unknown_agent_is_a_sink_error(kernel):
    with pytest.raises(SinkError, match="no local agent or"):
        await send(kernel, TriggerSink(kind="agent", agent="ghost"))


async def test_the_agent_sink_reaches_another_tern_over_a2a(nursery, tmp_path):
    from tests.a2a.test_server import start

    server, server_url = await start(nursery, tmp_path / "server")
    client = Kernel(Config(state=StateConfig(dir=str(tmp_path / "client")),
                           agents=[AgentConfig(name="echo", kind="echo")],
                           a2a=A2aConfig(external_agents=[ExternalAgent(name="peer", url=server_url)],
                                         discovery_timeout_secs=5)))
    await nursery.start(client.run)
    with trio.fail_after(20):
        await send(client, TriggerSink(kind="agent", agent="peer"), "the nightly report")
    [task] = (await server.a2a.engine.list())[0]
    assert task.agent == "echo" and task.state == "completed"
    assert any("the nightly report" in json.dumps(msg, default=str) for msg in
               [m.parts for m in task.history])
