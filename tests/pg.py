"""A real PostgreSQL for the tests: Debian's server, a fresh cluster in a temporary
directory (``initdb``), listening on loopback only, with password authentication.

    server = PgServer.start(tmp)    # or the session fixture ``pg_server`` (tests/conftest.py)
    url = server.create_database()  # postgresql://tern:<password>@127.0.0.1:<port>/t_<random>
    server.restart()                # the database goes away and comes back on the same port
    server.stop()

Debian's ``postgresql`` package provides the binaries (``.ci/run`` installs it). As root
(CI), the cluster runs as the ``postgres`` user the package creates: PostgreSQL refuses
to run as root. A missing server fails in CI and skips elsewhere (``peers.require``).
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

from tests.peers import PeerUnavailable

__all__ = ["PgServer", "pg_bin"]

USER = "tern"


def pg_bin() -> Path:
    """The directory of Debian's PostgreSQL binaries (the newest installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise PeerUnavailable("PostgreSQL: no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)")
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, root: Path, port: int, password: str) -> None:
        self.root, self.port, self.password = root, port, password
        self.data = root / "data"
        self.log = root / "postgres.log"

    @property
    def admin_url(self) -> str:
        return self.url("postgres")

    def url(self, database: str, *, password: str | None = None) -> str:
        return f"postgresql://{USER}:{self.password if password is None else password}@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls, root: Path, *, port: int | None = None) -> PgServer:
        bin_dir = pg_bin()
        root.mkdir(parents=True, exist_ok=True)
        server = cls(root, port or _free_port(), secrets.token_hex(12))
        pwfile = root / "pwfile"
        pwfile.write_text(server.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
            shutil.chown(pwfile, "postgres", "postgres")
        os.chmod(root, 0o700)
        server._as_owner([str(bin_dir / "initdb"), "-D", str(server.data), "-U", USER, "--auth=scram-sha-256",
                          f"--pwfile={pwfile}", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"], timeout=120)
        with open(server.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nlisten_addresses = '127.0.0.1'\nport = {server.port}\nunix_socket_directories = '{root}'\n"
                       "max_connections = 300\nshared_buffers = 64MB\n"
                       # the tests stop and restart the server, never the OS: nothing needs to reach the disk
                       "fsync = off\nfull_page_writes = off\n")
        server._pg_ctl("start")
        return server

    def _as_owner(self, argv: list[str], timeout: float = 60) -> None:
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{argv[-1] if len(argv) < 3 else ' '.join(argv[:6])} failed: "
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")

    def _pg_ctl(self, action: str, *extra: str) -> None:
        argv = [str(pg_bin() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", action, *extra]
        if action != "start":
            argv += ["-m", "fast"]
        self._as_owner(argv, timeout=90)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._pg_ctl("stop")

    def restart(self, down_secs: float = 0.0) -> None:
        """Stop (fast: clients are cut off), wait ``down_secs``, start on the same port."""
        self._pg_ctl("stop")
        time.sleep(down_secs)
        self._pg_ctl("start")

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = name or f"t_{secrets.token_hex(6)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)
