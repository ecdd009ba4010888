"""``subscriptions/listen`` (2026-07-28): one long request whose stream carries the change
notifications the client opted in to, instead of the handshake era's GET stream and
``resources/subscribe``.

The first message is ``notifications/subscriptions/acknowledged`` with the part of the
filter tern honours: the three ``*ListChanged`` flags, and ``resourceSubscriptions``
for the URIs that exist (an upstream URI is subscribed at its server). Every notification
carries ``_meta["io.modelcontextprotocol/subscriptionId"]``, the listen request's id.
The stream lasts until the client closes it (HTTP) or cancels the request (stdio).
"""

from __future__ import annotations

from typing import Any
from collections.abc import Awaitable, Callable

import trio

from runtime.errors import RpcError
from runtime.mcp.protocol import META_PREFIX
from runtime.mcp.server.catalog import MAX_SUBSCRIPTIONS, Catalog
from runtime.mcp.server.exposure import Exposure
from runtime.mcp.server.resources import check_uri
from runtime.wire.jsonrpc import INVALID_PARAMS

__all__ = ["listen", "SUBSCRIPTION_ID"]

SUBSCRIPTION_ID = META_PREFIX + "subscriptionId"


async def listen(request_id: Any, params: dict[str, Any], notify: Callable[[dict[str, Any]], Awaitable[None]] | None,
                 exposure: Exposure, catalog: Catalog) -> dict[str, Any]:
    wanted = params.get("notifications")
    if not isinstance(wanted, dict):
        raise RpcError(INVALID_PARAMS, "subscriptions/listen needs params.notifications (an object)")
    if notify is None:
        raise RpcError(INVALID_PARAMS, "subscriptions/listen needs a stream: accept text/event-stream")
    uris = wanted.get("resourceSubscriptions") or []
    if not isinstance(uris, list) or len(uris) > MAX_SUBSCRIPTIONS:
        raise RpcError(INVALID_PARAMS, f"resourceSubscriptions must be a list of at most {MAX_SUBSCRIPTIONS} URIs")
    subscribed = {uri for uri in dict.fromkeys(check_uri(uri) for uri in uris)
                  if await catalog.resources.exists(uri) is not None}
    honored: dict[str, Any] = {}
    for key in ("toolsListChanged", "promptsListChanged", "resourcesListChanged"):
        if wanted.get(key) is True:
            honored[key] = True
    if subscribed:
        honored["resourceSubscriptions"] = [uri for uri in uris if uri in subscribed]
    meta = {SUBSCRIPTION_ID: request_id}

    async def send(method: str, params: dict[str, Any]) -> None:
        await notify({"method": method, "params": {**params, "_meta": meta}})

    await send("notifications/subscriptions/acknowledged", {"notifications": honored})

    async def tools() -> None:
        async for _ in exposure.changes():
            await send("notifications/tools/list_changed", {})

    async def lists() -> None:
        async for kind in catalog.list_changes():
            if f"{kind}ListChanged" in honored:
                await send(f"notifications/{kind}/list_changed", {})

    async def resources() -> None:
        async for uri in catalog.updates(subscribed):
            await send("notifications/resources/updated", {"uri": uri})

    async with trio.open_nursery() as nursery:
        if "toolsListChanged" in honored:
            nursery.start_soon(tools)
        if subscribed:
            nursery.start_soon(resources)
        if "promptsListChanged" in honored or "resourcesListChanged" in honored:
            nursery.start_soon(lists)
        await trio.sleep_forever()
    return {}  # not reached: the stream ends when the client leaves
