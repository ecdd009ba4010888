"""Memory tools on a real SQLite file: scopes, recall by key and by literal query,
hostile keys stored verbatim, persistence, and the pipeline's state directory."""

from __future__ import annotations

import os
import sqlite3

import trio

from runtime.config import AgentConfig, Config, StateConfig
from runtime.kernel.builtins import register_builtins
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.tools_memory import like_pattern, memory_list, memory_recall, memory_store


def ctx(tmp_path, agent="a"):
    return ToolContext(agent=agent, state_dir=str(tmp_path / "state"))


async def test_agents_are_isolated_and_shared_is_common(tmp_path):
    a, b, operator = ctx(tmp_path, "a"), ctx(tmp_path, "b"), ctx(tmp_path, "")
    assert (await memory_store({"key": "color", "value": "red"}, a)).text == "stored 'color' in 'a' memory"
    await memory_store({"key": "color", "value": "blue"}, b)
    await memory_store({"key": "color", "value": "green", "shared": True}, a)
    assert (await memory_recall({"key": "color"}, a)).text == "red"
    assert (await memory_recall({"key": "color"}, b)).text == "blue"
    assert (await memory_recall({"key": "color", "shared": True}, b)).text == "green"
    assert (await memory_recall({"key": "color"}, operator)).text == "green"  # no agent: shared
    missing = await memory_recall({"key": "size"}, a)
    assert not missing.is_error and missing.text == "nothing stored under 'size' in 'a' memory"
    await memory_store({"key": "only-b", "value": "x"}, b)
    assert "only-b" not in (await memory_list({}, a)).text
    assert (await memory_recall({"query": "only"}, a)).structured == []


async def test_store_replaces_and_persists(tmp_path):
    await memory_store({"key": "k", "value": "v1"}, ctx(tmp_path))
    await memory_store({"key": "k", "value": "v2"}, ctx(tmp_path))
    assert (await memory_recall({"key": "k"}, ctx(tmp_path))).text == "v2"
    path = tmp_path / "state" / "memory.sqlite3"
    assert (os.stat(path).st_mode & 0o777) == 0o600
    with sqlite3.connect(path) as db:  # really on disk, one row, WAL mode
        assert db.execute("SELECT scope, key, value FROM memory").fetchall() == [("a", "k", "v2")]
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_recall_by_query_treats_wildcards_literally(tmp_path):
    c = ctx(tmp_path)
    for key, value in [("100%", "all of it"), ("1000", "a thousand"), ("a_b", "underscore"), ("axb", "no underscore"),
                       ("path", "C:\\temp\\x"), ("note", "discount 50% today")]:
        await memory_store({"key": key, "value": value}, c)
    keys = lambda result: sorted(entry["key"] for entry in result.structured)  # noqa: E731
    assert keys(await memory_recall({"query": "%"}, c)) == ["100%", "note"]
    assert keys(await memory_recall({"query": "0%"}, c)) == ["100%", "note"]
    assert keys(await memory_recall({"query": "_"}, c)) == ["a_b"]
    assert keys(await memory_recall({"query": "\\t"}, c)) == ["path"]
    assert keys(await memory_recall({"query": "THOUSAND"}, c)) == ["1000"]  # LIKE: ASCII case-insensitive
    assert keys(await memory_recall({"query": "underscore"}, c)) == ["a_b", "axb"]
    none = await memory_recall({"query": "zzz"}, c)
    assert not none.is_error and none.text == "nothing in 'a' memory matches 'zzz'"
    assert len((await memory_recall({"query": "a", "limit": 2}, c)).structured) == 2
    assert len((await memory_recall({}, c)).structured) == 6  # no key, no query: the most recent
    both = await memory_recall({"key": "a_b", "query": "a"}, c)
    assert both.is_error and "not both" in both.text
    assert like_pattern("5%_\\") == "%5\\%\\_\\\\%"


async def test_injection_looking_keys_are_stored_verbatim(tmp_path):
    c = ctx(tmp_path)
    hostile = ["'; DROP TABLE memory; --", "\" OR 1=1 --", "x') OR ('1'='1", "🙂\n\t", "Robert'); --"]
    for i, key in enumerate(hostile):
        await memory_store({"key": key, "value": f"v{i}'--"}, c)
    for i, key in enumerate(hostile):
        assert (await memory_recall({"key": key}, c)).text == f"v{i}'--"
    listed = await memory_list({}, c)
    assert sorted(entry["key"] for entry in listed.structured) == sorted(hostile)
    assert (await memory_recall({"key": "' OR '1'='1"}, c)).text.startswith("nothing stored")


async def test_list_shows_keys_with_time_and_is_bounded(tmp_path):
    c = ctx(tmp_path)
    assert (await memory_list({}, c)).text == "'a' memory is empty"
    for i in range(5):
        await memory_store({"key": f"k{i}", "value": "x" * 1000}, c)
    lines = (await memory_list({"limit": 3}, c)).text.splitlines()
    assert [line.split("\t")[0] for line in lines[:3]] == ["k0", "k1", "k2"]
    assert lines[0].split("\t")[1].endswith("+00:00") and lines[-1] == "[2 more]"
    assert "x" * 10 not in "\n".join(lines)  # keys only, no values


async def test_no_state_dir_is_a_tool_error():
    for handler, arguments in [(memory_store, {"key": "k", "value": "v"}), (memory_recall, {}), (memory_list, {})]:
        result = await handler(arguments, ToolContext(agent="a"))
        assert result.is_error and "no state directory" in result.text


async def test_concurrent_stores(tmp_path):
    results = []

    async def store(i):
        results.append(await memory_store({"key": f"k{i}", "value": str(i)}, ctx(tmp_path, f"agent{i % 3}")))

    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(store, i)
    assert len(results) == 20 and [r.text for r in results if r.is_error] == []
    counts = [len((await memory_list({}, ctx(tmp_path, f"agent{n}"))).structured) for n in range(3)]
    assert counts == [7, 7, 6]


async def test_through_the_pipeline(tmp_path):
    registry = ToolRegistry()
    register_builtins(registry)
    pipeline = ToolPipeline(registry, Config(state=StateConfig(dir=str(tmp_path))))
    run = pipeline.run(AgentConfig(name="w", kind="echo", tools=["file_*", "memory_*"]))
    assert not (await pipeline.call("memory_store", {"key": "plan", "value": "ship it"}, run=run)).is_error
    assert (await pipeline.call("memory_recall", {"key": "plan"}, run=run)).text == "ship it"
    too_long = await pipeline.call("memory_store", {"key": "k" * 201, "value": "v"}, run=run)
    assert too_long.is_error and "invalid arguments for memory_store" in too_long.text
    over = await pipeline.call("memory_list", {"limit": 1001}, run=run)
    assert over.is_error and "invalid arguments" in over.text
    other = pipeline.run(AgentConfig(name="v", kind="echo", tools=["memory_*"]))
    assert (await pipeline.call("memory_recall", {"key": "plan"}, run=other)).text.startswith("nothing stored")
    assert (tmp_path / "memory.sqlite3").exists()
