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
