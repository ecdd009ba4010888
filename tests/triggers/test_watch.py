"""The file watcher: the scan, the diff and the debounce driven directly, then the trio
shell on real files in tmp_path in real time (short intervals)."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
import trio

from runtime.kernel.triggers import watch
from runtime.kernel.triggers.watch import MAX_DEPTH, MAX_WAIT_DEBOUNCES, Debounce, changed, scan, watch_dir

WAIT = 10.0  # seconds a test waits for a run before failing: real time on a shared machine


def write(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- scan ---------------------------------------------------------------------

def test_scan_reports_regular_files_relative_to_the_root(tmp_path):
    write(tmp_path / "a.txt", "hello")
    write(tmp_path / "sub" / "deeper" / "b.md")
    snapshot, cut = scan(tmp_path, 100)
    assert not cut and sorted(snapshot) == ["a.txt", "sub/deeper/b.md"]
    info = os.stat(tmp_path / "a.txt")
    assert snapshot["a.txt"] == (info.st_mtime_ns, 5, info.st_ino)


def test_scan_ignores_symlinks_out_of_the_root_and_does_not_follow_them(tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    write(outside / "secret.txt")
    write(root / "inside.txt")
    (root / "file-link").symlink_to(outside / "secret.txt")
    (root / "dir-link").symlink_to(outside, target_is_directory=True)
    (root / "dangling").symlink_to(tmp_path / "nowhere")
    (root / "inner-link").symlink_to(root / "inside.txt")  # even a link that stays inside is not reported
    assert scan(root, 100) == ({"inside.txt": scan(root, 100)[0]["inside.txt"]}, False)


def test_scan_survives_a_directory_symlink_loop(tmp_path):
    write(tmp_path / "a" / "f.txt")
    (tmp_path / "a" / "loop").symlink_to(tmp_path / "a", target_is_directory=True)
    (tmp_path / "up").symlink_to(tmp_path, target_is_directory=True)
    snapshot, cut = scan(tmp_path, 1000)
    assert sorted(snapshot) == ["a/f.txt"] and not cut


def test_scan_skips_special_files_and_names_that_cannot_travel_as_text(tmp_path):
    write(tmp_path / "ok.txt")
    os.mkfifo(tmp_path / "pipe")
    with open(os.fsencode(tmp_path) + b"/bad\xff.txt", "w") as file:
        file.write("x")
    for name in ("two\nlines.txt", "esc\x1b[2J.txt", "sep\u2028.txt", "del\x7f.txt"):
        write(tmp_path / name)
    write(tmp_path / "caf\u00e9 \u00a0ok.txt")  # non-ASCII text is fine
    assert sorted(scan(tmp_path, 100)[0]) == ["caf\u00e9 \u00a0ok.txt", "ok.txt"]


def test_scan_is_cut_at_max_files_entries(tmp_path):
    for index in range(50):
        write(tmp_path / f"f{index:02}.txt")
    write(tmp_path / "d" / "inner.txt")
    snapshot, cut = scan(tmp_path, 10)
    assert cut and 8 <= len(snapshot) <= 10  # files and directories count
    assert scan(tmp_path, 10) == (snapshot, True)  # the same cut every time: no phantom changes


def test_within_the_bound_the_walk_is_depth_first_in_name_order(tmp_path):
    for name in ("b.txt", "a/z.txt", "a/b/c.txt", "c.txt"):
        write(tmp_path / name)
    assert list(scan(tmp_path, 100)[0]) == ["a/b/c.txt", "a/z.txt", "b.txt", "c.txt"]


def test_scan_of_a_missing_root_is_empty(tmp_path):
    assert scan(tmp_path / "gone", 10) == ({}, False)


def test_scan_does_not_enter_a_root_that_is_a_symlink(tmp_path):
    write(tmp_path / "outside" / "secret.txt")
    (tmp_path / "root").symlink_to(tmp_path / "outside", target_is_directory=True)
    assert scan(tmp_path / "root", 10) == ({}, False)


def test_scan_stops_at_max_depth(tmp_path):
    deep = tmp_path.joinpath(*["d"] * (MAX_DEPTH + 5))
    write(deep / "bottom.txt")
    write(tmp_path / "top.txt")
    snapshot, cut = scan(tmp_path, 1000)
    assert cut and list(snapshot) == ["top.txt"]


def test_scan_of_a_huge_directory_reads_a_bounded_part(tmp_path):
    for index in range(3000):
        (tmp_path / f"f{index}").touch()
    snapshot, cut = scan(tmp_path, 100)
    assert cut and len(snapshot) == 100


# -- changed and Debounce (sans-IO) ----------------------------------------------

def test_changed_reports_created_modified_renamed_and_replaced_but_not_deleted():
    old = {"keep": (1, 1, 1), "edit": (1, 1, 2), "gone": (1, 1, 3), "from": (1, 1, 4), "swap": (1, 1, 5)}
    new = {"keep": (1, 1, 1), "edit": (2, 3, 2), "to": (1, 1, 4), "swap": (1, 1, 9), "fresh": (5, 0, 6)}
    assert sorted(changed(old, new)) == ["edit", "fresh", "swap", "to"]
    assert changed(new, {}) == []


def test_debounce_waits_for_quiet():
    pending = Debounce(2.0)
    assert not pending.due(0.0)
    pending.add(["b", "a"], 0.0, {"a", "b"})
    pending.add([], 1.0, {"a", "b"})  # a scan with nothing new does not extend the wait
    assert not pending.due(1.5)
    pending.add(["c", "a"], 1.5, {"a", "b", "c"})
    assert not pending.due(3.0) and pending.due(3.5)
    assert pending.take(10) == ["a", "b", "c"]
    assert not pending.due(100.0) and pending.take(10) == []


def test_debounce_fires_a_constant_writer_after_the_longest_wait():
    pending = Debounce(1.0)
    now = 0.0
    present = set()
    while not pending.due(now):
        present.add(f"f{now:.1f}")
        pending.add([f"f{now:.1f}"], now, present)
        now += 0.5
    assert now == MAX_WAIT_DEBOUNCES * 1.0  # due once the first change is ten debounces old
    assert len(pending.take(1000)) == 20


def test_debounce_forgets_files_deleted_before_their_run():
    pending = Debounce(1.0)
    pending.add(["keep", "tmp"], 0.0, {"keep", "tmp"})
    pending.add([], 0.5, {"keep"})
    assert pending.due(1.0) and pending.take(10) == ["keep"]
    pending.add(["tmp"], 2.0, {"tmp"})
    pending.add([], 2.5, set())
    assert not pending.due(10.0)


def test_take_is_bounded_and_counts_the_rest():
    pending = Debounce(1.0)
    paths = [f"f{index:04}" for index in range(1000)]
    pending.add(paths, 0.0, set(paths))
    batch = pending.take(100)
    assert batch[:100] == [f"f{index:04}" for index in range(100)] and batch[100:] == ["... and 900 more"]


# -- the scanner's timeout --------------------------------------------------------

async def test_a_hung_scan_is_abandoned_and_holds_one_thread(tmp_path, monkeypatch):
    release, entered = threading.Event(), []

    def hung(root, max_files):
        entered.append(root)
        release.wait(WAIT)
        return {}, False

    monkeypatch.setattr(watch, "SCAN_TIMEOUT_SECS", 0.1)
    monkeypatch.setattr(watch, "scan", hung)
    scanner = watch._Scanner(tmp_path, 10)
    with trio.fail_after(WAIT):
        assert await scanner.scan() is None  # timed out
        assert await scanner.scan() is None  # the first still runs: no second thread
        assert len(entered) == 1
        release.set()
        while (snapshot := await scanner.scan()) is None:
            await trio.sleep(0.01)
    assert snapshot == {}


async def test_a_cut_scan_is_logged_once(tmp_path):
    for index in range(5):
        write(tmp_path / f"f{index}")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("tern.triggers.watch")
    logger.addHandler(handler)
    try:
        scanner = watch._Scanner(tmp_path, 2)
        for _ in range(3):
            assert len(await scanner.scan()) == 2
    finally:
        logger.removeHandler(handler)
    assert [record.levelno for record in records] == [logging.WARNING]


# -- watch_dir on real files --------------------------------------------------------

class Watcher:
    """Runs watch_dir over ``root`` and hands each run's paths to the test."""

    def __init__(self, root: Path, **options) -> None:
        self.root = root
        self.options = {"interval": 0.05, "debounce": 0.15, "max_files": 10_000, "max_paths_per_run": 2000,
                        **options}
        self.send, self.receive = trio.open_memory_channel[list[str]](1000)

    async def run(self) -> None:
        await watch_dir(self.root, fire=self.send.send, **self.options)

    async def next_run(self) -> list[str]:
        with trio.fail_after(WAIT):
            return await self.receive.receive()

    async def quiet(self, seconds: float = 0.6) -> None:
        """No run comes for ``seconds`` (several intervals and debounces)."""
        await trio.sleep(seconds)
        with pytest.raises(trio.WouldBlock):
            self.receive.receive_nowait()

    async def ready(self) -> None:
        """Wait until the watcher has its baseline: a file written now is reported (written
        again, longer, until it is: the first writes may land before the baseline scan)."""
        with trio.fail_after(WAIT):
            for size in range(1, 1000):
                write(self.root / "ready", "x" * size)
                with trio.move_on_after(0.5):
                    assert await self.receive.receive() == ["ready"]
                    return


@pytest.fixture
async def watcher(tmp_path, nursery):
    write(tmp_path / "old.txt")  # present at start: the baseline, no run
    found = Watcher(tmp_path)
    nursery.start_soon(found.run)
    await found.ready()
    return found


async def test_create_modify_rename_replace_and_delete(watcher):
    root = watcher.root
    write(root / "inbox" / "new.txt", "one")
    assert await watcher.next_run() == ["inbox/new.txt"]
    with open(root / "old.txt", "a") as file:
        file.write("more")
    assert await watcher.next_run() == ["old.txt"]
    os.rename(root / "inbox" / "new.txt", root / "inbox" / "renamed.txt")
    assert await watcher.next_run() == ["inbox/renamed.txt"]
    write(root / "swap.tmp", "two")
    os.replace(root / "swap.tmp", root / "old.txt")  # replaced under the same name
    assert await watcher.next_run() == ["old.txt"]
    os.remove(root / "inbox" / "renamed.txt")
    os.remove(root / "ready")
    await watcher.quiet()  # deletes start no run


async def test_a_link_out_of_the_root_starts_no_run(watcher, tmp_path_factory):
    outside = write(tmp_path_factory.mktemp("outside") / "secret.txt")
    (watcher.root / "link.txt").symlink_to(outside)
    (watcher.root / "linkdir").symlink_to(outside.parent, target_is_directory=True)
    (watcher.root / "loop").symlink_to(watcher.root, target_is_directory=True)
    await watcher.quiet()
    write(outside, "changed outside")
    await watcher.quiet()


async def test_a_burst_of_a_thousand_files_is_one_bounded_run(tmp_path, nursery):
    found = Watcher(tmp_path, max_paths_per_run=100)
    nursery.start_soon(found.run)
    await found.ready()
    for index in range(1000):
        write(tmp_path / "burst" / f"f{index:04}.txt")
    runs = [await found.next_run()]
    while True:
        with trio.move_on_after(0.6) as waited:
            runs.append(await found.receive.receive())
        if waited.cancelled_caught:
            break
    assert len(runs) <= 3, [len(run) for run in runs]  # debounced: one run, a few on a stalled machine
    listed = [path for run in runs for path in run if not path.startswith("...")]
    counted = sum(int(path.split()[2]) for run in runs for path in run if path.startswith("..."))
    assert all(len(run) <= 101 for run in runs)
    assert len(listed) + counted == 1000 and len(set(listed)) == len(listed)
    assert runs[0][:100] == sorted(runs[0][:100])
