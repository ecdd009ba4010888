"""A daemon-like server with several named keys, for the key, scope and ownership tests:
``alice`` and ``bob`` (no scopes: message and their own tasks), ``ops`` (approvals),
``echo-only`` (may message the agent ``echo`` alone), ``mcp-b`` (a second ``mcp``), one key per scope
(``only-<scope>``), and the ``api_key`` (``admin``)."""

from __future__ import annotations

import httpx

from runtime.config import A2aConfig, AgentConfig, Config, ServerConfig, StateConfig
from runtime.config.keys import SCOPES, KeyTable
from runtime.config.schema import KeyConfig
from runtime.host.api import build_router
from runtime.host.node import Node
from runtime.httpd.access import Access
from runtime.httpd.metrics import Metrics
from runtime.httpd.server import HttpServer

ADMIN = "admin-key-0123456789abcdef"
KEYS = {"alice": "alice-key-0123456789", "bob": "bob-key-0123456789abc", "ops": "ops-key-0123456789abcd",
        "echo-only": "echo-only-key-012345678", "mcp-b": "mcp-b-key-0123456789",
        **{f"only-{s}": f"only-{s}-key-0123456789" for s in SCOPES}}
SCOPED = {"ops": ["approvals"], "mcp-b": ["mcp"], **{f"only-{s}": [s] for s in SCOPES}}


def key_configs() -> list[KeyConfig]:
    return [KeyConfig(name=name, key=key, scopes=SCOPED.get(name, []),
                      agents=["echo"] if name == "echo-only" else ["*"]) for name, key in KEYS.items()]


def config(tmp_path, **server) -> Config:
    agents = [AgentConfig(name="echo", kind="echo", description="Echoes."),
              AgentConfig(name="other", kind="echo", description="Echoes too.")]
    return Config(agents=agents, state=StateConfig(dir=str(tmp_path / "state")),
                  server=ServerConfig(keys=key_configs(), **server),
                  a2a=A2aConfig(enabled=True, default_agent="echo"))


async def start(nursery, tmp_path, *, ssl_context=None, cfg: Config | None = None):
    """The node and the base URL of a server that takes every key above."""
    cfg = cfg or config(tmp_path)
    node = Node(cfg)
    await nursery.start(node.run)
    access = Access(ADMIN, keys=KeyTable.build(ADMIN, cfg.server.keys))
    server = HttpServer(cfg.server, build_router(node, metrics=Metrics(), secured=True), access,
                        metrics=Metrics(), ssl_context=ssl_context)
    bound = await nursery.start(server.serve, "127.0.0.1", 0)
    node.http_bound = ("127.0.0.1", bound[0][1])
    scheme = "https" if ssl_context is not None else "http"
    return node, f"{scheme}://127.0.0.1:{bound[0][1]}"


def client(url: str, name: str | None, **options) -> httpx.AsyncClient:
    """A client that presents ``name``'s key (``admin``: the api_key; None: no key)."""
    headers = {} if name is None else {"Authorization": f"Bearer {ADMIN if name == 'admin' else KEYS[name]}"}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=10, **options)
