"""Where a triggered run's reply goes (``[triggers.sink]``): a workspace file, a webhook
URL, or another agent.

Each way reuses the path every other caller takes, so a sink has no rules of its own to
get wrong: the file is written by the ``file_write`` tool's writer (beneath the agent's
workspace, no symlink followed, atomic, bounded), the URL is POSTed through the SSRF
guard's client (metadata and link-local never, no redirects, a deadline), and an agent
is sent the reply like any other message (local agents through ``Agents``, the
``[[a2a.external_agents]]`` through the A2A client). A failure is one ``SinkError`` line
for the run's ``sink_error``; nothing here can take the runner down.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import msgspec
import trio

from runtime.config import TriggerConfig, TriggerSink
from runtime.errors import TernError
from runtime.kernel.agents import Agents
from runtime.kernel.triggers.template import render
from runtime.log import get_logger
from runtime.net.guard import AddressPolicy

if TYPE_CHECKING:
    from runtime.a2a.client.external import ExternalAgents
    from runtime.kernel.kernel import Kernel

__all__ = ["SinkError", "deliver", "MAX_REPLY_BYTES"]

log = get_logger("triggers.sinks")

MAX_REPLY_BYTES = 1024 * 1024  # what a sink passes on at most; the rest is cut (the run record is bounded too)


class SinkError(TernError):
    """A reply could not be delivered; the message is the one line the run records."""

    http_status = 502


async def deliver(sink: TriggerSink, *, reply: str, run: dict[str, Any], trigger: TriggerConfig, kernel: Kernel,
                  timeout_secs: float = 30.0) -> None:
    """Deliver ``reply`` of ``run`` (its record: id, trigger, outcome) for ``trigger``
    within ``timeout_secs``; raises ``SinkError`` only."""
    reply = _bounded(reply)
    try:
        with trio.fail_after(timeout_secs):
            if sink.kind == "file":
                agent = kernel.agents.get(trigger.agent)
                await _to_file(sink.path, reply, run, kernel.pipeline.run(agent).context.workspace)
            elif sink.kind == "webhook":
                await _to_url(sink.url, reply, run, AddressPolicy.from_security(kernel.config.security),
                              timeout_secs)
            else:
                await _to_agent(sink.agent, reply, run, kernel.agents, kernel.external)
    except SinkError:
        raise
    except trio.TooSlowError:
        raise SinkError(f"the {sink.kind} sink took longer than {timeout_secs:g} s") from None
    except (TernError, OSError) as exc:
        raise SinkError(f"the {sink.kind} sink failed: {_line(exc)}") from None
    except Exception as exc:  # a bug: the run records it, the log has the traceback, the runner goes on
        log.error("the %s sink of %s failed", sink.kind, run.get("id", ""), exc_info=True)
        raise SinkError(f"the {sink.kind} sink failed: internal error: {type(exc).__name__}") from None


def _bounded(reply: str) -> str:
    data = reply.encode("utf-8", "replace")
    if len(data) <= MAX_REPLY_BYTES:
        return reply
    return data[:MAX_REPLY_BYTES].decode("utf-8", "ignore") + "\n[... truncated by tern]"


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:500]


async def _to_file(template: str, reply: str, run: dict[str, Any], workspace: str) -> None:
    """The path template sees only the run's trigger, id and the time of delivery: never a
    webhook's body, so no sender chooses the file name."""
    from runtime.kernel.tools_files import file_write
    from runtime.ports import ToolContext

    if not workspace:
        raise SinkError("the file sink has no workspace to write in (set [state] dir or the agent's workspace)")
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    path = render(template, {"trigger": run.get("trigger", ""), "run_id": run.get("id", ""), "time": now})
    result = await file_write({"path": path, "content": reply}, ToolContext(workspace=workspace))
    if result.is_error:
        raise SinkError(f"the file sink could not write {path[:200]!r}: {_line(Exception(result.text))}")


async def _to_url(url: str, reply: str, run: dict[str, Any], policy: AddressPolicy, timeout_secs: float) -> None:
    import httpx

    from runtime.net.guard import check_url
    from runtime.net.outbound import make_client

    shown = _shown(url)
    check_url(url, policy)
    body = msgspec.json.encode({"trigger": run.get("trigger", ""), "run_id": run.get("id", ""),
                                "outcome": run.get("outcome", ""), "reply": reply})
    try:
        async with make_client(policy, timeout=timeout_secs) as client, \
                client.stream("POST", url, content=body, headers={"content-type": "application/json"}) as answer:
            status = answer.status_code  # the answer's body is never read: nothing here needs it
    except httpx.HTTPError as exc:
        raise SinkError(f"the webhook sink {shown} failed: {_line(exc)}") from None
    if 300 <= status < 400:
        raise SinkError(f"the webhook sink {shown} answered {status}: redirects are not followed")
    if not 200 <= status < 300:
        raise SinkError(f"the webhook sink {shown} answered {status}")


def _shown(url: str) -> str:
    """The URL without its query or user info, which may hold a token."""
    try:
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.hostname}{':%d' % parts.port if parts.port else ''}{parts.path}"[:200]
    except ValueError:
        return "(an invalid URL)"


async def _to_agent(name: str, reply: str, run: dict[str, Any], agents: Agents,
                    external: ExternalAgents | None) -> None:
    if any(agent.name == name for agent in agents.config.agents):
        await agents.send(name, reply, caller=f"trigger:{run.get('trigger', '')}")
    elif external is not None and name in external.peers:
        await external.send(name, reply)
    else:
        raise SinkError(f"the agent sink names no local agent or [[a2a.external_agents]] entry {name[:100]!r}")
