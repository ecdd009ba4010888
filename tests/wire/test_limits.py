"""``wire/limits.py``: what no store can hold (a NUL, a lone surrogate) is refused as
invalid params wherever it sits, and nothing else is."""

from __future__ import annotations

import pytest

from runtime.wire.jsonrpc import INVALID_PARAMS
from runtime.wire.limits import LimitExceeded, check_id, check_name, check_stored


@pytest.mark.parametrize("bad", ["\x00", "a\x00", "\ud800", "x\udfffy"])
def test_ids_and_names_refuse_what_no_store_holds(bad):
    for check in (check_id, check_name):
        with pytest.raises(LimitExceeded, match="which tern does not store") as refused:
            check(bad, "the id")
        assert refused.value.code == INVALID_PARAMS


@pytest.mark.parametrize(("value", "path"), [
    ({"message": {"parts": [{"text": "ok"}, {"text": "a\x00"}]}}, "params.message.parts[1].text"),
    ({"metadata": {"k\x00": 1}}, "a key of params.metadata"),
    ({"a": [[["\ud83d"]]]}, "params.a[0][0][0]"),
])
def test_check_stored_names_the_first_bad_string(value, path):
    with pytest.raises(LimitExceeded) as refused:
        check_stored(value, "params")
    assert refused.value.message.startswith(path + " ")


def test_what_stores_hold_passes():
    fine = {"text": "emoji \U0001F600, tab\t, newline\n, \u00e9", "n": 1, "none": None, "list": [True, 2.5]}
    assert check_stored(fine, "params") is fine
    assert check_id("c-1", "id") == "c-1" and check_name("agent", "name") == "agent"
