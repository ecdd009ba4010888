"""A server's question answered at a terminal, field by field, and from ``--set``.

The dialogue is a generator (sans-IO), so the in-process prompt of ``tern run`` and the
one that answers a daemon's streamed run drive the same questions: it yields what to
ask (a prompt, and whether to hide what is typed) and takes each line typed; it returns
the decision ``(approve, answer, cancel)``. The person first says yes (fill the form),
no (decline) or cancel; then each field is asked with its type, its choices and its
default, and Enter takes the default (or leaves an optional field out). A wrong value
is asked again at once; the whole answer is checked once more when it is decided.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Generator

from runtime.errors import UsageError
from runtime.log import clean
from runtime.kernel.forms import choices, parse_value, sensitive, validate

__all__ = ["dialogue", "field_lines", "from_args", "Decision"]

Decision = tuple[bool, dict[str, Any] | None, bool]  # approve, answer, cancel
Ask = tuple[str, bool]  # prompt, hide what is typed
_YES, _NO, _CANCEL = ("y", "yes"), ("n", "no", ""), ("c", "cancel")


def field_lines(form: dict[str, Any]) -> list[str]:
    """The form as a person reads it: one line per field. Everything in it is the
    server's text: escaped for the terminal (``log.clean``)."""
    if form.get("mode") == "url":
        return [clean(f"  open this URL yourself: {form.get('url')}")]
    schema = form.get("requestedSchema") or {}
    required = schema.get("required") or []
    lines = []
    for name, field in (schema.get("properties") or {}).items():
        kind = "choices" if field.get("type") == "array" else field.get("type")
        what = [str(kind), "required" if name in required else "optional"]
        if field.get("format"):
            what.append(str(field["format"]))
        if "minimum" in field or "maximum" in field:
            what.append(f"{field.get('minimum', '')}..{field.get('maximum', '')}")
        options = choices(field)
        listed = f" one{' or more' if kind == 'choices' else ''} of: " + ", ".join(
            label if label == str(value) else f"{value} ({label})" for value, label in options) if options else ""
        default = f" [default {_shown(field['default'])}]" if "default" in field and not sensitive(name, field) else ""
        about = field.get("title") or field.get("description") or ""
        lines.append(clean(f"  {name} ({', '.join(what)}){': ' + str(about)[:120] if about else ''}{listed}{default}"))
    return lines


def dialogue(form: dict[str, Any]) -> Generator[Ask, str, Decision]:
    """Ask for the form's values (see the module docstring)."""
    url = form.get("mode") == "url"
    first = ("done? [y]es (I finished at the URL) / [n]o (decline) / [c]ancel: " if url else
             "answer? [y]es (fill in the form) / [n]o (decline) / [c]ancel: ")
    while True:
        choice = (yield first, False).strip().lower()
        if choice in _NO:
            return False, None, False
        if choice in _CANCEL:
            return False, None, True
        if choice in _YES:
            break
    if url:
        return True, {}, False
    schema = form.get("requestedSchema") or {}
    required = schema.get("required") or []
    answer: dict[str, Any] = {}
    for name, field in (schema.get("properties") or {}).items():
        secret = sensitive(name, field)
        default = "" if secret or "default" not in field else f" [{_shown(field['default'])}]"
        need = "" if name in required or "default" in field else " (Enter: leave out)"
        prompt = clean(f"  {name}{default}{need}: ")
        while True:
            line = (yield prompt, secret).rstrip("\r\n")
            if not line.strip():
                if "default" in field or name not in required:
                    break  # the default fills it when the answer is decided
                print_problem(f"{name} is required")
                continue
            try:
                value = parse_value(field, line.strip() if not secret else line)
                validate({"requestedSchema": {"properties": {name: field}}}, {name: value})
            except UsageError as exc:
                print_problem(str(exc))
                continue
            answer[name] = value
            break
    return True, answer, False


def _shown(value: Any) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value).lower() if isinstance(
        value, bool) else str(value)


def print_problem(text: str) -> None:
    import sys

    print(f"tern: {clean(text)}", file=sys.stderr, flush=True)


def from_args(form: dict[str, Any] | None, answer_json: str | None, sets: list[str]) -> dict[str, Any] | None:
    """``--answer JSON`` and ``--set name=value`` (typed by the form's fields) as one
    answer; None when neither was given."""
    if answer_json is None and not sets:
        return None
    if form is None:
        raise UsageError("this request is a tool call, not a question: --set and --answer are for questions")
    answer: dict[str, Any] = {}
    if answer_json is not None:
        import msgspec

        try:
            answer = msgspec.json.decode(answer_json)
        except msgspec.DecodeError as exc:
            raise UsageError(f"--answer is not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise UsageError("--answer must be a JSON object of field values")
    properties = (form.get("requestedSchema") or {}).get("properties") or {}
    for item in sets:
        name, equals, text = item.partition("=")
        if not equals:
            raise UsageError(f"--set takes name=value, not {item[:60]!r}")
        if name not in properties:
            raise UsageError(f"the form has no field {name[:60]!r} (it has: {', '.join(properties) or 'none'})")
        answer[name] = parse_value(properties[name], text)
    return answer
