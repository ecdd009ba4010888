"""Approvals across real processes: a ``tern run`` whose model asks for ``shell_exec``
waits while ``tern approvals``/``approve``/``deny`` answer from other processes; a
daemon's calls are answered through ``POST /api/approvals/{id}``; many answers at once
from several processes; a restart with requests pending; ids that do not exist and
requests that already ended."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.chat_stub import calls_tool, serve_chat
from tests.test_cli import ROOT
from tests.test_daemon import start_daemon

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX processes")


@pytest.fixture
def model_url():
    """A model that asks for ``shell_exec echo approved-run``, then says what the tool returned."""
    with serve_chat(calls_tool("shell_exec", {"argv": ["echo", "approved-run"]})) as url:
        yield url


def write_config(tmp_path, model_url: str = "", *, timeout: float = 300, max_pending: int = 5) -> str:
    path = tmp_path / "config.toml"
    text = ('[server]\nlisten = "127.0.0.1:0"\nrate_limit_per_sec = 0\nmax_connections_per_client = 0\n'
            f'[state]\ndir = "{tmp_path / "state"}"\n'
            f'[governance]\napproval_timeout_secs = {timeout}\nmax_pending_per_agent = {max_pending}\n'
            '[tools]\nshell_exec_enabled = true\nshell_sandbox = "off"\n'  # unsandboxed: literal rules only
            '[[tools.shell_rules]]\nprogram = "echo"\nargs = ["approved-run"]\n'
            '[[tools.shell_rules]]\nprogram = "echo"\nargs = ["hi"]\n'
            '[[agents]]\nname = "writer"\nkind = "tool"\ntool = "file_write"\n')
    if model_url:
        text += (f'[[agents]]\nname = "bot"\nkind = "llm"\ntools = ["shell_exec"]\n'
                 f'[agents.model]\nbase_url = "{model_url}"\nmodel = "m"\n')
    path.write_text(text)
    return str(path)


def env() -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    clean["PYTHONPATH"] = str(ROOT)
    return clean


def tern(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True, env=env(),
                          stdin=subprocess.DEVNULL, timeout=60)


def pending(config: str, count: int = 1, within: float = 30) -> list[dict]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        listed = json.loads(tern("approvals", "--json", "--config", config).stdout)["approvals"]
        if len(listed) >= count:
            return listed
        time.sleep(0.1)
    raise AssertionError(f"fewer than {count} approval requests appeared")


def start_run(config: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runtime", "run", "bot", "go", "--config", config],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env())


def test_a_run_waits_until_another_process_approves(tmp_path, model_url):
    config = write_config(tmp_path, model_url)
    run = start_run(config)
    try:
        [request] = pending(config)
        assert (request["agent"], request["tool"], request["arguments"]) == ("bot", "shell_exec",
                                                                             {"argv": ["echo", "approved-run"]})
        assert run.poll() is None  # still waiting
        human = tern("approvals", "--config", config)
        assert request["id"] in human.stdout and "shell_exec" in human.stdout and "tern approve" in human.stdout
        approved = tern("approve", request["id"], "--config", config)
        assert approved.returncode == 0 and f"approved {request['id']}" in approved.stdout
        out, err = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 0, err
    assert out.startswith("the tool said: exit code 0") and "approved-run" in out
    assert f"tern approve {request['id']}" in err  # a non-interactive run says how to answer
    records = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    resolved = [r for r in records if r["kind"] == "approval_resolved"]
    assert resolved[0]["channel"] == "cli" and resolved[0]["outcome"] == "approved"
    assert [r["outcome"] for r in records if r["kind"] == "tool_call"] == ["ok"]


def test_deny_and_expiry_reach_the_model_as_tool_errors(tmp_path, model_url):
    config = write_config(tmp_path, model_url, timeout=60)  # a person's deny: time for a CLI to start, loaded or not
    run = start_run(config)
    try:
        [request] = pending(config)
        denied = tern("deny", request["id"], "--reason", "not on a friday", "--config", config)
        assert denied.returncode == 0
        out, _ = run.communicate(timeout=30)
    finally:
        run.kill()
    assert run.returncode == 0
    assert "shell_exec was not run" in out and "denied it" in out and "not on a friday" in out
    config = write_config(tmp_path, model_url, timeout=2)
    expired = start_run(config)  # nobody answers: denied after approval_timeout_secs
    out, _ = expired.communicate(timeout=30)
    assert expired.returncode == 0 and "shell_exec was not run" in out and "expired" in out
    again = tern("approve", request["id"], "--config", config)
    assert again.returncode != 0 and "already denied" in again.stderr and "Traceback" not in again.stderr
    unknown = tern("approve", "ap_doesnotexist", "--config", config)
    assert unknown.returncode != 0 and "no approval request has the id" in unknown.stderr


@pytest.fixture
def daemon(tmp_path):
    processes = []

    def start(**options):
        process, url = start_daemon(write_config(tmp_path, **options))
        processes.append(process)
        return process, url

    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_fifty_requests_answered_out_of_order_from_several_processes(tmp_path, daemon):
    _, url = daemon(max_pending=50)
    config = str(tmp_path / "config.toml")
    with ThreadPoolExecutor(50) as pool:
        sends = [pool.submit(httpx.post, f"{url}/api/agents/writer/message",
                             json={"message": json.dumps({"path": f"f{i}.txt", "content": str(i)})}, timeout=300)
                 for i in range(50)]
        requests = pending(config, 50)
        assert len(requests) == 50
        order = [r["id"] for r in requests]
        random.shuffle(order)
        verdicts = {approval_id: ("approve" if n % 3 else "deny") for n, approval_id in enumerate(order)}
        chunks = [order[i::5] for i in range(5)]  # five processes, each answering ten in its own order
        scripts = [" && ".join(f"{sys.executable} -m runtime {verdicts[a]} {a} --config {config} >/dev/null"
                               for a in chunk) for chunk in chunks]
        answering = [subprocess.Popen(["sh", "-c", script], env=env()) for script in scripts]
        assert [p.wait(timeout=280) for p in answering] == [0] * 5  # 50 CLI starts: slow on a loaded machine
        answers = [send.result() for send in sends]
    by_path = {}
    for request in requests:
        by_path[request["arguments"]["path"]] = verdicts[request["id"]]
    workspace = tmp_path / "state" / "workspaces" / "writer"
    for i, answer in enumerate(answers):
        if by_path[f"f{i}.txt"] == "approve":
            assert answer.status_code == 200 and (workspace / f"f{i}.txt").read_text() == str(i)
        else:
            assert answer.status_code == 502 and "denied it" in answer.json()["error"]["message"]
            assert not (workspace / f"f{i}.txt").exists()
    assert httpx.get(f"{url}/api/approvals").json() == {"approvals": []}


def test_http_decisions_and_a_restart_with_requests_pending(tmp_path, daemon):
    process, url = daemon()
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(httpx.post, f"{url}/api/agents/writer/message",
                            json={"message": json.dumps({"path": "a.txt", "content": "a"})}, timeout=60)
        [request] = httpx.get(f"{url}/api/approvals").json()["approvals"] or pending(str(tmp_path / "config.toml"))
        assert httpx.get(f"{url}/api/approvals/{request['id']}").json()["state"] == "pending"
        bad = httpx.post(f"{url}/api/approvals/{request['id']}", json={"decision": "maybe"})
        assert bad.status_code == 400
        assert httpx.post(f"{url}/api/approvals/ap_nothere", json={"decision": "approve"}).status_code == 404
        started = time.monotonic()
        decided = httpx.post(f"{url}/api/approvals/{request['id']}", json={"decision": "approve", "reason": "ok"})
        answer = first.result()
        resumed = time.monotonic() - started
    assert decided.status_code == 200 and decided.json()["state"] == "approved"
    assert decided.json()["channel"] == "http" and decided.json()["decided_by"].startswith("api:127.0.0.1")
    assert answer.status_code == 200 and resumed < 2
    closed = httpx.post(f"{url}/api/approvals/{request['id']}", json={"decision": "deny"})
    assert closed.status_code == 409 and "already approved" in closed.json()["error"]["message"]
    metrics = httpx.get(f"{url}/metrics").text
    assert 'tern_approvals_total{outcome="approved"} 1' in metrics and "tern_approvals_pending 0" in metrics

    with ThreadPoolExecutor(1) as pool:  # a request left pending when the daemon dies
        pool.submit(httpx.post, f"{url}/api/agents/writer/message",
                    json={"message": json.dumps({"path": "b.txt", "content": "b"})}, timeout=60)
        [left] = pending(str(tmp_path / "config.toml"))
        process.kill()
        process.wait()
    _, url = daemon()
    gone = httpx.get(f"{url}/api/approvals/{left['id']}").json()
    assert gone["state"] == "expired" and gone["reason"] == "tern stopped while it waited"
    late = httpx.post(f"{url}/api/approvals/{left['id']}", json={"decision": "approve"})
    assert late.status_code == 409 and "already expired" in late.json()["error"]["message"]


def test_config_check_names_rules_that_match_no_tool_and_refuses_unknown_tiers(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[[mcp_servers]]\nname = "github"\n[mcp_servers.transport]\ntype = "stdio"\ncommand = "gh-mcp"\n'
                      '[[governance.rules]]\ntool = "mcp_github_*"\ndecision = "ask"\n'
                      '[[governance.rules]]\ntool = "shel_exec"\ndecision = "deny"\n')
    checked = tern("config", "check", str(config))
    assert checked.returncode == 0
    assert "warning: governance.rules[1]: tool 'shel_exec' matches no tool" in checked.stderr
    assert "mcp_github" not in checked.stderr
    config.write_text('[[agents]]\nname = "a"\nkind = "echo"\naccess_tier = "tier_9"\n')
    refused = tern("config", "check", str(config))
    assert refused.returncode == 2 and 'agents[0].access_tier: "tier_9" is not a tier' in refused.stderr


def test_approval_events_reach_websocket_subscribers(tmp_path, daemon):
    import trio
    from trio_websocket import open_websocket_url

    _, url = daemon()
    seen: list[dict] = []

    async def follow() -> None:
        async with open_websocket_url(url.replace("http://", "ws://") + "/api/events") as socket:
            assert json.loads(await socket.get_message())["type"] == "hello"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, lambda: httpx.post(
                    f"{url}/api/agents/writer/message", json={"message": json.dumps({"path": "e.txt", "content": "e"})},
                    timeout=60))
                while len(seen) < 2:
                    event = json.loads(await socket.get_message())
                    if event["type"] == "approval_requested":
                        seen.append(event)
                        await trio.to_thread.run_sync(lambda: httpx.post(
                            f"{url}/api/approvals/{event['approval']['id']}", json={"decision": "approve"}))
                    elif event["type"] == "approval_resolved":
                        seen.append(event)

    trio.run(follow)
    assert [e["type"] for e in seen] == ["approval_requested", "approval_resolved"]
    assert seen[0]["approval"]["tool"] == "file_write" and seen[1]["approval"]["state"] == "approved"


def test_a_run_on_a_terminal_asks_inline(tmp_path):
    """Under a real pseudo-terminal: the prompt appears, "a" approves this call and every
    later one of this tool by this agent, and the decision is audited as the terminal's."""
    import pty
    import select

    config = write_config(tmp_path)

    def run_on_terminal(message: dict) -> tuple[int, str]:
        leader, follower = pty.openpty()
        process = subprocess.Popen([sys.executable, "-m", "runtime", "run", "writer", json.dumps(message),
                                    "--config", config], stdin=follower, stdout=subprocess.PIPE, stderr=follower,
                                   env=env(), text=True)
        os.close(follower)
        screen = b""
        try:
            deadline = time.monotonic() + 30
            while b"approve?" not in screen and time.monotonic() < deadline and process.poll() is None:
                if select.select([leader], [], [], 0.1)[0]:
                    try:
                        screen += os.read(leader, 4096)
                    except OSError:  # EIO: the other end is closed, the process ended
                        break
            if b"approve?" in screen:
                os.write(leader, b"a\n")
            out, _ = process.communicate(timeout=30)
        finally:
            process.kill()
            os.close(leader)
        return process.returncode, screen.decode(errors="replace") + out

    code, seen = run_on_terminal({"path": "t.txt", "content": "tty"})
    assert code == 0 and "agent 'writer' wants to call file_write" in seen and "wrote 3 bytes to t.txt" in seen
    code, seen = run_on_terminal({"path": "u.txt", "content": "tty"})  # --always: not asked again
    assert code == 0 and "approve?" not in seen and "wrote 3 bytes to u.txt" in seen
    records = [json.loads(line) for line in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    [resolved] = [r for r in records if r["kind"] == "approval_resolved"]
    assert (resolved["channel"], resolved["scope"]) == ("terminal", "always")


def test_approvals_rules_lists_whom_each_rule_is_for_and_who_made_it(tmp_path):
    """``tern approvals rules``: a rule a key made for its own runs says so, and the
    owner's rule is for every caller; ``--forget-rules --caller`` removes one key's."""
    import trio

    from runtime.config.keys import Caller
    from runtime.kernel.approvals import Approvals

    config = write_config(tmp_path)
    (tmp_path / "state").mkdir(mode=0o700, exist_ok=True)
    approvals = Approvals(tmp_path / "state" / "approvals.sqlite3", timeout_secs=60,
                          self_approval=lambda origin: origin == "mcp")

    async def make_rules() -> None:
        async with trio.open_nursery() as nursery:
            for key, origin, who in (("mallory", "mcp", Caller("mallory", frozenset({"mcp"}))), ("admin", "", None)):
                nursery.start_soon(lambda k=key, o=origin: approvals.request("bot", "shell_exec", {}, "d", key=k,
                                                                          origin=o))
                while not (pending := await approvals.list()):
                    await trio.sleep(0.01)
                await approvals.decide(pending[0].id, True, scope="always", who=who, by="test")
                while await approvals.list():
                    await trio.sleep(0.01)

    trio.run(make_rules)
    approvals.close()
    listed = json.loads(tern("approvals", "rules", "--json", "--config", config).stdout)["rules"]
    assert sorted((r["caller"], r["made_by"]) for r in listed) == [("everyone", "test"), ("mallory", "mallory")]
    text = tern("approvals", "rules", "--config", config).stdout
    assert "for the key 'mallory''s runs (made by mallory" in text and "for every caller" in text
    forgot = tern("approvals", "--forget-rules", "--caller", "mallory", "--config", config)
    assert "forgot 1 persisted decision" in forgot.stdout
    left = json.loads(tern("approvals", "rules", "--json", "--config", config).stdout)["rules"]
    assert [r["caller"] for r in left] == ["everyone"]


@pytest.mark.parametrize("through_daemon", [False, True], ids=["in-process", "daemon"])
def test_no_wait_fails_at_once_naming_the_request(tmp_path, daemon, through_daemon):
    """#34 item 8: a script's ``tern call``/``tern run --no-wait`` does not wait
    approval_timeout_secs (300 s) for a person: it fails now, the request named and denied."""
    config = write_config(tmp_path)
    if through_daemon:
        daemon()
    args = ["call", "shell_exec", "--args", '{"argv": ["echo", "hi"]}', "--no-wait", "--config", config]
    started = time.monotonic()
    done = tern(*args)
    assert time.monotonic() - started < 30
    assert done.returncode == 1 and "does not wait (--no-wait): request ap_" in done.stderr, done
    assert "denied" in done.stdout + done.stderr
    listed = json.loads(tern("approvals", "--json", "--state", "denied", "--config", config).stdout)["approvals"]
    assert [a["reason"] for a in listed] == ["its caller does not wait for a person (--no-wait)"]
    ran = tern("run", "writer", '{"path": "x.txt", "content": "x"}', "--no-wait", "--config", config)
    assert ran.returncode == 1 and "does not wait (--no-wait)" in ran.stderr, ran
