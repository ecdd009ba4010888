"""The trigger message template: dotted paths into plain JSON, one pass, bounded, and
nothing a hostile webhook body can use to run code or reach Python objects."""

from __future__ import annotations

import json

import pytest

from runtime.errors import ConfigError
from runtime.kernel.triggers.template import MAX_OUTPUT_CHARS, MAX_PATH_DEPTH, MAX_TEMPLATE_CHARS, TRUNCATED, render

CONTEXT = {
    "body": {"a": {"b": "deep"}, "items": ["zero", "one"], "n": 3, "x": 1.5, "t": True, "f": False, "z": None,
             "obj": {"k": [1, "2"]}},
    "paths": ["inbox/a.txt", "inbox/b.txt"],
    "time": "2026-11-25T07:00:00Z",
    "trigger": "ci",
    "run_id": "run_0123456789abcdef",
}


@pytest.mark.parametrize(("template", "expected"), [
    ("{{ body.a.b }}", "deep"),
    ("{{body.a.b}}", "deep"),
    ("{{  body.a.b\t}}", "deep"),
    ("{{ body.items.0 }}/{{ body.items.1 }}", "zero/one"),
    ("{{ trigger }} {{ run_id }} at {{ time }}", "ci run_0123456789abcdef at 2026-11-25T07:00:00Z"),
    ("{{ paths }}", '["inbox/a.txt","inbox/b.txt"]'),
    ("{{ body.n }} {{ body.x }} {{ body.t }} {{ body.f }} {{ body.z }}", "3 1.5 true false null"),
    ("{{ body.obj }}", '{"k":[1,"2"]}'),
    ("no placeholders", "no placeholders"),
    ("", ""),
])
def test_placeholders_render(template, expected):
    assert render(template, CONTEXT) == expected


@pytest.mark.parametrize("template", [
    "{{ nothing }}", "{{ body.missing }}", "{{ body.a.b.c }}", "{{ body.items.2 }}", "{{ body.items.-1 }}",
    "{{ body.items.x }}", "{{ body.n.0 }}", "{{ trigger.0 }}", "{{ body.items.01x }}",
])
def test_a_missing_value_renders_empty(template):
    assert render("[" + template + "]", CONTEXT) == "[]"


@pytest.mark.parametrize("template", [
    "{{ body.__class__ }}", "{{ trigger.__class__ }}", "{{ body.__dict__ }}", "{{ trigger.upper }}",
    "{{ body.items.__len__ }}", "{{ __builtins__ }}", "{{ body.a.__getitem__ }}",
])
def test_no_attribute_access_on_python_objects(template):
    assert render(template, CONTEXT) == ""


def test_keys_that_look_like_dunders_are_just_keys():
    body = {"__class__": "harmless", "__init__": {"__globals__": 1}}
    assert render("{{ body.__class__ }} {{ body.__init__.__globals__ }}", {"body": body}) == "harmless 1"


@pytest.mark.parametrize("template", [
    "{{ 1 + 1 }}", "{{ body.a.b | upper }}", "{{ body['a'] }}", "{{ body.a.b() }}", "{% for x in y %}",
    "{{ }}", "{{}}", "{ body.a.b }",
])
def test_no_expressions_or_filters(template):
    """Nothing is evaluated: text that is not a placeholder stays as written, and a path
    no JSON value has (``body['a']``) renders empty."""
    assert render(template, CONTEXT) in (template, "")


def test_triple_braces_render_the_inner_placeholder():
    assert render("{{{ body.a.b }}}", CONTEXT) == "{deep}"


def test_rendered_values_are_not_rendered_again():
    body = {"a": "{{ trigger }}", "b": "{{ body.a }}", "c": "{{{{ run_id }}}}"}
    assert render("{{ body.a }}|{{ body.b }}|{{ body.c }}", {"body": body, "trigger": "ci", "run_id": "r"}) == (
        "{{ trigger }}|{{ body.a }}|{{{{ run_id }}}}")


def test_unicode_keys_and_values():
    body = {"名前": "テスト", "emoji": "🦀\u202e\x00", "ключ": {"ü": "ö"}}
    assert render("{{ body.名前 }} {{ body.emoji }} {{ body.ключ.ü }} {{ body.ключ }}", {"body": body}) == (
        'テスト 🦀\u202e\x00 ö {"ü":"ö"}')


def test_huge_numbers_and_odd_floats():
    body = json.loads('{"big": 123456789012345678901234567890, "neg": -0.0, "exp": 1e308}')
    assert render("{{ body.big }} {{ body.neg }} {{ body.exp }}", {"body": body}) == (
        "123456789012345678901234567890 -0.0 1e+308")


def test_deep_nesting_is_bounded():
    deep = {"a": "leaf"}
    for _ in range(MAX_PATH_DEPTH + 5):
        deep = {"a": deep}
    ok_path = ".".join(["a"] * (MAX_PATH_DEPTH - 1))
    assert render("{{ body." + ok_path + " }}", {"body": deep}).startswith("{")
    too_deep = ".".join(["a"] * (MAX_PATH_DEPTH + 1))
    assert render("{{ body." + too_deep + " }}", {"body": deep}) == ""


def test_a_value_too_deep_to_write_renders_a_marker():
    value: list = []
    for _ in range(100_000):
        value = [value]
    assert render("{{ body }}", {"body": value}) == "[too deeply nested to show]"


def test_huge_strings_are_truncated_with_a_marker():
    out = render("start {{ body }} end", {"body": "x" * 1_000_000})
    assert len(out) == MAX_OUTPUT_CHARS
    assert out.startswith("start xxx") and out.endswith(TRUNCATED)


def test_many_placeholders_stop_at_the_bound():
    out = render("{{ body }}" * 1000, {"body": "y" * 1000})
    assert len(out) == MAX_OUTPUT_CHARS and out.endswith(TRUNCATED)


def test_output_just_under_the_bound_is_untouched():
    text = "z" * MAX_OUTPUT_CHARS
    assert render("{{ body }}", {"body": text}) == text


def test_an_oversized_template_is_refused():
    with pytest.raises(ConfigError, match="limit"):
        render("x" * (MAX_TEMPLATE_CHARS + 1), {})
    assert render("x" * MAX_TEMPLATE_CHARS, {}) == "x" * MAX_TEMPLATE_CHARS


def test_a_hostile_template_scans_in_linear_time():
    import time

    start = time.perf_counter()
    render("{{ " * (MAX_TEMPLATE_CHARS // 3), {})
    render("{{" + "a" * (MAX_TEMPLATE_CHARS - 4), {})
    assert time.perf_counter() - start < 1.0
