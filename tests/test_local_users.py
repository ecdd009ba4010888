"""Other local users (hardening items 2 and 13), through real processes.

Item 2: with no API key, only tern's own OS user may use the API. The tests run as
root, so "another user" is a forked child that drops to uid 65534 before it opens its
socket. Item 13: ``tern status``/``events`` and ``tern mcp``'s relay send the key only
to a daemon whose discovery file, state directory, pid and listener are this user's
and whose URL is loopback; a recording loopback listener shows that nothing else gets it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.test_cli import ROOT, tern
from tests.test_daemon import start_daemon

pytestmark = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="needs root to act as another uid")

OTHER_UID = 65534
KEY = "item13-secret-key-0123456789"


def write_config(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "config.toml"
    path.write_text(f'[server]\nlisten = "127.0.0.1:0"\n{extra}[state]\ndir = "{tmp_path / "state"}"\n'
                    '[a2a]\nenabled = true\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    return str(path)




def http_get(url: str, path: str, uid: int | None = None, headers: dict[str, str] | None = None) -> int:
    """The status of GET ``path``, asked over a socket opened by ``uid`` (a forked child
    that drops to it) or by this process."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    request = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n".encode()

    def ask() -> int:
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(request)
            data = b""
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        return int(data.split(b" ", 2)[1])

    if uid is None:
        return ask()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: become the other user, then open the socket
        status = 1
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.write(write, str(ask()).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as pipe:
            answer = pipe.read()
    finally:
        os.waitpid(pid, 0)
    return int(answer)


@pytest.fixture
def keyless(tmp_path):
    config = write_config(tmp_path)
    process, url = start_daemon(config)
    yield config, url
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --- item 2: no key means only tern's own OS user ----------------------------------------


def test_without_a_key_another_local_user_is_refused(keyless):
    config, url = keyless
    for path in ("/api/status", "/api/agents", "/a2a/agents", "/metrics"):
        assert http_get(url, path) == 200, path  # our own uid: no configuration needed
    assert http_get(url, "/api/status", uid=OTHER_UID) == 401
    assert http_get(url, "/metrics", uid=OTHER_UID) == 401
    assert http_get(url, "/api/status", uid=OTHER_UID, headers={"Authorization": "Bearer guess"}) == 401
    status = tern("status", "--config", config)  # tern's own CLI, same user
    assert status.returncode == 0 and "agents: echo" in status.stdout


def test_health_and_agent_cards_stay_public_for_other_users(keyless):
    config, url = keyless
    assert http_get(url, "/health", uid=OTHER_UID) == 200
    assert http_get(url, "/.well-known/agent-card.json", uid=OTHER_UID) == 200


def test_token_fallback_when_the_peer_cannot_be_identified(tmp_path):
    config = write_config(tmp_path)
    process, url = start_daemon(config, {"TERN_PEER_UID": "off"})
    try:
        token_file = tmp_path / "state" / "local-token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        assert http_get(url, "/api/status") == 401  # even our own uid: it cannot be told any more
        assert http_get(url, "/api/status", headers={"Authorization": "Bearer wrong"}) == 401
        assert http_get(url, "/api/status", headers={"Authorization": f"Bearer {token}"}) == 200
        assert http_get(url, "/health") == 200
        status = tern("status", "--config", config)  # tern's own CLI reads the token
        assert status.returncode == 0, status.stderr
        relayed = mcp_relay(config)
        assert '"tools"' in relayed.stdout and "relaying to the tern daemon" in relayed.stderr, relayed.stderr
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)


def mcp_relay(config: str) -> subprocess.CompletedProcess:
    """``tern mcp`` with initialize + tools/list on stdin, then EOF."""
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    process = subprocess.Popen([sys.executable, "-m", "runtime", "--log-level", "info", "mcp", "--config", config],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env)
    out: list[str] = []
    try:
        process.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
        process.stdin.flush()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait for the tools/list answer before EOF
            line = process.stdout.readline()
            if not line:
                break
            out.append(line)
            if '"id":2' in line.replace(" ", ""):
                break
        process.stdin.close()
        process.wait(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, "".join(out), process.stderr.read())


# --- item 13: the key goes only to a daemon.json that is really ours ----------------------


class Recorder(BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def do_GET(self) -> None:
        Recorder.seen.append(self.headers.get("Authorization"))
        body = b'{"status":"ok"}' if self.path == "/health" else json.dumps({
            "version": "x", "uptime_secs": 1, "agents": [], "mcp_servers": [], "a2a_peers": []}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        Recorder.seen.append(self.headers.get("Authorization"))
        self.send_response(404)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    Recorder.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def plant(tmp_path: Path, url: str, pid: int) -> tuple[str, Path]:
    config = write_config(tmp_path, f'api_key = "{KEY}"\n')
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    path = state / "daemon.json"
    path.write_text(json.dumps({"pid": pid, "url": url, "started": time.time(), "version": "x"}))
    path.chmod(0o600)
    return config, path


def assert_key_never_sent(config: str, why: str) -> None:
    for command in ("status", "events"):
        done = tern(command, "--config", config)
        assert done.returncode != 0 and why in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    relayed = mcp_relay(config)  # not trusted: it serves in-process and says why
    assert why in relayed.stderr and '"tools"' in relayed.stdout, relayed.stderr
    assert not any(KEY in (seen or "") for seen in Recorder.seen), Recorder.seen


def test_a_trusted_discovery_file_does_get_the_key(tmp_path, recorder):
    """The control: the recorder does receive the key from a file that passes."""
    config, _ = plant(tmp_path, f"http://127.0.0.1:{recorder}", os.getpid())
    done = tern("status", "--config", config)
    assert done.returncode == 0, done.stderr
    assert f"Bearer {KEY}" in Recorder.seen


def test_non_loopback_url_gets_no_key(tmp_path, recorder):
    # 0.0.0.0 is not a loopback address, though a connect to it lands on this host's
    # loopback listener (so the old code's leak shows up in the recorder, and nothing
    # ever leaves the machine).
    config, _ = plant(tmp_path, f"http://0.0.0.0:{recorder}", os.getpid())
    assert_key_never_sent(config, "is not a loopback http(s) URL")


@pytest.mark.parametrize("target", ["dir", "file"])
def test_group_or_world_writable_discovery_gets_no_key(tmp_path, recorder, target):
    config, path = plant(tmp_path, f"http://127.0.0.1:{recorder}", os.getpid())
    (path.parent if target == "dir" else path).chmod(0o777 if target == "dir" else 0o666)
    assert_key_never_sent(config, "group- or world-writable")


def test_discovery_file_owned_by_another_user_gets_no_key(tmp_path, recorder):
    config, path = plant(tmp_path, f"http://127.0.0.1:{recorder}", os.getpid())
    os.chown(path, OTHER_UID, OTHER_UID)
    assert_key_never_sent(config, f"owned by uid {OTHER_UID}")


def test_discovery_pid_of_another_user_gets_no_key(tmp_path, recorder):
    other = subprocess.Popen(["sleep", "60"], user=OTHER_UID, group=OTHER_UID, extra_groups=[])
    try:
        config, _ = plant(tmp_path, f"http://127.0.0.1:{recorder}", other.pid)
        assert_key_never_sent(config, f"runs as uid {OTHER_UID}")
    finally:
        other.kill()
        other.wait()


def test_the_daemon_refuses_a_world_writable_state_dir(tmp_path):
    config = write_config(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state").chmod(0o777)
    done = tern("serve", "--config", config)
    assert done.returncode == 2 and "group- or world-writable" in done.stderr, done.stderr


@pytest.mark.parametrize("mode", [0o644, 0o620])
def test_a_local_token_others_could_read_or_write_is_replaced(tmp_path, mode):
    from types import SimpleNamespace

    from runtime.host.discovery import ensure_local_token, read_local_token

    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = SimpleNamespace(state=SimpleNamespace(dir=str(state)))
    token = ensure_local_token(config)
    assert read_local_token(config) == token and (state / "local-token").stat().st_mode & 0o777 == 0o600
    assert ensure_local_token(config) == token  # reused across restarts
    (state / "local-token").chmod(mode)
    assert read_local_token(config) == ""  # tern's clients will not send it
    fresh = ensure_local_token(config)
    assert fresh != token and (state / "local-token").stat().st_mode & 0o777 == 0o600


# --- the system service's operators (#34): a token file their group may read ---------------


def as_operator(url: str, token_file: Path, groups: list[int]) -> str:
    """What a process of uid 65534 in ``groups`` gets: it reads the token file as that
    user and asks ``GET /api/approvals`` with it ("unreadable" when it may not read it)."""
    import encodings.idna  # noqa: F401  (the child, as another user, may not read the stdlib's files)

    host, port = url.removeprefix("http://").rsplit(":", 1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.setgroups(groups)
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            try:
                token = token_file.read_text().strip()
            except PermissionError:
                os.write(write, b"unreadable")
            else:
                with socket.create_connection((host, int(port)), timeout=10) as sock:
                    sock.sendall(f"GET /api/approvals HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\n"
                                 "Connection: close\r\n\r\n".encode())
                    data = b""
                    while b"\r\n" not in data and (chunk := sock.recv(4096)):
                        data += chunk
                os.write(write, data.split(b" ", 2)[1])
            status = 0
        except BaseException as exc:  # said to the parent, which fails with it
            os.write(write, repr(exc).encode()[:500])
        finally:
            os._exit(status)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as pipe:
            return pipe.read().decode()
    finally:
        os.waitpid(pid, 0)


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_an_operator_in_the_group_reaches_the_service_and_no_one_else_does(tmp_path, keyed, monkeypatch):
    import grp
    import tempfile

    from runtime.config import Config
    from runtime.host.discovery import named_daemon

    group = grp.getgrnam("users").gr_gid
    run_dir = Path(tempfile.mkdtemp(prefix="tern-operators-"))  # outside root's 0700 pytest directory
    os.chmod(run_dir, 0o755)
    token_file = run_dir / "operator-token"
    extra = f'operator_group = "users"\noperator_token_file = "{token_file}"\n'
    if keyed:
        extra += 'api_key_env = "ITEM34_KEY"\n'
        monkeypatch.setenv("ITEM34_KEY", KEY)
    config = write_config(tmp_path, extra)
    process, url = start_daemon(config, **({"env_extra": {"ITEM34_KEY": KEY}} if keyed else {}))
    try:
        info = token_file.stat()
        assert (info.st_mode & 0o777, info.st_gid) == (0o640, group)
        assert as_operator(url, token_file, [group]) == "200"  # in the group: the owner's access
        assert as_operator(url, token_file, []) == "unreadable"  # the same uid outside it cannot read it
        assert http_get(url, "/api/approvals", OTHER_UID, {"Authorization": "Bearer " + "x" * 43}) == 401
        # The CLI's way to it: --url / TERN_URL with TERN_TOKEN_FILE sends that token.
        monkeypatch.setenv("TERN_URL", url)
        monkeypatch.setenv("TERN_TOKEN_FILE", str(token_file))
        monkeypatch.delenv("TERN_API_KEY", raising=False)
        _, headers = named_daemon(None, Config())  # an operator's own (default) config holds no key
        assert headers == {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=15)
        shutil.rmtree(run_dir, ignore_errors=True)


def test_an_operator_group_that_cannot_be_used_is_one_line(tmp_path):
    config = write_config(tmp_path, f'operator_group = "no-such-group-34"\noperator_token_file = "{tmp_path / "t"}"\n')
    done = tern("serve", "--config", config)
    assert done.returncode == 2 and "no group named 'no-such-group-34'" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    half = write_config(tmp_path, 'operator_group = "users"\n')
    checked = tern("config", "check", half)
    assert checked.returncode == 2 and "operator_group and operator_token_file go together" in checked.stderr
