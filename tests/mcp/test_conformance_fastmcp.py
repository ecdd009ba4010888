"""The official MCP conformance suite in server mode against ``tern serve``, with a FastMCP
server (``tests/fixtures/fastmcp_conformance_server.py``, stdio) as the upstream whose
resources, templates, prompts, completion and content tool tern re-exports, in place of
tests/mcp/test_conformance.py's fake server. FastMCP cannot subscribe to resources (and a
2026-07-28 upstream has no ``resources/subscribe`` at all), so the subscribe scenarios pass
only because tern watches such an upstream resource itself (issue #32)."""

from __future__ import annotations

import pytest

from tests import peers
from tests.mcp.conftest import FIXTURES
from tests.mcp.server_harness import tern_env, tern_serve
from tests.mcp.test_conformance import RESOURCES_AND_PROMPTS, failing, run_suite

SERVER = FIXTURES / "fastmcp_conformance_server.py"


@pytest.fixture(scope="module")
def conformance():
    return peers.require(peers.mcp_conformance)


@pytest.fixture(scope="module", params=["auto", "2025-11-25"], ids=["fastmcp-2026", "fastmcp-2025"])
def tern_url(request, tmp_path_factory):
    """tern serving the suite, its upstream FastMCP connected in the era ``request.param``
    names ("auto": 2026-07-28, which FastMCP 4 speaks)."""
    python = peers.require(peers.fastmcp_python)
    tmp = tmp_path_factory.mktemp("conformance-fastmcp")
    config = tmp / "conformance.toml"
    fixture_tools = "".join(f'\n[[mcp_server.presets]]\nname = "{name}"\ntool = "mcp_fx_content"\n' for name in (
        "test_image_content", "test_audio_content", "test_embedded_resource", "test_multiple_content_types"))
    config.write_text((FIXTURES / "conformance.toml").read_text() + f'\n[state]\ndir = "{tmp / "state"}"\n'
                      f'\n[[mcp_servers]]\nname = "fx"\ntransport = {{ type = "stdio", command = "{python}", '
                      f'args = ["{SERVER}"] }}\nprotocol = "{request.param}"\n' + fixture_tools)
    with tern_serve(tmp, config, tern_env(tmp), servers_connected=True, within=60) as url:
        yield url + "/mcp"


@pytest.mark.slow
@pytest.mark.parametrize("requirements", ["2025-11-25", "2026-07-28"])
def test_conformance_with_a_fastmcp_upstream(conformance, tern_url, requirements, tmp_path):
    results = run_suite(conformance, tern_url, requirements, tmp_path)
    assert failing(results) == set(), {name: results[name] for name in failing(results)}
    for scenario in RESOURCES_AND_PROMPTS:
        if scenario in results or requirements == "2025-11-25":
            assert results[scenario][0] > 0 and results[scenario][1] == 0, scenario
