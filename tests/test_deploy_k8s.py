"""``deploy/k8s/``: the manifests against the Kubernetes JSON schemas (``kubernetes-validate``
from PyPI, offline, strict: an unknown field fails), then what a schema cannot see: the
probes' paths are tern's public routes, the ConfigMap's config passes ``tern config
check``, every Secret key and ConfigMap a pod names exists, the Service and the PDB select
the Deployment's pods, the pods run as the image's user on a read-only root, and the
memory is sized from the figure the comment gives. Then the layout runs for real: two
nodes on one PostgreSQL, as the Deployment starts them (the init container's key copy,
the emptyDir's mode, the Secret's variables, the image's command), and the MCP sidecar
with the official MCP SDK as the agent next to it. No cluster and no docker here: the
containers' processes run on this machine under a temporary root."""

from __future__ import annotations

import base64
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests import peers
from tests.test_cli import ROOT
from tests.test_deploy import _dockerfile, _serve, _stop

K8S = ROOT / "deploy" / "k8s"
MANIFESTS = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
EXAMPLES = ["mcp-sidecar.yaml"]  # not in kustomization.yaml: copied into another app's manifests
KUBERNETES_VERSIONS = ["1.29.0", "1.37.0"]  # native sidecars need 1.29; the newest schemas the validator ships


@pytest.fixture(scope="module")
def validator() -> Path:
    return peers.require(peers.k8s_validator)


@pytest.fixture(scope="module")
def docs(validator) -> dict[str, list[dict]]:
    """Every manifest file's documents, parsed by the validator's own YAML library."""
    python = validator.parent / "python"
    code = ("import json, sys, yaml; print(json.dumps({p: [d for d in yaml.safe_load_all(open(p)) if d] "
            "for p in sys.argv[1:]}))")
    done = subprocess.run([python, "-c", code, *MANIFESTS, "kustomization.yaml"], cwd=K8S, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kind(docs: dict[str, list[dict]], kind: str, name: str) -> dict:
    found = [d for file in docs.values() for d in file if d.get("kind") == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


def _pods(docs: dict[str, list[dict]]) -> list[dict]:
    return [d for file in docs.values() for d in file if d.get("kind") == "Deployment"]


def _containers(deployment: dict) -> list[dict]:
    spec = deployment["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def _tern(deployment: dict) -> dict:
    """tern's container: the one running the image's command (or a sidecar's serve)."""
    found = [c for c in _containers(deployment) if c["image"] == "tern" and c.get("name") == "tern"]
    assert len(found) == 1
    return found[0]


# --- the schemas ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_passes_the_kubernetes_schemas(validator, version):
    done = subprocess.run([validator, "--strict", "-k", version, *MANIFESTS], cwd=K8S, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    passed = re.findall(r"passed for resource (\S+)", done.stdout + done.stderr)
    assert sorted(passed) == sorted(["secret/tern", "configmap/tern-config", "deployment/tern", "service/tern",
                                     "poddisruptionbudget/tern", "secret/tern-sidecar",
                                     "configmap/tern-sidecar-config", "deployment/agent-with-tern"])


@pytest.mark.parametrize("breakage", [("readinessProbe:", "readinesProbe:"), ("replicas: 2", 'replicas: "two"'),
                                      ("      port: 80\n", ""), ("containerPort: 50051", "containerPort: http")])
def test_the_validator_refuses_a_broken_manifest(validator, tmp_path, breakage):
    """The check above can fail: an unknown field, a wrong type, a missing required field."""
    old, new = breakage
    for name in ("deployment.yaml", "pdb.yaml", "service.yaml"):
        text = (K8S / name).read_text()
        if old in text:
            (tmp_path / name).write_text(text.replace(old, new, 1))
            break
    done = subprocess.run([validator, "--strict", *[p.name for p in tmp_path.iterdir()]], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout


def test_the_kustomization_lists_every_manifest_but_the_example(docs):
    kustomization = docs["kustomization.yaml"][0]
    assert sorted(kustomization["resources"]) == sorted(set(MANIFESTS) - set(EXAMPLES))
    assert [image["name"] for image in kustomization["images"]] == ["tern"]


# --- what the schemas cannot see -----------------------------------------------------------


def _public_routes() -> set[str]:
    from runtime.config import A2aConfig, AgentConfig, Config
    from runtime.host.api import build_router
    from runtime.host.node import Node

    config = Config(a2a=A2aConfig(enabled=True), agents=[AgentConfig(name="echo", kind="echo")])
    return {route.path for route in build_router(Node(config)).routes if route.method == "GET" and not route.auth}


def _probe_path(probe: dict) -> str:
    if "httpGet" in probe:
        return probe["httpGet"]["path"]
    url = re.search(r"urlopen\('(http://127\.0\.0\.1:\d+(/[^']*))'", " ".join(probe["exec"]["command"]))
    assert url, probe
    return url.group(2)


def test_probes_ask_tern_public_routes(docs):
    """Readiness asks /ready (the store), liveness /health (the process): both tern routes
    that need no key, on a port the container declares (or, for the loopback-only
    sidecar, an exec probe on its own listen address)."""
    public = _public_routes()
    assert {"/ready", "/health"} <= public
    for deployment in _pods(docs):
        tern = _tern(deployment)
        assert _probe_path(tern["readinessProbe"]) == "/ready"
        assert _probe_path(tern["livenessProbe"]) == "/health"
        assert _probe_path(tern["startupProbe"]) == "/health"
        ports = {p["name"]: p["containerPort"] for p in tern.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if "httpGet" in tern[probe]:
                assert tern[probe]["httpGet"]["port"] in ports
            else:
                assert ":50051/" in " ".join(tern[probe]["exec"]["command"]) and "127.0.0.1:50051" in tern["args"]
        assert tern["readinessProbe"].get("timeoutSeconds", 1) > 2  # tern's check answers within 2 s


def _config_check(text: str, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    path = tmp_path / "config.toml"
    path.write_text(text)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TERN_", "XDG_"))}
    return subprocess.run([sys.executable, "-m", "runtime", "--config", str(path), "config", "check"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**base, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), **env})


@pytest.mark.parametrize("configmap,secret", [("tern-config", "tern"), ("tern-sidecar-config", "tern-sidecar")])
def test_the_configmaps_config_passes_config_check(docs, tmp_path, configmap, secret):
    config = _kind(docs, "ConfigMap", configmap)["data"]["config.toml"]
    deployment = next(d for d in _pods(docs) if any(v.get("configMap", {}).get("name") == configmap
                                                    for v in d["spec"]["template"]["spec"]["volumes"]))
    env = {e["name"]: secrets.token_urlsafe(32) for e in _tern(deployment)["env"]}
    if "TERN_DATABASE_URL" in env:
        env["TERN_DATABASE_URL"] = "postgresql://tern:pw-0123456789@postgres:5432/tern"
    done = _config_check(config, tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr  # not even a warning
    store = "postgres at ${TERN_DATABASE_URL}" if "TERN_DATABASE_URL" in env else "sqlite"
    assert re.search(r"listen: \S+ +state: /var/lib/tern/node +store: " + re.escape(store), done.stdout)
    for variable in re.findall(r"\$\{(\w+)\}", config) + re.findall(r'_env = "(\w+)"', config):
        assert variable in env, f"the config reads ${variable}, which the pod does not set"


def test_the_config_check_summary_never_shows_a_password(tmp_path):
    text = '[state]\nstore = "postgres"\npostgres_url = "postgresql://tern:hunter2-secret@db.internal:5433/tern"\n'
    done = _config_check(text, tmp_path, {})
    assert done.returncode == 0, done.stderr
    assert "store: postgres at db.internal:5433/tern" in done.stdout and "hunter2" not in done.stdout + done.stderr


def test_every_secret_and_configmap_a_pod_names_exists(docs):
    for deployment in _pods(docs):
        spec = deployment["spec"]["template"]["spec"]
        for container in _containers(deployment):
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["key"] in _kind(docs, "Secret", ref["name"])["stringData"], ref
            mounts = {m["name"] for m in container.get("volumeMounts", [])}
            assert mounts <= {v["name"] for v in spec["volumes"]}, container["name"]
        for volume in spec["volumes"]:
            if "configMap" in volume:
                assert "config.toml" in _kind(docs, "ConfigMap", volume["configMap"]["name"])["data"]
            if "secret" in volume:
                data = _kind(docs, "Secret", volume["secret"]["secretName"])["stringData"]
                assert {item["key"] for item in volume["secret"]["items"]} <= set(data)


def test_the_service_and_the_budget_select_the_deployments_pods(docs):
    deployment = _kind(docs, "Deployment", "tern")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] >= 2
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = _kind(docs, "Service", "tern")
    assert service["spec"]["selector"].items() <= labels.items()
    ports = {p["name"] for p in _tern(deployment)["ports"]}
    assert all(p["targetPort"] in ports for p in service["spec"]["ports"])
    budget = _kind(docs, "PodDisruptionBudget", "tern")
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert 1 <= budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_pods_run_as_the_images_user_on_a_read_only_root(docs):
    uid = int(re.search(r"useradd [^\n]*--uid (\d+)", (ROOT / "deploy" / "Dockerfile").read_text()).group(1))
    for deployment in _pods(docs):
        spec = deployment["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == uid
        assert spec["automountServiceAccountToken"] is False
        for container in _containers(deployment):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["capabilities"]["drop"] == ["ALL"]
            if container["image"] == "tern":
                assert context["readOnlyRootFilesystem"] is True
            if container["name"] == "tern":
                assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/var/lib/tern", "/tmp"}
    deployment = _kind(docs, "Deployment", "tern")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    pre_stop = int(_tern(deployment)["lifecycle"]["preStop"]["exec"]["command"][-1])
    shutdown = float(re.search(r"shutdown_grace_secs = ([\d.]+)", _kind(docs, "ConfigMap", "tern-config")
                               ["data"]["config.toml"]).group(1))
    assert pre_stop + shutdown < grace


def _mib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def test_memory_is_sized_from_the_measured_rss(docs):
    """The comment gives the measured peak (bench/serve_rss.py); the request is at least
    1.5 times it and the limit 3 times, and docs/scale-out.md gives the same figure."""
    text = (K8S / "deployment.yaml").read_text()
    peak = float(re.search(r"peaked at ([\d.]+) MiB", text).group(1))
    assert f"{peak:g} MiB" in (ROOT / "docs" / "scale-out.md").read_text()
    for deployment in _pods(docs):
        resources = _tern(deployment)["resources"]
        assert _mib(resources["requests"]["memory"]) >= 1.5 * peak
        assert _mib(resources["limits"]["memory"]) >= 3 * peak


# --- the layout, run -----------------------------------------------------------------------


def _ed25519_pem() -> bytes:
    """A PKCS#8 Ed25519 private key, as ``openssl genpkey -algorithm ed25519`` writes one."""
    der = bytes.fromhex("302e020100300506032b657004220420") + secrets.token_bytes(32)
    return b"-----BEGIN PRIVATE KEY-----\n" + base64.b64encode(der) + b"\n-----END PRIVATE KEY-----\n"


def _pod_root(tmp_path: Path, name: str, deployment: dict, config: str, secret_files: dict[str, bytes]) -> Path:
    """A pod's filesystem under ``tmp_path/name``: the ConfigMap at its mount, the emptyDirs
    as Kubernetes makes them (mode 0777), the Secret's files 0440."""
    root = tmp_path / name
    spec = deployment["spec"]["template"]["spec"]
    for container in _containers(deployment):
        for mount in container.get("volumeMounts", []):
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            where = root / mount["mountPath"].lstrip("/")
            where.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in volume:
                os.chmod(where, 0o777)
            elif "configMap" in volume:
                (where / "config.toml").write_text(config.replace('"/var/lib/tern', f'"{root}/var/lib/tern'))
            elif "secret" in volume:
                for item in volume["secret"]["items"]:
                    (where / item["path"]).write_bytes(secret_files[item["key"]])
                    os.chmod(where / item["path"], volume["secret"]["defaultMode"])
    return root


def _run_init_container(root: Path, deployment: dict) -> None:
    """The Deployment's init container (the card key's copy), on the pod's files."""
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert init["command"][0] == "python3"
    argv = [sys.executable, *[str(root) + a if a.startswith("/") else a for a in init["command"][1:]]]
    copied = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert copied.returncode == 0, copied.stderr


def _image_env(root: Path) -> dict[str, str]:
    env = dict(part.split("=", 1) for kind, rest in _dockerfile() if kind == "ENV" for part in shlex.split(rest))
    return {k: str(root) + v if v.startswith("/") else v for k, v in env.items()}


def test_two_replicas_run_as_the_deployment_starts_them(docs, pg_url, tmp_path):
    """Each pod: the init container copies the card key, tern starts with the image's
    command and the Secret's variables, the probes pass, the API wants the key, and both
    replicas serve the same card signing key."""
    deployment = _kind(docs, "Deployment", "tern")
    service = _kind(docs, "Service", "tern")
    assert [p["port"] for p in service["spec"]["ports"]] == [80]  # so public_url has no port
    config = _kind(docs, "ConfigMap", "tern-config")["data"]["config.toml"]
    values = {"api-key": secrets.token_urlsafe(32), "database-url": pg_url, "card-signing-key.pem": _ed25519_pem()}
    tern = _tern(deployment)
    env = {e["name"]: values[e["valueFrom"]["secretKeyRef"]["key"]] for e in tern["env"]}
    cmd = json.loads(dict(_dockerfile())["CMD"])
    assert "args" not in tern and "command" not in tern and cmd[-1] == "0.0.0.0:50051"
    processes, urls = [], []
    try:
        for name in ("pod-a", "pod-b"):
            root = _pod_root(tmp_path, name, deployment, config, values)
            _run_init_container(root, deployment)
            process, url = _serve({**_image_env(root), **env}, [*cmd[:-1], "127.0.0.1:0"], tmp_path)
            processes.append(process)
            urls.append(url)
            assert (root / "var" / "lib" / "tern" / "node" / "daemon.json").exists()  # the state dir, made 0700
        keys = []
        for url in urls:
            for probe in ("readinessProbe", "livenessProbe"):
                answer = httpx.get(url + tern[probe]["httpGet"]["path"], timeout=10)
                assert answer.status_code == 200, answer.text
            assert httpx.get(url + "/api/status", timeout=10).status_code == 401
            headers = {"Authorization": f"Bearer {values['api-key']}"}
            assert httpx.get(url + "/api/status", headers=headers, timeout=10).status_code == 200
            keys.append(httpx.get(url + "/.well-known/jwks.json", timeout=10).json()["keys"])
            card = httpx.get(url + "/.well-known/agent-card.json", timeout=10).json()
            assert card["url"] == f"http://{service['metadata']['name']}/a2a/echo"  # the Service, not the pod
        assert keys[0] == keys[1] and len(keys[0]) == 1  # one key for every replica
    finally:
        for process in processes:
            _stop(process)


SDK_AGENT = """
import json, os, sys
import anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    http = httpx2.AsyncClient(headers={"Authorization": os.environ["MCP_AUTHORIZATION"]}, timeout=30)
    async with Client(streamable_http_client(os.environ["MCP_SERVER_URL"], http_client=http)) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        now = await client.call_tool("time_now", {})
        print(json.dumps({"tools": tools, "now_is_error": now.is_error}))

anyio.run(main, backend="trio")
"""


def test_the_mcp_sidecar_serves_the_agent_next_to_it(docs, tmp_path):
    """The sidecar's tern starts with its args on loopback, its exec probes pass, and the
    official MCP SDK, given the agent container's variables, lists and calls tern's tools."""
    sdk = peers.require(peers.mcp_sdk_python)
    deployment = _kind(docs, "Deployment", "agent-with-tern")
    config = _kind(docs, "ConfigMap", "tern-sidecar-config")["data"]["config.toml"]
    key = secrets.token_urlsafe(32)
    root = _pod_root(tmp_path, "pod", deployment, config, {})
    tern = _tern(deployment)
    assert tern["restartPolicy"] == "Always" and tern in deployment["spec"]["template"]["spec"]["initContainers"]
    args = [a.replace("127.0.0.1:50051", "127.0.0.1:0") for a in tern["args"]]
    process, url = _serve({**_image_env(root), "TERN_API_KEY": key}, args, tmp_path)
    try:
        port = url.rsplit(":", 1)[1]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = [sys.executable,
                       *[part.replace(":50051", f":{port}") for part in tern[probe]["exec"]["command"][1:]]]
            assert subprocess.run(command, capture_output=True, timeout=30).returncode == 0, probe
        (agent,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value", "") for e in agent["env"]}
        env["TERN_API_KEY"] = key
        env = {k: re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], v).replace(":50051", f":{port}")
               for k, v in env.items()}  # Kubernetes expands $(VAR) from earlier variables
        done = subprocess.run([sdk, "-c", SDK_AGENT], capture_output=True, text=True, timeout=120,
                              env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env})
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert "time_now" in seen["tools"] and "memory_store" in seen["tools"] and seen["now_is_error"] is False
        assert not any(name.startswith("tern_agent_") for name in seen["tools"])  # expose_agents = false
        env["MCP_AUTHORIZATION"] = "Bearer wrong-key"
        refused = subprocess.run([sdk, "-c", SDK_AGENT], capture_output=True, text=True, timeout=120,
                                 env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env})
        assert refused.returncode != 0 and refused.stdout == ""
        wrong = httpx.post(env["MCP_SERVER_URL"], headers={"Authorization": "Bearer wrong-key"}, json={}, timeout=10)
        assert wrong.status_code == 401
    finally:
        _stop(process)


@pytest.mark.parametrize("url,expected", [
    ("tern:hunter2-pw@postgres:5432/tern", "postgres_url ${TERN_DATABASE_URL} does not give a postgresql:// URL"),
    (None, "needs ${TERN_DATABASE_URL}, which is not set"),
    ("postgresql://tern:hunter2-pw@127.0.0.1:{closed}/tern", "PostgreSQL at 127.0.0.1:{closed}/tern: "),
], ids=["not-a-url", "unset", "unreachable"])
def test_a_bad_database_url_stops_the_boot_with_one_line(docs, tmp_path, url, expected):
    """What a wrong Secret does to a replica: it exits at once with one line (the pod
    restarts and says why in its log), and the password is in no output."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    deployment = _kind(docs, "Deployment", "tern")
    config = _kind(docs, "ConfigMap", "tern-config")["data"]["config.toml"]
    root = _pod_root(tmp_path, "pod", deployment, config, {"card-signing-key.pem": _ed25519_pem()})
    _run_init_container(root, deployment)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TERN_", "XDG_"))}
    env.update(_image_env(root), PYTHONPATH=str(ROOT), HOME=str(tmp_path), TERN_API_KEY=secrets.token_urlsafe(32))
    if url is not None:
        env["TERN_DATABASE_URL"] = url.replace("{closed}", str(closed))
    done = subprocess.run([sys.executable, "-m", "runtime", "serve", "--listen", "127.0.0.1:0"], capture_output=True,
                          text=True, timeout=60, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected.replace("{closed}", str(closed)) in lines[0], done.stderr
    assert "hunter2" not in done.stdout + done.stderr
