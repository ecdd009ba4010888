"""``GET /ready`` over real HTTP: with a real PostgreSQL reached through a relay the test can
cut (refusing connections, or taking them and never answering), and with the SQLite state
directory taken away. Ready, then 503 with a reason that names no host or path, then ready
again by itself; ``/health`` (liveness) stays 200 throughout, so Kubernetes takes a node
out of the Service while its store is down instead of restarting it."""

from __future__ import annotations

import re
import time

import httpx
import trio

from runtime.config import Config, StateConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.host.readiness import Readiness
from runtime.httpd.access import Access
from runtime.httpd.server import HttpServer
from runtime.pg import Database


class Relay:
    """A TCP relay on a fixed loopback port to PostgreSQL. ``cut()`` closes the port and
    every connection through it (the database unreachable, as a stopped server or a lost
    network looks to tern); ``hang()`` takes connections and never answers; ``up()`` serves
    again on the same port."""

    def __init__(self, nursery: trio.Nursery, target: int) -> None:
        self.nursery, self.target = nursery, target
        self.port = 0
        self.silent = False
        self._scope: trio.CancelScope | None = None

    async def up(self, *, silent: bool = False) -> None:
        self.silent = silent
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        self._scope = scope = trio.CancelScope()

        async def serve() -> None:
            with scope:
                await trio.serve_listeners(self._pipe, listeners)

        self.nursery.start_soon(serve)

    def cut(self) -> None:
        assert self._scope is not None
        self._scope.cancel()

    async def _pipe(self, client: trio.SocketStream) -> None:
        async with client:
            if self.silent:
                await trio.sleep_forever()
            upstream = await trio.open_tcp_stream("127.0.0.1", self.target)
            async with upstream, trio.open_nursery() as nursery:
                nursery.start_soon(_copy, client, upstream, nursery.cancel_scope)
                nursery.start_soon(_copy, upstream, client, nursery.cancel_scope)


async def _copy(source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except trio.BrokenResourceError:
        pass
    done.cancel()


async def _serve(nursery: trio.Nursery, cfg: Config) -> str:
    node = Node(cfg)
    await nursery.start(node.kernel.run)
    server = HttpServer(cfg.server, build_router(node), Access(""))
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    return f"http://127.0.0.1:{bound[0][1]}"


async def _until(client: httpx.AsyncClient, status: int, within: float = 10.0) -> httpx.Response:
    deadline = time.monotonic() + within
    while True:
        response = await client.get("/ready")
        if response.status_code == status or time.monotonic() > deadline:
            return response
        await trio.sleep(0.2)


async def test_ready_follows_the_postgresql_store(nursery, pg_url, tmp_path):
    target = int(re.search(r":(\d+)/", pg_url).group(1))
    relay = Relay(nursery, target)
    await relay.up()
    url = pg_url.replace(f":{target}/", f":{relay.port}/")
    cfg = Config(state=StateConfig(dir=str(tmp_path / "state"), store="postgres", postgres_url=url))
    async with httpx.AsyncClient(base_url=await _serve(nursery, cfg), timeout=15) as client:
        ready = await client.get("/ready")
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        assert (await client.head("/ready")).status_code == 200

        relay.cut()  # refused: every pooled connection is dead, no new one can be made
        down = await _until(client, 503)
        assert down.status_code == 503
        assert down.json() == {"status": "unready", "reason": "the PostgreSQL store does not answer"}
        assert str(relay.port) not in down.text and "tern" not in down.text  # no host, port, user or database
        assert (await client.get("/health")).json() == {"status": "ok"}  # alive: not a reason to restart it

        await relay.up()  # the same port again: the node reconnects by itself
        assert (await _until(client, 200)).json() == {"status": "ready"}

        relay.cut()
        await relay.up(silent=True)  # a database that takes the connection and never answers
        started = time.monotonic()
        hung = await _until(client, 503)
        assert hung.status_code == 503 and time.monotonic() - started < 8  # 2 s per check, not the driver's wait
        relay.cut()
        await relay.up()
        assert (await _until(client, 200)).status_code == 200


async def test_ready_follows_the_sqlite_state_directory(nursery, tmp_path):
    state = tmp_path / "state"
    async with httpx.AsyncClient(base_url=await _serve(nursery, Config(state=StateConfig(dir=str(state)))),
                                 timeout=15) as client:
        assert (await client.get("/ready")).json() == {"status": "ready"}
        assert [p.name for p in state.iterdir() if p.name.startswith(".ready-")] == []  # the probe cleans up
        state.rename(tmp_path / "gone")  # (as root, a read-only mode would not stop a write: take it away)
        down = await _until(client, 503)
        assert down.json() == {"status": "unready",
                               "reason": "the state directory cannot be written (No such file or directory)"}
        assert str(tmp_path) not in down.text
        (tmp_path / "gone").rename(state)
        assert (await _until(client, 200)).json() == {"status": "ready"}


async def test_a_flood_of_probes_costs_one_query(pg_url):
    """A hundred probes at once (the route is public): one check runs, the others take its answer."""
    db = Database(pg_url, pool_size=2)
    await db.open()
    checks = 0
    real = db.check

    async def counted(timeout: float = 2.0) -> None:
        nonlocal checks
        checks += 1
        await real(timeout=timeout)

    db.check = counted
    readiness = Readiness(db, "")
    answers: list[str | None] = []

    async def probe() -> None:
        answers.append(await readiness.check())

    async with trio.open_nursery() as nursery:
        for _ in range(100):
            nursery.start_soon(probe)
    assert answers == [None] * 100 and checks == 1
    db.close()


async def test_a_stopped_database_at_a_closed_port():
    """Nothing listens at the port: unready at once, with the same one line."""
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    db = Database(f"postgresql://tern:secret-pw@127.0.0.1:{port}/tern", connect_timeout=2)
    assert await Readiness(db, "").check() == "the PostgreSQL store does not answer"
