"""Routing: method + path -> route, with ``{name}`` path parameters.

Static paths are one dict lookup (the hot path: ``/health``, ``/mcp``); only paths
with parameters are matched segment by segment. Each route carries its policy: whether
it needs the API key and which scope of it (``scope``), its rate-limit cost, whether the Host/Origin checks apply,
whether it is a WebSocket endpoint, and whether a client that disconnects while the
handler runs cancels it (``watch_disconnect``: for long calls whose answer no one
would read once the client is gone). Every route with a key check names its way in
(``way``: ``api``, ``a2a``, ``mcp``, ``hook``, ``dashboard``), which the server stamps on
the authenticated ``Caller``: what a run started there may do later (answer its own
approvals, say) is decided by that, in the kernel. A route whose policy depends on the request
(``/hooks/{name}``: each trigger has its own body limit, and a signed one needs no key)
gives ``admit``, which decides before the key check and the body.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, NamedTuple
from collections.abc import Awaitable, Callable, Iterator
from urllib.parse import unquote

from runtime.httpd.messages import HttpError, Request

__all__ = ["Admission", "Route", "Router"]

Handler = Callable[[Request], Awaitable[Any]]


class Admission(NamedTuple):
    """A route's ``admit`` answer for one request, before its body is read: whether the
    API key is required, and the body limit (never above the server's)."""

    key_required: bool
    max_body_bytes: int


class Route:
    __slots__ = ("method", "path", "handler", "auth", "cost", "guard_origin", "websocket", "watch_disconnect",
                 "summary", "scope", "admit", "way", "secret_path")

    def __init__(self, method: str, path: str, handler: Handler, *, auth: bool = True, cost: float = 1.0,
                 guard_origin: bool = True, websocket: bool = False, watch_disconnect: bool = False,
                 summary: str = "", scope: str | None = None,
                 admit: Callable[[Request], Admission] | None = None, way: str = "",
                 secret_path: bool = False) -> None:
        self.method = method
        self.path = path  # the template, e.g. /api/agents/{name}/message; also the metrics label
        self.handler = handler
        self.auth = auth
        self.cost = cost
        self.guard_origin = guard_origin
        self.websocket = websocket
        self.watch_disconnect = watch_disconnect
        self.summary = summary
        self.scope = scope  # the key scope it needs (runtime.config.keys.SCOPES); None: any caller, or per operation
        self.admit = admit  # may raise HttpError (404, 429, ...) before the key check; replaces ``auth`` then
        self.way = way  # the way in its callers come by (Caller.way); "" only on a public route
        self.secret_path = secret_path  # the path holds a credential (a one-time link): logs show the template


class Router:
    def __init__(self) -> None:
        self._static: dict[str, dict[str, Route]] = {}
        self._dynamic: list[tuple[list[str], dict[str, Route]]] = []
        self.routes: list[Route] = []
        self._hints: list[tuple[str, str]] = []
        self.way = ""  # see ``entering``

    @contextmanager
    def entering(self, way: str) -> Iterator[None]:
        """Routes added meanwhile are the way in ``way`` (unless they name their own)."""
        outer, self.way = self.way, way
        try:
            yield
        finally:
            self.way = outer

    def hint(self, prefix: str, text: str) -> None:
        """Say ``text`` in the 404 for any path at or under ``prefix``: a feature that is
        off (A2A, say) tells the caller what turns it on instead of a bare "no route"."""
        self._hints.append((prefix.rstrip("/"), text))

    def add(self, method: str, path: str, handler: Handler, **policy: Any) -> Route:
        """A route; ``way`` defaults to the router's ``way`` while ``entering`` is in force."""
        policy.setdefault("way", self.way)
        route = Route(method, path, handler, **policy)
        self.routes.append(route)
        if "{" not in path:
            methods = self._static.setdefault(path, {})
        else:
            segments = path.strip("/").split("/")
            for existing, methods in self._dynamic:
                if existing == segments:
                    break
            else:
                methods = {}
                self._dynamic.append((segments, methods))
        if method in methods:
            raise ValueError(f"route {method} {path} defined twice")
        methods[method] = route
        return route

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route and its path parameters; HttpError 404, or 405 with ``Allow``."""
        methods = self._static.get(path)
        params: dict[str, str] = {}
        if methods is None:
            methods = self._match_dynamic(path, params)
            if methods is None:
                for prefix, text in self._hints:
                    if path == prefix or path.startswith(prefix + "/"):
                        raise HttpError(404, text)  # the same words for every path: clients can say them once
                raise HttpError(404, f"no route for {path}")
        route = methods.get(method) or (methods.get("GET") if method == "HEAD" else None)
        if route is None:
            allowed = sorted(set(methods) | ({"HEAD"} if "GET" in methods else set()))
            raise HttpError(405, f"{method} is not allowed on {path}",
                            [(b"allow", ", ".join(allowed).encode())])
        return route, params

    def _match_dynamic(self, path: str, params: dict[str, str]) -> dict[str, Route] | None:
        parts = path.strip("/").split("/")
        for segments, methods in self._dynamic:
            if len(segments) != len(parts):
                continue
            for pattern, part in zip(segments, parts):
                if pattern[:1] == "{":
                    if not part:
                        break
                    params[pattern[1:-1]] = unquote(part)
                elif pattern != part:
                    break
            else:
                return methods
            params.clear()
        return None
