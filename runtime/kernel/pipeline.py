"""The one tool pipeline every caller goes through (agents, ``tern call``, the MCP server,
A2A tasks through their agents):

    capability -> arguments vs inputSchema -> loop guard -> taint check -> policy and
    approval -> timeout -> execution -> truncation -> redaction -> taint labelling -> audit record

Every refusal and failure comes back as a tool error (``ToolResult.is_error``) with a
sentence a model can act on, and an audit record; only the caller's own cancellation
escapes. An unexpected exception in a tool (a bug) is logged with its traceback and
answered as ``internal error in <tool>: <ExceptionType>``. Results are redacted with
the configured secrets plus every value registered with ``runtime.log.register_secret``
(expanded header values, API keys), so a peer that echoes a credential back does not
hand it to the caller; the matcher is rebuilt only when that set changes. With
``[security] audit_required``, no tool runs while the audit log cannot be written. A ``Run`` is
one agent run (or one CLI call): the loop guard and the taint tracker live there, so
what one run fetched never taints another.

Policy (``policy.py``) says allow, ask or deny for each agent and tool; an ``ask`` waits
in ``approvals.py`` for a person (the run's ``ask`` callback, if its caller can put the
question, runs meanwhile) unless a persisted decision already answers it. A call the
policy allows costs one cached dict look-up here.
"""

from __future__ import annotations

import os
import time
from typing import Any

import trio

from runtime import tracing
from runtime.config import AgentConfig, Config
from runtime.errors import Forbidden, TernError
from runtime.kernel.door import enter_tool
from runtime.log import get_logger, register_secret, registered_secrets, secrets_version
from runtime.mcp.names import tool_globs
from runtime.wire.jcs import CanonicalError, canonicalize
from runtime.kernel.approvals import args_digest
from runtime.kernel.audit import AuditLog, digest
from runtime.kernel.policy import Policy
from runtime.kernel.guards import (LoopGuard, Redactor, TaintTracker, is_sensitive_sink, is_untrusted_source,
                                   secret_env_values, truncate)
from runtime.ports import CALL_CLOCK, CallClock, Caller, Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.schema import validate

__all__ = ["Run", "ToolPipeline"]

log = get_logger("pipeline")


class Run:
    """One agent run's state: which agent (None: an operator, e.g. ``tern call``), its
    loop guard, what untrusted content it has seen, and whether its caller gave up."""

    def __init__(self, agent: AgentConfig | None = None, *, max_calls: int = 50,
                 context: ToolContext | None = None, context_id: str = "", on_tool: Any = None,
                 key: str = "admin") -> None:
        self.agent = agent
        #: ``on_tool(event)`` hears each call of this run start and end (``tern run`` shows them as they
        #: happen): {"phase": "start", "tool", "arguments"} then {"phase": "end", "tool", "outcome", "ms"}
        self.on_tool = on_tool
        self.context = context or ToolContext(agent=agent.name if agent else "")
        self.context_id = context_id  # the conversation, for approval requests
        self.key = key  # the key name it runs for: its audit records and approval requests carry it
        self.loop_guard = LoopGuard(max_calls=max_calls)
        self.taint = TaintTracker()
        self.cancelled = False
        self._scopes: set[trio.CancelScope] = set()  # the timeout scopes of its calls now running

    def cancel(self) -> None:
        """The caller gave up (an MCP client's notifications/cancelled, say): the call
        running now stops, ends as "cancelled" (audited as such), and none starts again.
        The pipeline's own timeout scope does the stopping, so a caller needs no scope
        of its own per call."""
        self.cancelled = True
        for scope in self._scopes:
            scope.cancel()


def allowed(agent: AgentConfig | None, tool: str) -> bool:
    """Capabilities: an agent may call only tools its ``tools`` globs name (casefolded,
    ``-`` and ``_`` the same; compiled once per agent config)."""
    return agent is None or tool_globs(agent.tools).matches(tool)


class ToolPipeline:
    def __init__(self, registry: ToolRegistry, config: Config, *, audit: AuditLog | None = None,
                 secrets: list[str] | None = None, observers: list[Any] | None = None,
                 approvals: Any = None) -> None:
        self.registry = registry
        self.config = config
        self.audit = audit
        self.policy = Policy(config)
        self.approvals = approvals  # kernel.approvals.Approvals; None: an "ask" is refused
        secret_values = [*(secrets or []), *config.security.redact,
                         *secret_env_values(os.environ, extra_names=config.security.redact_env)]
        for value in secret_values:  # the same secrets never reach a log line either
            register_secret(value)
        self._own_secrets = secret_values  # with the live registered set: see _current_redactor
        self._secrets_version = secrets_version()
        self.redactor = Redactor([*secret_values, *registered_secrets()])
        self.observers = observers if observers is not None else []  # (tool, outcome, seconds)
        self.events: Any = None  # the kernel's EventBus: a "tool.call" event per call while anyone listens
        self._remote_agents = frozenset(a.name for a in config.agents if a.kind == "remote")

    def reconfigure(self, config: Config) -> None:
        """A reloaded config's policy, timeouts, limits and secrets; a call already
        running finishes under the settings it started with."""
        self.config = config
        self.policy = Policy(config)
        fresh = [*config.security.redact, *secret_env_values(os.environ, extra_names=config.security.redact_env)]
        for value in fresh:
            register_secret(value)
        self._own_secrets = list(dict.fromkeys([*self._own_secrets, *fresh]))  # a secret once seen stays masked
        self._remote_agents = frozenset(a.name for a in config.agents if a.kind == "remote")
        self._refresh_redactor()

    def _refresh_redactor(self) -> None:
        self._secrets_version = secrets_version()
        self.redactor = Redactor([*self._own_secrets, *registered_secrets()])

    def redact(self, text: str) -> str:
        """``text`` with every known secret masked (for what reaches a caller outside a
        tool call: a remote agent's reply)."""
        if self._secrets_version != secrets_version():
            self._refresh_redactor()
        return self.redactor.redact(text)

    def redact_obj(self, value: Any) -> Any:
        if self._secrets_version != secrets_version():
            self._refresh_redactor()
        return self.redactor.redact_obj(value)

    def short_arguments(self, arguments: Any, limit: int = 160) -> str:
        """A call's arguments as one short redacted line of JSON, for people watching
        (events, ``tern run``'s tool lines), never for the audit log (digests only)."""
        import json

        try:
            text = json.dumps(self.redact_obj(arguments), ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = "?"
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def tools(self) -> list[Tool]:
        return self.registry.tools()

    def get(self, name: str) -> Tool | None:
        return self.registry.get(name)

    async def wait_for(self, name: str) -> Tool | None:
        return await self.registry.wait_for(name)

    def run(self, agent: AgentConfig | None = None, *, progress: Any = None, log: Any = None, ask: Any = None,
            context_id: str = "", on_tool: Any = None, sample: Any = None, owner: Caller | None = None) -> Run:
        """A new run for ``agent`` (None: an operator), with its tool context: the agent's
        workspace (default ``<state dir>/workspaces/<agent>``), and the caller's
        ``progress``/``log``/``ask``/``sample`` callbacks (see ToolContext)."""
        state = self.config.state.dir
        workspace = ""
        if agent is not None:
            workspace = agent.workspace or (os.path.join(state, "workspaces", agent.name) if state else "")
        if progress is not None:  # streamed output is masked like results: a peer may echo a secret
            shown_progress = progress

            def progress(text: str) -> None:
                shown_progress(self.redact(text))
        if log is not None:
            shown_log = log

            def log(level: str, text: str) -> None:
                shown_log(level, self.redact(text))
        context = ToolContext(agent=agent.name if agent else "", workspace=workspace, state_dir=state,
                              progress=progress, log=log, ask=ask, sample=sample, owner=owner)
        return Run(agent, max_calls=(agent and agent.max_tool_calls_per_run) or self.config.tools.max_calls_per_run,
                   context=context, context_id=context_id, on_tool=on_tool,
                   key=owner.name if owner is not None else "admin")

    async def call(self, name: str, arguments: dict[str, Any] | None = None, *, run: Run | None = None,
                   timeout_secs: float | None = None, caller: str = "") -> ToolResult:
        agent_name = run.agent.name if run is not None and run.agent else ""
        with tracing.span(f"execute_tool {name}", tracing.INTERNAL,
                          {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                           "gen_ai.agent.name": agent_name}, merge="execute_tool") as span:  # in MCP's tools/call
            run = run or self.run()
            arguments = arguments if arguments is not None else {}
            started = time.perf_counter()
            tool = self.registry.get(name)  # looked up once: the call and its audit record share it
            if tool is None and allowed(run.agent, name) and not run.cancelled:
                tool = await self._arriving(name, run)
            untrusted = is_untrusted_source(name, mcp=tool is not None and tool.source == "mcp")
            span.set("gen_ai.tool.type", "extension" if tool is not None and tool.source == "mcp" else "function")
            if self._secrets_version != secrets_version():  # a secret was registered since: mask it too
                self._refresh_redactor()
            audit = self.audit
            if run.on_tool is not None:
                run.on_tool({"phase": "start", "tool": name, "arguments": self.short_arguments(arguments)})
            if audit is not None and self.config.security.audit_required and not audit.probe():
                result, outcome = _refused(f"{name} was not run: the audit log cannot be written ({audit.error}) "
                                           "and [security] audit_required is on"), "audit_unavailable"
            else:
                try:
                    result, outcome = await self._call(name, tool, untrusted, arguments, run, timeout_secs, caller)
                except Exception as exc:  # a bug in a tool: a tool error and a record, never a dropped call
                    log.error("tool %s failed with an unexpected %s", name, type(exc).__name__, exc_info=True)
                    result, outcome = _refused(f"internal error in {name}: {type(exc).__name__}"), "error"
            seconds = time.perf_counter() - started
            if outcome != "ok":
                span.error(outcome)
            for observe in self.observers:
                observe(name, outcome, seconds)
            events = self.events if self.events is not None and self.events.listening else None
            if events is not None or run.on_tool is not None:  # else the call costs no event at all
                event: dict[str, Any] = {"tool": name, "agent": run.agent.name if run.agent else None, "caller": caller,
                                         "outcome": outcome, "ms": round(seconds * 1000, 3)}
                if outcome != "ok":  # tern's sentence or the tool's own error, cut: enough to see why
                    event["error"] = result.text[:200]
                if result.task:
                    event["task"] = result.task
                if events is not None:
                    events.publish("tool.call", {**event, "arguments": self.short_arguments(arguments),
                                                 "context_id": run.context_id})
                if run.on_tool is not None:
                    run.on_tool({"phase": "end", **event})
            if audit is not None:
                # A refusal or failure carries tern's own sentence (redacted); a tool's output never goes in the log.
                why = {} if outcome in ("ok", "tool_error") else {"error": result.text}
                if result.task:  # it ran as this upstream task (an MCP server's tasks)
                    why["task"] = result.task
                audit.record("tool_call", agent=run.agent.name if run.agent else None, caller=caller, key=run.key,
                             tool=name,
                             arguments=digest(arguments), outcome=outcome, ms=round(seconds * 1000, 3),
                             untrusted=untrusted, **why)
            return result

    async def _arriving(self, name: str, run: Run) -> Tool | None:
        """A tool not there yet whose MCP server is still connecting: wait for it (within
        the server's timeout; ``run.cancel()`` stops the wait) instead of failing the
        first calls after a start."""
        with trio.CancelScope() as scope:
            run._scopes.add(scope)
            try:
                return await self.registry.wait_for(name)
            finally:
                run._scopes.discard(scope)
        return None

    async def _call(self, name: str, tool: Tool | None, untrusted: bool, arguments: dict[str, Any], run: Run,
                    timeout_secs: float | None, caller: str = "") -> tuple[ToolResult, str]:
        agent = run.agent
        if run.cancelled:
            return _refused(f"{name} was not run: its caller cancelled"), "cancelled"
        if not allowed(agent, name):
            return _refused(f"agent '{agent.name}' may not call {name}: it is not in the agent's tools"), "denied"  # type: ignore[union-attr]
        if agent is None:  # called outside an agent: the caller's own reach decides (kernel.door)
            try:
                enter_tool(run.context.owner, name)
            except Forbidden as exc:
                return _refused(str(exc)), "denied"
        if tool is None:  # unknown, or the tool of an MCP server that is down: say which
            try:
                await self.registry.call(name, arguments)
            except TernError as exc:  # the server's last error may quote what a peer said: redacted too
                return _refused(self.redactor.redact(str(exc))), "unavailable"
            return _refused(f"there is no tool named {name}"), "unknown"
        if not isinstance(arguments, dict):
            return _refused(f"{name} takes a JSON object of arguments"), "invalid"
        problems = validate(arguments, tool.input_schema)
        if problems:
            return _refused(f"invalid arguments for {name}: " + "; ".join(problems)), "invalid"
        verdict = run.loop_guard.check(name, arguments)
        if verdict.action == "block":
            return _refused(verdict.reason), "loop_blocked"
        remote = name == "agent_send" and arguments.get("agent") in self._remote_agents
        if is_sensitive_sink(name, remote_agent=remote):
            taint = run.taint.find(arguments)
            if taint is not None and not (agent is not None and agent.allow_tainted_sinks):
                return _refused(f"refused: the arguments of {name} contain content from {taint.source} "
                                f"({taint.path}), which is untrusted; sensitive tools do not take it"), "tainted"
        decision = self.policy.verdict(agent, tool)
        if decision.decision != "allow":
            governed = await self._govern(decision, name, arguments, run, caller)
            if isinstance(governed, tuple):
                return governed
            arguments = governed  # the bytes a person approved, decoded afresh
        limit = timeout_secs or self.config.tools.timeouts.get(name, self.config.tools.timeout_secs)
        with trio.move_on_after(limit) as scope:
            run._scopes.add(scope)
            clock = CALL_CLOCK.set(CallClock(scope))  # paused while a server's question waits for its answer
            try:
                result = await self.registry.call(name, arguments, timeout_secs=limit, context=run.context)
            except TernError as exc:
                return _refused(self.redactor.redact(f"{name} failed: {exc}")), "error"
            finally:
                CALL_CLOCK.reset(clock)
                run._scopes.discard(scope)
        if scope.cancelled_caught:
            if run.cancelled:
                return _refused(f"{name} was cancelled by its caller"), "cancelled"
            return _refused(f"{name} did not finish within {limit:g} s"), "timeout"
        text = self.redactor.redact(truncate(result.text, self.config.tools.max_result_chars))
        if verdict.action == "warn":
            text += f"\n[warning: {verdict.reason}]"
        if untrusted:
            run.taint.add_untrusted(result.text, name)
        outcome = "tool_error" if result.is_error else "ok"
        structured = self.redactor.redact_obj(result.structured) if result.structured is not None else None
        return ToolResult(text, result.is_error, structured, self.redactor.redact_obj(result.content),
                          task=result.task), outcome


    async def _govern(self, verdict: Any, name: str, arguments: dict[str, Any], run: Run,
                      caller: str) -> tuple[ToolResult, str] | dict[str, Any]:
        """Deny, or ask a person and wait; the arguments to run when the call may go on.
        A person's yes runs exactly what they were shown: the arguments are frozen to their
        RFC 8785 bytes before the request, the tool gets those bytes decoded afresh, and
        only if their (redacted) digest is the one the approval bound to."""
        if verdict.decision == "deny":
            return _refused(f"{name} was not run: {verdict.reason}"), "denied"
        approvals = self.approvals
        if approvals is None:
            return _refused(f"{name} was not run: it needs a person's approval ({verdict.reason}), and this tern "
                            "has no state directory to keep the request in"), "denied"
        agent = run.agent.name if run.agent is not None else ""
        arguments_digest = digest(arguments)
        try:
            remembered = await approvals.remembered(agent, name, arguments_digest, run.key)
        except TernError as exc:  # the store is away: no rule to read, so no yes
            return _refused(f"{name} was not run: {exc}"), "denied"
        if remembered == "allow":
            return arguments
        try:
            frozen = _frozen(arguments)
        except CanonicalError as exc:
            return _refused(f"{name} was not run: its arguments have no canonical JSON form to show a person "
                            f"({exc})"), "denied"
        if remembered == "deny":
            return _refused(f"{name} was not run: a person denied it from now on"
                            f"{' for agent ' + repr(agent) if agent else ''}"), "rejected"
        with trio.CancelScope() as scope:  # run.cancel() stops the wait too
            run._scopes.add(scope)
            try:
                approval = await approvals.request(agent, name, frozen, arguments_digest, caller=caller,
                                                   wait_secs=verdict.wait_secs,
                                                   context_id=run.context_id, reason=verdict.reason,
                                                   ask=run.context.ask, key=run.key,
                                                   origin=run.context.owner.way if run.context.owner else "",
                                                   bounded=run.context.owner is not None
                                                   and not run.context.owner.is_owner)
            except TernError as exc:
                return _refused(f"{name} was not run: {exc}"), "denied"
            finally:
                run._scopes.discard(scope)
        if run.cancelled or scope.cancelled_caught:
            return _refused(f"{name} was cancelled by its caller while it waited for approval"), "cancelled"
        if approval.state == "approved":
            try:
                bound = args_digest(approvals.redact(frozen)) == approval.arguments_sha256
            except CanonicalError:
                bound = False
            if bound:
                return frozen
            return _refused(f"{name} was not run: approval {approval.id} was given for other arguments than this "
                            "call's"), "rejected"
        if approval.state == "expired":
            return _refused(f"{name} was not run: approval {approval.id} expired ({approval.reason}); a person "
                            f"can allow it with `tern approve` next time, or a [[governance.rules]] entry"), "expired"
        if not approval.id:  # refused before it was asked (too many waiting)
            return _refused(f"{name} was not run: {approval.reason}"), "denied"
        by = approval.decided_by or "a person"
        return _refused(f"{name} was not run: {by} denied it (approval {approval.id}"
                        f"{', ' + approval.channel if approval.channel else ''})"
                        f"{': ' + approval.reason if approval.reason else ''}"), "rejected"


def _frozen(arguments: dict[str, Any]) -> dict[str, Any]:
    """``arguments`` as their RFC 8785 bytes decoded again: a copy nothing else holds."""
    import msgspec

    return msgspec.json.decode(canonicalize(arguments))


def _refused(message: str) -> ToolResult:
    return ToolResult(message, is_error=True)
