"""What of the catalog (resources, prompts) a caller may see: an agent's workspace files
and prompts only if it reaches that agent (``Caller.reaches``), and a re-exported
server's resources and prompts only if it may call kernel tools directly
(``Caller.may_call_tools``: a key limited to some agents reaches nothing beyond them).

The same rule as the tools' (``Exposure.reachable``), applied as a view: an entry a
caller may not reach is not listed, and to it reading one is "not found", exactly as
for a name that does not exist.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from runtime.errors import RpcError
from runtime.mcp.server.resources import URI_PREFIX, not_found
from runtime.ports import Caller
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["uri_visible", "prompt_visible", "check", "filtered"]


def uri_visible(uri: str, who: Caller | None) -> bool:
    if who is None or who.may_call_tools():
        return True
    if uri.startswith(URI_PREFIX):
        return who.reaches(unquote(uri[len(URI_PREFIX):].partition("/")[0]))
    return False


def prompt_visible(name: str, who: Caller | None, prompts: Any) -> bool:
    if who is None or who.may_call_tools():
        return True
    own = prompts.own.get(name)
    if own is not None:
        return who.reaches(own[0].name)
    return prompts.ask(name) is not None  # the config's own asks, which reach agents only through the door


def check(method: str, params: dict[str, Any], who: Caller | None, prompts: Any, *, modern: bool) -> None:
    """Before a request about one entry: not found for one ``who`` may not reach."""
    if who is None or who.may_call_tools():
        return
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        uri = params.get("uri")
        if isinstance(uri, str) and not uri_visible(uri, who):
            raise not_found(uri, modern=modern)
    elif method == "prompts/get":
        name = params.get("name")
        if isinstance(name, str) and not prompt_visible(name, who, prompts):
            raise RpcError(INVALID_PARAMS, f"no prompt named {name[:100]!r}")
    elif method == "completion/complete":
        ref = params.get("ref") if isinstance(params.get("ref"), dict) else {}
        uri, name = ref.get("uri"), ref.get("name")
        if isinstance(uri, str) and not uri_visible(uri, who) or \
                isinstance(name, str) and not prompt_visible(name, who, prompts):
            raise RpcError(INVALID_PARAMS, "no such prompt or resource")


def filtered(method: str, result: dict[str, Any], who: Caller | None, prompts: Any) -> dict[str, Any]:
    """A list's page with what ``who`` may not reach left out."""
    if who is None or who.may_call_tools():
        return result
    if method == "resources/list" and isinstance(result.get("resources"), list):
        result["resources"] = [r for r in result["resources"] if uri_visible(str(r.get("uri", "")), who)]
    elif method == "resources/templates/list" and isinstance(result.get("resourceTemplates"), list):
        result["resourceTemplates"] = [t for t in result["resourceTemplates"]
                                       if uri_visible(str(t.get("uriTemplate", "")), who)]
    elif method == "prompts/list" and isinstance(result.get("prompts"), list):
        result["prompts"] = [p for p in result["prompts"] if prompt_visible(str(p.get("name", "")), who, prompts)]
    return result
