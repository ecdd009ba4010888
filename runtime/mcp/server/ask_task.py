"""An ask tool (``asks.py``) run as a task of MCP's tasks extension (``[[mcp_server.asks]]
task``): the call returns a ``CreateTaskResult`` at once, and the task is
``input_required`` with the current round's questions as its ``inputRequests`` (keyed
by question key, several at once when a round has several), until ``tasks/update``
brings answers. A client may answer any subset: the answered keys leave
``inputRequests``, the rest stay asked, and the next round comes when a round is whole.
When every round is answered the reply is the task's result.

Nothing runs between updates: the task is the answers so far, checked as they come
(``Ask.take``; a bad answer ends the task with an error result that says why, as the
call would have). A round nobody answers within the ask's ``timeout_secs`` ends the task
the same way. Time is ``trio.current_time`` (virtual in tests); ``expire`` is called by
whoever looks.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import trio

from runtime.errors import RpcError
from runtime.mcp.server.ask_call import conclude, error_result
from runtime.mcp.server.asks import Ask, AskError
from runtime.wire import jsonrpc

__all__ = ["AskTask", "PREFIX"]

PREFIX = "ask-"  # ask task ids: never an A2A task's


class AskTask:
    """One ask being answered through ``tasks/update``."""

    def __init__(self, ask: Ask, arguments: dict[str, Any], capabilities: Any) -> None:
        self.id = PREFIX + secrets.token_urlsafe(16)
        self.ask, self.arguments, self.capabilities = ask, arguments, capabilities
        self.answers: dict[str, Any] = {}
        self.number = 0  # the round being asked
        self.pending: dict[str, dict[str, Any]] = {}  # question key -> its input request
        self.created = self.updated = time.time()
        self.deadline = trio.current_time() + ask.config.timeout_secs
        self.result: dict[str, Any] | None = None  # the tool result, once finished
        self.cancelled = False
        self._advance()

    @property
    def status(self) -> str:
        if self.cancelled:
            return "cancelled"
        return "completed" if self.result is not None else "input_required"

    def finished(self) -> bool:
        return self.cancelled or self.result is not None

    def update(self, responses: dict[str, Any]) -> None:
        """Take the answers to pending questions (others are ignored). Raises RpcError
        -32602 for an answer that is not an object, before any is taken."""
        self.expire()
        if self.finished():
            return
        taken = {key: answer for key, answer in responses.items() if key in self.pending}
        for key, answer in taken.items():
            if not isinstance(answer, dict):
                raise RpcError(jsonrpc.INVALID_PARAMS, f"inputResponses[{key[:64]!r}] must be an object")
        if not taken:
            return
        try:
            for key, answer in taken.items():
                self.answers[key] = self.ask.take(key, answer)
        except AskError as exc:
            self._finish(error_result(str(exc)))
            return
        self.deadline = trio.current_time() + self.ask.config.timeout_secs
        self._advance()

    def cancel(self) -> None:
        if not self.finished():
            self.cancelled, self.pending = True, {}
            self.updated = time.time()

    def expire(self) -> None:
        """End a round its client left unanswered past the ask's ``timeout_secs``."""
        if not self.finished() and trio.current_time() >= self.deadline:
            keys = ", ".join(sorted(self.pending))
            self._finish(error_result(f"the client did not answer {keys} within {self.ask.config.timeout_secs:g} s"))

    def _advance(self) -> None:
        while self.number < len(self.ask.rounds):
            self.pending = self.ask.requests(self.number, self.capabilities, self.arguments, self.answers, mode=True)
            if self.pending:
                self.updated = time.time()
                return
            if self.ask.declined(self.answers):
                break  # the person said no: later rounds are not asked
            self.number += 1
        outcome = conclude(self.ask, self.arguments, self.answers)
        assert isinstance(outcome, dict)  # a task ask has no send_to (config checks)
        self._finish(outcome)

    def _finish(self, result: dict[str, Any]) -> None:
        self.pending = {}
        self.result = result
        self.updated = time.time()
