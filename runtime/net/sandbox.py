"""The sandbox a program tern starts runs in: bubblewrap when it is installed and works,
else Landlock (``runtime.net.landlock``, nothing to install on Linux 5.13+), else none.
Used by ``shell_exec`` (``runtime.kernel.shell_sandbox``) and stdio MCP servers
(``runtime.mcp.client.stdio``); each says what goes in its ``Box``.

Inside either: the system directories (``SYSTEM_DIRS``) and the box's ``read`` paths read
and execute, its ``write`` paths read-write, a private temporary directory, the harmless
devices (``DEV_FILES``), no capabilities; no network unless the box allows it. Not
visible or not readable: everything else (home directories, tern's state directory with
other agents' workspaces and the audit log, ``/var``, ``/run``, ``/proc`` under Landlock).

The two differ (docs/threat-model.md has the table): bubblewrap builds new mount, PID,
IPC, UTS and network namespaces (so the rest of the file system is not there at all,
``/tmp`` is a tmpfs and the network a loopback of its own) and needs user namespaces;
Landlock leaves the file system in place and refuses access to what is not allowed
(``EACCES``), denies TCP with its own rights (ABI 4) and every socket with a seccomp
filter, and needs no namespace, so it works under systemd's ``RestrictNamespaces=yes``
and in a container's default seccomp profile. Its temporary directory is a fresh
directory per run (``TMPDIR``), removed after it; a program that writes to ``/tmp`` by
name is refused.

Whether each works here is probed once per process (``probe``): bwrap builds a box and
runs ``bwrap --version`` in it; the Landlock launcher applies its whole policy and exits.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

__all__ = ["SYSTEM_DIRS", "DEV_FILES", "KINDS", "PROBE_TIMEOUT_SECS", "Box", "Wrapped", "probe", "choose",
           "wrap", "describe", "bwrap_args", "landlock_abi", "bwrap_path"]

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEV_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
KINDS = ("bubblewrap", "landlock")
PROBE_TIMEOUT_SECS = 10.0
_REASON_CAP = 300  # characters of a failing probe's stderr kept for the reason


@dataclass(frozen=True)
class Box:
    """What a program may reach: ``read`` (besides ``SYSTEM_DIRS``), ``write``, the network.
    ``own_home``: HOME is the private temporary directory under Landlock (tern's own
    home is there but refused, and ``git`` stops at an unreadable ``~/.gitconfig``
    where under bubblewrap it finds none)."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    network: bool = False
    own_home: bool = False


@dataclass
class Wrapped:
    """What to spawn, and the temporary directory to remove when it has ended ("" for none)."""

    argv: list[str]
    executable: str
    env: dict[str, str]
    tmp: str = ""
    kind: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def cleanup(self) -> None:
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _under(path: str, roots: list[str]) -> bool:
    return any(os.path.commonpath([root, path]) == root for root in roots)


def bwrap_path(env: dict[str, str] | None = None) -> str | None:
    """bwrap on the absolute directories of PATH, or None."""
    source = os.environ if env is None else env
    path = os.pathsep.join(d for d in source.get("PATH", "").split(os.pathsep) if os.path.isabs(d))
    return shutil.which("bwrap", path=path)


def bwrap_args(box: Box, *, cwd: str) -> list[str]:
    """bwrap's options (before ``--``) for ``box``, the program started in ``cwd``."""
    args = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--cap-drop", "ALL", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    if not box.network:
        args.insert(0, "--unshare-net")
    bound: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
            bound.append(directory)
    for path in [os.path.realpath(p) for p in box.read]:
        if not _under(path, bound):
            args += ["--ro-bind-try", path, path]
            bound.append(path)
    for path in [os.path.realpath(p) for p in box.write]:
        args += ["--bind-try", path, path]
    if box.network:
        for name in ("/etc/resolv.conf",):  # often a link into /run: the real file
            real = os.path.realpath(name)
            if real != name and os.path.exists(real):
                args += ["--ro-bind-try", real, real]
    return args + ["--chdir", cwd]


def landlock_policy(box: Box, *, tmp: str) -> dict[str, object]:
    """The launcher's policy for ``box`` (``runtime.net.landlock``)."""
    read = list(SYSTEM_DIRS) + [os.path.realpath(p) for p in box.read]
    write = [os.path.realpath(p) for p in box.write] + ([tmp] if tmp else [])
    return {"read": read, "write": write, "dev": list(DEV_FILES), "net": box.network}


@functools.cache
def _launcher_source() -> str:
    import importlib.resources  # here, not at import: only a sandboxed call needs it (start-up stays lean)

    return importlib.resources.files("runtime.net").joinpath("landlock.py").read_text(encoding="utf-8")


def landlock_argv(policy: dict[str, object], rest: list[str]) -> list[str]:
    """The command that applies ``policy`` and then runs ``rest`` (executable, argv0, args...)."""
    return [sys.executable, "-I", "-S", "-B", "-c", _launcher_source(), json.dumps(policy), *rest]


def landlock_abi() -> int:
    """This kernel's Landlock ABI (0: none), asked in this process (creating no ruleset)."""
    if not sys.platform.startswith("linux"):
        return 0
    from runtime.net import landlock

    try:
        return landlock.abi()
    except (OSError, AttributeError):
        return 0


@functools.cache
def probe(kind: str) -> str | None:
    """None when sandbox ``kind`` works on this host, else why not (asked once per process)."""
    if kind == "bubblewrap":
        bwrap = bwrap_path()
        if bwrap is None:
            return "bwrap (bubblewrap) is not on PATH"
        command = [bwrap, *bwrap_args(Box(read=(os.path.dirname(os.path.realpath(bwrap)),)), cwd="/"),
                   "--", bwrap, "--version"]
    else:
        if not sys.platform.startswith("linux"):
            return "Landlock is Linux only"
        version = landlock_abi()
        if version < 1:
            return "this kernel has no Landlock (Linux 5.13 or later, with lsm=landlock)"
        from runtime.net import landlock

        if version < 4 and os.uname().machine not in landlock.SECCOMP_ARCH:
            return f"Landlock ABI {version} cannot deny the network (ABI 4 can) and seccomp is not set up here"
        command = landlock_argv(landlock_policy(Box(), tmp=""), ["--probe"])
    try:
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_SECS,
                              env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, check=False)
    except subprocess.TimeoutExpired:
        return f"the {kind} probe did not answer within {PROBE_TIMEOUT_SECS:g} s"
    except OSError as error:
        return f"{command[0]} cannot start: {error.strerror or error}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", errors="replace").strip().splitlines()
        first = said[0][:_REASON_CAP] if said else "-"
        return f"{kind} cannot build a sandbox here (exit code {done.returncode}: {first})"
    return None


def choose(mode: str) -> tuple[str | None, str]:
    """The sandbox ``mode`` gives on this host: (kind, "") or (None, why there is none).
    ``"auto"``: bubblewrap when it works, else Landlock; ``"off"``: (None, "")."""
    if mode == "off":
        return None, ""
    kinds = KINDS if mode == "auto" else (mode,)
    reasons = []
    for kind in kinds:
        reason = probe(kind)
        if reason is None:
            return kind, ""
        reasons.append(reason)
    return None, "; ".join(reasons)


def wrap(kind: str, box: Box, argv: list[str], executable: str, *, cwd: str, env: dict[str, str]) -> Wrapped:
    """The argv, executable and environment that run ``executable`` (``argv``) in ``box``."""
    inner = dict(env)
    dirs = sorted({os.path.dirname(executable), os.path.dirname(os.path.realpath(executable))})
    box = Box(read=(*box.read, *dirs), write=box.write, network=box.network, own_home=box.own_home)
    if kind == "bubblewrap":
        bwrap = bwrap_path(env) or bwrap_path()
        if bwrap is None:
            raise OSError("bwrap (bubblewrap) is not on PATH")
        for name in ("TMPDIR", "TMP", "TEMP"):
            if name in inner:
                inner[name] = "/tmp"  # the real one is not visible inside
        return Wrapped([bwrap, *bwrap_args(box, cwd=cwd), "--", executable, *argv[1:]], bwrap, inner,
                       kind=kind)
    import tempfile  # as above: only a sandboxed call needs it

    tmp = tempfile.mkdtemp(prefix="tern-sandbox-")
    for name in ("TMPDIR", "TMP", "TEMP") + (("HOME",) if box.own_home else ()):
        inner[name] = tmp
    policy = landlock_policy(box, tmp=tmp)
    policy["env"] = inner
    command = landlock_argv(policy, [executable, *argv])
    return Wrapped(command, sys.executable, inner, tmp=tmp, kind=kind)


def describe(kind: str | None, *, extra: tuple[str, ...] = (), what: str = "the workspace") -> str:
    """What sandbox ``kind`` contains, in a sentence or two (for ``tern config check``)."""
    paths = " ".join([d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)] + list(extra))
    if kind == "bubblewrap":
        return (f"bubblewrap: {paths} and the program's directory read-only, {what} read-write, a private /tmp, "
                "/dev and /proc of its own; no network (a namespace with its own loopback), own PID, IPC and UTS "
                "namespaces, no capabilities")
    if kind == "landlock":
        from runtime.net import landlock

        version = landlock_abi()
        net = ("TCP bind and connect denied by Landlock, " if version >= 4 else "") + (
            "socket() refused by seccomp" if os.uname().machine in landlock.SECCOMP_ARCH
            else "no seccomp filter on this architecture")
        scoped = "; signals and abstract UNIX sockets scoped to the sandbox" if version >= 6 else ""
        return (f"Landlock ABI {version}: {paths} and the program's directory read and execute, {what} "
                f"read-write, a private temporary directory (TMPDIR), /dev/null and the random devices; no "
                f"network ({net}){scoped}; no capabilities, no new privileges")
    return "none"
