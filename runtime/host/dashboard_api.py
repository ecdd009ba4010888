"""The API routes the dashboard needs beyond the CLI's: A2A tasks, the running config
and its reload, an MCP server's OAuth login, the activity history (``host/activity.py``)
and what the sign-in form may say about the local token. Each is an ordinary key-protected API
route (``openapi.py`` describes them); inputs are bounded as elsewhere (ids by
``wire.limits``, list sizes by ``MAX_TASKS``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

import msgspec

from runtime.host.node import Node
from runtime.httpd.messages import HttpError, Request, Response, json_response
from runtime.httpd.router import Router

__all__ = ["add_routes", "MAX_TASKS"]

MAX_TASKS = 500  # what GET /api/tasks answers at most
_TASK_STATES = ("submitted", "working", "input-required", "auth-required", "completed", "canceled", "failed",
                "rejected", "unknown")
_A2A_OFF = "A2A is off on this tern (set [a2a] enabled = true in its config to serve tasks)"


def _summary(task: Any) -> dict[str, Any]:
    """A task's row in the list: no history, no artifacts (``GET /api/tasks/{id}`` has them)."""
    from runtime.a2a.model import text_of

    return {"id": task.id, "context_id": task.context_id, "agent": task.agent, "state": task.state,
            "timestamp": task.timestamp, "created": task.created,
            "status_text": text_of(task.status_message.parts)[:200] if task.status_message is not None else "",
            "history": len(task.history), "artifacts": len(task.artifacts)}


def add_routes(router: Router, node: Node) -> None:
    from runtime.host.mcp_login import McpLogins

    logins = McpLogins(node)

    def engine() -> Any:
        if node.a2a is None:
            raise HttpError(404, _A2A_OFF)
        return node.a2a.engine

    def task_id(request: Request) -> str:
        from runtime.wire.limits import check_id

        return check_id(request.params["id"], "the task id")

    async def task_list(request: Request) -> Response:
        from runtime.wire.limits import check_id

        tasks = engine()
        query = parse_qs(request.query)
        state = query.get("state", [None])[0] or None
        if state is not None and state not in _TASK_STATES:
            raise HttpError(400, f"state must be one of {', '.join(_TASK_STATES)}")
        context_id = check_id(query.get("context_id", [None])[0] or None, "context_id")
        try:
            limit = min(max(int(query.get("limit", ["50"])[0]), 0), MAX_TASKS)
        except ValueError:
            raise HttpError(400, "limit must be a whole number") from None
        found, total = await tasks.list(context_id=context_id, state=state, who=request.caller, limit=limit)
        return json_response({"tasks": [_summary(t) for t in found], "total": total})  # newest first: the caller's own

    async def task_get(request: Request) -> Response:
        from runtime.a2a.server.engine import TaskNotFound

        try:
            task = await engine().find(task_id(request), request.caller)
        except TaskNotFound as exc:
            raise HttpError(404, exc.message) from None
        return json_response(msgspec.to_builtins(task))

    async def task_cancel(request: Request) -> Response:
        from runtime.a2a.server.engine import TaskNotCancelable, TaskNotFound

        try:
            task = await engine().cancel(task_id(request), request.caller)
        except TaskNotFound as exc:
            raise HttpError(404, exc.message) from None
        except TaskNotCancelable as exc:
            raise HttpError(409, exc.message) from None
        return json_response(msgspec.to_builtins(task))

    async def config_get(request: Request) -> Response:
        from runtime.config.dump import masked

        path = node.config_path
        return json_response({"path": str(path) if path is not None else None, "config": masked(node.config)})

    async def config_reload(request: Request) -> Response:
        from runtime.errors import ConfigError

        if node.reload_from_file is None:
            raise HttpError(404, "only a running `tern serve` reloads its config")
        try:
            report = node.reload_from_file()
        except ConfigError as exc:  # logged and published; the running config stays
            return json_response({"error": str(exc)}, 422)
        return json_response(report)

    async def mcp_login(request: Request) -> Response:
        from runtime.wire.limits import check_name

        name = check_name(request.params["name"], "the MCP server name")
        return json_response({"authorization_url": await logins.start(name)})

    async def activity(request: Request) -> Response:
        query = parse_qs(request.query)
        try:
            minutes = int(query.get("minutes", ["40"])[0])
            limit = int(query.get("limit", ["20"])[0])
        except ValueError:
            raise HttpError(400, "minutes and limit must be whole numbers") from None
        store = node.activity
        return json_response({**store.history(minutes), "runs": store.runs(limit),
                              "last_runs": store.last_runs(), "write_failures": store.write_failures})

    async def activity_runs(request: Request) -> Response:
        from runtime.wire.limits import check_id, check_name

        query = parse_qs(request.query)
        agent = check_name(query.get("agent", [None])[0] or None, "agent")
        context_id = check_id(query.get("context_id", [None])[0] or None, "context_id")
        try:
            limit = int(query.get("limit", ["50"])[0])
        except ValueError:
            raise HttpError(400, "limit must be a whole number") from None
        return json_response({"runs": node.activity.runs(limit, agent=agent, context_id=context_id)})

    async def activity_run(request: Request) -> Response:
        raw = request.params["id"]
        run = node.activity.run(int(raw)) if raw.isdigit() and len(raw) < 19 else None
        if run is None:
            raise HttpError(404, f"no run has the id {raw[:40]!r} (the history keeps the last runs only)")
        return json_response(run)

    async def sign_in_hint(request: Request) -> Response:
        """Where the local token is, for a client on this machine (the only one it lets in)."""
        from runtime.httpd.access import is_loopback

        access = node.access
        path = None
        if access is not None and access.takes_local_token and is_loopback(request.client[0]):
            from runtime.host.discovery import token_path

            path = str(token_path(node.config))
        return json_response({"local_token_path": path,
                              "key_hint": access.key_hint if access is not None else ""})

    router.add("GET", "/api/activity", activity, scope="audit",
               summary="the history: per-minute counts (?minutes=40), the last runs (?limit=20), each agent's last run")
    router.add("GET", "/api/activity/runs", activity_runs, scope="audit",
               summary="runs, newest first, with their cost (?agent=&context_id=&limit=)")
    router.add("GET", "/api/activity/runs/{id}", activity_run, scope="audit",
               summary="one run and its model and tool calls in order (its timeline)")
    router.add("GET", "/api/sign-in", sign_in_hint, auth=False,
               summary="what the sign-in form says: the local token's file (to a loopback client), the key's variable")
    router.add("GET", "/api/tasks", task_list, scope="tasks",
               summary="A2A tasks, newest first (?state=&context_id=&limit=)")
    router.add("GET", "/api/tasks/{id}", task_get, scope="tasks", summary="one A2A task: status, history, artifacts")
    router.add("POST", "/api/tasks/{id}/cancel", task_cancel, cost=5.0, scope="tasks", summary="cancel one A2A task")
    router.add("GET", "/api/config", config_get, scope="admin",
               summary="the running config, secrets masked, and its file")
    router.add("POST", "/api/config/reload", config_reload, cost=20.0, scope="admin",
               summary="re-read the config file and apply it (422 and the one-line error if it does not load)")
    router.add("POST", "/api/mcp/servers/{name}/login", mcp_login, cost=5.0, scope="admin",
               summary="start an OAuth login for one MCP server; answers the URL a person opens")
