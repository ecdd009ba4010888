"""Webhook authentication: GitHub's ``X-Hub-Signature-256`` HMAC, a timestamp window,
and a replay cache.

The signature is the webhook's only credential, so the rules are exact and each refusal
names one reason. The HMAC-SHA256 key is the trigger's secret; the signed bytes are the
raw body, or ``<timestamp>.<body>`` when the trigger names a timestamp header, which then
must be within the window of now. The comparison is constant-time (``hmac.compare_digest``).
Replays are refused by remembering, for the window, each signature that verified; only
verified signatures are stored, so nobody without the secret can fill the cache.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections import OrderedDict

from runtime.errors import TernError

__all__ = ["TriggerAuthError", "Replayed", "ReplayCache", "verify_hub_signature", "SIGNATURE_HEADER"]

SIGNATURE_HEADER = "X-Hub-Signature-256"
_SIGNATURE = re.compile(r"sha256=([0-9a-fA-F]{64})")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")  # whole seconds since the epoch


class TriggerAuthError(TernError):
    """A webhook request failed its authentication; the message says why (never the secret)."""

    http_status = 401


class Replayed(TriggerAuthError):
    """A correctly signed request that was already accepted inside the replay window."""

    http_status = 409


def verify_hub_signature(secret: bytes, body: bytes, header: str | None, *, timestamp: str | None,
                         now: float, window_secs: float) -> None:
    """Raise ``TriggerAuthError`` unless ``header`` is ``sha256=<hex HMAC of the signed bytes>``.

    ``timestamp`` is None when the trigger has no timestamp header, else the header's value
    (empty when the request lacks it): seconds since the epoch, within ``window_secs`` of
    ``now`` either way.
    """
    if header is None or not header.strip():
        raise TriggerAuthError(f"the {SIGNATURE_HEADER} header is missing")
    match = _SIGNATURE.fullmatch(header.strip())
    if match is None:
        raise TriggerAuthError(f"the {SIGNATURE_HEADER} header is not sha256=<64 hex digits>")
    signed = body
    if timestamp is not None:
        if not timestamp.strip():
            raise TriggerAuthError("the timestamp header is missing")
        if _TIMESTAMP.fullmatch(timestamp.strip()) is None:
            raise TriggerAuthError("the timestamp header is not whole seconds since the epoch")
        if abs(now - int(timestamp)) > window_secs:
            raise TriggerAuthError(f"the timestamp is more than {window_secs:g} seconds from now")
        signed = timestamp.strip().encode() + b"." + body
    expected = hmac.new(secret, signed, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, match.group(1).lower()):
        raise TriggerAuthError(f"the {SIGNATURE_HEADER} signature does not match the body")


class ReplayCache:
    """Signatures accepted within the last ``window_secs``, at most ``max_entries`` of them.

    When full, the oldest entry goes first: a replay of it would still need the original
    request's signature and, with a timestamp header, a timestamp inside the window.
    """

    __slots__ = ("_window", "_max", "_seen")

    def __init__(self, window_secs: float, *, max_entries: int = 4096) -> None:
        self._window = window_secs
        self._max = max_entries
        self._seen: OrderedDict[str, float] = OrderedDict()  # signature -> when accepted, oldest first

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, signature: str, now: float) -> None:
        """Remember ``signature``, or raise ``Replayed`` if it was accepted within the window."""
        seen = self._seen
        while seen:
            oldest, at = next(iter(seen.items()))
            if now - at <= self._window:
                break
            del seen[oldest]
        key = signature.strip().lower()
        if key in seen:
            raise Replayed("this signature was already accepted (a replayed request)")
        seen[key] = now
        if len(seen) > self._max:
            seen.popitem(last=False)
