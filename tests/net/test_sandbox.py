"""``runtime.net.sandbox`` and its Landlock launcher (``runtime.net.landlock``), run for
real: what the launcher allows and refuses, the network switch, capabilities as root,
and the launcher's source read from the pyz."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from runtime.net import landlock, sandbox

pytestmark = pytest.mark.skipif(sandbox.probe("landlock") is not None,
                                reason=f"no Landlock here: {sandbox.probe('landlock')}")

PY = "/usr/bin/python3"  # a system interpreter: under /usr, so readable inside


def run_boxed(box: sandbox.Box, code: str, tmp_path) -> subprocess.CompletedProcess[str]:
    if not os.path.exists(PY):
        pytest.skip(f"{PY} is not installed")
    wrapped = sandbox.wrap("landlock", box, [PY, "-c", code], PY, cwd=str(tmp_path), env={"PATH": "/usr/bin:/bin"})
    try:
        return subprocess.run(wrapped.argv, executable=wrapped.executable, env=wrapped.env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
    finally:
        wrapped.cleanup()
        assert not os.path.exists(wrapped.tmp)  # the private temporary directory goes with the run


PROBE = r"""
import os, socket, tempfile
def attempt(name, fn):
    try:
        fn()
        print(name, "ok")
    except OSError as error:
        print(name, error.errno)
attempt("tcp", lambda: socket.create_connection(("127.0.0.1", PORT), timeout=5).close())
attempt("udp", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close())
attempt("unix", lambda: socket.socket(socket.AF_UNIX).close())
attempt("pair", lambda: socket.socketpair()[0].close())
attempt("tmp", lambda: tempfile.mkstemp())
attempt("proc", lambda: open("/proc/1/environ", "rb").read())
attempt("kill", lambda: os.kill(os.getppid(), 0))
"""


@pytest.mark.parametrize("network", [False, True])
def test_the_launcher_contains_a_program(tmp_path, network):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        done = run_boxed(sandbox.Box(write=(str(tmp_path),), network=network),
                         PROBE.replace("PORT", str(listener.getsockname()[1])), tmp_path)
    finally:
        listener.close()
    said = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert done.returncode == 0, done.stderr
    assert said["tcp"] == ("ok" if network else "13") and said["udp"] == ("ok" if network else "13")
    assert said["unix"] == "13" and said["pair"] == "ok"  # /run's daemons stay out of reach; pipes do not
    assert said["tmp"] == "ok" and said["proc"] == "13" and said["kill"] == "1"  # EPERM: signals are scoped


def test_root_inside_has_no_capabilities(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("tern runs as root only in a container: this host runs the tests as another user")
    done = run_boxed(sandbox.Box(), "print(open('/proc/self/status').read())", tmp_path)
    assert done.returncode != 0 and "Permission denied" in done.stderr  # /proc is not readable either
    status = run_boxed(sandbox.Box(read=("/proc",)), "print(open('/proc/self/status').read())", tmp_path)
    caps = {line.split(":")[0]: int(line.split()[1], 16) for line in status.stdout.splitlines()
            if line.startswith(("CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"))}
    assert caps and not any(caps.values()), caps
    make_disk = "import os; os.mknod('disk', 0o600 | 0o60000, os.makedev(8, 0))"  # a block device: the host's disk
    mknod = run_boxed(sandbox.Box(write=(str(tmp_path),)), make_disk, tmp_path)
    assert mknod.returncode != 0 and not (tmp_path / "disk").exists()


def test_a_failing_step_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    policy = json.dumps({"read": ["/usr"], "write": [], "dev": [], "net": False, "env": {}})
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", sandbox._launcher_source(), policy,
                           "/nonexistent/program", "x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 127 and "cannot run /nonexistent/program" in done.stderr and not marker.exists()
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", sandbox._launcher_source(), "not json", "x"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == landlock.EXIT_REFUSED and "tern sandbox (landlock)" in done.stderr


def test_the_seccomp_filter_per_architecture():
    for machine in ("x86_64", "aarch64"):
        for net in (False, True):
            program = landlock.seccomp_program(machine, net)
            assert program and len(program) % 8 == 0
    assert landlock.seccomp_program("riscv64", False) is None  # unknown: no filter (the probe then needs ABI 4)
    assert sandbox.describe("landlock").startswith(f"Landlock ABI {sandbox.landlock_abi()}")


def test_the_pyz_runs_the_launcher_from_its_own_source(pyz, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cr3t")
    config = tmp_path / "config.toml"
    config.write_text(f'[state]\ndir = "{tmp_path / "state"}"\n[tools]\nshell_exec_enabled = true\n'
                      'shell_allowlist = ["cat"]\nshell_sandbox = "landlock"\n'
                      '[[governance.rules]]\ntool = "shell_exec"\ndecision = "allow"\n'
                      '[[agents]]\nname = "sh"\nkind = "tool"\ntool = "shell_exec"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["HOME"] = str(tmp_path)

    def run(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(pyz), "--config", str(config), "run", "--standalone", "sh",
                               json.dumps({"argv": ["cat", path]})], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)

    inside = run("/etc/hostname" if os.path.exists("/etc/hostname") else "/etc/passwd")
    assert inside.returncode == 0, inside.stderr
    outside = run(str(secret))
    assert outside.returncode != 0 and "s3cr3t" not in outside.stdout + outside.stderr
    assert "Permission denied" in outside.stdout + outside.stderr
