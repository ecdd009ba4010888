"""An MCP form question (``elicitation/create``) as a person answers it: the form is
checked and bounded once, when it arrives, and every answer is checked against it,
whichever channel typed it (API, WebSocket, ``tern approve --set``, the inline prompt).

A form is a flat object of primitive fields, as the MCP spec allows: string (with
``minLength``/``maxLength``, a ``format`` of email, uri, date or date-time, and the
SEP-1330 single-select styles ``enum``, ``enum`` + ``enumNames`` and ``oneOf`` of
``const``/``title``), number and integer (``minimum``/``maximum``), boolean, and the
SEP-1330 multi-select array (``items`` with ``enum`` or ``anyOf`` of ``const``,
``minItems``/``maxItems``). A hostile server cannot make tern keep or show much: the
message, the schema, its field count and each enum are bounded, and so is an answer.
A field is *sensitive* when its format or name says it holds a secret: the inline
prompt does not echo it, and nothing logs or audits its value (audit records carry
the answer's digest only).
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from runtime.errors import UsageError

__all__ = ["check_form", "validate", "parse_value", "choices", "sensitive", "FormRefused",
           "MAX_MESSAGE_CHARS", "MAX_FIELDS", "MAX_SCHEMA_BYTES", "MAX_ANSWER_BYTES"]

MAX_MESSAGE_CHARS = 2000
MAX_FIELDS = 64
MAX_SCHEMA_BYTES = 32 * 1024
MAX_ANSWER_BYTES = 64 * 1024
MAX_STRING_CHARS = 8192  # a string answer, when the form sets no smaller maxLength
MAX_OPTIONS = 200  # in one enum
MAX_URL_CHARS = 2048
_KINDS = ("string", "number", "integer", "boolean", "array")
_FORMATS = {
    "email": re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+"),
    "uri": re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S+"),
    "date": re.compile(r"\d{4}-\d{2}-\d{2}"),
    "date-time": re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})?"),
}
_SECRET_NAME = re.compile(r"pass(word|phrase)?|secret|token|api[_-]?key|pin|otp|credential", re.I)
_encode = msgspec.json.Encoder(order="sorted").encode


class FormRefused(UsageError):
    """A form tern will not put to a person (too big, not a flat form of primitives)."""


def check_form(params: dict[str, Any]) -> dict[str, Any]:
    """What a person is shown and answers: ``{"mode": "form", "message", "requestedSchema"}``
    or ``{"mode": "url", "message", "url", "elicitationId"}``. FormRefused, with the
    reason, for a form out of bounds or of a shape the spec does not allow."""
    message = params.get("message")
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        raise FormRefused(f"the question is not a message of at most {MAX_MESSAGE_CHARS} characters")
    mode = params.get("mode", "form")
    if mode == "url":
        url = params.get("url")
        if not isinstance(url, str) or len(url) > MAX_URL_CHARS or not url.lower().startswith(("https://",
                                                                                                "http://")):
            raise FormRefused(f"a URL-mode question without an http(s) url of at most {MAX_URL_CHARS} characters")
        return {"mode": "url", "message": message, "url": url,
                "elicitationId": str(params.get("elicitationId", ""))[:200]}
    if mode != "form":
        raise FormRefused(f"a question in {str(mode)[:20]!r} mode")
    schema = params.get("requestedSchema", {"type": "object", "properties": {}})
    if len(_encode(schema)) > MAX_SCHEMA_BYTES:
        raise FormRefused(f"a form schema over {MAX_SCHEMA_BYTES} bytes")
    properties = schema.get("properties", {}) if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        raise FormRefused("a form whose requestedSchema has no properties object")
    if len(properties) > MAX_FIELDS:
        raise FormRefused(f"a form of {len(properties)} fields (at most {MAX_FIELDS})")
    for name, field in properties.items():
        _check_field(str(name), field)
    required = schema.get("required", [])
    if not isinstance(required, list) or any(name not in properties for name in required):
        raise FormRefused("a form whose required list names fields it does not have")
    return {"mode": "form", "message": message, "requestedSchema": schema}


def _check_field(name: str, field: Any) -> None:
    kind = field.get("type") if isinstance(field, dict) else None
    if kind not in _KINDS:
        raise FormRefused(f"field {name[:60]!r} is not a string, number, integer, boolean or multi-select")
    if len(choices(field) or ()) > MAX_OPTIONS:
        raise FormRefused(f"field {name[:60]!r} offers more than {MAX_OPTIONS} choices")
    if kind == "array" and choices(field) is None:
        raise FormRefused(f"field {name[:60]!r} is an array that is not a multi-select of fixed choices")


def choices(field: dict[str, Any]) -> list[tuple[Any, str]] | None:
    """A select's (value, label) pairs, or None for a free field. Labels come from
    ``oneOf``/``anyOf`` titles or the legacy ``enumNames``."""
    source = field.get("items") if field.get("type") == "array" else field
    if not isinstance(source, dict):
        return None
    if isinstance(source.get("enum"), list):
        names = field.get("enumNames") if isinstance(field.get("enumNames"), list) else []
        return [(value, str(names[i]) if i < len(names) else str(value)) for i, value in enumerate(source["enum"])]
    for key in ("oneOf", "anyOf"):
        if isinstance(source.get(key), list):
            return [(option.get("const"), str(option.get("title", option.get("const"))))
                    for option in source[key] if isinstance(option, dict) and "const" in option]
    return None


def sensitive(name: str, field: dict[str, Any]) -> bool:
    """A field that holds a secret (format password, writeOnly, or a secret's name)."""
    return field.get("format") == "password" or field.get("writeOnly") is True or bool(_SECRET_NAME.search(name))


def validate(form: dict[str, Any], content: Any) -> dict[str, Any]:
    """``content`` checked against the form: every required field there, no unknown
    field, each value of its type, within its bounds and among its choices. UsageError
    that names the first field that is wrong (the request stays pending)."""
    if not isinstance(content, dict):
        raise UsageError("the answer must be an object of field values")
    if len(_encode(content)) > MAX_ANSWER_BYTES:
        raise UsageError(f"the answer is over {MAX_ANSWER_BYTES} bytes")
    schema = form.get("requestedSchema") or {}
    properties = schema.get("properties") or {}
    for name in content:
        if name not in properties:
            raise UsageError(f"the form has no field {str(name)[:60]!r} (it has: {', '.join(properties) or 'none'})")
    for name in schema.get("required") or []:
        if name not in content:
            raise UsageError(f"field {name!r} is required")
    for name, value in content.items():
        problem = _problem(properties[name], value)
        if problem:
            raise UsageError(f"field {name!r}: {problem}")
    return content


def _problem(field: dict[str, Any], value: Any) -> str:
    kind = field.get("type")
    options = choices(field)
    if kind == "boolean":
        return "" if isinstance(value, bool) else "must be true or false"
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
                kind == "integer" and not isinstance(value, int)):
            return f"must be {'a whole number' if kind == 'integer' else 'a number'}"
        low, high = field.get("minimum"), field.get("maximum")
        if isinstance(low, (int, float)) and value < low or isinstance(high, (int, float)) and value > high:
            return f"must be between {low if low is not None else '-inf'} and {high if high is not None else 'inf'}"
        return ""
    if kind == "array":
        if not isinstance(value, list):
            return "must be a list of choices"
        allowed = [option for option, _ in options or []]
        if any(item not in allowed for item in value) or len(set(map(str, value))) != len(value):
            return f"each choice once, among {', '.join(map(str, allowed))}"
        low, high = field.get("minItems", 0), field.get("maxItems", len(allowed))
        return "" if low <= len(value) <= high else f"choose between {low} and {high}"
    if not isinstance(value, str):
        return "must be text"
    if options is not None:
        allowed = [option for option, _ in options]
        return "" if value in allowed else f"must be one of {', '.join(map(str, allowed))}"
    low = field.get("minLength", 0)
    high = min(field.get("maxLength", MAX_STRING_CHARS), MAX_STRING_CHARS)
    if not (isinstance(low, int) and isinstance(high, int) and low <= len(value) <= high):
        return f"must be {low} to {high} characters"
    pattern = _FORMATS.get(str(field.get("format")))
    if pattern is not None and not pattern.fullmatch(value):
        return f"is not a valid {field['format']}"
    return ""


def parse_value(field: dict[str, Any], text: str) -> Any:
    """A value typed as text (``--set name=value``, the inline prompt) in the field's
    type: numbers and booleans parsed, a multi-select as comma-separated choices, a
    select by its value or its label. UsageError when it cannot be read."""
    kind = field.get("type")
    if kind == "boolean":
        lowered = text.strip().lower()
        if lowered in ("true", "yes", "y", "1", "on"):
            return True
        if lowered in ("false", "no", "n", "0", "off"):
            return False
        raise UsageError(f"{text[:40]!r} is not yes or no")
    if kind in ("number", "integer"):
        try:
            return int(text) if kind == "integer" else float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            raise UsageError(f"{text[:40]!r} is not {'a whole number' if kind == 'integer' else 'a number'}") from None
    options = choices(field)
    if kind == "array":
        return [_choice(options or [], part.strip()) for part in text.split(",") if part.strip()]
    return _choice(options, text) if options is not None else text


def _choice(options: list[tuple[Any, str]], text: str) -> Any:
    for value, label in options:
        if text == str(value) or text == label:
            return value
    return text  # validate() says what the choices are
