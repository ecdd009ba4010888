"""Logging: stderr only, JSON lines, wire records without content, secrets masked."""

import json
import logging

from runtime.log import get_logger, log_wire, register_secret, setup_logging


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


def teardown_module():
    logging.getLogger("tern").handlers.clear()
