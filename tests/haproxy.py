"""HAProxy from Debian in front of tern nodes, for the scale-out tests and bench:

    proxy = Haproxy.start(root, [port_a, port_b, port_c])   # round robin on 127.0.0.1
    proxy.wait_up(3)          # its health checks see three nodes ready
    proxy.url                 # http://127.0.0.1:<port>
    proxy.stop()

Every answer carries ``X-Tern-Backend: n<i>`` (the node that served it), so a test can
see which node a request landed on. A node that is down is taken out by the health
check (``GET /ready`` every 300 ms, out after 2 failures, back after 1 success); a
request whose connection to a node fails is tried on another (``retry-on
conn-failure``: nothing reached the node, so nothing is done twice). ``.ci/run``
installs the package; a missing binary fails in CI and skips elsewhere.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.peers import PeerUnavailable

__all__ = ["Haproxy", "haproxy_bin"]

CONFIG = """\
global
    maxconn 4000
    stats socket {root}/admin.sock mode 600 level admin
    log stderr format raw local0 err

defaults
    mode http
    log global
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout http-request 10s
    timeout queue 10s
    retries 3
    option redispatch 1
    retry-on conn-failure

frontend tern
    bind 127.0.0.1:{port}
    default_backend nodes

backend nodes
    balance roundrobin
    option httpchk GET {check}
    http-check expect status 200
    http-response set-header X-Tern-Backend %s
    default-server inter 300ms fastinter 300ms downinter 300ms fall 2 rise 1
{servers}
"""


def haproxy_bin() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if not found:
        raise PeerUnavailable("HAProxy: no haproxy binary (apt-get install haproxy)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Haproxy:
    def __init__(self, root: Path, port: int, process: subprocess.Popen) -> None:
        self.root, self.port, self.process = root, port, process

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @classmethod
    def start(cls, root: Path, backends: list[int], *, check: str = "/ready", port: int | None = None) -> Haproxy:
        binary = haproxy_bin()
        root.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        servers = "\n".join(f"    server n{i} 127.0.0.1:{p} check" for i, p in enumerate(backends))
        config = root / "haproxy.cfg"
        config.write_text(CONFIG.format(root=root, port=port, check=check, servers=servers))
        checked = subprocess.run([binary, "-c", "-q", "-f", str(config)], capture_output=True, text=True, timeout=30)
        if checked.returncode != 0:
            raise RuntimeError(f"haproxy refused its config: {checked.stdout}{checked.stderr}")
        log = (root / "haproxy.log").open("w")
        process = subprocess.Popen([binary, "-f", str(config), "-db"], stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT)
        proxy = cls(root, port, process)
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"haproxy exited: {(root / 'haproxy.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return proxy
            except OSError:
                if time.monotonic() > deadline:
                    proxy.stop()
                    raise RuntimeError("haproxy did not listen within 10 s") from None
                time.sleep(0.05)

    def admin(self, command: str) -> str:
        """One command on the admin socket (``show stat``, ``disable server nodes/n0``...)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(self.root / "admin.sock"))
            s.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self) -> dict[str, str]:
        """Each node's state as the health check sees it: ``{"n0": "UP", "n1": "DOWN", ...}``."""
        lines = self.admin("show stat").splitlines()
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","))) for line in lines[1:] if line]
        return {r["svname"]: r["status"].split()[0] for r in rows
                if r["pxname"] == "nodes" and r["svname"] not in ("BACKEND", "FRONTEND")}

    def wait_up(self, count: int, timeout: float = 20.0) -> None:
        """Until ``count`` nodes are UP (raises after ``timeout`` s, naming what it saw)."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            up = sum(s == "UP" for s in states.values())
            if up >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{up} of {count} nodes up after {timeout:g} s: {states}")
            time.sleep(0.1)

    def wait_down(self, name: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.states().get(name) == "UP":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} still up after {timeout:g} s")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
