"""Tool namespacing: normalisation, the 64-character cap, collisions, server lookup."""

import pytest

from runtime.mcp.names import (
    MAX_TOOL_NAME, assign_names, extract_mcp_server, format_mcp_tool_name, is_mcp_tool, normalize,
)


@pytest.mark.parametrize("server, tool, expected", [
    ("github", "create_issue", "mcp_github_create_issue"),
    ("GitHub", "Create-Issue", "mcp_github_create_issue"),
    ("my-server", "list-connections", "mcp_my_server_list_connections"),
    ("fs", "read.file/v2", "mcp_fs_read_file_v2"),
    ("ünï", "tööl", "mcp__n__t__l"),
])
def test_format(server, tool, expected):
    assert format_mcp_tool_name(server, tool) == expected


def test_long_names_are_shortened_deterministically_and_stay_distinct():
    a = format_mcp_tool_name("server", "x" * 80 + "a")
    b = format_mcp_tool_name("server", "x" * 80 + "b")
    assert len(a) == len(b) == MAX_TOOL_NAME
    assert a != b and a[:55] == b[:55]
    assert a == format_mcp_tool_name("server", "x" * 80 + "a")
    assert len(format_mcp_tool_name("s", "t" * 58)) == 64  # exactly 64 stays as it is
    assert format_mcp_tool_name("s", "t" * 58).endswith("t" * 10)


def test_collisions_are_reported_and_nothing_is_shadowed():
    names, collisions = assign_names([("a-b", "x"), ("a_b", "x"), ("a", "b_x"), ("other", "y")])
    assert len(collisions) == 1
    assert {(n.server, n.tool) for n in collisions[0]} == {("a-b", "x"), ("a_b", "x"), ("a", "b_x")}
    all_names = [n.name for n in names]
    assert len(set(all_names)) == len(all_names) == 4
    assert "mcp_other_y" in all_names
    assert all(len(n) <= 64 for n in all_names)
    again, _ = assign_names([("other", "y"), ("a", "b_x"), ("a_b", "x"), ("a-b", "x")])
    assert sorted(again) == sorted(names)  # independent of connection order


def test_original_tool_name_is_kept():
    (name,), _ = assign_names([("oracle", "list-connections")])
    assert name.name == "mcp_oracle_list_connections" and name.tool == "list-connections"


def test_extract_server_prefers_the_longest_match():
    servers = ["a", "a-b", "bocha", "my_server"]
    assert extract_mcp_server("mcp_a_b_x", servers) == "a-b"
    assert extract_mcp_server("mcp_a_x", servers) == "a"
    assert extract_mcp_server("mcp_bocha_search", servers) == "bocha"
    assert extract_mcp_server("mcp_my_server_t", servers) == "my_server"
    assert extract_mcp_server("mcp_unknown_t", servers) is None
    assert extract_mcp_server("file_read", servers) is None
    assert extract_mcp_server("mcp_a_", servers) is None


def test_is_mcp_tool_and_normalize():
    assert is_mcp_tool("mcp_x_y") and not is_mcp_tool("file_read")
    assert normalize("A-B.c d") == "a_b_c_d"
