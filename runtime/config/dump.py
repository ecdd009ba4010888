"""tern's one TOML writer, and masking secrets for display.

``masked`` turns a Config into plain data with every literal secret replaced;
``dump_toml`` renders plain data as a TOML document that ``parse_config`` reads back
unchanged (``tern config show``). The pieces it is made of (``toml_string``,
``toml_key``, ``toml_value``, ``toml_line``) also write ``tern mcp import``'s output,
which lays out its tables by hand.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from runtime.config.schema import Config

__all__ = ["SECRET_MASK", "masked", "mask_url_password", "mask_url", "mask_urls", "mask_args", "looks_like_token",
           "dump_toml", "toml_string", "toml_key", "toml_value",
           "toml_line"]

SECRET_MASK = "********"
_ENV_REFERENCE = re.compile(r"^(?:[^$]*\$\{[A-Za-z_][A-Za-z0-9_]*\}[^$]*)+$")


def mask_url_password(url: str) -> str:
    """``postgresql://tern:s3cret@db/tern`` shown as ``postgresql://tern:********@db/tern``
    (a ``${VAR}`` in its place stays: it names where the password comes from)."""
    match = re.match(r"^([a-z]+://[^:/@]*:)([^@]*)(@.*)$", url)
    if match is None or _ENV_REFERENCE.match(match.group(2)):
        return url
    return match.group(1) + SECRET_MASK + match.group(3)


_SECRET_WORDS = re.compile(r"pass(word|wd)?|secret|token|api[-_]?key|auth|credential|private[-_]?key|"
                           r"session|cookie|signature|sig\b|access[-_]?key|bearer|dsn", re.I)
_TOKEN_SHAPE = re.compile(r"^[A-Za-z0-9._~+/=-]{20,}$")


def looks_like_token(text: str) -> bool:
    """A value that is probably a credential by its shape alone: 20 or more characters of
    a token's alphabet, with both letters and digits (a long word or a path is not one)."""
    return bool(_TOKEN_SHAPE.match(text)) and any(c.isdigit() for c in text) and any(c.isalpha() for c in text) \
        and "/" not in text.strip("/=")[:1] and text.count("/") < 2


def mask_url(url: str) -> str:
    """A URL with what may be a secret masked: the userinfo's password, every query value,
    and each path segment shaped like a token (``/hooks/T0K3N...``). ``${VAR}`` stays."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return SECRET_MASK
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, password = userinfo.partition(":")
        if colon and not _ENV_REFERENCE.match(password):
            netloc = f"{user}:{SECRET_MASK}@{host}"
        elif not colon and looks_like_token(user):
            netloc = f"{SECRET_MASK}@{host}"
    path = "/".join(SECRET_MASK if looks_like_token(seg) else seg for seg in parts.path.split("/"))
    query = "&".join(f"{k}={SECRET_MASK}" if eq and v and not _ENV_REFERENCE.match(v) else pair
                     for pair in parts.query.split("&") if pair for k, eq, v in [pair.partition("=")])
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


_URL_IN_TEXT = re.compile(r"[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)


def mask_urls(text: str) -> str:
    """``text`` (an error that quotes an address) with each URL in it ``mask_url``-ed."""
    return _URL_IN_TEXT.sub(lambda m: mask_url(m.group(0)), text) if text else text


def mask_args(args: list[str]) -> list[str]:
    """A command's arguments with what may be a secret masked: the value of an option named
    like one (``--password X``, ``--api-key=X``, ``TOKEN=X``), URLs (``mask_url``), and
    anything shaped like a token. The program's own flags and paths stay readable."""
    out: list[str] = []
    secret_next = False
    for arg in args:
        if secret_next and not arg.startswith("-"):
            out.append(arg if _ENV_REFERENCE.match(arg) else SECRET_MASK)
            secret_next = False
            continue
        secret_next = False
        name, eq, value = arg.partition("=")
        if "://" in arg and not eq or "://" in arg.split("=", 1)[0]:
            out.append(mask_url(arg))
        elif eq and _SECRET_WORDS.search(name) and not _ENV_REFERENCE.match(value):
            out.append(f"{name}={SECRET_MASK}")
        elif eq and "://" in value:
            out.append(f"{name}={mask_url(value)}")
        elif arg.startswith("-") and _SECRET_WORDS.search(arg):
            out.append(arg)
            secret_next = True
        elif looks_like_token(arg) or eq and looks_like_token(value):
            out.append(f"{name}={SECRET_MASK}" if eq else SECRET_MASK)
        else:
            out.append(arg)
    return out


def masked(config: Config) -> dict[str, Any]:
    """The config as plain data with every literal secret, and whatever may be one,
    replaced by a mask: what every view shows (the API, the dashboard, ``tern config
    show``; only ``tern config show --secrets`` shows the file's values).

    Values that only reference variables (``Bearer ${TOKEN}``) stay visible: they say
    where the secret comes from without containing it. An MCP server's ``env`` values,
    its ``args`` (``mask_args``) and every URL (``mask_url``: a password, query values,
    token-shaped path segments) are masked too: people put database passwords in args
    and tokens in URLs.
    """

    def walk(node: Any, key: str) -> Any:
        if isinstance(node, dict):
            if key in ("headers", "env"):
                return {k: v if isinstance(v, str) and _ENV_REFERENCE.match(v) else SECRET_MASK
                        for k, v in node.items()}
            return {k: walk(v, k) for k, v in node.items()}
        if isinstance(node, list):
            if key == "redact":
                return [SECRET_MASK for _ in node]
            if key == "args" and all(isinstance(v, str) for v in node):
                return mask_args(node)
            return [walk(v, key) for v in node]
        if isinstance(node, str) and node and key in ("api_key", "topic"):  # an ntfy topic is its password
            return SECRET_MASK
        if isinstance(node, str) and key == "postgres_url":
            return mask_url_password(node)
        if isinstance(node, str) and node and (key == "url" or key.endswith("_url") or key == "url_prefix"):
            return mask_url(node)
        return node

    data = walk(msgspec.to_builtins(config), "")
    for entry in data.get("server", {}).get("keys", []):  # [[server.keys]] key = "...": a literal key
        if entry.get("key"):
            entry["key"] = SECRET_MASK
    return data


def dump_toml(data: dict[str, Any]) -> str:
    """Render plain config data as TOML (tables, arrays of tables, inline small maps)."""

    def is_table(value: Any) -> bool:
        return isinstance(value, dict) and any(isinstance(v, (dict, list)) for v in value.values()) \
            or isinstance(value, dict) and len(value) > 3

    def table_array(value: Any) -> bool:
        return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)

    lines: list[str] = []

    def emit(table: dict[str, Any], prefix: str) -> None:
        nested = []
        for key, value in table.items():
            if value is None:
                continue
            if (is_table(value) and key not in ("headers", "timeouts")) or table_array(value):
                nested.append((key, value))
            else:
                lines.append(toml_line(key, value))
        for key, value in nested:
            name = f"{prefix}{toml_key(key)}"
            if isinstance(value, list):
                for item in value:
                    lines.extend(["", f"[[{name}]]"])
                    emit(item, name + ".")
            else:
                lines.extend(["", f"[{name}]"])
                emit(value, name + ".")

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


# --- The pieces, shared with the MCP importer ---------------------------------------------

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
_SPECIAL = re.compile(r'["\\\x00-\x1f\x7f]')
_SURROGATE = re.compile("[\ud800-\udfff]")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_string(text: str) -> str:
    """A TOML basic string: readable (non-ASCII as is), control characters escaped.

    Raises ValueError for text TOML cannot hold at all (a lone UTF-16 surrogate, which
    JSON from another program may carry).
    """
    if _SURROGATE.search(text):
        raise ValueError("a string contains an unpaired UTF-16 surrogate, which TOML cannot hold")
    body = _SPECIAL.sub(lambda m: _ESCAPES.get(m.group(0)) or f"\\u{ord(m.group(0)):04X}", text)
    return f'"{body}"'


def toml_key(key: str) -> str:
    """A key, bare when TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """A value on one line: arrays and tables inline (None, which TOML lacks, as "")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if value is None:
        return '""'
    return toml_string(value) if isinstance(value, str) else repr(value)


def toml_line(key: str, value: Any, width: int | None = None) -> str:
    """``key = value``; with ``width``, an array whose line would be longer than that
    goes one item a line instead (easier to read and edit by hand)."""
    line = f"{toml_key(key)} = {toml_value(value)}"
    if width is None or len(line) <= width or not isinstance(value, list):
        return line
    return "\n".join([f"{toml_key(key)} = ["] + [f"    {toml_value(v)}," for v in value] + ["]"])
