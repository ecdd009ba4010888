"""Fixtures for MCP client tests: config entries for the fake and the real servers."""

import sys
from pathlib import Path

import pytest

from runtime.config import McpServerEntry, StdioTransport
from tests import peers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FAKE = str(FIXTURES / "fake_mcp_server.py")
SDK_SERVER = str(FIXTURES / "sdk_mcp_server.py")


def stdio_entry(command, *args, name="fake", timeout_secs=10.0, env=(), protocol="auto", cwd=""):
    return McpServerEntry(name=name, transport=StdioTransport(command=command, args=list(args), cwd=cwd),
                          timeout_secs=timeout_secs, env=list(env), protocol=protocol)


@pytest.fixture
def fake_entry():
    def make(*flags, **kwargs):
        return stdio_entry(sys.executable, FAKE, *flags, **kwargs)
    return make


@pytest.fixture(scope="session")
def npm():
    return {name: str(path) for name, path in peers.require(peers.npm_servers).items()}


@pytest.fixture(scope="session")
def node():
    return str(peers.require(peers.node))


@pytest.fixture(scope="session")
def sdk_python():
    return str(peers.require(peers.mcp_sdk_python))


@pytest.fixture
async def llm(nursery):
    """tern's scripted OpenAI-compatible model server, serving (append to ``script``)."""
    from tests.scripted_llm import ScriptedLLM

    model = ScriptedLLM()
    await nursery.start(model.serve)
    return model
