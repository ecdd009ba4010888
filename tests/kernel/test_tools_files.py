"""File tools on real files: containment against every escape we know of, reads, atomic
writes, bounded listing and search, and the pipeline's default workspace."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import trio

from runtime.config import AgentConfig, ApprovalRule, Config, GovernanceConfig, StateConfig
from runtime.kernel import tools_files
from runtime.kernel.builtins import register_builtins
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.tools_files import file_list, file_read, file_search, file_write


@pytest.fixture
def ws(tmp_path):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.fixture
def ctx(ws, tmp_path):
    return ToolContext(agent="a", workspace=str(ws), state_dir=str(tmp_path))


@pytest.fixture
def outside(tmp_path):
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("top secret")
    return secret


SYMLINK = "is a symlink: symlinks inside the workspace are not followed"


def refused(result, words="path escapes the workspace"):
    return result.is_error and words in result.text


# --- containment ------------------------------------------------------------------------------


async def test_dotdot_sibling_and_absolute_paths_are_refused(ws, ctx, tmp_path, outside):
    sibling = tmp_path / "ws-x"  # shares the prefix "…/ws": startswith would let it through
    sibling.mkdir()
    (sibling / "f.txt").write_text("sibling")
    for path in ["../x", "../ws-x/f.txt", "sub/../../ws-x/f.txt", str(sibling / "f.txt"),
                 str(outside / "secret.txt"), "/etc/passwd", ".."]:
        assert refused(await file_read({"path": path}, ctx)), path
        assert refused(await file_write({"path": path, "content": "x"}, ctx)), path
    assert refused(await file_list({"path": "../ws-x"}, ctx))
    assert refused(await file_search({"pattern": "*", "path": str(sibling)}, ctx))
    assert (sibling / "f.txt").read_text() == "sibling"
    assert not (tmp_path / "x").exists()
    assert not (sibling / "f.txt.tmp").exists() and sorted(os.listdir(sibling)) == ["f.txt"]


async def test_absolute_path_inside_the_workspace_is_allowed(ws, ctx):
    (ws / "a.txt").write_text("hello")
    assert (await file_read({"path": str(ws / "a.txt")}, ctx)).text == "hello"
    result = await file_write({"path": str(ws / "b.txt"), "content": "hi"}, ctx)
    assert result.text == "wrote 2 bytes to b.txt" and (ws / "b.txt").read_text() == "hi"
    assert str(ws) not in result.text


async def test_symlink_pointing_outside_is_not_followed(ws, ctx, outside):
    os.symlink(outside / "secret.txt", ws / "link.txt")
    os.symlink(outside, ws / "linkdir")
    assert refused(await file_read({"path": "link.txt"}, ctx), "link.txt is a symlink")
    assert refused(await file_read({"path": "linkdir/secret.txt"}, ctx), "linkdir is a symlink")
    assert refused(await file_write({"path": "link.txt", "content": "pwned"}, ctx), SYMLINK)
    assert refused(await file_write({"path": "linkdir/new.txt", "content": "pwned"}, ctx), SYMLINK)
    assert refused(await file_write({"path": "linkdir/deeper/new.txt", "content": "pwned"}, ctx), SYMLINK)
    assert refused(await file_write({"path": "link.txt", "content": "pwned", "append": True}, ctx), SYMLINK)
    assert (outside / "secret.txt").read_text() == "top secret"
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert refused(await file_list({"path": "linkdir"}, ctx), SYMLINK)
    assert refused(await file_search({"pattern": "*", "path": "linkdir"}, ctx), SYMLINK)
    listing = (await file_list({"recursive": True}, ctx)).text.splitlines()
    assert listing == ["link.txt", "linkdir"]  # listed, not a directory, not descended into
    found = await file_search({"pattern": "*", "text": "secret"}, ctx)
    assert found.text == "no matches"
    assert "secret" not in (await file_search({"pattern": "*"}, ctx)).text


async def test_symlink_pointing_inside_is_refused_too(ws, ctx):
    """Whether a link "stays inside" can change between a check and the use, so no symlink
    in the workspace is followed, wherever it points (regression (d) of item 11)."""
    (ws / "real").mkdir()
    (ws / "real" / "a.txt").write_text("inside")
    os.symlink(ws / "real" / "a.txt", ws / "alias.txt")
    os.symlink("real", ws / "aliasdir")
    assert refused(await file_read({"path": "alias.txt"}, ctx), "alias.txt is a symlink")
    assert refused(await file_read({"path": "aliasdir/a.txt"}, ctx), "aliasdir is a symlink")
    assert refused(await file_read({"path": str(ws / "aliasdir" / "a.txt")}, ctx), "aliasdir is a symlink")
    assert refused(await file_write({"path": "alias.txt", "content": "changed"}, ctx), "alias.txt is a symlink")
    assert refused(await file_write({"path": "aliasdir/b.txt", "content": "x"}, ctx), "aliasdir is a symlink")
    assert refused(await file_write({"path": "alias.txt", "content": "x", "append": True}, ctx), SYMLINK)
    assert (ws / "real" / "a.txt").read_text() == "inside" and os.path.islink(ws / "alias.txt")
    assert os.listdir(ws / "real") == ["a.txt"]
    assert refused(await file_list({"path": "aliasdir"}, ctx), "aliasdir is a symlink")
    assert (await file_read({"path": "real/../real/a.txt"}, ctx)).text == "inside"  # lexical ".." is fine


async def test_workspace_reached_through_a_symlink(tmp_path, outside):
    real = tmp_path / "real-ws"
    real.mkdir()
    os.symlink(real, tmp_path / "ws-link")
    ctx = ToolContext(workspace=str(tmp_path / "ws-link"))
    assert (await file_write({"path": "a.txt", "content": "x"}, ctx)).text == "wrote 1 bytes to a.txt"
    assert (await file_read({"path": str(tmp_path / "ws-link" / "a.txt")}, ctx)).text == "x"
    assert refused(await file_read({"path": "../outside/secret.txt"}, ctx))


async def test_nul_byte_long_path_and_bad_targets(ws, ctx):
    assert refused(await file_read({"path": "a\x00b"}, ctx), "NUL byte")
    assert refused(await file_write({"path": "a\x00b", "content": "x"}, ctx), "NUL byte")
    assert refused(await file_list({"path": "\x00"}, ctx), "NUL byte")
    assert refused(await file_search({"pattern": "*", "path": "\x00"}, ctx), "NUL byte")
    assert refused(await file_read({"path": "a" * 5000}, ctx), "too long")
    long_name = await file_read({"path": "a" * 300}, ctx)  # one component longer than NAME_MAX
    assert long_name.is_error and str(ws) not in long_name.text
    deep = await file_write({"path": "/".join(["d" * 203] * 20), "content": "x"}, ctx)  # > PATH_MAX with ws
    assert deep.is_error and str(ws) not in deep.text
    missing = await file_read({"path": "nope.txt"}, ctx)
    assert missing.is_error and missing.text == "nope.txt: No such file or directory"
    (ws / "d").mkdir()
    assert refused(await file_read({"path": "d"}, ctx), "is a directory")
    assert refused(await file_write({"path": "d", "content": "x"}, ctx), "is a directory")
    assert refused(await file_write({"path": ".", "content": "x"}, ctx), "not a file path")
    assert refused(await file_list({"path": "nope"}, ctx), "no such directory")
    os.mkfifo(ws / "fifo")
    assert refused(await file_read({"path": "fifo"}, ctx), "not a regular file")


async def test_no_workspace_is_a_tool_error():
    for handler, arguments in [(file_read, {"path": "a"}), (file_write, {"path": "a", "content": ""}),
                               (file_list, {}), (file_search, {"pattern": "*"})]:
        result = await handler(arguments, ToolContext(agent="a"))
        assert result.is_error and result.text == "this caller has no workspace"


async def test_workspace_is_created_private(tmp_path):
    ctx = ToolContext(workspace=str(tmp_path / "new" / "ws"))
    assert (await file_list({}, ctx)).text == f"(empty directory: {ctx.workspace})"
    assert (os.stat(tmp_path / "new" / "ws").st_mode & 0o777) == 0o700


# --- races and hostile files (item 11 of the hardening issue) --------------------------------

RACE_SECONDS = 2.0  # each race runs this long: thousands of calls, 100,000s of swaps on a busy machine
READERS = 4  # concurrent reads, as concurrent tool calls would be: more tries within the bound
DEEP = "/".join(["d"] * 8)  # the deeper the path, the longer the old code took between check and use
SWAPPER = Path(__file__).parent.parent / "fixtures" / "swapper.py"


class Swapper:
    """A hostile process (tests/fixtures/swapper.py) that swaps the workspace directory
    ``sub`` for a symlink to ``outside`` and back while the block runs."""

    def __init__(self, ws, outside):
        self.sub, self.link, self.stop = ws / "sub", ws / "sub.link", ws.parent / "stop-swapping"
        os.symlink(outside, self.link)
        self.swaps = 0

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, str(SWAPPER), str(self.sub), str(self.link), str(self.stop),
                                         str(2 * RACE_SECONDS + 5)], stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not os.path.islink(self.sub) and time.monotonic() < deadline:  # started swapping
            time.sleep(0.001)
        return self

    def __exit__(self, *exc_info):
        self.stop.touch()
        try:
            out, _ = self.process.communicate(timeout=30)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        self.swaps = int(out.strip() or 0)
        assert os.path.isdir(self.sub) and not os.path.islink(self.sub)


@pytest.fixture
def race(ws, outside):
    """``sub/secret.txt`` and ``sub/DEEP/secret.txt`` inside; the same names outside."""
    for top, content in [(ws / "sub", "inside"), (outside, "top secret")]:
        (top / DEEP).mkdir(parents=True)
        (top / "secret.txt").write_text(content)
        (top / DEEP / "secret.txt").write_text(content)
    return Swapper(ws, outside)


async def test_read_race_never_returns_outside_content(ctx, race):
    """(a) A directory swapped for a symlink between resolving and opening: the old code
    resolved by path, then opened the path, and read the outside file."""
    seen = Counter()

    async def reader(deadline, path):
        while time.monotonic() < deadline:
            result = await file_read({"path": path}, ctx)
            assert result.text != "top secret", f"read outside the workspace after {sum(seen.values())} reads"
            seen["refused" if result.is_error else result.text] += 1

    with race:
        async with trio.open_nursery() as nursery:
            for index in range(READERS):
                path = f"sub/{DEEP}/secret.txt" if index % 2 else "sub/secret.txt"
                nursery.start_soon(reader, time.monotonic() + RACE_SECONDS, path)
    assert race.swaps > 100 and seen["inside"] > 0 and seen["refused"] > 0, (race.swaps, seen)


def tree(top):
    """Every path under ``top`` with its content (files) or None (directories)."""
    found = {}
    for directory, _, files in os.walk(top):
        found[directory] = None
        found.update({os.path.join(directory, name): Path(directory, name).read_bytes() for name in files})
    return found


async def test_write_race_never_writes_outside(ctx, race, outside):
    """(b) The same race for writes (replace and append): nothing ever lands outside."""
    before, calls = tree(outside), 0
    with race:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline and tree(outside) == before:
            path = f"sub/{DEEP}/new.txt" if calls % 2 else "sub/new.txt"
            append = calls % 4 > 1  # half appends: no fsync, so more tries within the bound
            await file_write({"path": path, "content": "pwned", "append": append}, ctx)
            calls += 1
    assert tree(outside) == before, f"wrote outside the workspace after {calls} writes"
    assert race.swaps > 100 and calls > 100, (race.swaps, calls)


async def test_write_through_a_hard_link_is_refused(ws, ctx, outside):
    """(c) A hard link in the workspace to a file outside: neither replacing nor appending
    may touch it (the old code appended through it)."""
    os.link(outside / "secret.txt", ws / "hard.txt")
    for append in (False, True):
        result = await file_write({"path": "hard.txt", "content": "pwned", "append": append}, ctx)
        assert refused(result, "hard.txt has 2 hard links"), result.text
    assert (outside / "secret.txt").read_text() == "top secret"
    assert os.stat(ws / "hard.txt").st_ino == os.stat(outside / "secret.txt").st_ino
    assert sorted(os.listdir(ws)) == ["hard.txt"]  # no temp file left
    assert (await file_read({"path": "hard.txt"}, ctx)).text == "top secret"  # reading is not writing


async def test_fifo_is_refused_at_once(ws, ctx):
    """(e) A FIFO in the workspace: read, append and replace are refused without blocking
    (the old code opened it for appending and waited for a reader, for ever: writes are
    not abandoned on timeout). A watchdog opens the reading end to free a stuck call."""
    os.mkfifo(ws / "fifo")
    rescue = threading.Timer(5, lambda: os.close(os.open(ws / "fifo", os.O_RDONLY | os.O_NONBLOCK)))
    rescue.start()
    try:
        started = time.monotonic()
        assert refused(await file_read({"path": "fifo"}, ctx), "fifo is not a regular file")
        assert refused(await file_write({"path": "fifo", "content": "x", "append": True}, ctx), "not a regular file")
        assert refused(await file_write({"path": "fifo", "content": "x"}, ctx), "not a regular file")
        assert (await file_search({"pattern": "*", "text": "x"}, ctx)).text == "no matches"
        assert time.monotonic() - started < 2
    finally:
        rescue.cancel()
    assert stat.S_ISFIFO(os.stat(ws / "fifo", follow_symlinks=False).st_mode)  # not replaced either


# --- read / write -----------------------------------------------------------------------------


async def test_read_offset_limit_and_replacement(ws, ctx):
    (ws / "t.txt").write_text("héllo wörld", encoding="utf-8")
    assert (await file_read({"path": "t.txt"}, ctx)).text == "héllo wörld"
    assert (await file_read({"path": "t.txt", "offset": 6}, ctx)).text == "wörld"
    part = await file_read({"path": "t.txt", "offset": 1, "limit": 4}, ctx)
    assert part.text == "éllo" and part.structured["total_chars"] == 11
    assert (await file_read({"path": "t.txt", "offset": 100}, ctx)).text == ""
    assert (await file_read({"path": "t.txt", "limit": 0}, ctx)).text == ""
    (ws / "bad.bin").write_bytes(b"ok\xff\xfeok")
    assert (await file_read({"path": "bad.bin"}, ctx)).text == "ok\ufffd\ufffdok"


async def test_big_file_is_refused(ws, ctx):
    with open(ws / "big", "wb") as handle:
        handle.truncate(10 * 1024 * 1024 + 1)
    result = await file_read({"path": "big"}, ctx)
    assert result.is_error and "too large" in result.text
    with open(ws / "edge", "wb") as handle:
        handle.truncate(10 * 1024 * 1024)
    assert len((await file_read({"path": "edge", "limit": 5}, ctx)).text) == 5


async def test_write_is_atomic_creates_parents_and_appends(ws, ctx):
    result = await file_write({"path": "a/b/c.txt", "content": "one"}, ctx)
    assert result.text == "wrote 3 bytes to a/b/c.txt"
    assert (ws / "a" / "b" / "c.txt").read_text() == "one"
    os.chmod(ws / "a" / "b" / "c.txt", 0o640)
    inode = os.stat(ws / "a" / "b" / "c.txt").st_ino
    assert not (await file_write({"path": "a/b/c.txt", "content": "two"}, ctx)).is_error
    assert (ws / "a" / "b" / "c.txt").read_text() == "two"
    assert os.stat(ws / "a" / "b" / "c.txt").st_ino != inode  # replaced, not rewritten in place
    assert (os.stat(ws / "a" / "b" / "c.txt").st_mode & 0o777) == 0o640  # mode kept
    assert sorted(os.listdir(ws / "a" / "b")) == ["c.txt"]  # no temp file left
    assert (await file_write({"path": "a/b/c.txt", "content": "+3ü", "append": True}, ctx)).text == \
        "wrote 4 bytes to a/b/c.txt"
    assert (ws / "a" / "b" / "c.txt").read_text() == "two+3ü"
    assert not (await file_write({"path": "new.log", "content": "x", "append": True}, ctx)).is_error
    assert (ws / "new.log").read_text() == "x"


async def test_failed_write_leaves_old_content_and_no_temp(ws, ctx, monkeypatch):
    (ws / "keep.txt").write_text("old")

    def broken(src, dst, **dir_fds):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tools_files.os, "replace", broken)
    result = await file_write({"path": "keep.txt", "content": "new"}, ctx)
    assert result.is_error and result.text == "keep.txt: No space left on device"
    assert (ws / "keep.txt").read_text() == "old" and os.listdir(ws) == ["keep.txt"]


# --- list / search ----------------------------------------------------------------------------


async def test_list_sorted_recursive_and_bounded(ws, ctx):
    (ws / "b").mkdir()
    (ws / "b" / "z.txt").write_text("")
    (ws / "b" / "c").mkdir()
    (ws / "a.txt").write_text("")
    assert (await file_list({}, ctx)).text == "a.txt\nb/"
    assert (await file_list({"recursive": True}, ctx)).text == "a.txt\nb/\nb/c/\nb/z.txt"
    assert (await file_list({"path": "b"}, ctx)).text == "b/c/\nb/z.txt"
    assert refused(await file_list({"path": "a.txt"}, ctx), "is not a directory")
    (ws / "many").mkdir()
    for i in range(1234):
        (ws / "many" / f"f{i:04}").write_text("")
    lines = (await file_list({"path": "many"}, ctx)).text.splitlines()
    assert len(lines) == 1001 and lines[0] == "many/f0000" and lines[-1] == "[234 more]"


async def test_deep_tree_does_not_recurse(ws, ctx):
    path = ws
    for _ in range(60):
        path = path / "d"
    path.mkdir(parents=True)
    lines = (await file_list({"recursive": True}, ctx)).text.splitlines()
    assert len(lines) == 60 and lines[-1].count("d") == 60


async def test_search_glob_text_binary_and_large(ws, ctx):
    (ws / "docs").mkdir()
    (ws / "docs" / "a.md").write_text("intro\nTODO: write\nmore\n" + "TODO " + "x" * 500 + "\n")
    (ws / "b.md").write_text("nothing here")
    (ws / "c.txt").write_text("TODO too")
    (ws / "bin.md").write_bytes(b"TODO\x00binary")
    (ws / "big.md").write_text("TODO\n" * (300 * 1024))  # > 1 MiB
    names = await file_search({"pattern": "*.md"}, ctx)
    assert names.text.splitlines() == ["b.md", "big.md", "bin.md", "docs/a.md"]
    hits = (await file_search({"pattern": "*.md", "text": "TODO"}, ctx)).text.splitlines()
    assert hits[0] == "docs/a.md:2: TODO: write"
    assert hits[1] == "docs/a.md:4: " + ("TODO " + "x" * 500)[:200]
    assert hits[2] == "[skipped 2 binary, large or unreadable files]" and len(hits) == 3
    assert (await file_search({"pattern": "docs/*.md"}, ctx)).text == "docs/a.md"
    assert (await file_search({"pattern": "*", "text": "TODO", "path": "docs"}, ctx)).text.startswith("docs/a.md:2:")
    assert (await file_search({"pattern": "*.py"}, ctx)).text == "no matches"


async def test_search_bounds(ws, ctx, monkeypatch):
    (ws / "hits.txt").write_text("needle\n" * 500)
    lines = (await file_search({"pattern": "*", "text": "needle"}, ctx)).text.splitlines()
    assert len(lines) == 201 and lines[-1] == "[stopped at 200 matches]"
    assert lines[199] == "hits.txt:200: needle"
    monkeypatch.setattr(tools_files, "MAX_SEARCH_FILES", 10)
    for i in range(20):
        (ws / f"f{i:02}.log").write_text("")
    lines = (await file_search({"pattern": "*.log"}, ctx)).text.splitlines()
    assert lines[-1] == "[stopped after scanning 10 files]" and len(lines) == 11


# --- through the pipeline ---------------------------------------------------------------------


async def test_pipeline_uses_the_default_workspace(tmp_path):
    registry = ToolRegistry()
    register_builtins(registry)
    allow = GovernanceConfig(rules=[ApprovalRule(tool="file_write", decision="allow")])
    pipeline = ToolPipeline(registry, Config(state=StateConfig(dir=str(tmp_path)), governance=allow))
    run = pipeline.run(AgentConfig(name="w", kind="echo", tools=["file_*", "memory_*"]))
    result = await pipeline.call("file_write", {"path": "notes/n.txt", "content": "hello"}, run=run)
    assert result.text == "wrote 5 bytes to notes/n.txt"
    assert (tmp_path / "workspaces" / "w" / "notes" / "n.txt").read_text() == "hello"
    assert (await pipeline.call("file_read", {"path": "notes/n.txt"}, run=run)).text == "hello"
    invalid = await pipeline.call("file_read", {"path": "n.txt", "offset": -1, "extra": 1}, run=run)
    assert invalid.is_error and "invalid arguments for file_read" in invalid.text
    escape = await pipeline.call("file_read", {"path": "../../audit.jsonl"}, run=run)
    assert escape.is_error and "path escapes the workspace" in escape.text
    denied = await pipeline.call("time_now", {}, run=run)
    assert denied.is_error and "may not call time_now" in denied.text
    assert not (await pipeline.call("memory_store", {"key": "k", "value": "v"}, run=run)).is_error
    assert (tmp_path / "memory.sqlite3").exists()
