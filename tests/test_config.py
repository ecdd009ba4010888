"""Config decoding: every class of error gives its one line; paths resolve; secrets hide."""

from pathlib import Path

import msgspec
import pytest

from runtime.config import (
    BUNDLED_LABEL, SECRET_MASK, HttpTransport, StdioTransport, bundled_config_text, dump_toml,
    find_config, load_config, masked, parse_config, parse_listen,
)
from runtime.errors import ConfigError

STDIO_A = '[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="stdio"\ncommand="x"\n'

OAUTH = '[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="http"\nurl="https://h/mcp"\n[mcp_servers.transport.oauth]\n'
BAD = [
    (STDIO_A + '[[mcp_servers]]\nname="b"\n[mcp_servers.transport]\ntype="tcp"\n',
     'mcp_servers[1].transport.type: expected "stdio", "http" or "sse", got "tcp"'),
    ('[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ncommand="x"\n',
     'mcp_servers[0].transport.type: required key is missing (expected "stdio", "http" or "sse")'),
    ('[server]\nlistn="x"\n', 'server.listn: unknown key (did you mean "listen"?)'),
    ('[server]\nzzzzzz=1\n', "server.zzzzzz: unknown key (expected one of: listen, api_key,"),
    ('bogus = 1\n', 'bogus: unknown key'),
    ('[server]\nmax_body_bytes="big"\n', 'server.max_body_bytes: expected an integer, got "big"'),
    ('[server]\nmax_body_bytes=1.5\n', 'server.max_body_bytes: expected an integer, got 1.5'),
    ('[server]\nallow_unauthenticated_remote="yes"\n',
     'server.allow_unauthenticated_remote: expected true or false, got "yes"'),
    ('[[agents]]\nname="a"\nkind="robot"\n',
     'agents[0].kind: expected "llm", "echo", "command", "tool" or "remote", got "robot"'),
    ('[[agents]]\nkind="echo"\n', "agents[0].name: required key is missing"),
    ('server = 5\n', "server: expected a table, got 5"),
    ('[tools]\ntimeout_secs = -1\n', "tools.timeout_secs: expected a number above 0, got -1.0"),
    ('[server]\nlisten = "nope"\n', 'server.listen: expected "HOST:PORT", got "nope"'),
    ('[server]\nlisten = "127.0.0.1:99999"\n', 'server.listen: expected a port from 0 to 65535'),
    ('[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="stdio"\ncommand="../bin/x"\n',
     'mcp_servers[0].transport.command: a ".." path component is not allowed, got "../bin/x"'),
    ('[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="stdio"\ncommand="bin\\\\..\\\\x"\n',
     'a ".." path component is not allowed'),
    ('[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="http"\nurl="ftp://x"\n',
     'mcp_servers[0].transport.url: expected an http:// or https:// URL, got "ftp://x"'),
    ('[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="sse"\n',
     "mcp_servers[0].transport.url: required key is missing"),
    (STDIO_A + STDIO_A, 'mcp_servers[1].name: "a" is already used by mcp_servers[0]'),
    ('[[agents]]\nname="a"\nkind="echo"\n[[agents]]\nname="a"\nkind="echo"\n',
     'agents[1].name: "a" is already used by agents[0]'),
    ('[[agents]]\nname="a"\nkind="llm"\n', "agents[0].model: an llm agent needs [agents.model]"),
    ('[[agents]]\nname="a"\nkind="llm"\n[agents.model]\nbase_ur="x"\n',
     'agents[0].model.base_ur: unknown key (did you mean "base_url"?)'),
    ('[[agents]]\nname="a b"\nkind="echo"\n', 'agents[0].name: expected letters, digits'),
    ('[[agents]]\nname="a"\nkind="echo"\nmax_tool_calls_per_run=-1\n',
     "agents[0].max_tool_calls_per_run: expected 0 (no limit) or more, got -1"),
    ('[[agents]]\nname="r"\nkind="remote"\nremote="nowhere"\n',
     'agents[0].remote: expected the name of an [[a2a.external_agents]] entry, got "nowhere"'),
    ('[a2a]\ndefault_agent="ghost"\n', 'a2a.default_agent: no agent named "ghost"'),
    ('[a2a]\nlisten_path="a2a"\n', 'a2a.listen_path: expected a path starting with "/", got "a2a"'),
    ('[[mcp_servers]]\nname="a"\nrestart="always"\n[mcp_servers.transport]\ntype="stdio"\ncommand="x"\n',
     'mcp_servers[0].restart: expected "on-failure" or "never", got "always"'),
    ('[server]\napi_key="k"\napi_key_env="K"\n', "server: set api_key or api_key_env, not both"),
    ('[server]\ntls_cert="c.pem"\n', "server: tls_cert and tls_key go together"),
    (OAUTH + 'client_metadata_url="http://c/m.json"\n',
     'mcp_servers[0].transport.oauth.client_metadata_url: a Client ID Metadata Document URL is https with a path'),
    (OAUTH + 'grant="client_credentials"\n',
     'mcp_servers[0].transport.oauth.client_id: grant = "client_credentials" needs the client_id'),
    (OAUTH + 'grant="password"\n', 'mcp_servers[0].transport.oauth.grant: expected "authorization_code", '),
    (OAUTH + 'grant="jwt_bearer"\n',
     'mcp_servers[0].transport.oauth: grant = "jwt_bearer" reads its JWT from one of assertion_file or assertion_env'),
    (OAUTH + 'grant="jwt_bearer"\nassertion_file="/a"\nassertion_env="A"\n', "from one of assertion_file or"),
    (OAUTH + 'assertion_env="A"\n', 'oauth.assertion_file/assertion_env: only used with grant = "jwt_bearer"'),
    (OAUTH + 'grant="enterprise_managed"\nclient_id="c"\nassertion_env="T"\nidp_client_id="i"\n',
     "mcp_servers[0].transport.oauth.idp_token_endpoint: expected an http:// or https:// URL"),
    (OAUTH + 'grant="enterprise_managed"\nclient_id="c"\nassertion_env="T"\nidp_token_endpoint="https://i/t"\n',
     'oauth.idp_client_id: grant = "enterprise_managed" needs'),
    (OAUTH + 'idp_client_id="i"\n', 'oauth.idp_*: only used with grant = "enterprise_managed"'),
    (OAUTH + 'dpop="sometimes"\n', 'oauth.dpop: expected "auto", "always" or "never"'),
    (OAUTH + 'redirect_port=70000\n', "mcp_servers[0].transport.oauth.redirect_port: expected 0 (any free port)"),
    (OAUTH + 'client_secret="s"\n', "mcp_servers[0].transport.oauth.client_secret: unknown key"),
]


@pytest.mark.parametrize("text, expected", BAD)
def test_each_error_class_gives_one_line(text, expected):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.toml", None)
    message = str(caught.value)
    assert message.startswith("config.toml: ")
    assert expected in message
    assert "\n" not in message


def test_toml_syntax_error_gives_line_and_column():
    with pytest.raises(ConfigError) as caught:
        parse_config('[server]\nlisten = "a"\nmax_body_bytes = \n', "c.toml", None)
    assert str(caught.value).startswith("c.toml: line 3, column 18: TOML syntax error")


@pytest.mark.parametrize("text", [
    '[server]\napi_key=123456789\n',
    '[[mcp_servers]]\nname="a"\n[mcp_servers.transport]\ntype="http"\nurl="http://x"\nheaders={Authorization=987654321}\n',
])
def test_secret_values_never_appear_in_errors(text):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.toml", None)
    assert "not shown: secret" in str(caught.value)
    assert "123456789" not in str(caught.value) and "987654321" not in str(caught.value)


def test_seed_format_decodes_into_tagged_transports():
    text = (
        '[[mcp_servers]]\nname = "github"\ntimeout_secs = 30\nenv = ["GITHUB_PERSONAL_ACCESS_TOKEN"]\n'
        '[mcp_servers.transport]\ntype = "stdio"\ncommand = "npx"\n'
        'args = ["-y", "@modelcontextprotocol/server-github"]\n'
        '[[mcp_servers]]\nname = "remote-tools"\n[mcp_servers.transport]\ntype = "http"\n'
        'url = "https://tools.example.com/mcp"\nheaders = {Authorization = "Bearer ${TOKEN}"}\n'
    )
    config = parse_config(text, "config.toml", Path("/etc/tern"))
    github, remote = config.mcp_servers
    assert isinstance(github.transport, StdioTransport)
    assert github.transport.args == ["-y", "@modelcontextprotocol/server-github"]
    assert github.env == ["GITHUB_PERSONAL_ACCESS_TOKEN"] and github.timeout_secs == 30
    assert github.restart == "on-failure" and github.max_restarts == 5 and github.protocol == "auto"
    assert isinstance(remote.transport, HttpTransport)
    assert remote.transport.headers == {"Authorization": "Bearer ${TOKEN}"}


def test_relative_paths_resolve_against_the_config_file(tmp_path):
    (tmp_path / "config.toml").write_text(
        '[state]\ndir = "state"\n[[agents]]\nname = "w"\nkind = "echo"\nworkspace = "ws"\n'
        '[[agents]]\nname = "d"\nkind = "echo"\n'
        '[[mcp_servers]]\nname = "s"\n[mcp_servers.transport]\ntype = "stdio"\ncommand = "x"\ncwd = "srv"\n')
    config = load_config(str(tmp_path / "config.toml")).config
    assert config.state.dir == str(tmp_path / "state")
    assert config.agents[0].workspace == str(tmp_path / "ws")
    assert config.agents[1].workspace == str(tmp_path / "state" / "workspaces" / "d")
    assert config.mcp_servers[0].transport.cwd == str(tmp_path / "srv")


def test_search_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("TERN_CONFIG", raising=False)
    assert find_config() is None  # nothing anywhere: the bundled default
    user = tmp_path / "xdg" / "tern" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text("")
    assert find_config() == user
    (tmp_path / "config.toml").write_text("")
    assert find_config() == Path("config.toml")
    env_file = tmp_path / "env.toml"
    env_file.write_text("")
    monkeypatch.setenv("TERN_CONFIG", str(env_file))
    assert find_config() == env_file
    flag_file = tmp_path / "flag.toml"
    flag_file.write_text("")
    assert find_config(str(flag_file)) == flag_file
    with pytest.raises(ConfigError, match="no such config file"):
        find_config(str(tmp_path / "missing.toml"))


def test_bundled_default_is_valid_and_offline(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "none"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "st"))
    monkeypatch.delenv("TERN_CONFIG", raising=False)
    loaded = load_config()
    assert loaded.label == BUNDLED_LABEL and loaded.path is None
    assert loaded.config.mcp_servers == []  # nothing to download: runs offline
    assert {a.name for a in loaded.config.agents} >= {"echo", "files", "assistant"}
    assert loaded.config.server.listen.startswith("127.0.0.1:")
    assert loaded.config.state.dir == str(tmp_path / "st" / "tern")
    assert "[[agents]]" in bundled_config_text()


def test_masked_hides_literal_secrets_but_keeps_references():
    config = parse_config(
        '[server]\napi_key = "hunter2-very-secret"\n[security]\nredact = ["s3cr3t-value"]\n'
        '[[mcp_servers]]\nname="h"\n[mcp_servers.transport]\ntype="http"\nurl="http://127.0.0.1/mcp"\n'
        'headers = {Authorization = "Bearer abcdef", X-Token = "Bearer ${TOKEN}"}\n', "c.toml", None)
    data = masked(config)
    text = dump_toml(data)
    assert "hunter2" not in text and "s3cr3t" not in text and "abcdef" not in text
    assert data["server"]["api_key"] == SECRET_MASK
    assert data["mcp_servers"][0]["transport"]["headers"] == {
        "Authorization": SECRET_MASK, "X-Token": "Bearer ${TOKEN}"}


def test_dump_toml_round_trips(tmp_path):
    original = load_config(str(Path(__file__).parent.parent / "config.toml")).config
    again = parse_config(dump_toml(masked(original)), "again.toml", tmp_path)
    assert again == original


def test_dump_toml_writes_any_string_back_unchanged(tmp_path):
    """The one TOML writer (also used by ``tern mcp import``) escapes what TOML needs."""
    strange = ['say "hi"', "C:\\dir\\", "ünïcödé 🐍", "line\nbreak\r\n", "tab\there", "nul\x00del\x7fesc\x1b",
               "'''", "#not a comment", ""]
    original = load_config(str(Path(__file__).parent.parent / "config.toml")).config
    echo = msgspec.structs.replace(original.agents[0], description="".join(strange), tools=strange)
    changed = msgspec.structs.replace(original, agents=[echo, *original.agents[1:]])
    assert parse_config(dump_toml(masked(changed)), "again.toml", tmp_path) == changed
    with pytest.raises(ValueError, match="unpaired UTF-16 surrogate"):
        dump_toml({"text": "\ud800"})


@pytest.mark.parametrize("listen, expected", [
    ("127.0.0.1:50051", ("127.0.0.1", 50051)), ("[::1]:8080", ("::1", 8080)), ("0.0.0.0:0", ("0.0.0.0", 0))])
def test_parse_listen(listen, expected):
    assert parse_listen(listen) == expected


SHA = "ab" * 32


@pytest.mark.parametrize("text, expected", [
    ('[scripts]\nallow = {report = "xyz"}\n',
     'scripts.allow.report: expected a SHA-256 as 64 hex characters, got "xyz"'),
    (f'[scripts]\nallow = {{report = "{SHA}0"}}\n', "scripts.allow.report: expected a SHA-256 as 64 hex"),
    (f'[scripts]\nallow = {{"../x" = "{SHA}"}}\n', 'scripts.allow: "../x" is not a script name'),
    (f'[scripts]\nallow = {{"" = "{SHA}"}}\n', 'scripts.allow: "" is not a script name'),
    (f'[scripts]\nallow = {{"a\\nb" = "{SHA}"}}\n', 'scripts.allow: "a\\nb" is not a script name'),
    ('[scripts]\ntimeout_secs = 0\n', "scripts.timeout_secs: expected a number above 0, got 0.0"),
    ('[scripts]\nmax_output_bytes = -1\n', "scripts.max_output_bytes: expected a number above 0, got -1"),
])
def test_scripts_section_problems_are_one_line(text, expected):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "config.toml", None)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_scripts_dir_resolves_against_the_config_file_and_hashes_any_case(tmp_path):
    (tmp_path / "config.toml").write_text(f'[scripts]\ndir = "scripts"\nallow = {{report = "{SHA.upper()}"}}\n')
    scripts = load_config(str(tmp_path / "config.toml")).config.scripts
    assert scripts.dir == str(tmp_path / "scripts") and scripts.allow == {"report": SHA.upper()}


HUGO = ('baseURL = "https://example.org/"\ntitle = "My site"\n'
        '[security]\nenableInlineShortcodes = true\n[params]\nx = 1\n')


def test_an_unrelated_config_toml_in_the_working_directory_is_skipped(tmp_path):
    """A Hugo site's config.toml (it even has a [security] table) never breaks tern: it
    is skipped with one line and the search goes on, here to the user config directory."""
    from tests.test_cli import tern

    site, xdg = tmp_path / "site", tmp_path / "xdg"
    site.mkdir()
    (site / "config.toml").write_text(HUGO)
    env = {"XDG_CONFIG_HOME": str(xdg), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = tern("config", "check", cwd=site, env_extra=env)
    assert done.returncode == 0 and done.stdout.startswith("<bundled config.toml>: OK"), done.stderr
    [note] = done.stderr.splitlines()
    assert f"skipping {site / 'config.toml'}: not a tern config (tern has no baseURL, params, title)" in note
    listed = tern("tools", cwd=site, env_extra=env)  # looks for its config more than once: says it once
    assert listed.returncode == 0 and listed.stderr.count("skipping") == 1, listed.stderr
    (xdg / "tern").mkdir(parents=True)
    (xdg / "tern" / "config.toml").write_text('[[agents]]\nname = "mine"\nkind = "echo"\n')
    done = tern("config", "check", cwd=site, env_extra=env)
    assert done.returncode == 0 and "agents (1): mine" in done.stdout
    for named in (["--config", "config.toml"], ["config", "check", "config.toml"]):  # named: strict
        args = [*named, "config", "check"] if named[0] == "--config" else named
        done = tern(*args, cwd=site, env_extra=env)
        assert done.returncode == 2 and "config.toml: baseURL: unknown key" in done.stderr, done.stderr
    done = tern("config", "check", cwd=site, env_extra={**env, "TERN_CONFIG": "config.toml"})
    assert done.returncode == 2 and "baseURL: unknown key" in done.stderr


@pytest.mark.parametrize("text,tern_s", [
    ('[[agents]]\nname = "a"\nkind = "echo"\nbogus = 1\n', True),  # a typo in a tern config: still strict
    ('[server]\nlisten = "127.0.0.1:1"\n', True),  # only tern's keys
    ("", True),
    ('[[mcp_servers]]\nname = "x"\ntransport = { type = "stdio" command = "y" }\n', True),  # broken, but tern's
    ("[editor]\nline-number = 'relative'\n", False),  # an editor's
    ("[server]\nport = 8080\n", False),  # only a name tern shares, with contents that are not tern's
    ("title = [unclosed\n", False),  # not TOML, nothing of tern's
])
def test_what_looks_like_a_tern_config(tmp_path, text, tern_s):
    from runtime.config import foreign_config

    path = tmp_path / "config.toml"
    path.write_text(text)
    assert (foreign_config(path) == "") is tern_s


def test_a_webhook_whose_secret_is_not_set_is_named_at_start(tmp_path, monkeypatch):
    """#34 item 6: not silent until the first POST."""
    from runtime.config import AgentConfig, Config, TriggerConfig
    from runtime.config.checks import missing_key_warnings

    monkeypatch.delenv("HOOK_SECRET_UNSET", raising=False)
    config = Config(agents=[AgentConfig(name="a", kind="echo")],
                    triggers=[TriggerConfig(name="ci", agent="a", message="m", kind="webhook",
                                            secret_env="HOOK_SECRET_UNSET")])
    [warning] = missing_key_warnings(config)
    assert "HOOK_SECRET_UNSET" in warning and "/hooks/ci" in warning
    monkeypatch.setenv("HOOK_SECRET_UNSET", "s" * 20)
    assert missing_key_warnings(config) == []
