"""Configured request headers with ``${VAR}`` references, for every outgoing client
(MCP servers, external A2A agents)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from runtime.errors import ConfigError
from runtime.log import register_secret

__all__ = ["expand_headers"]

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand_headers(headers: Mapping[str, str], owner: str,
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Header values with ``${VAR}`` taken from tern's environment.

    An unset variable is a configuration error, not an empty credential; expanded
    values, and each variable's value on its own (the token without its "Bearer "), are
    registered as secrets, so no log line or tool result can show them.
    """
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for key, value in headers.items():
        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in env:
                raise ConfigError(f"{owner}: header {key} needs ${{{name}}}, "
                                  "which is not set in tern's environment")
            register_secret(env[name])
            return env[name]

        expanded = _VAR.sub(lookup, value)
        if expanded != value:
            register_secret(expanded)
        out[key] = expanded
    return out
