"""Model turns on the MCP client (``runtime.ports.Sample``), for llm agents with
``provider = "mcp-sampling"``: in the handshake era as the server's own
``sampling/createMessage`` requests (``outbound.py``); in 2026-07-28 the parked call's
``sample`` (``mrtr.py``) puts them in ``input_required`` results.

Either way the params are fitted to what the client declared: tools are offered only
to a client with ``sampling.tools`` (2025-11-25), else the agent's turn is plain text.
"""

from __future__ import annotations

from typing import Any

from runtime.mcp.server.outbound import Send

__all__ = ["HandshakeSampler", "fit", "can_sample", "SAMPLE_TIMEOUT_SECS"]

SAMPLE_TIMEOUT_SECS = 600.0  # one model turn on the client, the person's review of it included


def can_sample(capabilities: Any) -> bool:
    return isinstance(capabilities, dict) and isinstance(capabilities.get("sampling"), dict)


def fit(params: dict[str, Any], capabilities: Any) -> dict[str, Any]:
    """``params`` without what the client cannot take (tools, without ``sampling.tools``)."""
    sampling = capabilities.get("sampling") if isinstance(capabilities, dict) else None
    if "tools" in params and not (isinstance(sampling, dict) and isinstance(sampling.get("tools"), dict)):
        params = {key: value for key, value in params.items() if key != "tools"}
    return params


class HandshakeSampler:
    """The ``Sample`` of one handshake-era tools/call: a request to its client."""

    def __init__(self, peer: Any, send: Send) -> None:
        self.peer = peer  # dispatch.Peer: its ``requests`` route the client's answer
        self.send = send

    async def __call__(self, params: dict[str, Any]) -> dict[str, Any]:
        return await self.peer.requests.request(self.send, "sampling/createMessage",
                                                fit(params, self.peer.capabilities), timeout_secs=SAMPLE_TIMEOUT_SECS)
