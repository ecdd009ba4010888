"""Agents: what answers a message. Every kind makes its tool calls through the pipeline
and is audited (``agent_message``, with its ``context_id``); the kinds that read their
conversation back (``llm``) also commit each exchange to it before replying. The others
answer from the message alone, so storing their exchanges would be a write per message
that nothing ever reads (a ``remote`` agent's history lives at the remote end, under the
same contextId).

- ``echo``: replies with the message (protocol demos and tests).
- ``command``: runs a local program with the message on stdin, in a cleared environment
  and a session of its own (``runtime.net.process``, as for MCP servers), with a timeout
  and an output cap; replies with its stdout. However the call ends, the program and
  everything it started are killed.
  Its stdout lines stream to ``on_text`` and its stderr lines to ``on_log`` as they come.
- ``tool``: one fixed tool call. A message that is a JSON object is the arguments;
  otherwise it fills the tool's one string parameter (``file_list`` -> ``path``), or
  no parameter at all when it is empty.
- ``llm``: an OpenAI-compatible model with tool calling (``llm.py``), given the
  conversation so far and the tools its ``tools`` globs allow; up to ``max_iterations``
  model turns, every tool call through the pipeline (one run: one loop guard, one
  taint tracker). Text streams to ``on_text`` as it comes.
- ``remote``: an ``[[a2a.external_agents]]`` entry reached over A2A (``a2a/external.py``),
  in the conversation's contextId.

Budgets (``budgets.py``): ``send`` takes one of the agent's ``requests_per_minute``
before any work (``admit`` only checks); an llm agent's ``tokens_per_hour`` is checked
before each model turn and charged after it; its run's tool calls are capped at its
``max_tool_calls_per_run``. A spent budget is ``BudgetExceeded``, audited as
``budget_exceeded``.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any
from collections.abc import Callable

import msgspec
import trio

from runtime import tracing
from runtime.wire.depth import loads as json_loads
from runtime.config import AgentConfig, Config
from runtime.errors import AgentError, BudgetExceeded, TernError, UnknownAgent, UnknownConversation
from runtime.ports import AgentReply, Caller
from runtime.kernel.budgets import Budgets
from runtime.kernel.conversations import Conversations
from runtime.kernel.door import enter_agent
from runtime.kernel.pipeline import ToolPipeline
from runtime.net.process import shutdown, spawn, subprocess_env
from runtime.wire.limits import check_id, check_name, check_stored

__all__ = ["Agents"]

READ_BYTES = 65536
REMEMBERING_KINDS = frozenset({"llm"})  # the kinds whose replies depend on their conversation


class Agents:
    def __init__(self, config: Config, pipeline: ToolPipeline, conversations: Conversations | None, *,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: the budgets' time in seconds (default trio's)."""
        self.config = config
        self.pipeline = pipeline
        self.conversations = conversations
        self._by_name = {agent.name: agent for agent in config.agents}
        self._clock = clock
        self.budgets = Budgets(config.agents, clock=clock)
        self.remote: Any = None  # ExternalAgents.send, when [a2a] external_agents are configured
        #: the event bus's publish (the kernel sets it): "agent.message" per message, "model.call" per model turn
        self.publish: Callable[[str, dict[str, Any]], None] | None = None
        self.model_calls = 0  # since start, ended or not: the dashboard charts its changes

    def reconfigure(self, config: Config) -> None:
        """A reloaded config's agents (``tern reload``). A message already being answered
        finishes with the agent it started with; budgets count afresh."""
        self.config = config
        self._by_name = {agent.name: agent for agent in config.agents}
        self.budgets = Budgets(config.agents, clock=self._clock)

    def get(self, name: str) -> AgentConfig:
        agent = self._by_name.get(name)
        if agent is None:
            known = ", ".join(self._by_name) or "none configured"
            raise UnknownAgent(f"no agent named {name!r} (agents: {known})")
        return agent

    def admit(self, name: str, who: Caller | None = None) -> None:
        """Whether ``who`` may send ``name`` a message now (``UnknownAgent``, ``Forbidden``
        from the door, ``BudgetExceeded``); counts nothing."""
        check_name(name, "the agent name")
        agent = self.get(name)
        enter_agent(who, agent.name)
        self.budgets.admit(agent.name, who)

    async def send(self, name: str, message: str, *, context_id: str | None = None,
                   on_text: Callable[[str], None] | None = None,
                   on_log: Callable[[str, str], None] | None = None,
                   env: dict[str, str] | None = None, ask: Any = None,
                   on_tool: Callable[[dict[str, Any]], None] | None = None, sample: Any = None,
                   owner: Caller | None = None, caller: str = "", new_context: bool = False) -> AgentReply:
        """Answer one message; for an agent that remembers, the exchange is committed to
        its conversation before the reply is returned. ``on_text`` gets output as it comes (model text, a
        command's stdout); ``on_log(level, line)`` a command's stderr lines; ``env`` is
        added to a command agent's cleared environment; ``ask`` puts a tool call that needs
        approval to the person behind the caller (``runtime.ports.Ask``); ``on_tool`` hears
        each tool call of the run start and end (``pipeline.Run.on_tool``); ``sample`` runs a
        model turn on the caller's MCP client (``runtime.ports.Sample``), for an llm agent
        whose model is ``provider = "mcp-sampling"``. ``owner`` is the caller it runs for:
        another key's ``context_id`` is not found (``UnknownConversation``), and the
        exchange, its tool calls and approvals carry its name (None: "admin"). ``caller``
        names who sent it in the audit record and the event (``trigger:NAME``; empty: not said).
        ``new_context``: the caller minted ``context_id`` just now (an A2A task's own), so no
        conversation has it and its owner is not looked up."""
        check_name(name, "the agent name")
        check_id(context_id, "context_id")
        check_stored(message, "the message")  # its conversation keeps it: storable on either store
        agent = self.get(name)
        enter_agent(owner, agent.name)  # every way in reaches an agent through here: the one decision
        key = owner.name if owner is not None else "admin"
        if not caller and owner is not None and owner.via:
            caller = " via ".join(owner.via)  # a trigger's run, an agent's agent_send: who acted, for the audit
        if context_id and not new_context and self.conversations is not None \
                and not await self.conversations.visible(context_id, owner):
            raise UnknownConversation(f"no conversation has the id {context_id!r} (see `tern conversations`)")
        context_id = context_id or os.urandom(16).hex()  # as random as uuid4().hex, 4x cheaper
        started = time.perf_counter()
        outcome = "error"
        try:
            with tracing.span(f"invoke_agent {name}", tracing.INTERNAL,
                              {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name,
                               "gen_ai.conversation.id": context_id}):
                self.budgets.take(name, owner)
                text = await self._answer(agent, message, context_id, on_text, on_log, env, ask, on_tool, sample,
                                          owner)
            outcome = "ok"
        except BudgetExceeded:
            outcome = "budget_exceeded"
            raise
        finally:
            if outcome == "error" and trio.current_effective_deadline() == -math.inf:
                outcome = "cancelled"  # the caller went away (or shutdown); a nursery may have grouped the Cancelled
            ms = round((time.perf_counter() - started) * 1000, 3)
            if self.pipeline.audit is not None:
                self.pipeline.audit.record("agent_message", agent=name, context_id=context_id, outcome=outcome,
                                           ms=ms, chars_in=len(message), key=key,
                                           **({"caller": caller} if caller else {}))
            if self.publish is not None:
                self.publish("agent.message", {"agent": name, "context_id": context_id, "outcome": outcome, "ms": ms,
                                               "chars_in": len(message), "key": key,
                                               **({"caller": caller} if caller else {})})
        if self.conversations is not None and agent.kind in REMEMBERING_KINDS:
            await self.conversations.append(context_id, Conversations.message("user", name, message),
                                            Conversations.message("agent", name, text), owner=key)
        return AgentReply(name, context_id, text)

    async def _answer(self, agent: AgentConfig, message: str, context_id: str,
                      on_text: Callable[[str], None] | None,
                      on_log: Callable[[str, str], None] | None,
                      env: dict[str, str] | None = None, ask: Any = None, on_tool: Any = None,
                      sample: Any = None, owner: Caller | None = None) -> str:
        if agent.kind == "llm":
            return await self._llm(agent, message, context_id, on_text, ask, on_tool, sample, owner)
        if agent.kind == "echo":
            return message
        if agent.kind == "command":
            return await self._command(agent, message, on_text, on_log, env)
        if agent.kind == "tool":
            return await self._tool(agent, message, context_id, ask, on_tool, owner)
        if agent.kind == "remote":
            return await self._remote(agent, message, context_id)
        raise AgentError(f"agent {agent.name!r} is of kind {agent.kind!r}, which does not run in this build yet")

    async def _remote(self, agent: AgentConfig, message: str, context_id: str) -> str:
        """An A2A agent elsewhere; tern's conversation id is the remote contextId."""
        if self.remote is None:
            raise AgentError(f"agent {agent.name!r}: no [[a2a.external_agents]] entry named {agent.remote!r}")
        try:
            reply = await self.remote(agent.remote, message, context_id=context_id)
        except TernError as exc:
            raise AgentError(f"agent {agent.name!r}: {exc}") from None
        return self.pipeline.redact(reply.text)  # a peer may echo the credentials tern sent it

    async def _command(self, agent: AgentConfig, message: str, on_text: Callable[[str], None] | None,
                       on_log: Callable[[str, str], None] | None,
                       env: dict[str, str] | None = None) -> str:
        if not agent.command:
            raise AgentError(f"agent {agent.name!r}: kind = \"command\" needs command = [...]")
        try:
            process = await spawn(agent.command, env={**subprocess_env([]), **(env or {})})
        except OSError as exc:
            raise AgentError(f"agent {agent.name!r}: cannot run {agent.command[0]}: {exc.strerror or exc}") from None
        out, err = bytearray(), bytearray()
        cap = agent.max_output_bytes

        async def feed() -> None:
            try:
                await process.stdin.send_all(message.encode("utf-8"))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # it did not read all of it: its choice
            await process.stdin.aclose()

        async def drain(stream: Any, into: bytearray, limit: int, lines: Any) -> None:
            pending = b""
            while chunk := await stream.receive_some(READ_BYTES):
                if len(into) < limit:
                    into += chunk[: limit - len(into)]
                if lines is not None:  # whole lines as they come, each cut to a sane length
                    *complete, pending = (pending + chunk).split(b"\n")
                    pending = pending[-4096:]
                    for line in complete:
                        lines(line[:4096].decode("utf-8", "replace"))
            if lines is not None and pending:
                lines(pending.decode("utf-8", "replace"))

        try:
            with trio.move_on_after(agent.timeout_secs) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(feed)
                    nursery.start_soon(drain, process.stdout, out, cap, on_text and (lambda line: on_text(line + "\n")))
                    nursery.start_soon(drain, process.stderr, err, 4096, on_log and (lambda line: on_log("info", line)))
                await process.wait()
        finally:
            await shutdown(process, grace_secs=0)  # at once, with whatever it started
        if scope.cancelled_caught:
            raise AgentError(f"agent {agent.name!r}: {agent.command[0]} did not finish within {agent.timeout_secs:g} s")
        if process.returncode != 0:
            tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            raise AgentError(f"agent {agent.name!r}: {agent.command[0]} exited with code {process.returncode}"
                             f"{': ' + tail[0] if tail[0] else ''}")
        text = out.decode("utf-8", "replace")
        return text + (f"\n[output cut at {cap} bytes]" if len(out) >= cap else "")

    async def _llm(self, agent: AgentConfig, message: str, context_id: str,
                   on_text: Callable[[str], None] | None, ask: Any = None, on_tool: Any = None,
                   sample: Any = None, owner: Caller | None = None) -> str:
        from runtime.kernel.llm import ChatClient, LlmError
        from runtime.kernel.pipeline import allowed

        if agent.model is None:
            raise AgentError(f"agent {agent.name!r} has no [agents.model]")
        messages: list[dict[str, Any]] = []
        if agent.system_prompt:
            messages.append({"role": "system", "content": agent.system_prompt})
        if self.conversations is not None:
            for past in await self.conversations.history(context_id):
                messages.append({"role": "user" if past.role == "user" else "assistant", "content": past.content})
        messages.append({"role": "user", "content": message})
        tools = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description[:1024], "parameters": t.input_schema},
            }
            for t in self.pipeline.registry.tools()
            if agent.tools and allowed(agent, t.name)
        ]
        run = self.pipeline.run(agent, ask=ask, context_id=context_id, on_tool=on_tool, sample=sample, owner=owner)
        self.budgets.watch_run(agent.name, run.loop_guard)
        if agent.model.provider == "mcp-sampling":
            from runtime.kernel.llm_sampling import SamplingClient

            if sample is None:
                raise AgentError(f"agent {agent.name!r} runs on the model of the MCP client that calls it "
                                 '(provider = "mcp-sampling"), and was not called by an MCP client that offers '
                                 "sampling")
            client: Any = SamplingClient(agent.model, sample)
        else:
            client = ChatClient(agent.model, usage=agent.tokens_per_hour > 0)
        try:
            for _ in range(max(agent.max_iterations, 1)):
                reservation = self.budgets.reserve(agent.name, owner,
                                                   lambda: _turn_reserve(agent, messages, tools))
                turn = None
                try:
                    turn = await self._model_turn(client, agent, context_id, messages, tools, on_text)
                finally:
                    self.budgets.settle(reservation, turn.tokens if turn is not None else 0)
                if not turn.tool_calls:
                    return turn.text
                messages.append(
                    {
                        "role": "assistant",
                        "content": turn.text or None,
                        "tool_calls": [
                            {
                                "id": call.id,
                                "type": "function",
                                "function": {
                                    "name": call.name,
                                    "arguments": call.arguments
                                    if isinstance(call.arguments, str)
                                    else json.dumps(call.arguments),
                                },
                            }
                            for call in turn.tool_calls
                        ],
                    }
                )
                for call in turn.tool_calls:
                    if isinstance(call.arguments, dict):
                        result = await self.pipeline.call(
                            call.name, call.arguments, run=run, caller=f"agent:{agent.name}"
                        )
                        text = result.text
                    else:
                        text = f"the arguments for {call.name} are not a JSON object: {str(call.arguments)[:200]}"
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
        except LlmError as exc:
            raise AgentError(str(exc)) from None
        finally:
            await client.aclose()
        raise AgentError(f"agent {agent.name!r} stopped after {agent.max_iterations} model turns without a final "
                         "answer (its max_iterations); the conversation was not saved")

    async def _model_turn(self, client: Any, agent: AgentConfig, context_id: str, messages: list[dict[str, Any]],
                          tools: list[dict[str, Any]], on_text: Callable[[str], None] | None) -> Any:
        """One model call, published as a "model.call" event (model, tokens, duration,
        outcome), so `tern events` shows what each turn cost."""
        started = time.perf_counter()
        outcome, turn = "error", None
        self.model_calls += 1
        model = client.model
        try:
            with tracing.span(f"chat {model.model}", tracing.CLIENT,
                              {"gen_ai.operation.name": "chat", "gen_ai.request.model": model.model,
                               "gen_ai.provider.name": "mcp" if model.provider == "mcp-sampling" else "openai",
                               "gen_ai.agent.name": agent.name}) as span:
                turn = await client.complete(messages, tools, on_text=on_text)
                if span.recording:
                    _trace_turn(span, turn)
            outcome = "ok"
            return turn
        finally:
            if self.publish is not None:
                event: dict[str, Any] = {"agent": agent.name, "context_id": context_id, "model": client.model.model,
                                         "outcome": outcome, "ms": round((time.perf_counter() - started) * 1000, 3)}
                if turn is not None:
                    event.update(tokens=turn.tokens, reported=turn.usage is not None, tool_calls=len(turn.tool_calls))
                self.publish("model.call", event)

    async def _tool(self, agent: AgentConfig, message: str, context_id: str = "", ask: Any = None,
                    on_tool: Any = None, owner: Caller | None = None) -> str:
        from runtime.kernel.policy import is_read_only

        if not agent.tool:
            raise AgentError(f'agent {agent.name!r}: kind = "tool" needs tool = "..."')
        tool = self.pipeline.registry.get(agent.tool) or await self.pipeline.registry.wait_for(agent.tool)
        arguments = _arguments(message, tool.input_schema if tool is not None else {})
        # The fixed tool is the agent's capability even when its tools list is empty.
        allowed = (
            agent if agent.tool in agent.tools else msgspec.structs.replace(agent, tools=[*agent.tools, agent.tool])
        )
        guessed = _guessed_optional(arguments, message, tool.input_schema if tool is not None else {})
        retriable = bool(guessed) and tool is not None and is_read_only(tool)
        held: list[dict[str, Any]] = []  # a guess's tool events: shown only if the guess is what answers
        run = self.pipeline.run(allowed, ask=ask, context_id=context_id, owner=owner,
                                on_tool=held.append if retriable and on_tool is not None else on_tool)
        result = await self.pipeline.call(agent.tool, arguments, run=run, caller=f"agent:{agent.name}")
        if result.is_error and retriable:
            # "list my files" is a request, not a path: a read-only tool whose only
            # argument is optional answers it with its default instead, and says so.
            run.on_tool = on_tool
            retry = await self.pipeline.call(agent.tool, {}, run=run, caller=f"agent:{agent.name}")
            if not retry.is_error:
                return (f"({json.dumps(message.strip())} is not a {guessed} here ({result.text}), so this is "
                        f"{agent.tool} with no {guessed}; send a {guessed} for something else.)\n{retry.text}")
        for event in held if on_tool is not None else ():
            on_tool(event)
        if result.is_error:
            raise AgentError(result.text)
        return result.text


DEFAULT_TURN_TOKENS = 1024  # what a turn's answer is reckoned at when the model sets no max_tokens


def _turn_reserve(agent: AgentConfig, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
    """What a model turn holds of a token budget while it runs: its prompt at two
    characters a token (tokenizers give three to four for prose, fewer for JSON and code:
    too much held costs nothing, it is given back at ``settle``, while too little would let
    turns running together pass the budget) plus the most it may answer (the model's
    ``max_tokens``)."""
    size = len(json.dumps(messages, ensure_ascii=False)) + len(json.dumps(tools, ensure_ascii=False))
    answer = agent.model.max_tokens if agent.model is not None and agent.model.max_tokens else DEFAULT_TURN_TOKENS
    return -(-size // 2) + answer


def _trace_turn(span: Any, turn: Any) -> None:
    """A model call's GenAI attributes: the reported token counts and finish reason."""
    prompt, completion = turn.split
    if prompt is not None:
        span.set("gen_ai.usage.input_tokens", prompt)
    if completion is not None:
        span.set("gen_ai.usage.output_tokens", completion)
    if turn.finish:
        span.set("gen_ai.response.finish_reasons", (turn.finish,))


def _guessed_optional(arguments: dict[str, Any], message: str, schema: dict[str, Any]) -> str:
    """The argument a plain-text message was put in, if the tool may be called without
    it (not required); else ""."""
    if len(arguments) != 1 or message.strip().startswith("{"):
        return ""
    (key, value), = arguments.items()
    return key if value == message and key not in schema.get("required", []) else ""


def _arguments(message: str, schema: dict[str, Any]) -> dict[str, Any]:
    text = message.strip()
    if text.startswith("{"):
        try:
            parsed = json_loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    if not text:
        return {}
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    strings = [key for key, spec in properties.items() if isinstance(spec, dict) and spec.get("type") == "string"]
    required = [key for key in schema.get("required", []) if key in strings]
    if len(required) == 1:
        return {required[0]: message}
    if len(strings) == 1:
        return {strings[0]: message}
    return {"message": message}
