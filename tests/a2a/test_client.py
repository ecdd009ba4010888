"""tern's A2A client (runtime/a2a/client.py) and ``tern a2a``: against tern's own server
in every dialect, against a real a2a-sdk 1.x server, and against peers that answer
garbage, too much, nothing at all, or live at an address the SSRF guard refuses."""

from __future__ import annotations

import functools
import gzip
import json
import os
import socket
import sys
from contextlib import aclosing
from pathlib import Path

import httpcore
import pytest
import trio

from runtime.a2a.client.client import A2aClient, A2aClientError, A2aTimeout, RemoteAgent, reply_text
from runtime.a2a.model import ArtifactEvent, Message, StatusEvent, Task
from runtime.net.guard import BlockedAddress
from tests.a2a.test_server import start

ROOT = Path(__file__).resolve().parent.parent.parent
DIALECTS = ["1.0", "0.3", "0.1"]


# --- tern's own server, in-process --------------------------------------------------------


async def start_tern(nursery, tmp_path, key=""):
    return await start(nursery, tmp_path, key=key)  # the same in-process tern as the server tests


@pytest.fixture
async def tern_url(nursery, tmp_path):
    return (await start_tern(nursery, tmp_path))[1]


async def discover(client, url, dialect, agent=""):
    """Each dialect reached the way a peer of that version would: 1.0 from the card,
    0.3 forced, 0.1 from the legacy /.well-known/agent.json."""
    base = f"{url}/a2a/{agent}" if agent else url
    if dialect == "0.1":
        remote = await client.discover(f"{base}/.well-known/agent.json" if not agent else base, dialect="0.1")
    else:
        remote = await client.discover(base, dialect=None if dialect == "1.0" else dialect)
    assert remote.dialect == dialect
    return remote


async def test_discover_tern(tern_url):
    async with A2aClient() as client:
        remote = await client.discover(tern_url)
        assert (remote.name, remote.dialect, remote.url) == ("echo", "1.0", tern_url + "/a2a/echo")
        assert remote.card_url == tern_url + "/.well-known/agent-card.json"
        assert remote.streaming and remote.skills[0]["id"] == "echo" and remote.description == "Echoes."
        legacy = await client.discover(tern_url + "/.well-known/agent.json")  # a card URL, the 0.1 shape
        assert (legacy.dialect, legacy.url) == ("0.1", tern_url + "/a2a/echo")
        forced = await client.discover(tern_url + "/", dialect="0.3")
        assert (forced.dialect, forced.url) == ("0.3", tern_url + "/a2a/echo")
        sleepy = await client.discover(tern_url + "/a2a/sleepy")  # an agent's own URL: its own card
        assert (sleepy.name, sleepy.url) == ("sleepy", tern_url + "/a2a/sleepy")
        with pytest.raises(A2aClientError, match="unknown A2A dialect"):
            await client.discover(tern_url, dialect="2.0")


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_send_get_cancel_against_tern(tern_url, dialect):
    async with A2aClient() as client:
        remote = await discover(client, tern_url, dialect)
        task = await client.send(remote, "hello")
        assert isinstance(task, Task) and task.state == "completed" and reply_text(task) == "hello"
        got = await client.get(remote, task.id)
        assert (got.id, got.state, got.context_id) == (task.id, "completed", task.context_id)
        assert reply_text(got) == "hello" and [m.role for m in got.history] == ["user", "agent"]
        assert len((await client.get(remote, task.id, history_length=1)).history) == 1
        again = await client.send(remote, "second", context_id=task.context_id)
        assert again.context_id == task.context_id and again.id != task.id and reply_text(again) == "second"
        with pytest.raises(A2aClientError) as cancel:
            await client.cancel(remote, task.id)
        assert cancel.value.code == -32002 and "already completed" in cancel.value.message
        with pytest.raises(A2aClientError) as missing:
            await client.get(remote, "no-such-task")
        assert missing.value.code == -32001 and "TaskNotFound" in str(missing.value)


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_stream_against_tern(tern_url, dialect):
    async with A2aClient() as client:
        remote = await discover(client, tern_url, dialect)
        events = [e async for e in client.stream(remote, "streamed")]
        first = Task if dialect != "0.1" else StatusEvent  # 0.1 streams carry status and artifact events only
        assert [type(e) for e in events] == [first, StatusEvent, ArtifactEvent, StatusEvent]
        assert [events[0].state, events[1].state, events[3].state] == ["submitted", "working", "completed"]
        assert events[2].artifact.parts == [{"text": "streamed"}]
        task_id = events[0].id if isinstance(events[0], Task) else events[0].task_id
        assert {e.task_id for e in events[1:]} == {task_id}
        if dialect != "1.0":
            assert events[3].final  # 1.0 has no final flag: the stream's end says it


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_cancel_a_working_task_mid_stream(tern_url, dialect):
    async with A2aClient() as client:
        remote = await discover(client, tern_url, dialect, agent="sleepy")
        seen = []
        with trio.fail_after(10):
            async with aclosing(client.stream(remote, "zzz")) as events:
                async for event in events:
                    seen.append(event)
                    if isinstance(event, StatusEvent) and event.state == "working":
                        canceled = await client.cancel(remote, event.task_id)
                        assert canceled.state == "canceled"
        assert seen[-1].state == "canceled" and isinstance(seen[-1], StatusEvent)
        task_id = seen[0].id if isinstance(seen[0], Task) else seen[0].task_id
        assert (await client.get(remote, task_id)).state == "canceled"


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
async def test_non_blocking_send_and_poll(tern_url, dialect):
    async with A2aClient() as client:
        echo = await discover(client, tern_url, dialect)
        task = await client.send(echo, "later", blocking=False)
        assert task.state in ("submitted", "working", "completed")
        done = await client.poll(echo, task.id, interval=0.05, timeout=10)
        assert done.state == "completed" and reply_text(done) == "later"
        sleepy = await discover(client, tern_url, dialect, agent="sleepy")
        slow = await client.send(sleepy, "zzz", blocking=False)
        assert slow.state in ("submitted", "working")
        started = trio.current_time()
        with pytest.raises(A2aTimeout, match="still working"):
            await client.poll(sleepy, slow.id, interval=0.05, timeout=0.3)
        assert trio.current_time() - started < 2
        assert (await client.cancel(sleepy, slow.id)).state == "canceled"


@pytest.mark.parametrize("dialect", ["1.0", "0.3"])
async def test_resubscribe(tern_url, dialect):
    async with A2aClient() as client:
        sleepy = await discover(client, tern_url, dialect, agent="sleepy")
        task = await client.send(sleepy, "zzz", blocking=False)
        seen = []
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                async def watch():
                    async for event in client.resubscribe(sleepy, task.id):
                        seen.append(event)

                nursery.start_soon(watch)
                await trio.sleep(0.3)
                await client.cancel(sleepy, task.id)
        assert isinstance(seen[0], Task) and seen[0].id == task.id
        assert isinstance(seen[-1], StatusEvent) and seen[-1].state == "canceled"
        with pytest.raises(A2aClientError) as late:  # nothing more will happen to it
            [e async for e in client.resubscribe(sleepy, task.id)]
        assert late.value.code == -32004


async def test_blocking_send_is_bounded(tern_url):
    async with A2aClient() as client:
        sleepy = await client.discover(tern_url + "/a2a/sleepy")
        started = trio.current_time()
        with pytest.raises(A2aTimeout, match="SendMessage: no answer within 0.5 s"):
            await client.send(sleepy, "zzz", timeout=0.5)
        assert trio.current_time() - started < 3


async def test_credentials_go_in_headers(nursery, tmp_path):
    key = "client-test-key-98765"
    _, url = await start_tern(nursery, tmp_path, key=key)
    async with A2aClient() as client:
        remote = await client.discover(url)  # the card is public
        with pytest.raises(A2aClientError, match="HTTP 401: the agent needs credentials"):
            await client.send(remote, "hi")
    async with A2aClient(headers={"Authorization": f"Bearer {key}"}) as client:
        remote = await client.discover(url)
        assert reply_text(await client.send(remote, "hi")) == "hi"


# --- a real a2a-sdk 1.x server --------------------------------------------------------------


async def test_sdk_server(sdk_url):
    async with A2aClient() as client:
        remote = await client.discover(sdk_url)
        assert (remote.name, remote.dialect, remote.url) == ("sdk-echo", "1.0", sdk_url + "/")
        assert remote.streaming and remote.skills[0]["id"] == "echo"
        task = await client.send(remote, "hello")
        assert isinstance(task, Task) and task.state == "completed" and reply_text(task) == "echo: hello"
        got = await client.get(remote, task.id)
        assert (got.id, got.state, reply_text(got)) == (task.id, "completed", "echo: hello")
        events = [e async for e in client.stream(remote, "streamed")]
        assert [type(e) for e in events] == [Task, StatusEvent, ArtifactEvent, StatusEvent]
        assert [events[0].state, events[1].state, events[3].state] == ["submitted", "working", "completed"]
        assert events[2].artifact.parts == [{"text": "echo: streamed"}] and events[2].task_id == events[0].id
        with pytest.raises(A2aClientError) as cancel:
            await client.cancel(remote, task.id)
        assert cancel.value.code == -32002
        with pytest.raises(A2aClientError) as missing:
            await client.get(remote, "no-such-task")
        assert missing.value.code == -32001


async def test_sdk_server_in_its_03_compat_mode(sdk_url):
    async with A2aClient() as client:
        remote = await client.discover(sdk_url, dialect="0.3")
        assert remote.url == sdk_url + "/"  # the card's 0.3 url
        task = await client.send(remote, "old")
        assert task.state == "completed" and reply_text(task) == "echo: old"
        assert (await client.get(remote, task.id)).state == "completed"
        events = [e async for e in client.stream(remote, "old stream")]
        assert [type(e) for e in events] == [Task, StatusEvent, ArtifactEvent, StatusEvent] and events[-1].final
        follow = await client.send(remote, "again", context_id=task.context_id)
        assert follow.context_id == task.context_id


# --- bad peers ------------------------------------------------------------------------------


class FakePeer:
    """A minimal HTTP/1.1 server on 127.0.0.1: ``routes[path] = (status, content_type, body)``;
    a body of ``None`` never answers; ``("unsized", chunk, n)`` sends ``n`` chunks without a
    Content-Length; more items after the body are extra header lines."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple] = {}
        self.requests: list[tuple[str, str, bytes]] = []
        self.url = ""

    async def start(self, nursery) -> str:
        listeners = await nursery.start(functools.partial(trio.serve_tcp, self._handle, 0, host="127.0.0.1"))
        self.url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        return self.url

    async def _handle(self, stream) -> None:
        try:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            length = next(
                (int(line.split(":", 1)[1]) for line in lines[1:] if line.lower().startswith("content-length")), 0
            )
            while len(body) < length:
                body += await stream.receive_some(65536)
            self.requests.append((method, path, body))
            status, kind, payload, *extra = self.routes.get(path, (404, "text/plain", b"not found"))
            kind += "".join(f"\r\n{header}" for header in extra)
            if payload is None:
                await trio.sleep_forever()
            if isinstance(payload, tuple) and payload[0] == "unsized":  # close-delimited, no length
                await stream.send_all(
                    f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nConnection: close\r\n\r\n".encode()
                )
                for _ in range(payload[2]):
                    await stream.send_all(payload[1])
            else:
                await stream.send_all(
                    f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nContent-Length: {len(payload)}"
                    f"\r\nConnection: close\r\n\r\n".encode()
                    + payload
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await stream.aclose()


CARD = "/.well-known/agent-card.json"
LEGACY = "/.well-known/agent.json"


async def test_bad_cards(nursery):
    peer = FakePeer()
    url = await peer.start(nursery)
    async with A2aClient() as client:
        with pytest.raises(A2aClientError) as none:
            await client.discover(url)
        assert str(none.value) == f"no A2A agent card at {url}: {CARD}: HTTP 404; {LEGACY}: HTTP 404"
        peer.routes[CARD] = peer.routes[LEGACY] = (200, "text/html", b"<!doctype html><html>Welcome</html>")
        with pytest.raises(A2aClientError, match=r"agent-card.json: not JSON \(text/html: '<!doctype html>"):
            await client.discover(url)
        peer.routes[CARD] = (200, "application/json", b"[1, 2, 3]")
        with pytest.raises(A2aClientError, match="a card must be a JSON object, got list"):
            await client.discover(url)
        peer.routes[CARD] = (200, "application/json", b'{"url": "http://127.0.0.1:1/"}')
        with pytest.raises(A2aClientError, match="the card has no name"):
            await client.discover(url)
        peer.routes[CARD] = (200, "application/json", b'{"name": "nowhere", "protocolVersion": "0.3.0"}')
        with pytest.raises(A2aClientError, match="names no endpoint tern can use for A2A 0.3"):
            await client.discover(url)
        peer.routes[CARD] = (200, "application/json", b'{"name": "big", "pad": "' + b"x" * (1024 * 1024) + b'"}')
        with pytest.raises(A2aClientError, match=r"is 10\d{5} bytes \(at most 1048576\)"):
            await client.discover(url)
        peer.routes[CARD] = (200, "application/json", ("unsized", b"x" * 65536, 40))  # 2.5 MiB, no length
        with pytest.raises(A2aClientError, match="larger than 1048576 bytes"):
            await client.discover(url)
        zipped = {"name": "zipped", "url": url + "/rpc", "protocolVersion": "0.3.0"}
        peer.routes[CARD] = (
            200,
            "application/json",
            gzip.compress(json.dumps(zipped).encode()),
            "Content-Encoding: gzip",
        )
        assert (await client.discover(url)).name == "zipped"  # decoded, then read
        bomb = gzip.compress(b'{"name": "bomb", "pad": "' + b"x" * (8 * 1024 * 1024) + b'"}')
        assert len(bomb) < 20000
        peer.routes[CARD] = (200, "application/json", bomb, "Content-Encoding: gzip")
        with pytest.raises(A2aClientError, match="larger than 1048576 bytes"):  # counted as it decodes
            await client.discover(url)
        peer.routes[CARD] = (401, "application/json", b"{}")
        with pytest.raises(A2aClientError, match="HTTP 401: the card needs credentials"):
            await client.discover(url)
        # the legacy card where the 0.3 one is missing; a path-less card at the host's root
        del peer.routes[CARD]
        peer.routes[LEGACY] = (200, "application/json", json.dumps({"name": "old", "url": url + "/rpc"}).encode())
        old = await client.discover(url + "/some/agent")
        assert (old.dialect, old.url, old.card_url) == ("0.1", url + "/rpc", url + LEGACY)


async def test_bad_answers(nursery):
    peer = FakePeer()
    url = await peer.start(nursery)
    remote = RemoteAgent(name="fake", url=url + "/rpc", dialect="1.0", card_url=url + CARD)
    async with A2aClient(timeout=2, max_event_bytes=4096) as client:
        peer.routes["/rpc"] = (500, "text/html", b"<html>Internal Server Error</html>")
        with pytest.raises(A2aClientError, match=r"fake: SendMessage: HTTP 500 from .*/rpc: '<html>Internal"):
            await client.send(remote, "hi")
        peer.routes["/rpc"] = (200, "application/json", b'{"jsonrpc": "2.0", "id": 1, "result": {"what": 1}}')
        with pytest.raises(A2aClientError, match="answered neither a task nor a message"):
            await client.send(remote, "hi")
        peer.routes["/rpc"] = (200, "application/json", b'{"jsonrpc": "2.0", "id": 1}')
        with pytest.raises(A2aClientError, match="not a JSON-RPC answer"):
            await client.get(remote, "t")
        peer.routes["/rpc"] = (200, "text/event-stream", b"data: " + b"x" * 10000 + b"\n\n")
        with pytest.raises(A2aClientError, match="larger than 4096 bytes"):
            [e async for e in client.stream(remote, "hi")]
        reply = {
            "jsonrpc": "2.0",
            "id": 1,
            "result": {"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "direct"}]}},
        }
        peer.routes["/rpc"] = (200, "application/json", json.dumps(reply).encode())
        message = await client.send(remote, "hi")
        assert isinstance(message, Message) and reply_text(message) == "direct"
        sent = json.loads(peer.requests[-1][2])
        assert sent["method"] == "SendMessage" and sent["params"]["message"]["parts"] == [{"text": "hi"}]
        assert sent["params"]["configuration"] == {"returnImmediately": False}
        peer.routes["/rpc"] = (200, "text/event-stream", b"data: " + json.dumps(reply).encode() + b"\n\n")
        assert [reply_text(e) for e in [e async for e in client.stream(remote, "hi")]] == ["direct"]
        peer.routes["/rpc"] = (200, "application/json", None)  # never answers
        started = trio.current_time()
        with pytest.raises(A2aTimeout, match="fake: GetTask: no answer within 0.3 s"):
            await client.get(remote, "t", timeout=0.3)
        with pytest.raises(A2aTimeout, match="SendStreamingMessage: no answer within 0.3 s"):
            [e async for e in client.stream(remote, "hi", timeout=0.3)]
        assert trio.current_time() - started < 3


async def test_unreachable_peer_fails_within_the_timeout():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    silent = socket.socket()  # listens, never accepts nor answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        async with A2aClient(timeout=1) as client:
            started = trio.current_time()
            with pytest.raises(A2aClientError, match=f"cannot reach http://127.0.0.1:{port}/"):
                await client.discover(f"http://127.0.0.1:{port}")
            with pytest.raises(A2aTimeout, match="reading the agent card of .*: no answer within 1 s"):
                await client.discover(f"http://127.0.0.1:{silent.getsockname()[1]}")
            assert trio.current_time() - started < 4
    finally:
        silent.close()


async def test_ssrf_guard_refuses_metadata_without_a_connection(nursery, monkeypatch):
    async def no_connections(*args, **kwargs):
        raise AssertionError("the client opened a connection")

    peer = FakePeer()
    url = await peer.start(nursery)
    peer.routes[CARD] = (
        200,
        "application/json",
        json.dumps(
            {
                "name": "evil",
                "supportedInterfaces": [
                    {
                        "url": "http://169.254.169.254/latest/meta-data/",
                        "protocolBinding": "JSONRPC",
                        "protocolVersion": "1.0",
                    }
                ],
            }
        ).encode(),
    )
    async with A2aClient() as client:
        evil = await client.discover(url)  # the card is fine; its endpoint is not
        monkeypatch.setattr(httpcore.TrioBackend, "connect_tcp", no_connections)
        for target in ("http://169.254.169.254/", "http://metadata.google.internal/", "http://[fd00:ec2::254]/"):
            with pytest.raises(BlockedAddress, match="blocked"):
                await client.discover(target)
        with pytest.raises(BlockedAddress, match="169.254.169.254"):
            await client.send(evil, "hi")
        with pytest.raises(BlockedAddress):
            [e async for e in client.stream(evil, "hi")]
        with pytest.raises(BlockedAddress, match="only http and https"):
            await client.discover("file:///etc/passwd")
    assert all(path == CARD for _, path, _ in peer.requests)


# --- tern a2a (the CLI, as a real process) -------------------------------------------------


async def tern_cli(tmp_path, *args, stdin=b""):
    config = tmp_path / "client.toml"
    config.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "runtime", "a2a", *args, "--config", str(config)],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd=tmp_path,
        )


async def test_cli(tern_url, tmp_path):
    found = await tern_cli(tmp_path, "discover", tern_url)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.decode().splitlines()
    assert "name:      echo" in lines and "dialect:   A2A 1.0" in lines
    assert f"endpoint:  {tern_url}/a2a/echo" in lines and "  echo: Echoes. [echo]" in lines
    card = json.loads(
        (await tern_cli(tmp_path, "discover", tern_url.removeprefix("http://") + "/a2a/sleepy", "--json")).stdout
    )
    assert card["name"] == "sleepy" and card["dialect"] == "1.0" and card["card"]["name"] == "sleepy"

    sent = await tern_cli(tmp_path, "send", tern_url, "hello there")
    assert (sent.returncode, sent.stdout, sent.stderr) == (0, b"hello there\n", b"")
    as_json = json.loads(
        (await tern_cli(tmp_path, "send", tern_url, "-", "--json", "--dialect", "0.3", stdin=b"from stdin")).stdout
    )
    assert as_json["kind"] == "task" and as_json["state"] == "completed" and as_json["text"] == "from stdin"
    assert as_json["dialect"] == "0.3"
    follow = json.loads(
        (await tern_cli(tmp_path, "send", tern_url, "more", "--json", "--context", as_json["context_id"])).stdout
    )
    assert follow["context_id"] == as_json["context_id"]

    streamed = await tern_cli(tmp_path, "send", tern_url + "/.well-known/agent.json", "streamed", "--stream")
    assert streamed.returncode == 0 and streamed.stdout == b"streamed\n"
    assert streamed.stderr.decode().splitlines()[-1].endswith("] completed")
    events = [
        json.loads(line)
        for line in (await tern_cli(tmp_path, "send", tern_url, "s", "--stream", "--json")).stdout.splitlines()
    ]
    assert [e["event"] for e in events] == ["task", "status", "artifact", "status"]
    assert events[-1]["state"] == "completed" and events[2]["artifact"]["parts"] == [{"text": "s"}]

    got = await tern_cli(tmp_path, "get", tern_url, as_json["id"])
    assert got.returncode == 0 and got.stdout.decode().splitlines() == [
        f"task {as_json['id']}: completed (context {as_json['context_id']})",
        "from stdin",
    ]
    cancel = await tern_cli(tmp_path, "cancel", tern_url, as_json["id"])
    assert cancel.returncode == 1 and cancel.stdout == b""
    assert cancel.stderr.decode().strip().splitlines() == [
        f"tern: echo: CancelTask: task {as_json['id']} is already completed (TaskNotCancelable -32002)"
    ]


async def test_cli_errors(tern_url, tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    down = await tern_cli(tmp_path, "send", f"http://127.0.0.1:{port}", "hi", "--timeout", "5")
    assert down.returncode == 1 and len(down.stderr.decode().strip().splitlines()) == 1
    assert down.stderr.decode().startswith(f"tern: cannot reach http://127.0.0.1:{port}/")
    blocked = await tern_cli(tmp_path, "discover", "http://169.254.169.254")
    assert blocked.returncode == 1 and blocked.stderr.decode().startswith("tern: blocked: 169.254.169.254")
    missing = await tern_cli(tmp_path, "get", tern_url, "nope")
    assert missing.returncode == 1 and "(TaskNotFound -32001)" in missing.stderr.decode()
    header = await tern_cli(tmp_path, "discover", tern_url, "--header", "no colon")
    assert header.returncode == 2 and "--header expects 'Name: value'" in header.stderr.decode()


async def test_an_openfang_style_legacy_server(nursery):
    """OpenFang's server (the seed's dialect): a 0.1 card at /.well-known/agent.json whose
    url is .../a2a, no JSON-RPC route there, and the seed's REST routes answering a bare
    task. tern's client falls back to them (OpenFang's own client cannot)."""
    from runtime.config import ServerConfig
    from runtime.httpd.access import Access as NoKey
    from runtime.httpd.messages import Request, Response, json_response
    from runtime.httpd.router import Router
    from runtime.httpd.server import HttpServer as Server

    tasks: dict = {}
    router = Router()
    base = {}

    async def card(request: Request) -> Response:
        return json_response(
            {
                "name": "openfang-agent",
                "description": "legacy",
                "url": base["url"] + "/a2a",
                "version": "0.1.0",
                "capabilities": {"streaming": True, "pushNotifications": False},
                "skills": [],
                "defaultInputModes": ["text"],
                "defaultOutputModes": ["text"],
            }
        )

    async def send(request: Request) -> Response:
        body = request.json()
        text = next(p["text"] for p in body["message"]["parts"] if p.get("type") == "text")
        task = {
            "id": body["id"],
            "sessionId": body.get("sessionId"),
            "status": {"state": "completed"},
            "artifacts": [{"parts": [{"type": "text", "text": f"openfang: {text}"}], "index": 0}],
        }
        tasks[body["id"]] = task
        return json_response(task)  # a bare task: no JSON-RPC envelope

    async def get(request: Request) -> Response:
        return json_response(tasks[request.params["id"]])

    router.add("GET", "/.well-known/agent.json", card, auth=False, guard_origin=False)
    router.add("POST", "/a2a/tasks/send", send, auth=False, guard_origin=False)
    router.add("GET", "/a2a/tasks/{id}", get, auth=False, guard_origin=False)
    server = Server(ServerConfig(rate_limit_per_sec=0), router, NoKey(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    base["url"] = f"http://127.0.0.1:{bound[0][1]}"
    async with A2aClient() as client:
        remote = await client.discover(base["url"])
        assert (remote.dialect, remote.url) == ("0.1", base["url"] + "/a2a")
        task = await client.send(remote, "hello")
        assert isinstance(task, Task) and task.state == "completed" and reply_text(task) == "openfang: hello"
        assert (await client.get(remote, task.id)).id == task.id
