"""`tern import ossa`: an OSSA agent manifest in, tern TOML out that tern's own parser
loads, with one warning per field tern does not honour."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.config import HttpTransport, StdioTransport, bundled_config_text, parse_config
from runtime.config.ossa import MAX_MANIFEST_BYTES, OssaImport, import_ossa
from runtime.errors import ConfigError
from runtime.mcp.names import ToolGlobs, assign_names

ROOT = Path(__file__).resolve().parent.parent
MINIMAL = '[server]\nlisten = "127.0.0.1:50051"\n\n'

# Verbatim from the seed, section 4.2 "OSSA Manifest Structure".
SEED = (
    '{ "ossa_version": "0.3.3", "agent": { "id": "bluefly/code-review-agent", "name": "Code Review Agent", '
    '"version": "3.2.1", "type": "reviewer", "description": "Automated code review with security analysis", '
    '"access_tier": "tier_2_write_limited" }, "capabilities": { "mcp_servers": [ { "name": "gitlab-server", '
    '"transport": "stdio", "tools": ["get_merge_request", "add_comment", "list_files"] } ], "a2a": { '
    '"agent_card_url": "https://review.blueflyagents.com/.well-known/agent.json", "skills": ["code-review", '
    '"dependency-audit"] } }, "governance": { "max_autonomy_level": 3, "requires_approval_for": '
    '["merge_request_approval", "production_deployment"], "audit_log": true, "rate_limits": { '
    '"requests_per_minute": 60, "tokens_per_hour": 500000 } }, "lifecycle": { "health_check_interval": 30, '
    '"restart_policy": "on-failure", "max_restarts": 5, "graceful_shutdown_timeout": 30 } }'
)

SEED_TOML = '''\
# From an OSSA manifest: agent "bluefly/code-review-agent" ("Code Review Agent"), version "3.2.1", type "reviewer"
[[agents]]
name = "code-review-agent"
kind = "llm"
description = "Automated code review with security analysis"
access_tier = "write"
tools = [
    "mcp_gitlab_server_get_merge_request",
    "mcp_gitlab_server_add_comment",
    "mcp_gitlab_server_list_files",
]
requests_per_minute = 60
tokens_per_hour = 500000
[agents.model]
# the manifest does not say which model: name one (and its base_url)
model = ""
[[agents.skills]]
id = "code-review"
name = "code-review"
[[agents.skills]]
id = "dependency-audit"
name = "dependency-audit"

# the manifest does not say how to start gitlab-server: set the command, then remove enabled = false
[[mcp_servers]]
name = "gitlab-server"
enabled = false
restart = "on-failure"
max_restarts = 5
tools_include = ["get_merge_request", "add_comment", "list_files"]
[mcp_servers.transport]
type = "stdio"
command = "/path/to/gitlab-server"

# governance.requires_approval_for: a person approves these calls
[[governance.rules]]
tool = "*merge_request_approval*"
decision = "ask"
agent = "code-review-agent"

[[governance.rules]]
tool = "*production_deployment*"
decision = "ask"
agent = "code-review-agent"

# capabilities.a2a.agent_card_url: the deployed agent; enable this to call it from tern
[[a2a.external_agents]]
name = "code-review-agent"
url = "https://review.blueflyagents.com/.well-known/agent.json"
enabled = false
'''


def manifest(**changes):
    """The seed's manifest with top-level sections replaced (None removes one)."""
    data = json.loads(SEED)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def run(data, builtin_tools=()):
    return import_ossa(json.dumps(data) if not isinstance(data, str) else data, "manifest.json", builtin_tools)


def load(result, base=MINIMAL):
    """The config the TOML makes, decoded by tern's own parser."""
    return parse_config(base + result.toml, "config.toml", None)


def fields(result):
    """The field each warning names."""
    return [warning.split(": ", 1)[0] for warning in result.warnings]


def warning(result, field):
    found = [w for w in result.warnings if w.startswith(field + ": ")]
    assert len(found) == 1, (field, result.warnings)
    return found[0]


# --- The seed's manifest -------------------------------------------------------------------


def test_seed_manifest_becomes_this_toml():
    result = run(SEED)
    assert isinstance(result, OssaImport) and result.agent == "code-review-agent"
    assert result.toml == SEED_TOML


def test_seed_manifest_loads_as_the_agent_it_describes():
    config = load(run(SEED))
    [agent] = config.agents
    assert (agent.name, agent.kind, agent.access_tier) == ("code-review-agent", "llm", "write")
    assert agent.description == "Automated code review with security analysis"
    assert (agent.requests_per_minute, agent.tokens_per_hour, agent.max_tool_calls_per_run) == (60, 500000, 0)
    assert [(s.id, s.name) for s in agent.skills] == [("code-review", "code-review"),
                                                      ("dependency-audit", "dependency-audit")]
    assert agent.model is not None and agent.model.model == ""

    [server] = config.mcp_servers
    assert server.name == "gitlab-server" and not server.enabled
    assert isinstance(server.transport, StdioTransport) and server.transport.command == "/path/to/gitlab-server"
    assert (server.restart, server.max_restarts) == ("on-failure", 5)
    assert server.tools_include == ["get_merge_request", "add_comment", "list_files"]

    assert [(r.tool, r.decision, r.agent) for r in config.governance.rules] == [
        ("*merge_request_approval*", "ask", "code-review-agent"),
        ("*production_deployment*", "ask", "code-review-agent"),
    ]
    [peer] = config.a2a.external_agents
    assert (peer.name, peer.url, peer.enabled) == (
        "code-review-agent", "https://review.blueflyagents.com/.well-known/agent.json", False)


def test_seed_agent_may_call_exactly_the_declared_tools_under_the_names_tern_gives_them():
    agent = load(run(SEED)).agents[0]
    declared = [("gitlab-server", t) for t in ("get_merge_request", "add_comment", "list_files")]
    names, collisions = assign_names(declared + [("gitlab-server", "delete_branch"), ("other", "add_comment")])
    assert collisions == []
    allowed = ToolGlobs(agent.tools)
    assert [n.tool for n in names if n.server == "gitlab-server" and allowed.matches(n.name)] == [
        "get_merge_request", "add_comment", "list_files"]
    assert not allowed.matches("mcp_other_add_comment") and not allowed.matches("file_read")


def test_seed_warnings_name_each_field_tern_does_not_honour():
    result = run(SEED)
    assert fields(result) == [
        "capabilities.mcp_servers[0]",
        "capabilities.a2a.agent_card_url",
        "governance.max_autonomy_level",
        "governance.requires_approval_for[0]",
        "governance.requires_approval_for[1]",
        "lifecycle.health_check_interval",
        "lifecycle.graceful_shutdown_timeout",
        "agent",
    ]
    assert "set its command" in warning(result, "capabilities.mcp_servers[0]")
    assert '"merge_request_approval" is not a tool tern knows' in warning(result, "governance.requires_approval_for[0]")
    assert "[agents.model]" in warning(result, "agent")
    assert all("\n" not in w for w in result.warnings)


def test_the_import_appends_to_the_bundled_config():
    config = load(run(SEED), base=bundled_config_text() + "\n")
    assert [a.name for a in config.agents][-1] == "code-review-agent"
    assert config.agents[0].name == "echo" and config.governance.rules[0].agent == "code-review-agent"


# --- Each part of the mapping --------------------------------------------------------------


@pytest.mark.parametrize("tier, expected, warned", [
    ("tier_1_read", "read", False),
    ("tier_2_write_limited", "write", False),
    ("tier_3_full_access", "full", False),
    ("tier_4_policy", "full", True),
    ("tier_9_root", "read", True),
])
def test_access_tiers(tier, expected, warned):
    data = manifest()
    data["agent"]["access_tier"] = tier
    result = run(data)
    assert load(result).agents[0].access_tier == expected
    assert ("agent.access_tier" in fields(result)) == warned
    if tier == "tier_4_policy":
        assert "no policy tier" in warning(result, "agent.access_tier")


@pytest.mark.parametrize("kind, expected", [("guardian", "full"), ("Analyzer", "read"), ("bridge", "write"),
                                            ("poet", "read"), (None, "read")])
def test_a_missing_tier_comes_from_the_agent_type_or_is_read(kind, expected):
    data = manifest()
    del data["agent"]["access_tier"]
    if kind is None:
        del data["agent"]["type"]
    else:
        data["agent"]["type"] = kind
    result = run(data)
    assert load(result).agents[0].access_tier == expected
    assert "missing" in warning(result, "agent.access_tier")
    assert ("agent.type" in fields(result)) == (kind == "poet")


def test_approvals_name_declared_and_builtin_tools_exactly_and_glob_the_rest():
    data = manifest()
    data["governance"]["requires_approval_for"] = ["Add-Comment", "shell_exec", "production_deployment",
                                                   "production_deployment"]
    result = run(data, builtin_tools=["shell_exec", "file_write"])
    rules = load(result).governance.rules
    assert [r.tool for r in rules] == ["mcp_gitlab_server_add_comment", "shell_exec", "*production_deployment*"]
    assert all(r.decision == "ask" and r.agent == "code-review-agent" for r in rules)
    assert [f for f in fields(result) if f.startswith("governance.requires")] == ["governance.requires_approval_for[2]"]
    glob = ToolGlobs([rules[2].tool])
    assert glob.matches("mcp_k8s_production_deployment_create") and not glob.matches("mcp_k8s_deploy")


def test_servers_transports_and_tools():
    data = manifest()
    data["capabilities"]["mcp_servers"] = [
        {"name": "search", "transport": "streamable-http"},
        {"name": "legacy", "transport": "sse", "tools": ["find*"]},
        {"name": "bus", "transport": "websocket", "tools": ["publish"]},
        {"name": "git hub"},
        {"name": "search", "transport": "stdio"},
    ]
    result = run(data)
    config = load(result)
    assert [s.name for s in config.mcp_servers] == ["search", "legacy", "git-hub", "search-2"]
    assert not any(s.enabled for s in config.mcp_servers)
    search, legacy, github, _ = config.mcp_servers
    assert isinstance(search.transport, HttpTransport) and search.transport.url == "https://search.invalid/mcp"
    assert search.tools_include == [] and isinstance(github.transport, StdioTransport)
    assert legacy.tools_include == ["find[*]"]  # a literal name, not a glob
    assert ToolGlobs(legacy.tools_include).matches("find*") and not ToolGlobs(legacy.tools_include).matches("findx")
    assert config.agents[0].tools == ["mcp_search_*", "mcp_legacy_find_", "mcp_git_hub_*", "mcp_search_2_*"]
    assert "websocket" in warning(result, "capabilities.mcp_servers[2].transport")
    assert "missing" in warning(result, "capabilities.mcp_servers[3].transport")
    assert '"git-hub"' in warning(result, "capabilities.mcp_servers[3].name")
    assert '"search-2"' in warning(result, "capabilities.mcp_servers[4].name")


@pytest.mark.parametrize("policy, restart", [("always", "on-failure"), ("unless-stopped", "on-failure"),
                                             ("never", "never"), ("On-Failure", "on-failure")])
def test_restart_policy_applies_to_the_agents_mcp_servers(policy, restart):
    data = manifest()
    data["lifecycle"]["restart_policy"] = policy
    data["lifecycle"]["max_restarts"] = 2
    result = run(data)
    server = load(result).mcp_servers[0]
    assert (server.restart, server.max_restarts) == (restart, 2)
    assert "lifecycle.restart_policy" not in fields(result)


def test_lifecycle_with_no_servers_or_an_unknown_policy_is_warned():
    data = manifest(capabilities={}, lifecycle={"restart_policy": "sometimes", "max_restarts": 1})
    result = run(data)
    assert "(on-failure, always, never)" in warning(result, "lifecycle.restart_policy")
    assert "it has none" in warning(result, "lifecycle.max_restarts")
    assert load(result).mcp_servers == []


def test_governance_fields_tern_does_not_honour():
    data = manifest(governance={"audit_log": False, "rate_limits": {"requests_per_minute": 0, "tokens_per_hour": 10,
                                                                     "concurrent_tasks": 4}})
    result = run(data)
    agent = load(result).agents[0]
    assert (agent.requests_per_minute, agent.tokens_per_hour) == (0, 10)
    assert "tern audits every tool call" in warning(result, "governance.audit_log")
    assert "no limit" in warning(result, "governance.rate_limits.requests_per_minute")
    assert "ignored" in warning(result, "governance.rate_limits.concurrent_tasks")
    assert "governance.max_autonomy_level" not in fields(run(manifest(governance={"audit_log": True})))
    assert "governance.audit_log" not in fields(run(manifest(governance={"audit_log": True})))


def test_unknown_fields_and_versions_are_warned():
    data = manifest(ossa_version="1.0", dependencies=["x"], signature="abc")
    data["agent"]["owner"] = "team"
    data["capabilities"]["a2a"]["streaming"] = True
    result = run(data)
    assert "1.0" in warning(result, "ossa_version")
    for field in ("dependencies", "signature", "agent.owner", "capabilities.a2a.streaming"):
        assert "ignored" in warning(result, field)
    assert "missing" in warning(run(manifest(ossa_version=None)), "ossa_version")
    odd = run(manifest(**{"x\ny": 1, "$schema": "https://example.com/ossa.json"}))
    assert fields(odd) == [*fields(run(SEED))[:-1], '"x\\ny"', "$schema", "agent"]
    assert all("\n" not in w for w in odd.warnings)
    assert "ossa_version" not in fields(run(manifest(ossa_version="0.3.1")))


@pytest.mark.parametrize("agent, name, field", [
    ({"id": "acme/Code Review:2"}, "Code-Review-2", "agent.id"),
    ({"name": "Code Review Agent"}, "code-review-agent", "agent.id"),
    ({"id": "x/", "name": "Ünïcode Bot"}, "unicode-bot", "agent.id"),
    ({"id": "acme/日本"}, "ossa-agent", "agent.id"),
    ({"id": "a" * 80}, "a" * 64, "agent.id"),
])
def test_agent_names(agent, name, field):
    result = run(manifest(agent=agent))
    assert load(result).agents[0].name == name == result.agent
    assert field in fields(result)


def test_a_minimal_manifest_gives_an_agent_with_no_tools():
    result = run({"ossa_version": "0.3.3", "agent": {"id": "solo"}})
    [agent] = load(result).agents
    assert (agent.name, agent.tools, agent.access_tier, agent.description) == ("solo", [], "read", "")
    assert load(result).governance.rules == [] and load(result).a2a.external_agents == []


def test_text_is_carried_safely():
    data = manifest()
    data["agent"]["description"] = 'line one\nline two "quoted" \\ \x1b[31m'
    data["agent"]["name"] = "evil\n[server]\nlisten = \"0.0.0.0:1\""
    result = run(data)
    config = load(result, base="")
    assert config.agents[0].description == data["agent"]["description"]
    assert config.server.listen == "127.0.0.1:50051"  # the default: the name stayed in its comment
    assert result.toml.splitlines()[0].startswith("# From an OSSA manifest: ") and "\n[server]" not in result.toml


# --- Input that is not a manifest ------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("{not json", "manifest.json: line 1, column 2: invalid JSON"),
    ('{"agent": {"id": "a"}, "x": NaN}', "manifest.json: invalid JSON: NaN is not a JSON number"),
    ("[1, 2]", "manifest.json: expected a JSON object (an OSSA manifest), got an array"),
    ('{"agent": ' + "[" * 200 + "]" * 200 + "}", "manifest.json: invalid JSON: nested more than 128 levels deep"),
    ('{"ossa_version": "0.3.3"}', "manifest.json: agent: missing"),
    ('{"agent": ["id"]}', "manifest.json: agent: expected an object, got an array"),
    ('{"agent": {}}', "manifest.json: agent: needs an id or a name to name the agent after"),
    ('{"agent": {"id": 7}}', "manifest.json: agent.id: expected a string, got a number"),
    ('{"agent": {"id": "a"}, "capabilities": {"mcp_servers": "gitlab"}}',
     "manifest.json: capabilities.mcp_servers: expected an array, got a string"),
    ('{"agent": {"id": "a"}, "capabilities": {"mcp_servers": [{"name": "g", "tools": "x"}]}}',
     "manifest.json: capabilities.mcp_servers[0].tools: expected an array, got a string"),
    ('{"agent": {"id": "a"}, "capabilities": {"mcp_servers": [{"transport": "stdio"}]}}',
     "manifest.json: capabilities.mcp_servers[0].name: missing"),
    ('{"agent": {"id": "a"}, "governance": {"rate_limits": {"requests_per_minute": "60"}}}',
     "manifest.json: governance.rate_limits.requests_per_minute: expected a whole number 0 or more, got a string"),
    ('{"agent": {"id": "a"}, "governance": {"rate_limits": {"tokens_per_hour": -1}}}',
     "manifest.json: governance.rate_limits.tokens_per_hour: expected a whole number 0 or more, got -1"),
    ('{"agent": {"id": "a"}, "lifecycle": {"max_restarts": 1e30}}',
     "manifest.json: lifecycle.max_restarts: expected a whole number 0 or more, got a number too large for TOML"),
    ('{"agent": {"id": "a"}, "governance": {"requires_approval_for": "deploy"}}',
     "manifest.json: governance.requires_approval_for: expected an array, got a string"),
    ('{"agent": {"id": "a"}, "governance": {"audit_log": "yes"}}',
     "manifest.json: governance.audit_log: expected true or false, got a string"),
    ('{"agent": {"id": "a"}, "lifecycle": {"health_check_interval": "30s"}}',
     "manifest.json: lifecycle.health_check_interval: expected a number of seconds, got a string"),
    ('{"agent": {"id": "a", "description": "\\ud800"}}',
     "manifest.json: agent.description: a string contains an unpaired UTF-16 surrogate"),
])
def test_bad_input_is_one_sentence(text, expected):
    with pytest.raises(ConfigError) as caught:
        run(text)
    message = str(caught.value)
    assert message.startswith(expected) and "\n" not in message


def test_a_manifest_over_the_bound_is_refused_before_it_is_decoded():
    text = json.dumps({"agent": {"id": "a", "description": "x" * MAX_MANIFEST_BYTES}})
    with pytest.raises(ConfigError, match=r"^manifest\.json: larger than 1024 KiB"):
        run(text)
    with pytest.raises(ConfigError, match="larger than"):
        run('{"agent": {"id": "a"}, "d": "' + "é" * (MAX_MANIFEST_BYTES // 2) + '"}')  # in bytes, not characters


# --- The command line, as a real subprocess --------------------------------------------------


def tern(*args, cwd, stdin=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERN_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "runtime", *args], capture_output=True, text=True, cwd=cwd,
                          env=env, input=stdin, timeout=60)


def test_cli_prints_toml_and_warns_on_stderr(tmp_path):
    (tmp_path / "manifest.json").write_text(SEED, encoding="utf-8")
    done = tern("import", "ossa", "manifest.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == SEED_TOML
    assert done.stderr.splitlines() == [f"tern: warning: {w}" for w in run(SEED).warnings]
    piped = tern("import", "ossa", "-", cwd=tmp_path, stdin=SEED)
    assert piped.returncode == 0 and piped.stdout == SEED_TOML


def test_cli_output_writes_a_config_that_config_check_accepts(tmp_path):
    (tmp_path / "manifest.json").write_text(SEED, encoding="utf-8")
    done = tern("import", "ossa", "manifest.json", "--output", "agent.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "agent.toml").read_text(encoding="utf-8") == SEED_TOML
    assert 'agent "code-review-agent"' in done.stdout and len(done.stderr.splitlines()) == len(run(SEED).warnings)
    check = tern("config", "check", "--config", "agent.toml", cwd=tmp_path)
    assert check.returncode == 0, check.stderr
    assert "agents (1): code-review-agent" in check.stdout and "gitlab-server (stdio)" in check.stdout

    again = tern("import", "ossa", "manifest.json", "--output", "agent.toml", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr == "tern: agent.toml already exists; add --append to add the " \
                                                     "agent to it\n"


def test_cli_append_adds_to_a_config_only_when_the_result_loads(tmp_path):
    (tmp_path / "manifest.json").write_text(SEED, encoding="utf-8")
    config = tmp_path / "config.toml"
    original = '[[agents]]\nname = "echo"\nkind = "echo"\n\n[[governance.rules]]\ntool = "*"\ndecision = "allow"'
    config.write_text(original, encoding="utf-8")  # no newline at the end
    done = tern("import", "ossa", "manifest.json", "-o", "config.toml", "--append", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert config.read_text(encoding="utf-8") == original + "\n\n" + SEED_TOML
    assert done.stderr.splitlines()[-1].startswith("tern: warning: governance.rules: config.toml has 1 rules before")
    loaded = parse_config(config.read_text(encoding="utf-8"), "config.toml", tmp_path)
    assert [a.name for a in loaded.agents] == ["echo", "code-review-agent"] and len(loaded.governance.rules) == 3

    before = config.read_text(encoding="utf-8")
    twice = tern("import", "ossa", "manifest.json", "-o", "config.toml", "--append", cwd=tmp_path)
    assert twice.returncode == 2 and twice.stdout == ""
    assert twice.stderr.splitlines() == [
        'tern: config.toml with the import added: mcp_servers[1].name: "gitlab-server" is already used by '
        'mcp_servers[0]']
    assert config.read_text(encoding="utf-8") == before


def _big_manifest():
    return json.dumps({"agent": {"id": "a", "description": "x" * MAX_MANIFEST_BYTES}})


@pytest.mark.parametrize("content, expected", [
    (b"{not json", "tern: manifest.json: line 1, column 2: invalid JSON: "),
    (b'{"agent": ' + b"[" * 5000 + b"]" * 5000 + b"}", "tern: manifest.json: invalid JSON: nested more than 128"),
    (_big_manifest().encode(), "tern: manifest.json: larger than 1024 KiB, which no OSSA manifest needs"),
    (b'{"agent": {"id": "a"}, "capabilities": {"mcp_servers": "gitlab"}}',
     "tern: manifest.json: capabilities.mcp_servers: expected an array, got a string"),
    (b'{"ossa_version": "0.3.3"}', "tern: manifest.json: agent: missing"),
    (b'{"agent": {"id": "\xff"}}', "tern: cannot read manifest.json: not UTF-8 text (byte 18)"),
    (None, "tern: cannot read manifest.json: No such file or directory"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "manifest.json").write_bytes(content)
    done = tern("import", "ossa", "manifest.json", "-o", "out.toml", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(expected), done.stderr
    assert not (tmp_path / "out.toml").exists()


def test_cli_append_needs_output(tmp_path):
    (tmp_path / "manifest.json").write_text(SEED, encoding="utf-8")
    done = tern("import", "ossa", "manifest.json", "--append", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "tern: --append needs --output PATH: the config to add the agent to\n"
