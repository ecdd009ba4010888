"""Several real ``tern serve`` nodes on one PostgreSQL database, behind HAProxy: what the
scale-out tests and bench/scaleout.py run against.

    cluster = Cluster(root, pg_url, nodes=3, lease_secs=3)
    cluster.start()               # nodes n0..n2, then HAProxy; waits until all are up
    cluster.url                   # the balancer (also every card's public_url)
    cluster.nodes[1].kill()       # SIGKILL its whole process group, as a dying container
    cluster.nodes[1].start()      # back on the same port, state dir and node id
    cluster.stop()

Each node is ``python -m runtime serve`` from this checkout (``PYTHONPATH``), with its own
state dir and port, its node id ``n<i>`` (HAProxy names its servers the same; ``named=False``:
tern makes a new one at each start, as for the pods of a Deployment), an API
key, rate limits off (every request comes from HAProxy's one address) and these agents:
``echo``; ``slow`` (a command agent that says its pid, then sleeps 30 s: cancel must kill
it); ``steps`` (three status updates ``step 1..3``, each followed by a pause of as many
seconds as the message says, 0.3 if it says no number, then completed);
``writer`` (calls ``file_write``, which the default policy asks a person about).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.haproxy import Haproxy, free_port
from tests.mcp.server_harness import tern_env
from tests.test_cli import ROOT

__all__ = ["API_KEY", "Cluster", "Node"]

API_KEY = "scaleout-test-key-0123456789"

SLOW = r"""printf '{"event":"status","state":"working","text":"sleeping as pid %s"}\n' $$; exec sleep 30"""
STEPS = (r"""secs=$(cat); case "$secs" in [0-9]*) ;; *) secs=0.3;; esac; for i in 1 2 3; do """
         r"""printf '{"event":"status","state":"working","text":"step %s"}\n' $i; sleep "$secs"; done; """
         r"""printf '{"state":"completed","text":"done"}\n'""")

CONFIG = """\
[server]
listen = "127.0.0.1:{port}"
api_key_env = "TERN_API_KEY"
rate_limit_per_sec = 0
max_connections_per_client = 0
{server_extra}
[state]
dir = "{state}"
store = "postgres"
postgres_url = "{pg_url}"
lease_secs = {lease_secs}
{node_id}

[a2a]
enabled = true
default_agent = "echo"
public_url = "{public_url}"
caller_may_approve = {caller_may_approve}
{a2a_extra}
[governance]
approval_timeout_secs = 120

[[agents]]
name = "echo"
kind = "echo"

[[agents]]
name = "slow"
kind = "command"
command = ["sh", "-c", {slow}]
a2a_events = true
timeout_secs = 120

[[agents]]
name = "steps"
kind = "command"
command = ["sh", "-c", {steps}]
a2a_events = true

[[agents]]
name = "writer"
kind = "tool"
tool = "file_write"
"""


def _password_as_variable(url: str) -> tuple[str, str]:
    """The URL with its password as ``${TERN_PG_PASSWORD}`` (what a deployment writes), and the password."""
    parts = urlsplit(url)
    netloc = f"{parts.username}:${{TERN_PG_PASSWORD}}@{parts.hostname}:{parts.port}"
    return urlunsplit(parts._replace(netloc=netloc)), parts.password or ""


class Node:
    """One ``tern serve`` process; ``start`` after ``kill`` comes back as the same node."""

    def __init__(self, root: Path, name: str, config: str, env: dict[str, str], port: int) -> None:
        self.root, self.name, self.port, self.env = root, name, port, env
        self.config = root / "config.toml"
        self.config.write_text(config)
        self.log = root / "serve.log"
        self.process: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def spawn(self) -> None:
        self.starts += 1
        with self.log.open("a") as log:
            log.write(f"--- start {self.starts}\n")
            log.flush()
            self.process = subprocess.Popen([sys.executable, "-m", "runtime", "--config", str(self.config), "serve"],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=ROOT, start_new_session=True)

    def wait_serving(self, timeout: float = 60.0) -> None:
        marker = f"--- start {self.starts}\n"
        deadline = time.monotonic() + timeout
        while "serving on " not in self.log.read_text().rsplit(marker, 1)[-1]:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def start(self, timeout: float = 60.0) -> None:
        self.spawn()
        self.wait_serving(timeout)

    def kill(self) -> None:
        """SIGKILL to the node and everything it started (a container dying), no goodbye."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                pass
        self.kill()  # and whatever it left behind


class Cluster:
    def __init__(self, root: Path, pg_url: str, *, nodes: int = 3, lease_secs: float = 15.0,
                 caller_may_approve: bool = False, named: bool = True, server_extra: str = "", a2a_extra: str = "",
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.proxy_port = free_port()
        self.proxy: Haproxy | None = None
        url, password = _password_as_variable(pg_url)
        self.nodes: list[Node] = []
        for i in range(nodes):
            name, port = f"n{i}", free_port()
            home = root / name
            (home / "state").mkdir(parents=True)
            config = CONFIG.format(port=port, state=home / "state", pg_url=url, lease_secs=lease_secs,
                                   node_id=f'node_id = "{name}"' if named else "",
                                   public_url=self.url, caller_may_approve=str(caller_may_approve).lower(),
                                   slow=json.dumps(SLOW), steps=json.dumps(STEPS), server_extra=server_extra,
                                   a2a_extra=a2a_extra)
            node_env = tern_env(home, TERN_API_KEY=API_KEY, TERN_PG_PASSWORD=password, **(env or {}))
            self.nodes.append(Node(home, name, config, node_env, port))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {API_KEY}"}

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def start(self) -> Cluster:
        for node in self.nodes:  # boot together: migrations race under the advisory lock
            node.spawn()
        for node in self.nodes:
            node.wait_serving()
        self.proxy = Haproxy.start(self.root / "haproxy", [n.port for n in self.nodes], port=self.proxy_port)
        self.proxy.wait_up(len(self.nodes))
        return self

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
