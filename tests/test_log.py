"""Logging: stderr only, JSON lines, wire records without content, secrets masked."""

import json
import logging

from runtime.log import LogBudget, clean, get_logger, log_wire, register_secret, setup_logging

PEER_TEXT = "\x1b[31mred\x1b[0m\r\n12:00:00 ERROR   tern.api: forged\x9b2J\u2028\x00\ttab"


def test_json_lines_and_wire_records(capsys):
    setup_logging("debug", "json")
    log_wire("in", "tools/call", 7, 123, peer="mcp:fs")
    out, err = capsys.readouterr()
    assert out == ""
    record = json.loads(err.strip().splitlines()[-1])
    assert record["logger"] == "tern.wire" and record["level"] == "debug"
    assert record["direction"] == "in" and record["method"] == "tools/call"
    assert record["id"] == 7 and record["size"] == 123 and record["peer"] == "mcp:fs"


def test_wire_records_only_at_debug(capsys):
    setup_logging("info", "text")
    log_wire("out", "ping", 1, 10)
    assert capsys.readouterr().err == ""


def test_registered_secrets_are_masked_in_text_and_json(capsys):
    register_secret("tok-ABCDEFGH")
    for fmt in ("text", "json"):
        setup_logging("info", fmt)
        get_logger("test").warning("header was Bearer %s", "tok-ABCDEFGH")
        err = capsys.readouterr().err
        assert "tok-ABCDEFGH" not in err and "********" in err


def test_log_masks_like_the_tool_pipeline(capsys):
    """One redactor: JSON-escaped forms and overlapping secrets are masked in the log too,
    down to 8 characters (the log's minimum: shorter values are too common to mask)."""
    for secret in ('pw"q\\uote', "abcdefgh", "efghijkl", "k3y!k3y!", "k3y!", "abc"):
        register_secret(secret)
    setup_logging("info", "json")
    get_logger("test").warning("a %s b %s c %s d %s %s", 'pw"q\\uote', "xxabcdefghijklyy", "k3y!k3y!", "k3y!",
                               "abc")
    record = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert record["message"] == "a ******** b xx********yy c ******** d k3y! abc"


def test_peer_text_cannot_forge_a_line_in_either_format(capsys):
    """The formatters escape control characters in every record, whoever logged it."""
    setup_logging("info", "text")
    get_logger("a2a").warning("peer said: %s", PEER_TEXT)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "\x9b" not in err and "\r" not in err
    escaped = r"\x1b[31mred\x1b[0m\r\n12:00:00 ERROR   tern.api: forged\x9b2J\u2028\x00" + "\ttab"
    assert err.rstrip("\n").endswith(escaped)
    setup_logging("info", "json")
    get_logger("a2a").warning("peer said: %s", PEER_TEXT, extra={"body": PEER_TEXT})
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x9b" not in err and "\u2028" not in err
    record = json.loads(err)
    assert record["message"] == "peer said: " + clean(PEER_TEXT) and record["body"] == PEER_TEXT


def test_a_traceback_is_escaped_and_indented(capsys):
    setup_logging("info", "text")
    try:
        raise ValueError("peer\n12:00:00 ERROR   forged\x1b[2J")
    except ValueError:
        get_logger("x").exception("failed")
    lines = capsys.readouterr().err.rstrip("\n").split("\n")
    assert lines[0].endswith("failed") and all(line.startswith("    ") for line in lines[1:])
    assert "\x1b" not in "".join(lines)
    assert lines[-2:] == ["    ValueError: peer", r"    12:00:00 ERROR   forged\x1b[2J"]  # indented: no record


def test_log_budget_rate_burst_and_summaries():
    budget = LogBudget(per_sec=20, burst=100, summary_secs=1.0)
    assert sum(budget.admit(0.0) for _ in range(1000)) == 100
    assert budget.dropped(0.0) == 900 and budget.dropped(0.5) == 0  # one summary a second
    assert sum(budget.admit(0.5) for _ in range(100)) == 10  # 20 a second refilled
    assert budget.dropped(0.9) == 0 and budget.dropped(0.9, final=True) == 90


def teardown_module():
    logging.getLogger("tern").handlers.clear()
