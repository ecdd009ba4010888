"""Ask tools (``[[mcp_server.asks]]``): tools (or prompts) that ask their MCP caller for input.

An ask is a published tool whose questions go to the client that called it: forms and
URLs to open (``elicitation/create``, form and URL mode), model turns (``sampling/createMessage``) and ``roots/list``,
in rounds (a later round's messages may quote earlier answers). When every round is
answered, its ``reply`` (answers filled in) is the result, or is sent as the message to
the exposed tool ``send_to`` (an agent), whose result is the call's.

This module is the protocol logic, without I/O: which questions a round puts to a
client with given capabilities, what a valid answer is, and the text they make.
``ask_call.py`` carries the questions: as the server's own requests in the handshake
era, inside ``input_required`` results in 2026-07-28.

Answers come from a client, so each is checked before it is used: a form's content
against its schema (types, enums, required fields, lengths, ranges; fields the schema
does not name are dropped), a sampling answer must be text, and everything is bounded
(MAX_ANSWER_CHARS per answer, MAX_ROOTS roots). A bad answer ends the call with an
error result that says why.
"""

from __future__ import annotations

import math
import re
import secrets
from typing import Any

import msgspec

from runtime.config import McpAsk, McpAskQuestion
from runtime.errors import ProtocolError, RpcError
from runtime.mcp.protocol import MISSING_CAPABILITY

__all__ = ["Ask", "AskError", "PLACEHOLDER", "METHODS", "MAX_ANSWER_CHARS"]

MAX_ANSWER_CHARS = 16_384  # one answer, as text (a form's content as JSON, a model's reply)
MAX_ARGUMENT_CHARS = 16_384
MAX_ROOTS = 64
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?\}")
METHODS = {"form": "elicitation/create", "url": "elicitation/create", "sampling": "sampling/createMessage",
           "roots": "roots/list"}
CAPABILITY = {"form": "elicitation", "url": "elicitation", "sampling": "sampling", "roots": "roots"}
_encode = msgspec.json.Encoder(order="sorted").encode


class AskError(ProtocolError):
    """A client's answer that cannot be used; ``ask_call`` turns it into the call's
    ``isError`` result, which says why."""


class Ask:
    """One ``[[mcp_server.asks]]`` entry, ready to ask."""

    def __init__(self, config: McpAsk) -> None:
        self.config = config
        self.name = config.name
        self.rounds: list[list[McpAskQuestion]] = []
        for number in sorted({q.round for q in config.questions}):
            self.rounds.append([q for q in config.questions if q.round == number])
        self.questions = {q.key: q for q in config.questions}

    def tool(self) -> dict[str, Any]:
        """The tool as ``tools/list`` shows it."""
        properties = {name: {"type": "string", "maxLength": MAX_ARGUMENT_CHARS} for name in self.config.arguments}
        kinds = sorted({q.kind for q in self.config.questions})
        description = self.config.description or f"Asks you ({', '.join(kinds) or 'nothing'}) and replies."
        return {"name": self.name, "description": description,
                "inputSchema": {"type": "object", "properties": properties, "required": list(self.config.arguments),
                                "additionalProperties": False},
                "annotations": {"readOnlyHint": not self.config.send_to, "openWorldHint": False}}

    def prompt(self) -> dict[str, Any]:
        """The ask as ``prompts/list`` shows it (``prompt = true``)."""
        kinds = sorted({q.kind for q in self.config.questions})
        return {"name": self.name, "description": self.config.description or f"Asks you ({', '.join(kinds)}) first.",
                "arguments": [{"name": name, "required": True} for name in self.config.arguments]}

    def check_arguments(self, arguments: dict[str, Any]) -> str:
        """What is wrong with a call's arguments ('' when nothing)."""
        extra = sorted(set(arguments) - set(self.config.arguments))
        if extra:
            return f"unexpected arguments: {', '.join(extra)[:200]}"
        for name in self.config.arguments:
            value = arguments.get(name)
            if not isinstance(value, str):
                return f"argument {name} (a string) is required"
            if len(value) > MAX_ARGUMENT_CHARS:
                return f"argument {name} is over {MAX_ARGUMENT_CHARS} characters"
        return ""

    # --- Asking -------------------------------------------------------------------------

    def check_capabilities(self, capabilities: Any) -> None:
        """Raises RpcError -32021 when a required question needs what the client did not
        declare (checked before the first question, so nothing is asked in vain)."""
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        for question in self.config.questions:
            if not question.optional and not _can(capabilities, question.kind):
                needed = CAPABILITY[question.kind]
                raise RpcError(MISSING_CAPABILITY, f"this tool needs the client capability {needed!r}",
                               {"requiredCapabilities": {needed: {}}})

    def requests(self, number: int, capabilities: Any, arguments: dict[str, Any],
                 answers: dict[str, Any], *, mode: bool) -> dict[str, dict[str, Any]]:
        """Round ``number``'s questions as ``{key: {method, params}}``, leaving out the
        ones already answered and the optional ones the client cannot answer (recorded
        in ``answers`` as None). Raises RpcError -32021 naming a capability a required
        question needs (``check_capabilities``). ``mode``: forms say ``"mode": "form"`` (2025-11-25 and later)."""
        capabilities = capabilities if isinstance(capabilities, dict) else {}
        asked: dict[str, dict[str, Any]] = {}
        for question in self.rounds[number]:
            if question.key in answers:
                continue
            if not _can(capabilities, question.kind):
                self.check_capabilities(capabilities)  # raises for a required one
                answers[question.key] = None  # an optional one: not asked
                continue
            asked[question.key] = {"method": METHODS[question.kind],
                                   "params": self._params(question, arguments, answers, mode=mode)}
        return asked

    def _params(self, question: McpAskQuestion, arguments: dict[str, Any], answers: dict[str, Any], *,
                mode: bool) -> dict[str, Any]:
        message = fill(question.message, arguments, answers)
        if question.kind == "form":
            params: dict[str, Any] = {"message": message, "requestedSchema": question.schema}
            return {"mode": "form", **params} if mode else params
        if question.kind == "url":  # the URL is the config's, never filled from a client's text
            return {"mode": "url", "message": message, "url": question.url,
                    "elicitationId": f"{question.key}-{secrets.token_urlsafe(12)}"}
        if question.kind == "sampling":
            sampling: dict[str, Any] = {"messages": [{"role": "user", "content": {"type": "text", "text": message}}],
                                        "maxTokens": question.max_tokens}
            if question.system:
                sampling["systemPrompt"] = fill(question.system, arguments, answers)
            return sampling
        return {}

    def take(self, key: str, answer: Any) -> Any:
        """A client's answer to question ``key``, checked and reduced to what tern keeps
        (a form: ``{"action", "content"}``; sampling: its text; roots: ``[{uri, name}]``).
        Raises AskError."""
        question = self.questions[key]
        if not isinstance(answer, dict):
            raise AskError(f"the answer to {key} is not an object")
        if question.kind == "form":
            return _form_answer(key, question.schema, answer)
        if question.kind == "url":
            if answer.get("action") not in ("accept", "decline", "cancel"):
                raise AskError(f"the answer to {key} has no valid action (accept, decline or cancel)")
            return {"action": answer["action"]}
        if question.kind == "sampling":
            return _sampling_answer(key, answer)
        return _roots_answer(key, answer)

    # --- Replying -----------------------------------------------------------------------

    def declined(self, answers: dict[str, Any]) -> str:
        """The first form the person declined or dismissed ('' when none)."""
        for key, answer in answers.items():
            if isinstance(answer, dict) and answer.get("action") in ("decline", "cancel"):
                return key
        return ""

    def reply(self, arguments: dict[str, Any], answers: dict[str, Any]) -> str:
        if self.config.reply:
            return fill(self.config.reply, arguments, answers)
        return "\n".join(f"{key}: {render(answers.get(key))}" for key in self.questions)


def _can(capabilities: dict[str, Any], kind: str) -> bool:
    """Whether a client declared what a question needs (form elicitation: an empty
    ``elicitation`` object means form, as in 2025-06-18)."""
    declared = capabilities.get(CAPABILITY[kind])
    if kind == "form":
        return isinstance(declared, dict) and (not declared or "form" in declared)
    if kind == "url":
        return isinstance(declared, dict) and isinstance(declared.get("url"), dict)
    return isinstance(declared, dict)


def fill(template: str, arguments: dict[str, Any], answers: dict[str, Any]) -> str:
    """``template`` with ``{name}`` (an argument or an answer) and ``{key.field}`` (a
    form's field, or ``{key.action}``) filled in. Not ``str.format``: a client's text
    never reaches a format spec, and ``{`` in JSON examples stays as written."""
    def one(match: re.Match[str]) -> str:
        name, field = match.group(1), match.group(2)
        if field is None and name in arguments:
            return str(arguments[name])
        if name not in answers:
            return match.group(0)
        answer = answers[name]
        if field is None:
            return render(answer)
        if not isinstance(answer, dict):
            return ""
        if field == "action":
            return str(answer.get("action", ""))
        content = answer.get("content")
        value = content.get(field) if isinstance(content, dict) else None
        return "" if value is None else value if isinstance(value, str) else _encode(value).decode()
    return PLACEHOLDER.sub(one, template)


def render(answer: Any) -> str:
    """One answer as text: a form's content as JSON (or "(declined)"), a model's text,
    the roots' URIs, "(not available)" for an optional question the client could not answer."""
    if answer is None:
        return "(not available)"
    if isinstance(answer, str):
        return answer
    if isinstance(answer, list):
        return ", ".join(root["uri"] for root in answer) or "(no roots)"
    if answer.get("action") == "decline":
        return "(declined)"
    if answer.get("action") != "accept":
        return "(cancelled)"
    if "content" not in answer:  # a URL the person agreed to open
        return "(accepted)"
    return _encode(answer["content"]).decode()


# --- Checking answers ---------------------------------------------------------------------


def _form_answer(key: str, schema: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    action = answer.get("action")
    if action in ("decline", "cancel"):
        return {"action": action}
    if action != "accept":
        raise AskError(f"the answer to {key} has no valid action (accept, decline or cancel)")
    content = answer.get("content", {})
    if not isinstance(content, dict):
        raise AskError(f"the answer to {key}: content is not an object")
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    kept: dict[str, Any] = {}
    for name, field in properties.items():
        if name in content and content[name] is not None:
            problem = _field_problem(content[name], field if isinstance(field, dict) else {})
            if problem:
                raise AskError(f"the answer to {key}: {name} {problem}")
            kept[name] = content[name]
    missing = [name for name in schema.get("required", []) if name not in kept]
    if missing:
        raise AskError(f"the answer to {key} lacks the required {', '.join(map(str, missing))}")
    if len(_encode(kept)) > MAX_ANSWER_CHARS:
        raise AskError(f"the answer to {key} is over {MAX_ANSWER_CHARS} bytes")
    return {"action": "accept", "content": kept}


def _field_problem(value: Any, field: dict[str, Any]) -> str:
    """What is wrong with one form field's value against its (flat, primitive) schema."""
    kind = field.get("type")
    if kind == "string":
        if not isinstance(value, str):
            return "is not a string"
        allowed = _choices(field)
        if allowed is not None and value not in allowed:
            return "is not one of the choices"
        if len(value) < field.get("minLength", 0) or len(value) > field.get("maxLength", MAX_ANSWER_CHARS):
            return "has a length out of bounds"
        return ""
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return "is not an integer" if kind == "integer" else "is not a number"
        if kind == "integer" and not float(value).is_integer():
            return "is not an integer"
        if value < field.get("minimum", -math.inf) or value > field.get("maximum", math.inf):
            return "is out of range"
        return ""
    if kind == "boolean":
        return "" if isinstance(value, bool) else "is not a boolean"
    if kind == "array":
        items = field.get("items") if isinstance(field.get("items"), dict) else {}
        allowed = _choices(items)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return "is not a list of strings"
        if allowed is not None and any(v not in allowed for v in value):
            return "has a value that is not one of the choices"
        if len(value) < field.get("minItems", 0) or len(value) > field.get("maxItems", 256):
            return "has a number of choices out of bounds"
        return ""
    return "has a type this server cannot check"


def _choices(field: dict[str, Any]) -> set[str] | None:
    """The allowed values of an enum field, in any of SEP-1330's spellings (``enum``,
    ``oneOf``/``anyOf`` of ``const``); None when any string goes."""
    if isinstance(field.get("enum"), list):
        return {v for v in field["enum"] if isinstance(v, str)}
    for spelling in ("oneOf", "anyOf"):
        if isinstance(field.get(spelling), list):
            return {o.get("const") for o in field[spelling] if isinstance(o, dict) and isinstance(o.get("const"), str)}
    return None


def _sampling_answer(key: str, answer: dict[str, Any]) -> str:
    content = answer.get("content")
    parts = content if isinstance(content, list) else [content]
    texts = [part.get("text") for part in parts if isinstance(part, dict) and part.get("type") == "text"]
    if not texts or not all(isinstance(text, str) for text in texts):
        raise AskError(f"the answer to {key} has no text content")
    text = "".join(texts)
    if len(text) > MAX_ANSWER_CHARS:
        raise AskError(f"the model's answer to {key} is {len(text)} characters; at most {MAX_ANSWER_CHARS} are taken")
    return text


def _roots_answer(key: str, answer: dict[str, Any]) -> list[dict[str, str]]:
    roots = answer.get("roots")
    if not isinstance(roots, list) or len(roots) > MAX_ROOTS:
        raise AskError(f"the answer to {key} is not a list of at most {MAX_ROOTS} roots")
    kept = []
    for root in roots:
        uri = root.get("uri") if isinstance(root, dict) else None
        if not isinstance(uri, str) or not uri.startswith("file://") or len(uri) > 2048:
            raise AskError(f"the answer to {key} has a root that is not a file:// URI")
        name = root.get("name")
        kept.append({"uri": uri, "name": name[:200] if isinstance(name, str) else ""})
    return kept
