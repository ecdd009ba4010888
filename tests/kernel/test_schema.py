from __future__ import annotations

import pytest

from runtime.kernel.schema import MAX_DEPTH, MAX_PROBLEMS, json_type, validate

READ_TEXT_FILE = {  # @modelcontextprotocol/server-filesystem read_text_file
    "type": "object",
    "properties": {"path": {"type": "string"}, "head": {"type": "number"}, "tail": {"type": "number"}},
    "required": ["path"],
    "additionalProperties": False,
    "$schema": "http://json-schema.org/draft-07/schema#",
}
EDIT_FILE = {  # server-filesystem edit_file: arrays of objects
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "edits": {"type": "array", "items": {
            "type": "object",
            "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
            "required": ["oldText", "newText"], "additionalProperties": False}},
        "dryRun": {"type": "boolean", "default": False},
    },
    "required": ["path", "edits"],
    "additionalProperties": False,
}
FETCH = {  # mcp-server-fetch
    "type": "object",
    "properties": {
        "url": {"type": "string", "format": "uri", "minLength": 1},
        "max_length": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000},
        "raw": {"type": "boolean"},
    },
    "required": ["url"],
}

CASES = [
    # (schema, instance, problems)
    (READ_TEXT_FILE, {"path": "/a"}, []),
    (READ_TEXT_FILE, {"path": "/a", "head": 10}, []),
    (READ_TEXT_FILE, {"path": "/a", "head": 2.5}, []),
    (READ_TEXT_FILE, {"path": 3}, ["arguments.path: expected string, got integer"]),
    (READ_TEXT_FILE, {}, ['arguments: missing required property "path"']),
    (
        READ_TEXT_FILE,
        {"path": "/a", "lines": 3},
        ['arguments: unexpected property "lines" (allowed: path, head, tail)'],
    ),
    (READ_TEXT_FILE, {"path": "/a", "head": True}, ["arguments.head: expected number, got boolean"]),
    (READ_TEXT_FILE, {"path": "/a", "head": "10"}, ["arguments.head: expected number, got string"]),
    (READ_TEXT_FILE, ["/a"], ["arguments: expected object, got array"]),
    (EDIT_FILE, {"path": "p", "edits": [{"oldText": "a", "newText": "b"}]}, []),
    (
        EDIT_FILE,
        {"path": "p", "edits": [{"oldText": "a", "newText": "b"}, {"oldText": "a"}, {"oldText": 1, "newText": "x"}]},
        [
            'arguments.edits[1]: missing required property "newText"',
            "arguments.edits[2].oldText: expected string, got integer",
        ],
    ),
    (EDIT_FILE, {"path": "p", "edits": {"oldText": "a"}}, ["arguments.edits: expected array, got object"]),
    (FETCH, {"url": "https://x"}, []),
    (FETCH, {"url": ""}, ["arguments.url: expected at least 1 characters, got 0"]),
    (FETCH, {"url": "u", "max_length": 0}, ["arguments.max_length: expected more than 0, got 0"]),
    (FETCH, {"url": "u", "max_length": 1000000}, ["arguments.max_length: expected less than 1000000, got 1000000"]),
    (FETCH, {"url": "u", "max_length": 5000, "extra": 1}, []),  # additionalProperties defaults to true
    # integers: JSON integers only; bool is neither integer nor number
    ({"type": "integer"}, 3, []),
    ({"type": "integer"}, 3.0, ["arguments: expected integer, got number"]),
    ({"type": "integer"}, True, ["arguments: expected integer, got boolean"]),
    ({"type": "number"}, False, ["arguments: expected number, got boolean"]),
    ({"type": "boolean"}, 1, ["arguments: expected boolean, got integer"]),
    ({"type": "boolean"}, False, []),
    ({"type": "null"}, None, []),
    ({"type": ["string", "null"]}, None, []),
    ({"type": ["string", "null"]}, 1, ["arguments: expected string or null, got integer"]),
    ({"type": "object"}, {"a": 1}, []),
    # enum / const compare as JSON: True is not 1, 1 is 1.0
    ({"enum": ["a", "b"]}, "c", ['arguments: expected one of "a", "b", got "c"']),
    ({"enum": [1, 2]}, True, ["arguments: expected one of 1, 2, got true"]),
    ({"enum": [1, 2]}, 1.0, []),
    ({"enum": [[1], {"a": True}]}, {"a": True}, []),
    ({"const": False}, 0, ["arguments: expected false, got 0"]),
    ({"const": "x"}, "x", []),
    # bounds
    ({"type": "string", "maxLength": 2}, "abc", ["arguments: expected at most 2 characters, got 3"]),
    ({"type": "string", "maxLength": 2}, "\U0001f600\U0001f600", []),  # code points, not bytes
    ({"minimum": 1, "maximum": 3}, 0, ["arguments: expected at least 1, got 0"]),
    ({"minimum": 1, "maximum": 3}, 3.5, ["arguments: expected at most 3, got 3.5"]),
    ({"minimum": 1}, "not a number", []),
    ({"type": "array", "minItems": 1, "maxItems": 2}, [], ["arguments: expected at least 1 items, got 0"]),
    ({"type": "array", "maxItems": 1}, [1, 2], ["arguments: expected at most 1 items, got 2"]),
    # additionalProperties as a schema; patternProperties disables the check
    (
        {"type": "object", "additionalProperties": {"type": "string"}},
        {"a": "x", "b": 1},
        ["arguments.b: expected string, got integer"],
    ),
    (
        {"type": "object", "properties": {}, "additionalProperties": False},
        {"x": 1},
        ['arguments: unexpected property "x" (no properties are allowed)'],
    ),
    ({"type": "object", "patternProperties": {"^x": {}}, "additionalProperties": False}, {"x1": 1}, []),
    # paths for keys that are not identifiers
    ({"properties": {"a b": {"type": "string"}}}, {"a b": 1}, ['arguments["a b"]: expected string, got integer']),
    # unknown and unsupported keywords are ignored (accept)
    ({"type": "string", "format": "email", "pattern": "^x$", "x-custom": 1}, "hello", []),
    ({"$ref": "#/definitions/x", "definitions": {"x": {"type": "string"}}}, 1, []),
    ({"anyOf": [{"type": "string"}], "oneOf": [{"type": "null"}], "not": {}}, 1, []),
    ({"type": "array", "items": [{"type": "string"}]}, [1], []),  # tuple form ignored
    ({"type": "frobnicate"}, 1, []),  # unknown type name constrains nothing
    (True, 1, []),
    ({}, {"anything": [1, 2]}, []),
    (False, 1, ["arguments: no value is allowed here"]),
    ({"type": "object", "properties": {"a": False}}, {"a": 1}, ["arguments.a: no value is allowed here"]),
]


@pytest.mark.parametrize("schema,instance,expected", CASES)
def test_validate(schema, instance, expected):
    assert validate(instance, schema) == expected


def test_nested_arrays_of_objects():
    schema = {
        "type": "object",
        "properties": {
            "rows": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["cells"],
                    "properties": {"cells": {"type": "array", "items": {"type": "integer"}}},
                },
            }
        },
    }
    assert validate({"rows": [{"cells": [1, 2]}, {"cells": []}]}, schema) == []
    assert validate({"rows": [{"cells": [1, "2"]}, {}]}, schema) == [
        "arguments.rows[0].cells[1]: expected integer, got string",
        'arguments.rows[1]: missing required property "cells"',
    ]


def test_deep_nesting_stops_at_max_depth():
    schema: dict = {"type": "array"}
    schema["items"] = schema  # self-referencing: depth comes from the instance
    value: list = []
    for _ in range(500):
        value = [value]
    assert validate(value, schema) == [f"arguments{'[0]' * (MAX_DEPTH + 1)}: nested deeper than {MAX_DEPTH} levels"]
    shallow: list = []
    for _ in range(MAX_DEPTH):
        shallow = [shallow]
    assert validate(shallow, schema) == []


def test_stops_after_max_problems():
    problems = validate(list(range(100_000)), {"type": "array", "items": {"type": "string"}})
    assert len(problems) == MAX_PROBLEMS + 1
    assert problems[-1] == f"too many problems; stopped after {MAX_PROBLEMS}"


def test_long_values_are_shortened_in_messages():
    (problem,) = validate("x" * 10_000, {"enum": ["a"]})
    assert len(problem) < 150 and problem.endswith('..."') is False and "..." in problem


def test_custom_path_and_json_type():
    assert validate(1, {"type": "string"}, path="result") == ["result: expected string, got integer"]
    assert [json_type(v) for v in (None, True, 1, 1.5, "s", {}, [], (), object())] == [
        "null",
        "boolean",
        "integer",
        "number",
        "string",
        "object",
        "array",
        "array",
        "object",
    ]
