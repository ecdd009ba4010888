"""Webhook signatures: GitHub's X-Hub-Signature-256 form, the timestamp window and the
replay cache, each refusal with its one reason."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from runtime.kernel.triggers.signature import ReplayCache, Replayed, TriggerAuthError, verify_hub_signature

SECRET = b"s3cret-hook-key"
BODY = b'{"action":"opened","number":7}'
NOW = 1_800_000_000.0


def sign(body: bytes, secret: bytes = SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def check(header, body=BODY, *, timestamp=None, now=NOW, window=300.0, secret=SECRET):
    verify_hub_signature(secret, body, header, timestamp=timestamp, now=now, window_secs=window)


def test_githubs_documented_example():
    """The test vector in GitHub's "Validating webhook deliveries" page."""
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    verify_hub_signature(b"It's a Secret to Everybody", b"Hello, World!", header, timestamp=None, now=NOW,
                         window_secs=300)


def test_a_good_signature_passes_in_either_case_of_hex():
    check(sign(BODY))
    check(sign(BODY).upper().replace("SHA256=", "sha256="))
    check("  " + sign(BODY) + " ")


@pytest.mark.parametrize(("header", "reason"), [
    (None, "missing"),
    ("", "missing"),
    ("   ", "missing"),
    ("sha1=" + "0" * 40, "not sha256="),
    ("sha256=" + "0" * 63, "not sha256="),
    ("sha256=" + "0" * 65, "not sha256="),
    ("sha256=" + "g" * 64, "not sha256="),
    ("SHA256=" + "0" * 64, "not sha256="),
    ("sha256= " + "0" * 64, "not sha256="),
    ("0" * 64, "not sha256="),
    ("sha256=" + "0" * 64 + ",sha256=" + "0" * 64, "not sha256="),
    ("sha256=" + "é" * 64, "not sha256="),
    ("sha256=" + "0" * 64, "does not match"),
])
def test_each_refusal_names_its_reason(header, reason):
    with pytest.raises(TriggerAuthError, match=reason) as caught:
        check(header)
    assert caught.value.http_status == 401


def test_a_wrong_secret_or_a_changed_body_fails():
    with pytest.raises(TriggerAuthError, match="does not match"):
        check(sign(BODY, b"other secret"))
    with pytest.raises(TriggerAuthError, match="does not match"):
        check(sign(BODY), BODY + b" ")
    with pytest.raises(TriggerAuthError, match="does not match"):
        check(sign(BODY), b"")


def test_the_secret_never_appears_in_a_refusal():
    for header in (None, "junk", sign(BODY, b"x")):
        with pytest.raises(TriggerAuthError) as caught:
            check(header)
        assert SECRET.decode() not in str(caught.value)


def test_with_a_timestamp_the_signature_covers_timestamp_dot_body():
    stamp = str(int(NOW))
    check(sign(stamp.encode() + b"." + BODY), timestamp=stamp)
    with pytest.raises(TriggerAuthError, match="does not match"):
        check(sign(BODY), timestamp=stamp)  # the body alone is not enough
    with pytest.raises(TriggerAuthError, match="does not match"):
        check(sign(b"1." + BODY), timestamp=stamp)


@pytest.mark.parametrize(("offset", "ok"), [(0, True), (300, True), (-300, True), (301, False), (-301, False),
                                            (-10**9, False)])
def test_the_timestamp_window(offset, ok):
    stamp = str(int(NOW) + offset)
    header = sign(stamp.encode() + b"." + BODY)
    if ok:
        check(header, timestamp=stamp)
    else:
        with pytest.raises(TriggerAuthError, match="more than 300 seconds"):
            check(header, timestamp=stamp)


@pytest.mark.parametrize(("stamp", "reason"), [
    ("", "timestamp header is missing"), ("  ", "timestamp header is missing"),
    ("1.5e9", "whole seconds"), ("-1", "whole seconds"), ("9" * 400, "whole seconds"), ("0x10", "whole seconds"),
    ("１２３", "whole seconds"),
])
def test_a_bad_timestamp_is_refused_before_any_hmac(stamp, reason):
    with pytest.raises(TriggerAuthError, match=reason):
        check(sign(BODY), timestamp=stamp)


def test_the_replay_cache_refuses_a_second_use_within_the_window():
    cache = ReplayCache(300.0)
    cache.admit(sign(BODY), NOW)
    with pytest.raises(Replayed, match="replayed") as caught:
        cache.admit(sign(BODY), NOW + 299)
    assert caught.value.http_status == 409
    with pytest.raises(Replayed):
        cache.admit(sign(BODY).upper().replace("SHA256", "sha256"), NOW + 1)  # case does not dodge it
    cache.admit(sign(BODY + b"2"), NOW + 1)
    cache.admit(sign(BODY), NOW + 301)  # expired with the window: accepted again
    assert len(cache) == 2


def test_the_replay_cache_is_count_bounded_and_expires_entries():
    cache = ReplayCache(60.0, max_entries=100)
    for i in range(1000):
        cache.admit(f"sha256={i:064x}", NOW + i / 1000)
    assert len(cache) == 100
    with pytest.raises(Replayed):
        cache.admit(f"sha256={999:064x}", NOW + 1)  # the newest are kept
    cache.admit(f"sha256={1:064x}", NOW + 1)  # the oldest made room
    cache.admit("sha256=" + "f" * 64, NOW + 1000)  # everything older expired on the way
    assert len(cache) == 1
