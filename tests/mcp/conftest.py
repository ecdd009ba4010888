"""Fixtures for MCP client tests: config entries for the fake and the real servers."""

import sys
from pathlib import Path

import pytest

from runtime.config import McpServerEntry, StdioTransport

FAKE = str(Path(__file__).resolve().parent.parent / "fixtures" / "fake_mcp_server.py")


def stdio_entry(command, *args, name="fake", timeout_secs=10.0, env=(), protocol="auto", cwd=""):
    return McpServerEntry(name=name, transport=StdioTransport(command=command, args=list(args), cwd=cwd),
                          timeout_secs=timeout_secs, env=list(env), protocol=protocol)


@pytest.fixture
def fake_entry():
    def make(*flags, **kwargs):
        return stdio_entry(sys.executable, FAKE, *flags, **kwargs)
    return make
