"""Helpers for the MCP server tests: a test config, and ``tern mcp`` as a real process
spoken to with raw bytes (so framing, garbage and stdout hygiene are what is tested)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import trio

from tests.test_cli import ROOT

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}

AGENTS = """
[[agents]]
name = "echo"
kind = "echo"

[[agents]]
name = "slow-poke"
kind = "command"
command = ["sh", "-c", "echo working; sleep 30"]

[[agents]]
name = "counter"
kind = "command"
command = ["sh", "-c", "for i in 1 2 3 4; do echo \\"step $i\\"; sleep 0.1; done"]

[[agents]]
name = "logger"
kind = "command"
command = ["sh", "-c", "for i in 1 2 3; do echo \\"log line $i\\" >&2; sleep 0.05; done; echo done"]
"""


def write_config(tmp_path: Path, extra: str = "", *, mcp_server: str = 'tools = ["time_now"]') -> Path:
    """A config with the test agents, a ``say_hi`` preset, ``[mcp_server]`` keys from
    ``mcp_server`` and any ``extra`` TOML at the end."""
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\nrate_limit_per_sec = 0\n[state]\ndir = "{tmp_path / "state"}"\n'
                    f'[mcp_server]\n{mcp_server}\n'
                    '[[mcp_server.presets]]\nname = "say_hi"\ntool = "tern_agent_echo"\n'
                    'arguments = { message = "hi there" }\n' + AGENTS + extra)
    return path


@contextmanager
def tern_serve(tmp: Path, config: Path | str, env: dict[str, str], *, servers_connected: bool = False,
               within: float = 30.0, tern: Sequence[str] = (sys.executable, "-m", "runtime"),
               cwd: Path = ROOT) -> Iterator[str]:
    """A real ``tern serve`` on ``config`` (its log in ``tmp/serve.log``), run as ``tern``
    (the source tree, or e.g. a built pyz) in ``cwd``: its base URL, once it serves (and,
    with ``servers_connected``, once its first MCP server is connected); terminated
    afterwards."""
    import time

    import httpx

    log = tmp / "serve.log"
    process = subprocess.Popen([*tern, "--config", str(config), "serve"],
                               stdin=subprocess.DEVNULL, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env,
                               cwd=cwd)
    try:
        deadline = time.monotonic() + within
        while "serving on " not in log.read_text():
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        url = log.read_text().split("serving on ", 1)[1].split()[0]
        while servers_connected and not httpx.get(url + "/api/mcp/servers").json()["connected"][0]["connected"]:
            assert time.monotonic() < deadline, "the MCP server behind tern did not connect"
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def tern_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env.update(PYTHONPATH=str(ROOT), XDG_STATE_HOME=str(tmp_path / "xdg"), **extra)
    return env


def request(msg_id: Any, method: str, params: dict | None = None) -> dict:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def initialize(msg_id: Any = 0, version: str = "2025-11-25") -> dict:
    return request(msg_id, "initialize", {"protocolVersion": version, "capabilities": {},
                                          "clientInfo": {"name": "test", "version": "0"}})


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


class TernMcp:
    """``python -m runtime mcp`` with pipes; messages in and out as dicts or raw bytes."""

    def __init__(self, process: trio.Process, framing: str = "ndjson") -> None:
        self.process = process
        self.framing = framing
        self._buffer = b""

    @classmethod
    async def start(cls, config: Path, env: dict[str, str], *args: str, framing: str = "ndjson") -> "TernMcp":
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "runtime", "--config", str(config), "mcp", *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(config.parent / "mcp-stderr.log", "ab"),
            env=env)
        return cls(process, framing)

    async def write(self, data: bytes) -> None:
        await self.process.stdin.send_all(data)

    async def send(self, *messages: dict) -> None:
        data = b""
        for message in messages:
            body = json.dumps(message).encode()
            data += (b"Content-Length: %d\r\n\r\n%s" % (len(body), body)) if self.framing == "content-length" \
                else body + b"\n"
        await self.write(data)

    async def receive(self, timeout: float = 10.0) -> dict:
        with trio.fail_after(timeout):
            while True:
                message = self._take()
                if message is not None:
                    return message
                chunk = await self.process.stdout.receive_some(65536)
                if not chunk:
                    raise EOFError(f"tern mcp closed stdout; buffered {self._buffer[:200]!r}")
                self._buffer += chunk

    def _take(self) -> dict | None:
        if self.framing == "content-length":
            head, sep, rest = self._buffer.partition(b"\r\n\r\n")
            if not sep:
                return None
            assert head.lower().startswith(b"content-length:"), head
            size = int(head.split(b":", 1)[1])
            if len(rest) < size:
                return None
            self._buffer = rest[size:]
            return json.loads(rest[:size])
        line, sep, rest = self._buffer.partition(b"\n")
        if not sep:
            return None
        self._buffer = rest
        return json.loads(line)  # every stdout line must be JSON: nothing else may reach stdout

    async def answer(self, msg_id: Any, timeout: float = 10.0) -> tuple[dict, list[dict]]:
        """The response to ``msg_id``, and every other message that came before it."""
        others = []
        while True:
            message = await self.receive(timeout)
            if message.get("id") == msg_id and "method" not in message:
                return message, others
            others.append(message)

    async def call(self, msg_id: Any, method: str, params: dict | None = None) -> dict:
        await self.send(request(msg_id, method, params))
        return (await self.answer(msg_id))[0]

    async def handshake(self) -> dict:
        await self.send(initialize())
        reply, _ = await self.answer(0)
        await self.send(INITIALIZED)
        return reply

    async def close(self) -> int:
        await self.process.stdin.aclose()
        with trio.move_on_after(10):
            return await self.process.wait()
        self.process.kill()
        return await self.process.wait()
