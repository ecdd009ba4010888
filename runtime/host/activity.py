"""The dashboard's memory: what ran, who asked, what it cost, kept across restarts.

The daemon records the kernel's own events (``agent.message``: a run; ``model.call``;
``tool.call``) in ``<state dir>/activity.sqlite3`` (in memory without a state dir), so
the overview's charts start filled and a run's model and tool calls can be drawn as a
timeline after a restart. A run's spans are the calls of its conversation between its
start and its end (an event is published when its call ends; its ``ms`` gives the
start), the same spans a trace has (``invoke_agent``, ``chat``, ``execute_tool``).

At start it also reads the audit log's records written after its newest row (by
``tern run`` or ``tern call`` while no daemon ran, or before this store existed): runs
and tool calls, without model calls (the audit has none). Bounded: ``KEEP_ROWS`` rows
(the oldest go), ``AUDIT_IMPORT`` records read, strings cut. A write that fails (a full
disk) is logged and counted, never raised: the calls go on, their record may be lost.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import trio

from runtime.log import get_logger

__all__ = ["ActivityStore", "open_store", "audit_rows", "record_events", "KEEP_ROWS", "KINDS"]

log = get_logger("activity")

KEEP_ROWS = 50_000
AUDIT_IMPORT = 5_000  # audit records read at most at start
MAX_TEXT = 200  # characters kept of a name, caller or error
BATCH = 256  # events written in one transaction at most
BUCKETS = 60  # the history's per-minute buckets at most
RECENT = 200  # runs listed at most
SPANS = 500  # a run's model and tool calls drawn at most
KINDS = {"agent.message": "run", "model.call": "model", "tool.call": "tool"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS activity (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, started REAL NOT NULL, ended REAL NOT NULL,
    agent TEXT NOT NULL DEFAULT '', context_id TEXT NOT NULL DEFAULT '', caller TEXT NOT NULL DEFAULT '',
    name TEXT NOT NULL DEFAULT '', outcome TEXT NOT NULL DEFAULT '', tokens INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT 'events');
CREATE INDEX IF NOT EXISTS activity_ended ON activity (ended);
CREATE INDEX IF NOT EXISTS activity_context ON activity (context_id, ended);
"""
_COLUMNS = ("seq", "kind", "started", "ended", "agent", "context_id", "caller", "name", "outcome", "tokens", "error",
            "source")


def _text(value: Any) -> str:
    return value[:MAX_TEXT] if isinstance(value, str) else ""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def row_of(event: dict[str, Any]) -> tuple | None:
    """An event's row (kind, started, ended, agent, context_id, caller, name, outcome,
    tokens, error), or None for one this store does not keep."""
    kind = KINDS.get(event.get("type", ""))
    if kind is None:
        return None
    ended = _number(event.get("time")) or time.time()
    ms = max(_number(event.get("ms")), 0.0)
    who = event.get("caller") or event.get("key") if kind == "run" else event.get("caller")
    name = event.get("model") if kind == "model" else event.get("tool") if kind == "tool" else ""
    tokens = int(_number(event.get("tokens")))
    return (kind, ended - ms / 1000, ended, _text(event.get("agent")), _text(event.get("context_id")), _text(who),
            _text(name), _text(event.get("outcome")), tokens, _text(event.get("error")))


class ActivityStore:
    def __init__(self, path: str | Path | None, *, clock: Any = time.time) -> None:
        from runtime.storage import open_db

        self.clock = clock
        self.write_failures = 0
        self._added = 0
        if path:
            self._db = open_db(Path(path), _SCHEMA, timeout=5.0, isolation_level=None)
        else:
            self._db = sqlite3.connect(":memory:", isolation_level=None)
            self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    def add(self, rows: list[tuple], source: str = "events") -> int:
        """Write rows in one transaction; the oldest beyond ``KEEP_ROWS`` go now and then."""
        if not rows:
            return 0
        try:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany("INSERT INTO activity (kind, started, ended, agent, context_id, caller, name, "
                                     f"outcome, tokens, error, source) VALUES (?,?,?,?,?,?,?,?,?,?,'{source}')", rows)
            self._added += len(rows)
            if self._added >= 1000:
                self._added = 0
                self._db.execute("DELETE FROM activity WHERE seq <= (SELECT max(seq) FROM activity) - ?", (KEEP_ROWS,))
        except sqlite3.Error as exc:
            self.write_failures += 1
            log.error("activity store: a write was refused (%s); the dashboard's history misses these calls", exc)
            return 0
        return len(rows)

    def newest(self) -> float:
        """When the newest row ended (0: none yet): the audit records after it are imported."""
        found = self._db.execute("SELECT max(ended) FROM activity").fetchone()[0]
        return found or 0.0


    # --- reading --------------------------------------------------------------------------

    def history(self, minutes: int = BUCKETS) -> dict[str, Any]:
        """Per-minute counts of the last ``minutes`` (oldest first, the last one still open):
        runs, model calls, tool calls, errors, tokens; and the totals of the window."""
        minutes = max(1, min(minutes, BUCKETS))
        now = self.clock()
        end = (int(now // 60) + 1) * 60  # the open minute's end
        start = end - minutes * 60
        series = {k: [0] * minutes for k in ("runs", "model_calls", "tool_calls", "errors", "tokens")}
        for kind, bucket, n, errors, tokens in self._db.execute(
                "SELECT kind, CAST((ended - ?) / 60 AS INTEGER) AS b, count(*), "
                "sum(outcome NOT IN ('ok', '')), sum(tokens) FROM activity WHERE ended >= ? AND ended < ? "
                "GROUP BY kind, b", (start, start, end)):
            if not 0 <= bucket < minutes:
                continue
            series[{"run": "runs", "model": "model_calls", "tool": "tool_calls"}[kind]][bucket] += n
            series["errors"][bucket] += errors or 0
            series["tokens"][bucket] += tokens or 0
        return {"start": start, "minute_secs": 60, "series": series}

    def runs(self, limit: int = 20, agent: str | None = None, context_id: str | None = None) -> list[dict[str, Any]]:
        """Runs, newest first, each with what it cost: its model and tool calls and tokens."""
        where, params = ["kind = 'run'"], []
        if agent is not None:
            where.append("agent = ?")
            params.append(agent)
        if context_id is not None:
            where.append("context_id = ?")
            params.append(context_id)
        found = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM activity WHERE {' AND '.join(where)} "
                                 "ORDER BY ended DESC LIMIT ?", (*params, max(0, min(limit, RECENT)))).fetchall()
        return [self._costed(dict(zip(_COLUMNS, row))) for row in found]

    def last_runs(self) -> dict[str, dict[str, Any]]:
        """Each agent's last run."""
        found = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM activity WHERE seq IN (SELECT max(seq) "
                                 "FROM activity WHERE kind = 'run' GROUP BY agent)").fetchall()
        return {row[4]: self._costed(dict(zip(_COLUMNS, row))) for row in found}

    def _spans(self, run: dict[str, Any], limit: int) -> list[dict[str, Any]]:
        if not run["context_id"]:
            return []
        rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM activity WHERE context_id = ? AND kind != 'run' "
                                "AND ended >= ? AND ended <= ? ORDER BY started LIMIT ?",
                                (run["context_id"], run["started"] - 0.001, run["ended"] + 0.001, limit)).fetchall()
        return [dict(zip(_COLUMNS, row)) for row in rows]

    def _costed(self, run: dict[str, Any]) -> dict[str, Any]:
        spans = self._spans(run, SPANS)
        run["ms"] = round((run["ended"] - run["started"]) * 1000, 3)
        run["model_calls"] = sum(1 for s in spans if s["kind"] == "model")
        run["tool_calls"] = sum(1 for s in spans if s["kind"] == "tool")
        run["tokens"] = sum(s["tokens"] for s in spans)
        return run

    def run(self, seq: int) -> dict[str, Any] | None:
        """One run and its model and tool calls in the order they started (its timeline)."""
        row = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM activity WHERE seq = ? AND kind = 'run'",
                               (seq,)).fetchone()
        if row is None:
            return None
        run = self._costed(dict(zip(_COLUMNS, row)))
        run["spans"] = self._spans(run, SPANS)
        return run


def open_store(state_dir: str) -> ActivityStore:
    """The state dir's store; one in memory when there is none, or it cannot be opened
    (the daemon serves without a history across restarts rather than not at all)."""
    if state_dir:
        try:
            return ActivityStore(Path(state_dir) / "activity.sqlite3")
        except (OSError, sqlite3.Error) as exc:
            log.error("the activity store in %s cannot be opened (%s): the dashboard's history is kept in memory "
                      "until tern restarts", state_dir, exc)
    return ActivityStore(None)


def audit_rows(audit_path: Path, since: float) -> list[tuple]:
    """The rows of the audit records newer than ``since``: runs and tool calls (a file
    read: the caller runs it in a thread)."""
    from runtime.kernel.audit import last_records

    rows = []
    for line in last_records(audit_path, AUDIT_IMPORT, lambda line: b'"kind":"agent_message"' in line
                             or b'"kind":"tool_call"' in line):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict) or _number(record.get("time")) <= since:
            continue
        event = {**record, "type": "agent.message" if record.get("kind") == "agent_message" else "tool.call"}
        row = row_of(event)
        if row is not None:
            rows.append(row)
    return rows


async def record_events(events: Any, store: ActivityStore, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    """Keep every run, model call and tool call the kernel publishes, in batches."""
    with events.subscribe(1024, kinds=KINDS) as subscription:
        task_status.started()
        while True:
            rows = [row_of(await subscription.next())]
            while len(rows) < BATCH:
                try:
                    rows.append(row_of(subscription.receive.receive_nowait()))
                except trio.WouldBlock:
                    break
            store.add([r for r in rows if r is not None])
            await trio.sleep(0.05)  # a burst is written in one transaction, not one a call
