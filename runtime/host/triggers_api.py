"""The API of the daemon's triggers (``tern triggers``): list them, read their runs, fire
one now, resume a paused one. Ordinary key-protected routes (``openapi.py`` describes
them); names and ids are bounded by ``wire.limits``, lists by ``runs.LIST_LIMIT``. With
no ``[[triggers]]`` configured, the list is empty and a name is a 404.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from runtime.host.node import Node
from runtime.httpd.messages import HttpError, Request, Response, json_response
from runtime.httpd.router import Router

__all__ = ["add_routes"]


def add_routes(router: Router, node: Node) -> None:
    def runner() -> Any:
        if node.triggers is None:
            from runtime.errors import UnknownTrigger

            raise UnknownTrigger("no triggers are configured on this tern ([[triggers]] in its config)")
        return node.triggers

    def name_of(request: Request) -> str:
        from runtime.wire.limits import check_name

        name = check_name(request.params["name"], "the trigger name")
        runner().get(name)  # UnknownTrigger: 404
        return name

    async def trigger_list(request: Request) -> Response:
        return json_response({"triggers": node.triggers.listing() if node.triggers is not None else []})

    async def trigger_runs(request: Request) -> Response:
        from runtime.kernel.triggers.runs import LIST_LIMIT

        name = name_of(request)
        try:
            limit = min(max(int(parse_qs(request.query).get("limit", ["50"])[0]), 0), LIST_LIMIT)
        except ValueError:
            raise HttpError(400, "limit must be a whole number") from None
        return json_response({"trigger": name, "runs": runner().runs(name, limit)})

    async def trigger_run(request: Request) -> Response:
        from runtime.wire.limits import check_id

        name = name_of(request)
        run = runner().run_record(check_id(request.params["id"], "the run id"))
        if run is None or run["trigger"] != name:
            raise HttpError(404, f"trigger {name!r} has no run {request.params['id']!r} (see `tern triggers runs "
                                 f"{name}`)")
        return json_response(run)

    async def trigger_fire(request: Request) -> Response:
        name = name_of(request)
        run_id = runner().fire(name, {}, source="manual", who=request.caller)  # busy 409, paused 503
        return json_response({"trigger": name, "run_id": run_id}, 202)

    async def trigger_resume(request: Request) -> Response:
        return json_response(runner().resume(name_of(request)))

    router.add("GET", "/api/triggers", trigger_list, scope="admin",
               summary="the triggers: kind, agent, paused, failures in a row, next fire, last run")
    router.add("GET", "/api/triggers/{name}/runs", trigger_runs, scope="admin",
               summary="a trigger's runs, newest first (?limit=)")
    router.add("GET", "/api/triggers/{name}/runs/{id}", trigger_run, scope="admin", summary="one run of a trigger")
    router.add("POST", "/api/triggers/{name}/fire", trigger_fire, cost=5.0, scope="admin",
               summary="start a run now (202 and its id; 409 when the overlap policy refuses it, 503 when paused)")
    router.add("POST", "/api/triggers/{name}/resume", trigger_resume, cost=5.0, scope="admin",
               summary="resume a paused trigger (its failures in a row start again at 0)")
