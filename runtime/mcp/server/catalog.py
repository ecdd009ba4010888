"""The MCP server's resources, prompts and completion methods, for either era.

``dispatch.py`` hands every ``resources/*``, ``prompts/*`` and ``completion/complete``
request here. Lists are paginated like ``tools/list``; in 2026-07-28 lists and reads
carry ``ttlMs`` and ``cacheScope`` (SEP-2549), and ``resources/subscribe`` is gone (a
client names the URIs on ``subscriptions/listen`` instead).

Completion offers at most ``MAX_VALUES`` values with ``total`` and ``hasMore``: for an
agent prompt's argument its configured ``values``, for an agent's file template the
workspace paths its globs allow, and for a re-exported server's prompt or template
whatever that server completes.
"""

from __future__ import annotations

from typing import Any
from collections.abc import AsyncIterator

import trio

from runtime.config import Config
from runtime.errors import RpcError, TernError
from runtime.mcp.server.paging import page
from runtime.mcp.server.prompts import Prompts
from runtime.mcp.server.resources import URI_PREFIX, Resources, check_uri, not_found
from runtime.ports import ContentPort, EventPort
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["Catalog", "METHODS", "HANDSHAKE_ONLY", "MAX_SUBSCRIPTIONS", "MAX_VALUES"]

METHODS = ("resources/list", "resources/read", "resources/templates/list", "resources/subscribe",
           "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete")
HANDSHAKE_ONLY = ("resources/subscribe", "resources/unsubscribe")
MAX_SUBSCRIPTIONS = 256  # per client (a stdio connection, an HTTP session)
MAX_VALUES = 100  # the spec's cap on one completion answer
MAX_COMPLETION_INPUT = 1024
CACHE_TTL_MS = 30_000
READ_TTL_MS = 5_000  # files change: a read is cached for less than a list
POLL_SECS = 2.0  # how often a subscribed workspace file (or watched upstream resource) is looked at


class Catalog:
    def __init__(self, config: Config, content: ContentPort | None, events: EventPort | None = None) -> None:
        self.events = events
        self._stamps: dict[str, tuple[float, Any]] = {}  # uri -> (when looked at, stamp): shared by all clients
        self.resources = Resources(config, content)
        self.prompts = Prompts(config, self.resources)
        self.page_size = max(1, config.mcp_server.page_size)

    def reconfigure(self, config: Config) -> None:
        self.resources.reconfigure(config)
        self.prompts.reconfigure(config)
        self.page_size = max(1, config.mcp_server.page_size)

    async def handle(self, method: str, params: dict[str, Any], subscriptions: set[str] | None, *,
                     modern: bool) -> dict[str, Any]:
        """One request's result. ``subscriptions``: the client's subscribed URIs (handshake era)."""
        if method == "resources/list":
            result = page(await self.resources.listing(), params, self.page_size, "resources")
        elif method == "resources/templates/list":
            result = page(await self.resources.templates(), params, self.page_size, "resourceTemplates")
        elif method == "resources/read":
            result = await self.resources.read(check_uri(params.get("uri")), modern=modern)
            if modern:
                result.update(ttlMs=READ_TTL_MS, cacheScope="private")
            return result
        elif method == "prompts/list":
            result = page(await self.prompts.listing(), params, self.page_size, "prompts")
        elif method == "prompts/get":
            return await self.prompts.get(params.get("name"), params.get("arguments"))
        elif method == "completion/complete":
            return {"completion": await self.complete(params)}
        else:
            return await self._subscription(method, check_uri(params.get("uri")),
                                            subscriptions if subscriptions is not None else set())
        if modern:
            result.update(ttlMs=CACHE_TTL_MS, cacheScope="private")
        return result

    async def _subscription(self, method: str, uri: str, subscriptions: set[str]) -> dict[str, Any]:
        if method == "resources/unsubscribe":
            subscriptions.discard(uri)
            return {}
        if uri not in subscriptions:
            if len(subscriptions) >= MAX_SUBSCRIPTIONS:
                raise RpcError(INVALID_PARAMS, f"too many subscriptions (at most {MAX_SUBSCRIPTIONS} per client)")
            if await self.resources.exists(uri) is None:
                raise not_found(uri, modern=False)
            subscriptions.add(uri)
        return {}

    # --- list_changed -------------------------------------------------------------------

    def _shape(self) -> dict[str, Any]:
        """What a reload can change in each list tern makes itself."""
        agents = self.resources.agents.values()
        return {"prompts": [(name, prompt) for name, (_, prompt) in self.prompts.own.items()]
                + [(name, ask.config) for name, ask in self.prompts.asking.items()],
                "resources": [(a.name, a.workspace, a.resources) for a in agents] + [self.resources.upstream]}

    async def list_changes(self) -> AsyncIterator[str]:
        """Yields "prompts" or "resources" when that list may have changed: a reload
        changed the agents' prompts or globs, a re-exported server became ready or stopped
        being so, or it said its own list changed (``mcp.catalog``, from the supervisor)."""
        if self.events is None:
            await trio.sleep_forever()
        known, ready = self._shape(), {}
        with self.events.subscribe(kinds=("config.reloaded", "mcp.server", "mcp.catalog")) as events:  # type: ignore[union-attr]
            while True:
                event = await events.next()
                changed: list[str] = []
                if event.get("type") == "mcp.catalog":
                    if event.get("server") in self.resources.upstream and event.get("list") in ("prompts", "resources"):
                        changed.append(event["list"])
                elif event.get("type") == "mcp.server":
                    name, now = event.get("name"), event.get("state") == "ready"
                    if name in self.resources.upstream and ready.get(name, False) != now:
                        changed += ["prompts", "resources"]
                    ready[name] = now
                else:
                    shape = self._shape()
                    changed += [kind for kind in ("prompts", "resources") if shape[kind] != known[kind]]
                    known = shape
                for kind in changed:
                    yield kind

    # --- notifications/resources/updated ----------------------------------------------

    async def updates(self, subscriptions: set[str]) -> AsyncIterator[str]:
        """Yields each subscribed URI that changed, for one client, until cancelled: an
        upstream server's ``notifications/resources/updated`` (relayed by the supervisor
        as an ``mcp.resource`` event), a workspace file whose size, time or inode changed,
        or a watched upstream resource (``Resources.watched``) that reads differently
        (looked at every POLL_SECS; one look serves every client that subscribed)."""
        if self.events is None:
            await trio.sleep_forever()
        known: dict[str, Any] = {}
        with self.events.subscribe(kinds=("mcp.resource",)) as events:  # type: ignore[union-attr]
            next_poll = trio.current_time() + POLL_SECS
            while True:
                changed: list[str] = []
                with trio.move_on_at(next_poll):
                    event = await events.next()
                    if event.get("server") in self.resources.upstream and event.get("uri") in subscriptions:
                        changed.append(event["uri"])
                if trio.current_time() >= next_poll:
                    next_poll = trio.current_time() + POLL_SECS
                    changed += await self._changed_files(subscriptions, known)
                for uri in changed:
                    yield uri

    async def _changed_files(self, subscriptions: set[str], known: dict[str, Any]) -> list[str]:
        """The subscribed URIs that tern looks at itself (workspace files, and upstream
        resources whose server cannot subscribe) and that changed since the last look."""
        changed = []
        watched = self.resources.watched
        for uri in [uri for uri in subscriptions if uri.startswith(URI_PREFIX) or uri in watched]:
            stamp = await self._stamp(uri)
            if uri in known and known[uri] != stamp:
                changed.append(uri)
            known[uri] = stamp
        for uri in set(known) - subscriptions:
            del known[uri]
        return changed

    async def _stamp(self, uri: str) -> Any:
        now = trio.current_time()
        cached = self._stamps.get(uri)
        if cached is not None and now - cached[0] < POLL_SECS / 2:
            return cached[1]
        if uri in self.resources.watched:
            stamp = await self.resources.watch_stamp(uri)
        else:
            found = self.resources.agent_path(uri)
            content = self.resources.content
            stamp = await content.file_stamp(found[0].workspace, found[1]) if found and content else None
        if len(self._stamps) > 4 * MAX_SUBSCRIPTIONS:  # forget what nobody looked at lately
            self._stamps = {k: v for k, v in self._stamps.items() if now - v[0] < 2 * POLL_SECS}
        self._stamps[uri] = (now, stamp)
        return stamp

    # --- completion/complete -----------------------------------------------------------

    async def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        ref, argument = params.get("ref"), params.get("argument")
        if not isinstance(ref, dict) or not isinstance(argument, dict):
            raise RpcError(INVALID_PARAMS, "completion/complete needs params.ref and params.argument (objects)")
        name, value = argument.get("name"), argument.get("value", "")
        if not isinstance(name, str) or not isinstance(value, str) or len(value) > MAX_COMPLETION_INPUT:
            raise RpcError(INVALID_PARAMS, "argument.name and argument.value must be strings "
                                           f"(the value at most {MAX_COMPLETION_INPUT} characters)")
        kind = ref.get("type")
        if kind == "ref/prompt" and isinstance(ref.get("name"), str):
            if (ask := self.prompts.ask(ref["name"])) is not None:  # free text: nothing to offer
                if name not in ask.config.arguments:
                    raise RpcError(INVALID_PARAMS, f"the prompt has no argument {name[:100]!r}")
                return _values([])
            prompt = self.prompts.configured(ref["name"])
            if prompt is not None:
                choices = next((a.values for a in prompt.arguments if a.name == name), None)
                if choices is None:
                    raise RpcError(INVALID_PARAMS, f"the prompt has no argument {name[:100]!r}")
                return _values([choice for choice in choices if choice.startswith(value)])
            server = await self.prompts.owner(ref["name"])
            if server is None:
                raise RpcError(INVALID_PARAMS, f"Unknown prompt: {ref['name'][:200]}")
            return await self._upstream(server, params)
        if kind == "ref/resource" and isinstance(ref.get("uri"), str):
            uri = check_uri(ref["uri"])
            if uri.startswith(URI_PREFIX):
                agent = self.resources.agents.get(uri[len(URI_PREFIX):].partition("/")[0])
                if agent is None or name != "path":
                    return _values([])
                return _values([p for p in await self.resources.files(agent, 10_000) if p.startswith(value)])
            for server in await self.resources.offering("resources"):
                templates = await self.resources.upstream_list(server, "resources/templates/list", "resourceTemplates")
                if any(entry.get("uriTemplate") == uri for entry in templates):
                    return await self._upstream(server, params)
            return _values([])
        raise RpcError(INVALID_PARAMS, "params.ref must be a ref/prompt with a name or a ref/resource with a uri")

    async def _upstream(self, server: str, params: dict[str, Any]) -> dict[str, Any]:
        """What a re-exported server completes; nothing when it does not complete."""
        content = self.resources.content
        if content is None or (content.upstream_capabilities(server) or {}).get("completions") is None:
            return _values([])
        forwarded = {key: params[key] for key in ("ref", "argument", "context") if key in params}
        try:
            result = await content.upstream_request(server, "completion/complete", forwarded)
        except TernError:
            return _values([])
        completion = result.get("completion") if isinstance(result, dict) else None
        values = completion.get("values") if isinstance(completion, dict) else None
        return _values([v for v in values if isinstance(v, str)] if isinstance(values, list) else [])


def _values(found: list[str]) -> dict[str, Any]:
    return {"values": found[:MAX_VALUES], "total": len(found), "hasMore": len(found) > MAX_VALUES}
