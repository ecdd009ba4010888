"""The configurations in ``examples/``: each passes ``tern config check``, and the
federation pair runs as two real ``tern serve`` processes, the front one sending a
message to the back one's agent over A2A (ports rewritten to loopback port 0, the
back's model replaced by a stub endpoint)."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.chat_stub import serve_chat
from tests.test_cli import ROOT, tern
from tests.test_daemon import start_daemon

EXAMPLES = ROOT / "examples"
CONFIGS = sorted(EXAMPLES.rglob("*.toml"))
KEY = "federation-example-key-0123456789"


def test_the_examples_are_the_ones_documented():
    names = {str(path.relative_to(EXAMPLES)) for path in CONFIGS}
    assert names == {"ollama.toml", "llama-cpp.toml", "hosted-openai.toml", "desktop-assistant.toml",
                     "federation/front.toml", "federation/back.toml"}


@pytest.mark.parametrize("path", CONFIGS, ids=[str(p.relative_to(EXAMPLES)) for p in CONFIGS])
def test_example_passes_config_check(path):
    env = {"OPENAI_API_KEY": "sk-example-not-a-real-key"}
    done = tern("config", "check", str(path), env_extra=env)
    assert done.returncode == 0 and done.stdout.startswith(f"{path}: OK"), done.stderr
    assert "warning" not in done.stderr, done.stderr


def test_hosted_example_warns_without_its_key():
    done = tern("config", "check", str(EXAMPLES / "hosted-openai.toml"))
    assert done.returncode == 0
    assert 'warning: agents[0].model.api_key_env: "OPENAI_API_KEY" is not set' in done.stderr


def _rewrite(text: str, replacements: dict[str, str], state: Path) -> str:
    for old, new in replacements.items():
        assert old in text, old  # the example still says what the test rewrites
        text = text.replace(old, new)
    return text + f'\n[state]\ndir = "{state}"\n'


def test_federation_front_reaches_the_back_agent_over_a2a(tmp_path):
    def research(messages):
        return {"role": "assistant", "content": f"back researched: {messages[-1]['content']}"}

    with serve_chat(research) as model_url:
        back_text = _rewrite((EXAMPLES / "federation" / "back.toml").read_text(), {
            'listen = "0.0.0.0:50052"': 'listen = "127.0.0.1:0"',
            'public_url = "http://back.lan:50052"': "",
            'base_url = "http://127.0.0.1:11434/v1"': f'base_url = "{model_url}"',
            'workspace = "~/research"': f'workspace = "{tmp_path / "research"}"',
        }, tmp_path / "back-state")
        back_path = tmp_path / "back.toml"
        back_path.write_text(back_text)
        back, back_url = start_daemon(str(back_path), {"TERN_API_KEY": KEY})
        try:
            front_path = tmp_path / "front.toml"
            front_path.write_text(_rewrite((EXAMPLES / "federation" / "front.toml").read_text(), {
                'listen = "127.0.0.1:50051"': 'listen = "127.0.0.1:0"',
                'url = "http://back.lan:50052"': f'url = "{back_url}"',
            }, tmp_path / "front-state"))
            front, front_url = start_daemon(str(front_path), {"BACK_API_KEY": KEY})
            try:
                # the back tern wants its key: without it, its agent is out of reach
                refused = httpx.post(back_url + "/a2a", json={}, timeout=10)
                assert refused.status_code == 401
                reply = httpx.post(front_url + "/api/agents/researcher/message",
                                   json={"message": "what about churn?"}, timeout=60)
                assert reply.status_code == 200, reply.text
                assert reply.json()["text"] == "back researched: what about churn?"
                status = httpx.get(front_url + "/api/status", timeout=10).json()
                assert [peer["name"] for peer in status["a2a_peers"]] == ["back"]
            finally:
                front.send_signal(signal.SIGTERM)
                assert front.wait(timeout=15) == 0
        finally:
            back.send_signal(signal.SIGTERM)
            assert back.wait(timeout=15) == 0
