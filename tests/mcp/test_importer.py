"""`tern mcp import`: client JSON in, [[mcp_servers]] TOML out, no secrets carried over."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.config import (
    SECRET_MASK, HttpTransport, SseTransport, StdioTransport, bundled_config_text, masked, parse_config,
)
from runtime.errors import ConfigError
from runtime.config.mcp_import import ImportResult, import_mcp_json

MINIMAL = '[server]\nlisten = "127.0.0.1:50051"\n\n'


def load(result):
    """The imported servers, decoded by tern's own config parser."""
    return parse_config(MINIMAL + result.toml, "config.toml", None).mcp_servers


def run(data, label="in.json"):
    return import_mcp_json(json.dumps(data) if not isinstance(data, str) else data, label)


CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/Users/me/Desktop",
        "/Users/me/Downloads"
      ]
    },
    "github": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github"],
      "env": {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
      }
    }
  },
  "globalShortcut": "Ctrl+Space"
}
"""


def test_claude_desktop_file():
    result = import_mcp_json(CLAUDE_DESKTOP, "claude_desktop_config.json")
    assert isinstance(result, ImportResult)
    assert result.toml == (
        '[[mcp_servers]]\n'
        'name = "filesystem"\n'
        '[mcp_servers.transport]\n'
        'type = "stdio"\n'
        'command = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop", "/Users/me/Downloads"]\n'
        'sandbox = "auto"\n'
        'writable = ["/Users/me/Desktop", "/Users/me/Downloads"]\n'
        '\n'
        '[[mcp_servers]]\n'
        'name = "github"\n'
        'env = ["GITHUB_PERSONAL_ACCESS_TOKEN"]\n'
        '[mcp_servers.transport]\n'
        'type = "stdio"\n'
        'command = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-github"]\n'
        'sandbox = "auto"\n'
    )
    assert result.warnings == [
        "server github: env GITHUB_PERSONAL_ACCESS_TOKEN had a literal value in the source; "
        "export GITHUB_PERSONAL_ACCESS_TOKEN in tern's environment (the value was not copied)",
    ]
    filesystem, github = load(result)
    assert isinstance(filesystem.transport, StdioTransport) and filesystem.enabled
    assert filesystem.transport.args[-1] == "/Users/me/Downloads" and filesystem.env == []
    assert filesystem.transport.sandbox == "auto" and filesystem.transport.network  # tern mcp import proposes it
    assert filesystem.transport.writable == ["/Users/me/Desktop", "/Users/me/Downloads"]
    assert github.env == ["GITHUB_PERSONAL_ACCESS_TOKEN"]
    assert "ghp_" not in result.toml and not any("ghp_" in w for w in result.warnings)


def test_output_appends_to_the_bundled_config():
    result = import_mcp_json(CLAUDE_DESKTOP)
    config = parse_config(bundled_config_text() + "\n" + result.toml, "config.toml", None)
    assert [s.name for s in config.mcp_servers] == ["filesystem", "github"]
    assert [a.name for a in config.agents] == ["echo", "files", "assistant"]


def test_cursor_remote_servers_with_headers():
    result = run({"mcpServers": {
        "linear": {"url": "https://mcp.linear.app/mcp", "headers": {"Authorization": "Bearer lin_api_SECRET"}},
        "context7": {"serverUrl": "https://mcp.context7.com/mcp",
                     "headers": {"CONTEXT7_API_KEY": "${env:CONTEXT7_API_KEY}", "User-Agent": "tern"}},
        "legacy": {"url": "http://localhost:8931/sse"},
        "typed": {"url": "https://example.com/events/sse", "type": "streamable-http"},
        "old-style": {"url": "https://example.com/mcp", "transport": "sse"},
    }})
    assert result.warnings == [
        "server linear: header Authorization had a literal value in the source; export LINEAR_AUTHORIZATION in "
        'tern\'s environment (the value was not copied; the header is now "Bearer ${LINEAR_AUTHORIZATION}")',
        'server legacy: no transport type in the source; chose "sse" because the url ends in /sse '
        '(set type = "http" if the server speaks Streamable HTTP)',
    ]
    linear, context7, legacy, typed, old = load(result)
    assert isinstance(linear.transport, HttpTransport)
    assert linear.transport.url == "https://mcp.linear.app/mcp"
    assert linear.transport.headers == {"Authorization": "Bearer ${LINEAR_AUTHORIZATION}"}
    assert isinstance(context7.transport, HttpTransport)
    assert context7.transport.url == "https://mcp.context7.com/mcp"
    assert context7.transport.headers == {"CONTEXT7_API_KEY": "${CONTEXT7_API_KEY}", "User-Agent": "tern"}
    assert isinstance(legacy.transport, SseTransport) and legacy.transport.headers == {}
    assert isinstance(typed.transport, HttpTransport)
    assert isinstance(old.transport, SseTransport)
    assert "SECRET" not in result.toml


def test_header_references_stay_visible_in_masked_config():
    """The ${VAR} form written is the one tern's masking recognises as a reference."""
    result = run({"mcpServers": {"r": {"url": "https://x.example/mcp", "headers": {
        "Authorization": "Bearer abc", "X-Token": "${env:T}", "X-Plain": "value"}}}})
    config = parse_config(MINIMAL + result.toml, "config.toml", None)
    headers = masked(config)["mcp_servers"][0]["transport"]["headers"]
    assert headers["Authorization"] == "Bearer ${R_AUTHORIZATION}" and headers["X-Token"] == "${T}"
    assert headers["X-Plain"] == SECRET_MASK  # a literal: masked on display, but not a secret we moved


def test_literal_secret_header_without_scheme_and_variable_names():
    result = run({"mcpServers": {
        "a-b": {"url": "https://x.example/mcp", "headers": {"X-API-Key": "k1"}},
        "a_b": {"url": "https://y.example/mcp", "headers": {"X-API-Key": "k2"}},
        "1password": {"url": "https://z.example/mcp", "headers": {"Authorization": "opaque"}},
        "empty": {"url": "https://w.example/mcp", "headers": {"Authorization": ""}},
    }})
    a, b, one, empty = load(result)
    assert a.transport.headers == {"X-API-Key": "${A_B_X_API_KEY}"}
    assert b.transport.headers == {"X-API-Key": "${A_B_X_API_KEY_2}"}
    assert one.transport.headers == {"Authorization": "${MCP_1PASSWORD_AUTHORIZATION}"}
    assert empty.transport.headers == {"Authorization": ""}
    assert result.warnings[1] == (
        "server a_b: header X-API-Key had a literal value in the source; export A_B_X_API_KEY_2 in tern's "
        'environment (the value was not copied; the header is now "${A_B_X_API_KEY_2}")')
    assert len(result.warnings) == 3
    assert not any(k in result.toml or any(k in w for w in result.warnings) for k in ("k1", "k2", "opaque"))


VS_CODE = """{
  // .vscode/mcp.json: comments and trailing commas are allowed here
  "inputs": [
    {"type": "promptString", "id": "perplexity-key", "description": "Perplexity API Key", "password": true},
  ],
  "servers": {
    "perplexity": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "server-perplexity-ask"],
      "env": {"PERPLEXITY_API_KEY": "${input:perplexity-key}"},
    },
    "events": {"type": "sse", "url": "http://localhost:3001/events", /* local */ },
    "remote": {
      "type": "http",
      "url": "https://api.example.com/mcp",
      "headers": {"Authorization": "Bearer ${input:api-token}", "X-Workspace": "${workspaceFolder}"},
    },
    "fs": {
      "command": "node",
      "args": ["server.js", "${workspaceFolder}"],
      "cwd": "${workspaceFolder}/tools",
      "envFile": "${workspaceFolder}/.env",
      "dev": {"watch": "src/**/*.ts"},
    },
  },
}
"""


def test_vs_code_file_with_comments_inputs_and_types():
    result = import_mcp_json(VS_CODE, ".vscode/mcp.json")
    perplexity, events, remote, fs = load(result)
    assert isinstance(perplexity.transport, StdioTransport) and perplexity.env == ["PERPLEXITY_API_KEY"]
    assert isinstance(events.transport, SseTransport) and events.transport.url == "http://localhost:3001/events"
    assert isinstance(remote.transport, HttpTransport)
    assert remote.transport.headers == {"Authorization": "Bearer ${REMOTE_AUTHORIZATION}",
                                        "X-Workspace": "${workspaceFolder}"}
    assert fs.transport.args == ["server.js", "${workspaceFolder}"]
    assert result.warnings == [
        "server perplexity: env PERPLEXITY_API_KEY came from a VS Code input (inputs are not imported); "
        "export PERPLEXITY_API_KEY in tern's environment",
        "server remote: header Authorization used a VS Code input (inputs are not imported); "
        "export REMOTE_AUTHORIZATION in tern's environment",
        "server fs: args[1] uses ${workspaceFolder}, which tern does not expand there; edit the value in the config",
        "server fs: cwd uses ${workspaceFolder}, which tern does not expand there; edit the value in the config",
        "server fs: envFile was not read; export its variables in tern's environment and add their names to env",
        "server fs: ignored keys tern does not use: dev",
    ]


def test_vs_code_settings_json_shape():
    result = run({"editor.fontSize": 14, "mcp": {"servers": {"t": {"type": "stdio", "command": "uvx",
                                                                     "args": ["mcp-server-time"]}}}})
    (server,) = load(result)
    assert server.name == "t" and server.transport.args == ["mcp-server-time"]
    assert result.warnings == []


def test_comment_markers_inside_strings_are_kept():
    text = '{"servers": {"x": {"command": "cmd", "args": ["http://a/*b*/", "//c", "d,]", "e\\"//"],}}, // end\n}'
    (server,) = load(import_mcp_json(text))
    assert server.transport.args == ["http://a/*b*/", "//c", "d,]", 'e"//']


def test_bare_name_to_server_map_is_accepted():
    result = run({"time": {"command": "uvx", "args": ["mcp-server-time"]},
                  "docs": {"url": "https://docs.example.com/mcp"}})
    time, docs = load(result)
    assert time.name == "time" and isinstance(docs.transport, HttpTransport)


@pytest.mark.parametrize("data, message", [
    ({"time": {"command": "uvx"}, "theme": "dark"}, "no MCP servers found"),
    ({"time": {"command": "uvx"}, "other": {"foo": 1}}, "no MCP servers found"),
    ({}, 'no MCP servers found: expected an object with "mcpServers" (Claude Desktop, Cursor) or "servers"'),
    ([], "expected a JSON object at the top level, got an array"),
    ("null", "expected a JSON object at the top level, got null"),
    ({"mcpServers": []}, "mcpServers: expected an object of servers by name, got an array"),
    ({"servers": "x"}, "servers: expected an object of servers by name, got a string"),
    ('{"mcpServers": {"a": {"command": "x"}}', "line 1, column 39: invalid JSON: Expecting ',' delimiter"),
    ('{"mcpServers": {\n  "a": {"command": x}\n}}', "line 2, column 20: invalid JSON: Expecting value"),
    ("", "line 1, column 1: invalid JSON: Expecting value"),
    ("[" * 100_000, "invalid JSON"),
])
def test_errors_are_one_line_config_errors(data, message):
    with pytest.raises(ConfigError) as caught:
        run(data, "mcp.json")
    text = str(caught.value)
    assert text.startswith("mcp.json: ") and "\n" not in text
    assert message in text


def test_empty_servers_object_is_not_an_error():
    assert run({"mcpServers": {}}) == ImportResult("", ["mcpServers is empty: no servers to import"])


def test_both_keys_present_imports_the_first():
    result = run({"mcpServers": {"a": {"command": "x"}}, "servers": {"b": {"command": "y"}}})
    assert [s.name for s in load(result)] == ["a"]
    assert result.warnings == ["servers was ignored: only mcpServers was imported"]


def test_non_object_and_unusable_servers_are_skipped_with_a_reason():
    result = run({"mcpServers": {
        "text": "npx foo",
        "list": ["npx"],
        "nothing": None,
        "empty": {},
        "ftp": {"url": "ftp://files.example.com"},
        "ws": {"type": "websocket", "url": "wss://x.example"},
        "updir": {"command": "../bin/server"},
        "blank": {"command": "  "},
        "badargs": {"command": "x", "args": "--flag"},
        "badarg": {"command": "x", "args": [{"k": 1}]},
        "badenv": {"command": "x", "env": ["A=1"]},
        "badflag": {"command": "x", "disabled": "yes"},
        "My Bad": 5,
        "ok": {"command": "x"},
    }})
    assert [s.name for s in load(result)] == ["ok"]
    assert result.warnings == [
        "server text: skipped: expected an object, got a string",
        "server list: skipped: expected an object, got an array",
        "server nothing: skipped: expected an object, got null",
        "server empty: skipped: neither a command nor a url",
        "server ftp: skipped: url: expected an http:// or https:// URL",
        'server ws: skipped: type: transport "websocket" is not supported (tern speaks stdio, http and sse)',
        'server updir: skipped: command: a ".." path component is not allowed in tern; use an absolute path',
        "server blank: skipped: command: expected a program to run",
        'server badargs: skipped: args: expected an array, got a string',
        "server badarg: skipped: args[0]: expected a string, got an object",
        "server badenv: skipped: env: expected an object of variables, got an array",
        'server badflag: skipped: disabled: expected true or false, got a string',
        'server "My Bad": skipped: expected an object, got a number',
    ]


def test_disabled_and_enabled_flags():
    result = run({"mcpServers": {"off": {"command": "x", "disabled": True}, "on": {"command": "y", "disabled": False},
                                 "off2": {"command": "z", "enabled": False}}})
    assert "enabled = false" in result.toml
    assert [(s.name, s.enabled) for s in load(result)] == [("off", False), ("on", True), ("off2", False)]
    assert result.warnings == []


def test_weird_names_are_made_safe_and_unique():
    result = run({"mcpServers": {
        "My Server": {"command": "a"},
        "My-Server": {"command": "b"},
        "@scope/pkg.name": {"command": "c"},
        "ünï": {"command": "d"},
        "": {"command": "e"},
        "ok_name-2": {"command": "f"},
    }})
    assert [s.name for s in load(result)] == ["My-Server", "My-Server-2", "scope-pkg-name", "n",
                                               "server", "ok_name-2"]
    assert result.warnings == [
        'server "My Server" renamed to "My-Server" (tern server names use letters, digits, "-" and "_")',
        'server "My-Server" renamed to "My-Server-2" ("My-Server" is already used)',
        'server "@scope/pkg.name" renamed to "scope-pkg-name" (tern server names use letters, digits, "-" and "_")',
        'server "ünï" renamed to "n" (tern server names use letters, digits, "-" and "_")',
        'server "" renamed to "server" (tern server names use letters, digits, "-" and "_")',
    ]


def test_a_skipped_server_does_not_take_its_name():
    result = run({"mcpServers": {"a b": {"command": "../x"}, "a-b": {"command": "y"}}})
    assert [s.name for s in load(result)] == ["a-b"]
    assert result.warnings == ['server "a b": skipped: command: a ".." path component is not allowed in tern; '
                               "use an absolute path"]


STRANGE = ['say "hi"', "back\\slash\\", "C:\\Program Files\\node.exe", "ünïcödé ✓ 🐍", "line\nbreak\r\n",
           "tab\there", "nul\x00del\x7fesc\x1b", "'single' and '''triple'''", '"""', "${NOT_EXPANDED", "#not a comment",
           "", " "]


def test_string_escapes_round_trip():
    result = run({"mcpServers": {"s": {"command": STRANGE[2], "args": STRANGE, "cwd": "/tmp/\"q\"/ü",
                                       "env": {"K": "${K}"}},
                                 "h": {"url": "https://x.example/p?q=\"1\"",
                                       "headers": {"X-Note": 'ü "quoted" \\ \t', "X.Dotted": "v"}}}})
    s, h = load(result)
    assert s.transport.command == STRANGE[2] and s.transport.args == STRANGE
    assert s.transport.cwd == '/tmp/"q"/ü'
    assert h.transport.url == 'https://x.example/p?q="1"'
    assert h.transport.headers == {"X-Note": 'ü "quoted" \\ \t', "X.Dotted": "v"}
    assert "args = [\n" in result.toml  # a long array goes one item a line
    assert "ünïcödé ✓ 🐍" in result.toml  # non-ASCII stays readable


def test_numbers_and_booleans_in_args_become_strings():
    (server,) = load(run({"mcpServers": {"n": {"command": "x", "args": ["--port", 3000, 1.5, True]}}}))
    assert server.transport.args == ["--port", "3000", "1.5", "true"]


def test_unpaired_surrogate_skips_the_server():
    result = import_mcp_json('{"mcpServers": {"bad": {"command": "x", "args": ["\\ud800"]}, "ok": {"command": "y"}}}')
    assert [s.name for s in load(result)] == ["ok"]
    assert result.warnings == ["server bad: skipped: a string contains an unpaired UTF-16 surrogate, "
                               "which TOML cannot hold"]


def test_byte_order_mark_is_ignored():
    (server,) = load(import_mcp_json("\ufeff" + json.dumps({"mcpServers": {"a": {"command": "x"}}})))
    assert server.name == "a"


def test_env_references():
    result = run({"mcpServers": {"s": {"command": "x", "env": {
        "SAME": "${SAME}",
        "SAME_ENV": "${env:SAME_ENV}",
        "OTHER": "${env:GH_PAT}",
        "LITERAL": "plain",
        "NUMBER": 42,
        "PARTIAL": "prefix-${SAME}",
        "DEFAULTED": "${DEFAULTED:-fallback}",
        "": "x",
    }}}})
    (server,) = load(result)
    assert server.env == ["SAME", "SAME_ENV", "OTHER", "LITERAL", "NUMBER", "PARTIAL", "DEFAULTED"]
    literal = "server s: env {0} had a literal value in the source; export {0} in tern's environment " \
              "(the value was not copied)"
    assert result.warnings == [
        "server s: env OTHER is set from ${GH_PAT} in the source; tern passes OTHER through as it is, "
        'so export OTHER in tern\'s environment (for example OTHER="$GH_PAT")',
        literal.format("LITERAL"),
        literal.format("NUMBER"),
        literal.format("PARTIAL"),
        literal.format("DEFAULTED"),
        'server s: env name "" is not a variable name; left out',
    ]
    assert not any(v in result.toml for v in ("plain", "42", "fallback", "prefix"))


def test_header_env_references_are_converted():
    result = run({"mcpServers": {"r": {"url": "https://x.example/mcp", "headers": {
        "Authorization": "Bearer ${env:API_TOKEN}",
        "X-Both": "${env:A}:${B}",
        "X-Default": "${C:-secret-default}",
        "X-Port": 8080,
        "X-Null": None,
        "Bad Name": "v",
        "X-Split": "a\r\nInjected: 1",
    }}}})
    (server,) = load(result)
    assert server.transport.headers == {"Authorization": "Bearer ${API_TOKEN}", "X-Both": "${A}:${B}",
                                        "X-Default": "${C}", "X-Port": "8080"}
    assert result.warnings == [
        "server r: header X-Default: the default in ${C:-secret-default} was not copied; "
        "export C in tern's environment",
        "server r: header X-Null: expected a string, got null; left out",
        'server r: header name "Bad Name" is not valid in HTTP; left out',
        "server r: header X-Split: the value contains a line break or NUL; left out",
    ]
    assert "secret-default" not in result.toml


def test_url_secrets_and_unknown_keys_are_reported():
    result = run(
        {
            "mcpServers": {
                "r": {
                    "url": "https://x.example/mcp?profile=p&api_key=abc",
                    "serverUrl": "https://y",
                    "command": "ignored",
                    "autoApprove": ["t"],
                    "timeout": 60,
                    "type": "http",
                }
            }
        }
    )
    (server,) = load(result)
    assert server.transport.url == "https://x.example/mcp?profile=p&api_key=abc"
    assert result.warnings == [
        'server r: the url\'s query parameter "api_key" looks like a secret and was copied into the config as it '
        "is; pass it in a header instead if the server allows",
        "server r: ignored keys tern does not use: serverUrl, command, autoApprove, timeout",
    ]
    result = run(
        {
            "mcpServers": {
                "u": {"url": "https://me:pw@x.example/mcp"},
                "v": {"url": "https://x.example/mcp?to=a@b&page=2"},
            }
        }
    )
    assert [s.transport.url for s in load(result)] == [
        "https://me:pw@x.example/mcp",
        "https://x.example/mcp?to=a@b&page=2",
    ]
    assert result.warnings == [
        "server u: the url's user and password look like a secret and was copied into "
        "the config as it is; pass it in a header instead if the server allows"
    ]


def test_output_is_deterministic_and_in_source_order():
    data = {"mcpServers": {name: {"command": name} for name in ["zeta", "alpha", "mid"]}}
    first, second = run(data), run(data)
    assert first == second
    assert [s.name for s in load(first)] == ["zeta", "alpha", "mid"]


@settings(max_examples=200, deadline=None)
@given(args=st.lists(st.text(), max_size=4), command=st.text(min_size=1).filter(lambda c: c.strip() and ".." not in c))
def test_any_text_round_trips(args, command):
    result = run({"mcpServers": {"s": {"command": command, "args": args}}})
    (server,) = load(result)
    assert server.transport.command == command and server.transport.args == args
