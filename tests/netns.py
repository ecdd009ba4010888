"""Run a peer server that binds every interface, reachable only through 127.0.0.1.

The npm reference servers in their HTTP modes listen on all interfaces (they honour
only ``PORT``). ``isolated_server`` starts one inside a fresh network namespace that
has nothing but loopback, next to a relay from a unix socket to its port; outside,
a trio listener on 127.0.0.1 forwards to that socket. So nothing is ever exposed
beyond loopback, and tests talk to the real server through ``http://127.0.0.1:N``.
"""

from __future__ import annotations

import functools
import os
import shlex
import signal
import subprocess
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
import trio

from tests import peers

RELAY = str(Path(__file__).resolve().parent / "fixtures" / "unix_relay.py")


async def _pipe(source: trio.abc.Stream, sink: trio.abc.Stream) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        try:
            await sink.send_eof() if hasattr(sink, "send_eof") else await sink.aclose()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


@asynccontextmanager
async def isolated_server(argv: list[str], port: int, env: dict[str, str] | None = None) -> AsyncIterator[str]:
    """Yields ``http://127.0.0.1:N`` leading to ``argv`` (listening on ``port`` inside)."""
    prefix = peers.loopback_namespace_prefix()
    if not prefix:
        pytest.skip("no loopback-only network namespace here (needs unshare and ip)")
    with tempfile.TemporaryDirectory(prefix="tern-ns-") as tmp:
        sock = os.path.join(tmp, "relay.sock")
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        script = (f"ip link set lo up && ({assignments} exec {shlex.join(argv)}) & "
                  f"exec {shlex.quote(sys.executable)} {shlex.quote(RELAY)} {shlex.quote(sock)} {port}")
        process = subprocess.Popen([*prefix, "sh", "-c", script], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            with trio.fail_after(15):
                while not os.path.exists(sock):
                    if process.poll() is not None:
                        raise RuntimeError(f"isolated server exited with {process.returncode}: {argv}")
                    await trio.sleep(0.02)

            async def forward(client: trio.SocketStream) -> None:
                async with client:
                    upstream = await trio.open_unix_socket(sock)
                    async with upstream, trio.open_nursery() as nursery:
                        nursery.start_soon(_pipe, client, upstream)
                        nursery.start_soon(_pipe, upstream, client)

            async with trio.open_nursery() as nursery:
                listeners = await nursery.start(functools.partial(trio.serve_tcp, forward, 0, host="127.0.0.1"))
                outer = listeners[0].socket.getsockname()[1]
                yield f"http://127.0.0.1:{outer}"
                nursery.cancel_scope.cancel()
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait(timeout=10)
