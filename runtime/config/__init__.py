"""config.toml: its schema, loading, checks, error sentences and TOML writing.

A bad file gives one line naming the file, the key path and what was expected::

    config.toml: mcp_servers[1].transport.type: expected "stdio", "http" or "sse", got "tcp"

The modules, one job each: ``schema`` (the msgspec Structs), ``load`` (finding and
decoding the file), ``checks`` (what a type cannot express), ``sentences`` (decoding
errors as one line), ``dump`` (TOML out, secrets masked). The names below are the
public surface; import them from here.
"""

from __future__ import annotations

from runtime.config.checks import parse_listen
from runtime.config.dump import SECRET_MASK, dump_toml, masked
from runtime.config.load import (
    BUNDLED_LABEL, LoadedConfig, bundled_config_text, find_config, foreign_config, load_config, parse_config,
    user_config_dir, user_state_dir,
)
from runtime.config.schema import (
    A2aConfig, AccessTier, AgentConfig, AgentPrompt, ApprovalRule, Config, ExternalAgent, GovernanceConfig,
    HttpTransport, McpAsk, McpAskQuestion, McpPreset, McpServerEntry, McpServerExposure, ModelConfig, OAuthConfig,
    PeerAuth, PushWebhook, SamplingConfig, ScriptsConfig, SecurityConfig, ServerConfig, ShellRule, Skill,
    SseTransport, StateConfig, StdioTransport, ToolsConfig, TriggerConfig, TriggerSink, oauth_of,
)

__all__ = [
    "Config",
    "TriggerConfig",
    "TriggerSink",
    "ServerConfig",
    "McpServerEntry",
    "StdioTransport",
    "HttpTransport",
    "SseTransport",
    "OAuthConfig",
    "SamplingConfig",
    "oauth_of",
    "McpServerExposure",
    "McpAsk",
    "McpAskQuestion",
    "McpPreset",
    "A2aConfig",
    "ExternalAgent",
    "PeerAuth",
    "PushWebhook",
    "AgentConfig",
    "AgentPrompt",
    "ModelConfig",
    "Skill",
    "ToolsConfig",
    "GovernanceConfig",
    "ApprovalRule",
    "AccessTier",
    "ScriptsConfig",
    "ShellRule",
    "SecurityConfig",
    "StateConfig",
    "LoadedConfig",
    "BUNDLED_LABEL",
    "find_config",
    "foreign_config",
    "load_config",
    "parse_config",
    "bundled_config_text",
    "user_config_dir",
    "user_state_dir",
    "parse_listen",
    "masked",
    "dump_toml",
    "SECRET_MASK",
]
