"""Config files a person (or a tool gone wrong) can hand tern that once ended in an
``internal error``: 5,000 nested tables, inline tables or arrays, and a 100 MB file.
Each is one line from ``tern config check`` with exit 2 (issue 31, item 6). And the
webhook page names the one JSON nesting bound the code keeps (``wire.depth.MAX_DEPTH``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.config.load import MAX_CONFIG_BYTES
from runtime.wire.depth import MAX_DEPTH

ROOT = Path(__file__).resolve().parent.parent
DEEP = 5000


def check(path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "runtime", "config", "check", "--config", str(path)],
                          capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)


def one_line(done: subprocess.CompletedProcess, path: Path, says: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"tern: {path}: {says}\n"
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr


TOO_DEEP = f"tables, inline tables or arrays nested more than {MAX_DEPTH} levels deep"


@pytest.mark.parametrize("text", [
    "[" + ".".join(["a"] * DEEP) + "]\nx = 1\n",  # 5,000 nested tables
    ".".join(["a"] * DEEP) + " = 1\n",  # a dotted key as deep
    "a = " + "{b = " * DEEP + "1" + "}" * DEEP + "\n",  # inline tables: tomllib recursed until it broke
    "a = " + "[" * DEEP + "1" + "]" * DEEP + "\n",
    "".join("[" + ".".join(["t"] * i) + "]\n" for i in range(1, 200)),  # many headers, each one deeper
    # deep inside a field that takes any table (a preset's input_schema): once a RecursionError in the checks
    '[mcp_server]\n[[mcp_server.presets]]\nname = "p"\ntool = "time_now"\n'
    "[mcp_server.presets.input_schema." + ".".join(["a"] * DEEP) + "]\nx = 1\n",
], ids=["tables", "dotted", "inline", "arrays", "headers", "schema"])
def test_a_deep_config_is_one_line(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    one_line(check(path), path, TOO_DEEP)


def test_nesting_up_to_the_bound_is_read(tmp_path):
    path = tmp_path / "config.toml"
    schema = "{type = \"object\", properties = {a = " * 20 + "{type = \"string\"}" + "}}" * 20
    path.write_text(f'[mcp_server]\n[[mcp_server.presets]]\nname = "p"\ntool = "time_now"\ninput_schema = {schema}\n'
                    f'[state]\ndir = "{tmp_path / "state"}"\n')
    done = check(path)
    assert done.returncode == 0, done.stderr


def test_a_huge_config_is_one_line_and_never_read_whole(tmp_path):
    path = tmp_path / "config.toml"
    with open(path, "wb") as file:  # 100 MB of comments after a valid start: sparse, so cheap to make
        file.write(b"[server]\n# " + b"x" * 1000 + b"\n")
        file.truncate(100 * 1024 * 1024)
    one_line(check(path), path, f"the file is larger than a config may be ({MAX_CONFIG_BYTES // 1024 // 1024} MiB)")
    at_bound = tmp_path / "fits.toml"
    at_bound.write_bytes(b"[server]\n" + (b"# " + b"x" * 1021 + b"\n") * (MAX_CONFIG_BYTES // 1024 - 1))
    assert at_bound.stat().st_size <= MAX_CONFIG_BYTES
    assert check(at_bound).returncode == 0


def test_the_webhook_page_names_the_depth_the_code_keeps():
    page = (ROOT / "docs" / "triggers-webhooks.md").read_text()
    named = {int(n) for n in re.findall(r"JSON nested more than (\d+) levels", page)}
    assert named == {MAX_DEPTH}
    from runtime.host import hooks

    assert hooks.MAX_DEPTH == MAX_DEPTH  # the route checks the one bound, not a copy


async def test_a_webhook_refuses_json_one_level_past_that_depth(nursery, monkeypatch):
    import httpx

    from tests.http.test_hooks import SECRET, sign, start

    monkeypatch.setenv("HOOK_SECRET", SECRET)
    port, url = await start(nursery)
    async with httpx.AsyncClient(base_url=url) as client:
        for depth, status in ((MAX_DEPTH, 202), (MAX_DEPTH + 1, 400)):
            body = b"[" * depth + b"]" * depth
            answer = await client.post("/hooks/ci", content=body, headers={"X-Hub-Signature-256": sign(body)})
            assert answer.status_code == status, answer.text
    assert answer.json()["error"]["message"] == f"the request body is nested more than {MAX_DEPTH} levels deep"
    assert len(port.fired) == 1
