"""``deploy/``: the systemd unit (``systemd-analyze verify`` where it exists, its keys
always), the launchd plist (``plistlib``), the Dockerfile (its structure; docker itself
does not run here). Each file's layout (environment, paths, health check) is then run
for real: a ``tern serve`` with the environment the file gives it, in a temporary root."""

from __future__ import annotations

import json
import os
import plistlib
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.test_cli import ROOT

DEPLOY = ROOT / "deploy"


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """A systemd unit as {section: {key: [values, in order]}} (keys may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None and "=" in line, f"not a unit line: {raw!r}"
        key, value = line.split("=", 1)
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", key), key
        current.setdefault(key, []).append(value)
    return sections


def _serve(env_extra: dict[str, str], args: list[str], tmp_path: Path) -> tuple[subprocess.Popen, str]:
    """``tern serve`` with ``args``, no TERN_* or XDG_* variables of ours but ``env_extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERN_", "XDG_"))}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"), **env_extra)
    process = subprocess.Popen([sys.executable, "-m", "runtime", *args], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                               cwd=tmp_path)
    deadline = time.monotonic() + 30
    line = ""
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if "serving on " in line:
            return process, line.split("serving on ", 1)[1].strip()
        if not line and process.poll() is not None:
            break
    process.kill()
    raise AssertionError(f"the daemon did not start: {line!r}")


def _stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=15) == 0


# --- systemd ---------------------------------------------------------------------------


def test_systemd_unit_is_hardened():
    unit = _unit(DEPLOY / "tern.service")
    service = {key: values[-1] for key, values in unit["Service"].items()}
    for key, value in {"DynamicUser": "yes", "ProtectSystem": "strict", "NoNewPrivileges": "yes",
                       "StateDirectory": "tern", "ProtectHome": "yes", "PrivateTmp": "yes",
                       "CapabilityBoundingSet": "", "KillSignal": "SIGTERM"}.items():
        assert service.get(key) == value, key
    argv = shlex.split(service["ExecStart"])
    assert argv[0].startswith("/") and argv[-1] == "serve"  # systemd wants an absolute program
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_systemd_analyze_verifies_the_unit():
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: the unit's keys are checked by the test above")
    done = subprocess.run(["systemd-analyze", "verify", str(DEPLOY / "tern.service")], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "tern.service" not in done.stderr, done.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", str(DEPLOY / "tern.service")],
                              capture_output=True, text=True, timeout=60)
    score = re.search(r"Overall exposure level for tern\.service: ([\d.]+)", security.stdout)
    if score is None:
        pytest.skip(f"this systemd-analyze cannot score a unit offline: {security.stderr.strip()[:200]}")
    assert float(score.group(1)) <= 2.5, security.stdout[-2000:]


def _allowed_syscalls(filters: list[str]) -> set[str]:
    """The system calls a unit's SystemCallFilter= lines allow (groups expanded by systemd-analyze)."""
    allowed: set[str] = set()
    names = [name for line in filters for name in line.split()]
    assert not any(name.startswith("~") for name in names), "a deny list: this test reads allow lists"
    seen: set[str] = set()
    while names:
        name = names.pop()
        if not name.startswith("@"):
            allowed.add(name)
        elif name not in seen:  # a group: its lines are calls and groups, after its "# description"
            seen.add(name)
            listed = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True, text=True,
                                    timeout=60, check=True).stdout
            names += [line.strip() for line in listed.splitlines()[1:]
                      if re.fullmatch(r"@?[a-z0-9_-]+", line.strip())]
    return allowed


def test_the_unit_allows_the_landlock_sandbox():
    """RestrictNamespaces=yes stops bubblewrap; Landlock needs only its three system calls,
    which SystemCallFilter must allow (a call it leaves out kills tern with SIGSYS)."""
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed: it expands the filter's groups")
    service = _unit(DEPLOY / "tern.service")["Service"]
    assert service["RestrictNamespaces"] == ["yes"] and service["NoNewPrivileges"] == ["yes"]
    allowed = _allowed_syscalls(service["SystemCallFilter"])
    assert {"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self", "prctl", "execve"} <= allowed
    assert "unshare" not in allowed or service["RestrictNamespaces"] == ["yes"]


# The unit's hardening, applied to a child as systemd would (x86_64 numbers): no new
# privileges, no capabilities (CapabilityBoundingSet=), and RestrictNamespaces=yes as a
# seccomp filter that refuses unshare, setns, clone3 and a clone with any CLONE_NEW* flag.
_HARDENED = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in range(64):
    libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
def ins(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)
EPERM, ALLOW = 0x00050001, 0x7FFF0000
prog = [ins(0x20, 0),
        ins(0x15, 272, 0, 1), ins(0x06, EPERM),  # unshare
        ins(0x15, 308, 0, 1), ins(0x06, EPERM),  # setns
        ins(0x15, 435, 0, 1), ins(0x06, 0x00050026),  # clone3: ENOSYS, so libc falls back to clone
        ins(0x15, 56, 0, 3), ins(0x20, 16), ins(0x45, 0x7E020000, 0, 1), ins(0x06, EPERM),  # clone(CLONE_NEW*)
        ins(0x06, ALLOW)]
code = b"".join(prog)
buf = ctypes.create_string_buffer(code)
fprog = struct.pack("=HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
assert libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0, ctypes.get_errno()
os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], *sys.argv[2:]])
"""

_INSIDE = r"""
import subprocess, sys
from runtime.net import sandbox
assert sandbox.probe("bubblewrap") is not None, "bubblewrap should not work under RestrictNamespaces=yes"
kind, reason = sandbox.choose("auto")
print("chose", kind, reason)
boxed = sandbox.wrap(kind, sandbox.Box(write=(sys.argv[2],)), ["cat", sys.argv[1]], "/bin/cat", cwd=sys.argv[2],
                     env={"PATH": "/usr/bin:/bin"})
done = subprocess.run(boxed.argv, executable=boxed.executable, env=boxed.env, capture_output=True, text=True)
boxed.cleanup()
print("exit", done.returncode, done.stdout.strip(), done.stderr.strip())
"""


def test_under_the_units_hardening_auto_is_landlock_and_contains(tmp_path):
    if os.uname().machine != "x86_64" or not sys.platform.startswith("linux"):
        pytest.skip("the hardening filter here is written with x86_64 system call numbers")
    from runtime.net import sandbox

    if sandbox.probe("landlock") is not None:
        pytest.skip(sandbox.probe("landlock"))
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    done = subprocess.run([sys.executable, "-c", _HARDENED, _INSIDE, str(secret), str(workspace)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert "chose landlock" in done.stdout and "exit 1" in done.stdout and "Permission denied" in done.stdout
    assert "s3cr3t" not in done.stdout


def test_systemd_layout_runs(tmp_path):
    """The unit's environment puts the state in its StateDirectory and the native module
    cache in its CacheDirectory: run tern with it, under a temporary root."""
    unit = _unit(DEPLOY / "tern.service")["Service"]
    root = tmp_path / "root"
    env = dict(value.split("=", 1) for value in unit["Environment"])
    assert env["XDG_STATE_HOME"] == "/var/lib" and env["TERN_CACHE_DIR"] == "/var/cache/tern"
    env = {k: str(root) + v if v.startswith("/") else v for k, v in env.items()}
    config = root / "etc" / "tern" / "config.toml"  # ExecStart's --config
    assert "--config /etc/tern/config.toml serve" in unit["ExecStart"][0]
    config.parent.mkdir(parents=True)
    config.write_text('[server]\nlisten = "127.0.0.1:0"\n[[agents]]\nname = "echo"\nkind = "echo"\n')
    process, url = _serve(env, ["--config", str(config), "serve"], tmp_path)
    try:
        state = root / "var" / "lib" / "tern"  # StateDirectory=tern
        assert json.loads((state / "daemon.json").read_text())["url"] == url
        assert (state / "audit.key").exists()
        assert httpx.get(url + "/health", timeout=10).json() == {"status": "ok"}
    finally:
        _stop(process)


# --- launchd ---------------------------------------------------------------------------


def test_launchd_plist_parses():
    with open(DEPLOY / "dev.tern.serve.plist", "rb") as handle:
        plist = plistlib.load(handle)
    assert plist["Label"] == "dev.tern.serve" == (DEPLOY / "dev.tern.serve.plist").stem
    arguments = plist["ProgramArguments"]
    assert arguments[0].startswith("/") and arguments[1].endswith("tern.pyz") and arguments[-1] == "serve"
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["Umask"] == 0o77


# --- Docker ----------------------------------------------------------------------------


def _dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined, comments dropped."""
    text = (DEPLOY / "Dockerfile").read_text()
    instructions = []
    for line in re.sub(r"\\\n\s*", " ", text).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            instructions.append((word.upper(), rest.strip()))
    return instructions


def test_dockerfile_structure():
    instructions = _dockerfile()
    kinds = [kind for kind, _ in instructions]
    assert kinds[0] == "FROM" and re.fullmatch(r"python:3\.\d+-slim", instructions[0][1])
    copies = [rest for kind, rest in instructions if kind in ("COPY", "ADD")]
    assert copies == ["--chmod=0444 dist/tern.pyz /opt/tern/tern.pyz"]  # the pyz is the only application file
    users = [rest for kind, rest in instructions if kind == "USER"]
    assert users and users[-1] not in ("root", "0") and kinds.index("USER") < kinds.index("ENTRYPOINT")
    assert json.loads(dict(instructions)["ENTRYPOINT"]) == ["python3", "/opt/tern/tern.pyz"]
    assert json.loads(dict(instructions)["CMD"]) == ["serve", "--listen", "0.0.0.0:50051"]
    assert "HEALTHCHECK" in kinds and "/health" in dict(instructions)["HEALTHCHECK"]


def test_the_image_carries_the_postgres_driver_as_the_lock_pins_it():
    """One pip install, as root before USER, of exactly the psycopg the tests run with
    (.ci/requirements.lock), which pyproject's ``postgres`` extra allows."""
    instructions = _dockerfile()
    kinds = [kind for kind, _ in instructions]
    installs = [i for i, (kind, rest) in enumerate(instructions) if kind == "RUN" and "pip install" in rest]
    assert len(installs) == 1 and installs[0] < kinds.index("USER")
    wanted = dict(arg.split("==") for arg in shlex.split(instructions[installs[0]][1]) if "==" in arg)
    lock = dict(re.findall(r"^([a-z0-9-]+)==([^\s;]+)", (ROOT / ".ci" / "requirements.lock").read_text(), re.M))
    assert wanted == {"psycopg": lock["psycopg"], "psycopg-binary": lock["psycopg-binary"]}
    extra = re.search(r'^postgres = \["psycopg\[binary\]>=(\d+)\.(\d+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra and tuple(map(int, wanted["psycopg"].split(".")[:2])) >= tuple(map(int, extra.groups()))


def _healthcheck() -> list[str]:
    check = dict(_dockerfile())["HEALTHCHECK"]
    return json.loads(check[check.index("CMD") + 3:].strip())


def test_docker_layout_and_healthcheck_against_a_real_daemon(tmp_path):
    """The image's ENV (config found at /etc/tern/config.toml, state in /var/lib/tern)
    and its HEALTHCHECK command, run against a daemon started as CMD starts it."""
    instructions = _dockerfile()
    env = dict(shlex.split(rest)[i].split("=", 1) for kind, rest in instructions if kind == "ENV"
               for i in range(len(shlex.split(rest))))
    root = tmp_path / "root"
    env = {k: str(root) + v if v.startswith("/") else v for k, v in env.items()}
    config = Path(env["XDG_CONFIG_HOME"]) / "tern" / "config.toml"  # what `-v ...:/etc/tern/config.toml` mounts
    config.parent.mkdir(parents=True)
    config.write_text('[[agents]]\nname = "mounted"\nkind = "echo"\n')
    cmd = json.loads(dict(instructions)["CMD"])
    process, url = _serve(env, [*cmd[:-1], "127.0.0.1:0"], tmp_path)  # 0.0.0.0:50051 may be taken here
    port = url.rsplit(":", 1)[1]
    check = [part.replace("50051", port) for part in _healthcheck()]
    check[0] = sys.executable
    try:
        assert (root / "var" / "lib" / "tern" / "daemon.json").exists()
        agents = httpx.get(url + "/api/agents", timeout=10).json()["agents"]
        assert [a["name"] for a in agents] == ["mounted"]
        assert subprocess.run(check, capture_output=True, timeout=30).returncode == 0
    finally:
        _stop(process)
    assert subprocess.run(check, capture_output=True, timeout=30).returncode != 0  # and unhealthy once it is gone



@pytest.mark.pyz
@pytest.mark.slow
def test_the_image_steps_with_the_real_pyz(tmp_path):
    """The Dockerfile's steps with a freshly built pyz, under a temporary root: its RUN
    extracts the native module into TERN_CACHE_DIR; then, with that cache read-only (as
    in a container started with --read-only), ENTRYPOINT + CMD serve and HEALTHCHECK passes."""
    pyz = tmp_path / "opt" / "tern" / "tern.pyz"
    build = subprocess.run([sys.executable, str(ROOT / "build_pyz.py"), "--out", str(pyz)], cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr
    instructions = _dockerfile()
    env = dict(shlex.split(rest)[i].split("=", 1) for kind, rest in instructions if kind == "ENV"
               for i in range(len(shlex.split(rest))))
    env = {k: str(tmp_path) + v if v.startswith("/") else v for k, v in env.items()}
    cache = Path(env["TERN_CACHE_DIR"])
    cache.mkdir(parents=True, mode=0o700)  # the image's `install -d -m 0700`
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TERN_", "XDG_", "PYTHON"))}
    base.update(env, HOME=str(tmp_path))
    run = [rest for kind, rest in instructions if kind == "RUN"][-1]
    argv = shlex.split(run.split(">", 1)[0].replace("/opt/tern/tern.pyz", str(pyz)))
    assert argv[:2] == ["python3", str(pyz)]
    warmed = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, env=base, timeout=120)
    assert warmed.returncode == 0, warmed.stderr
    assert os.listdir(cache / "native")  # the native module is in the image now
    for folder, dirs, _ in os.walk(cache):
        os.chmod(folder, 0o500)  # read-only from here on
    entry = json.loads(dict(instructions)["ENTRYPOINT"])
    cmd = json.loads(dict(instructions)["CMD"])
    process = subprocess.Popen([sys.executable, str(pyz), *cmd[:-1], "127.0.0.1:0"], stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=base, cwd=tmp_path)
    assert entry[1] == "/opt/tern/tern.pyz"
    try:
        line = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "serving on " not in line:
            line = process.stderr.readline()
            if not line:
                break
        assert "serving on " in line, line + process.stderr.read()
        port = line.rsplit(":", 1)[1].strip()
        check = [part.replace("50051", port) for part in _healthcheck()]
        assert subprocess.run([sys.executable, *check[1:]], capture_output=True, timeout=30).returncode == 0
    finally:
        for folder, dirs, _ in os.walk(cache):
            os.chmod(folder, 0o700)
        _stop(process)


@pytest.mark.pyz
@pytest.mark.slow
def test_the_pyz_runs_the_postgresql_store_with_the_images_driver(pyz, pg_url, tmp_path):
    """The image's arrangement for several replicas: the single file, with psycopg in the
    interpreter's site-packages (the image's pip install; here the test venv's, same pin)
    and the database URL from the environment, as the Kubernetes Secret gives it."""
    config = tmp_path / "config.toml"
    config.write_text('[state]\nstore = "postgres"\npostgres_url = "${TERN_DATABASE_URL}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERN_", "XDG_", "PYTHON"))}
    env.update(HOME=str(tmp_path), TERN_CACHE_DIR=str(tmp_path / "cache"), TERN_DATABASE_URL=pg_url)
    process = subprocess.Popen([sys.executable, str(pyz), "--config", str(config), "serve", "--listen", "127.0.0.1:0"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=env, cwd=tmp_path)
    try:
        lines = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any("serving on " in line for line in lines):
            lines.append(process.stderr.readline())
            if not lines[-1]:
                break
        assert any("serving on " in line for line in lines), "".join(lines) + process.stderr.read()
        url = lines[-1].split("serving on ", 1)[1].strip()
        assert httpx.get(url + "/ready", timeout=10).json() == {"status": "ready"}
        import psycopg

        with psycopg.connect(pg_url) as conn:  # the pyz's own connections, seen by the server
            seen = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tern' "
                                "AND datname = current_database()").fetchone()[0]
        assert seen >= 1
    finally:
        _stop(process)
