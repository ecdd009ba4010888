"""``tern triggers``: the daemon's triggers (schedules, webhooks, watches), their runs, a
run now (``fire``), and ``resume`` for one paused after failing too often. Triggers run in
``tern serve``, so every subcommand goes through its API (``cli/remote.py``: no trio, no
kernel in this process)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from runtime.cli.common import Commands, print_json
from runtime.errors import TernError, UsageError

WAIT_POLL_SECS = 0.2
WAIT_MARGIN_SECS = 90.0  # past the trigger's timeout_secs: its sink and the record


def add_commands(commands: Commands) -> None:
    triggers = commands.add("triggers", cmd_triggers,
                            "list the daemon's triggers (schedules, webhooks, watches): state, next fire, last run")
    triggers.add_argument("--json", action="store_true", help="print JSON")
    group = commands.group(triggers, "triggers_command")
    runs = group.add("runs", cmd_runs, "a trigger's runs, newest first")
    runs.add_argument("name", help="the trigger's name")
    runs.add_argument("-n", type=int, default=20, metavar="N", help="how many runs (default 20, at most 1000)")
    runs.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    fire = group.add("fire", cmd_fire, "start a run of a trigger now; prints its run id")
    fire.add_argument("name", help="the trigger's name")
    fire.add_argument("--wait", action="store_true", help="wait for the run's end and print its reply "
                                                          "(exit 1 unless it ended ok)")
    fire.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    resume = group.add("resume", cmd_resume, "resume a trigger paused after failing too often")
    resume.add_argument("name", help="the trigger's name")


def _daemon(args: argparse.Namespace) -> tuple[Any, Any]:
    """(the daemon, the config); a UsageError when no daemon runs on the state directory."""
    from runtime.cli.remote import find_daemon
    from runtime.config import load_config

    config = load_config(getattr(args, "config", None)).config
    daemon = find_daemon(args, config)
    if daemon is None:
        raise UsageError("no tern daemon runs on this state directory: triggers run in `tern serve`; start it first")
    return daemon, config


def _name(name: str) -> str:
    from runtime.cli.remote import quote_path

    return quote_path(name)


def _when(iso: str | None, stamp: float | None = None) -> str:
    """A time as the daemon gave it: ISO 8601 with its zone's offset (``2026-03-29
    09:00:00+02:00``); from a daemon too old to give one, the local time with its offset."""
    if iso:
        return iso.replace("T", " ", 1)
    if not stamp:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S%z", time.localtime(stamp))


def _state(item: dict[str, Any]) -> str:
    if item["paused"]:
        return f"PAUSED ({item['paused_reason']})"
    if item.get("active"):
        return f"running ({item['active']})"
    return "idle" if not item["failures"] else f"idle, {item['failures']} failed in a row"


def cmd_triggers(args: argparse.Namespace) -> int:
    daemon, _ = _daemon(args)
    listed = daemon.call("GET", "/api/triggers")["triggers"]
    if getattr(args, "json", False):
        print_json({"triggers": listed})
        return 0
    if not listed:
        print("no triggers configured ([[triggers]] in the config)")
        return 0
    for item in listed:
        what = {"schedule": lambda: f"{item.get('schedule')} ({item.get('timezone')}), "
                                       f"next {_when(item.get('next_fire_iso'), item['next_fire'])}",
                "webhook": lambda: f"POST {item.get('path')}",
                "watch": lambda: f"watching {item.get('path')}"}[item["kind"]]()
        last = item["last_run"]
        shown = f"last {last['outcome']} {_when(last.get('started_iso'), last['started_at'])}" if last else "never run"
        print(f"{item['name']:<20} {item['kind']:<8} -> {item['agent']:<16} {what}; {shown}; {_state(item)}")
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    daemon, _ = _daemon(args)
    runs = daemon.call("GET", f"/api/triggers/{_name(args.name)}/runs?limit={max(0, min(args.n, 1000))}")["runs"]
    if getattr(args, "json", False):
        print_json({"trigger": args.name, "runs": runs})
        return 0
    if not runs:
        print(f"trigger {args.name} has not run yet")
    for run in runs:
        took = f"{run['ended_at'] - run['started_at']:.1f} s" if run["ended_at"] else "..."
        why = run["error"] or run["sink_error"]
        text = " ".join((why or run["reply"]).split())
        started = _when(run.get("started_iso"), run["started_at"])
        print(f"{run['id']}  {started}  {run['source']:<8} {run['outcome']:<8} {took:>8}  "
              f"{text[:100]}{'...' if len(text) > 100 else ''}")
    return 0


def cmd_fire(args: argparse.Namespace) -> int:
    daemon, config = _daemon(args)
    run_id = daemon.call("POST", f"/api/triggers/{_name(args.name)}/fire")["run_id"]
    if not args.wait:
        if getattr(args, "json", False):
            print_json({"trigger": args.name, "run_id": run_id})
        else:
            print(run_id)
        return 0
    limit = next((t.timeout_secs for t in config.triggers if t.name == args.name), 600.0) + WAIT_MARGIN_SECS
    deadline = time.monotonic() + limit
    while True:
        run = daemon.call("GET", f"/api/triggers/{_name(args.name)}/runs/{_name(run_id)}")
        if run["outcome"] not in ("queued", "running"):
            break
        if time.monotonic() > deadline:
            raise TernError(f"run {run_id} of trigger {args.name} has not ended after {limit:.0f} s; "
                            f"see `tern triggers runs {args.name}`")
        time.sleep(WAIT_POLL_SECS)
    if getattr(args, "json", False):
        print_json(run)
    else:
        print(run_id)
        print(run["reply"] if run["outcome"] == "ok" else f"{run['outcome']}: {run['error']}")
        if run["sink_error"]:
            print(f"the reply was not delivered: {run['sink_error']}")
    return 0 if run["outcome"] == "ok" and not run["sink_error"] else 1


def cmd_resume(args: argparse.Namespace) -> int:
    daemon, _ = _daemon(args)
    item = daemon.call("POST", f"/api/triggers/{_name(args.name)}/resume")
    print(f"trigger {item['name']} resumed")
    return 0
