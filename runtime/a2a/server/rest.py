"""The seed's REST routes (OpenFang's A2A): 0.1 shapes without a JSON-RPC envelope,
for the default agent, errors as plain HTTP errors."""

from __future__ import annotations

from runtime.a2a import dialects
from runtime.a2a.dialects import BadMessage
from runtime.a2a.server.engine import A2aError, TaskNotFound
from runtime.a2a.server.handler import A2aHandler, permit
from runtime.a2a.server.request import caller_of, check_ids
from runtime.httpd.messages import HttpError, Request, Response, json_response

__all__ = ["SeedRest"]


class SeedRest:
    def __init__(self, handler: A2aHandler, agent: str) -> None:
        self.handler = handler
        self.agent = agent

    async def send(self, request: Request) -> Response:
        body = request.json()
        if not isinstance(body, dict):
            raise HttpError(400, "expected a JSON object with id and message")
        try:
            permit(request.caller, "send", self.agent)
            return json_response(await self.handler.send(body, self.agent, "0.1", caller=caller_of(request),
                                                         who=request.caller))
        except BadMessage as exc:
            raise HttpError(400, str(exc)) from None
        except A2aError as exc:
            raise HttpError(404 if isinstance(exc, TaskNotFound) else 400, str(exc)) from None

    async def get(self, request: Request) -> Response:
        try:
            permit(request.caller, "get", self.agent)
            check_ids({"id": request.params["id"]})  # bounded, and storable: the same answer on either store
            task = await self.handler.engine.find(request.params["id"], request.caller)
        except TaskNotFound as exc:
            raise HttpError(404, str(exc)) from None
        return json_response(dialects.render_task(task, "0.1"))

    async def cancel(self, request: Request) -> Response:
        try:
            permit(request.caller, "cancel", self.agent)
            check_ids({"id": request.params["id"]})  # bounded, and storable: the same answer on either store
            task = await self.handler.engine.cancel(request.params["id"], request.caller)
        except TaskNotFound as exc:
            raise HttpError(404, str(exc)) from None
        except A2aError as exc:
            raise HttpError(409, str(exc)) from None
        return json_response(dialects.render_task(task, "0.1"))
