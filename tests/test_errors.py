"""One error model: every exception class tern defines is a TernError, so each boundary
(CLI exit code, HTTP status, JSON-RPC error) has one mapping that covers them all."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import runtime
from runtime.errors import TernError

#: Control flow, not errors: each is raised and caught inside its own module and never
#: reaches a boundary, so no mapping needs to know it.
CONTROL_FLOW = {
    "runtime.kernel.llm._Retry",  # "ask the model again after this pause"
    "runtime.kernel.schema._Stop",  # "enough problems found, stop walking the schema"
    "runtime.mcp.server.dispatch._Cancelled",  # "the client cancelled: send no reply"
    "runtime.mcp.client.streamable_http._NoAnswer",  # "this POST has no JSON-RPC answer"
    "runtime.net.landlock._Refused",  # "a sandbox step failed: exit 126" (the launcher runs outside tern, stdlib only)
}

SKIPPED_MODULES = {"runtime.__main__"}  # importing it runs the CLI


def _modules() -> list[str]:
    found = [info.name for info in pkgutil.walk_packages(runtime.__path__, "runtime.")]
    return ["runtime", *(name for name in found if name not in SKIPPED_MODULES)]


def _exception_classes() -> dict[str, type]:
    classes = {}
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if value.__module__ == name and issubclass(value, BaseException):
                classes[f"{name}.{value.__qualname__}"] = value
    return classes


def test_every_exception_tern_defines_is_a_tern_error():
    classes = _exception_classes()
    assert "runtime.httpd.messages.HttpError" in classes  # the walk reaches every layer
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, TernError))
    assert outside == sorted(CONTROL_FLOW), "not TernErrors: " + ", ".join(set(outside) - CONTROL_FLOW)


def test_control_flow_exceptions_stay_in_their_module():
    """An exempt class is private and named by no other module."""
    for qualified in CONTROL_FLOW:
        module, _, name = qualified.rpartition(".")
        assert name.startswith("_"), qualified
        for other in _modules():
            if other != module:
                with open(importlib.import_module(other).__file__, encoding="utf-8") as file:
                    assert not re.search(rf"\b{name}\b", file.read()), (qualified, other)


def test_every_boundary_reads_the_error_it_is_given():
    from runtime.httpd.messages import HttpError
    from runtime.wire import jsonrpc

    assert HttpError(409, "busy").http_status == 409
    answer = jsonrpc.error_answer(7, jsonrpc.InvalidMessage(jsonrpc.INVALID_PARAMS, "bad"))
    assert jsonrpc.encode(answer) == b'{"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"bad"}}'


def test_the_drawn_tree_lists_every_class():
    """``errors.py``'s tree names every TernError tern defines, so a reader sees them all."""
    import runtime.errors

    drawn = set(re.findall(r"\b_?[A-Z]\w+", runtime.errors.__doc__))
    missing = sorted(name for name, cls in _exception_classes().items()
                     if issubclass(cls, TernError) and cls.__name__ not in drawn)
    assert not missing, missing


def test_one_map_from_a_tern_error_to_http_and_json_rpc():
    from runtime.a2a.server.engine import StorageUnavailable, StoreFull, TaskNotFound
    from runtime.errors import (BudgetExceeded, Forbidden, RpcError, StorageError, TernTimeout, UnknownTool,
                                rpc_error)
    from runtime.wire import jsonrpc

    # A2A's own table, not ProtocolError's 400: TaskNotFound is 404, an internal error 500.
    assert (TaskNotFound("t").http_status, StoreFull("t").http_status) == (404, 500)
    # "Storage down" is one class: A2A says it in its terms, HTTP and the CLI read a StorageError.
    down = StorageUnavailable("disk full")
    assert isinstance(down, StorageError) and down.http_status == 503 and rpc_error(down).code == jsonrpc.INTERNAL_ERROR
    assert RpcError(jsonrpc.METHOD_NOT_FOUND, "m").http_status == 404
    assert RpcError(jsonrpc.INTERNAL_ERROR, "m").http_status == 500
    said = {cls.__name__: (rpc_error(cls("why")).code, rpc_error(cls("why")).message)
            for cls in (StorageError, UnknownTool, TernTimeout, Forbidden, BudgetExceeded)}
    assert said == {"StorageError": (jsonrpc.INTERNAL_ERROR, "why"), "UnknownTool": (jsonrpc.INVALID_PARAMS, "why"),
                    "TernTimeout": (-32001, "why"), "Forbidden": (jsonrpc.INVALID_REQUEST, "why"),
                    "BudgetExceeded": (jsonrpc.INTERNAL_ERROR, "why")}


async def test_tern_mcp_answers_a_store_that_is_down_with_its_message_not_as_a_bug(caplog):
    """A StorageError under ``tools/call`` is said to the MCP client (its message, -32603)
    and logged as one warning, not as "internal error: StorageError" with a traceback."""
    from runtime.errors import StorageError
    from runtime.mcp.server.dispatch import McpServer
    from runtime.wire import jsonrpc

    class Down:
        async def handle(self, *args, **kwargs):
            raise StorageError("tern cannot save conversations right now (disk full)")

    server = McpServer.__new__(McpServer)
    server._request = Down().handle  # the one request path, failing as a full disk does

    class Peer:
        last_seen = 0.0

    answer = await server.handle(jsonrpc.Request(3, "tools/call", {"name": "tern_agent_echo"}), Peer(), None)
    assert jsonrpc.encode(answer) == (b'{"jsonrpc":"2.0","id":3,"error":{"code":-32603,'
                                      b'"message":"tern cannot save conversations right now (disk full)"}}')
    assert not any(r.exc_info for r in caplog.records) and "disk full" in caplog.text
