"""``POST /hooks/{name}``: a webhook trigger's door (docs/triggers-webhooks.md).

Before the body is read (the route's ``admit``): an unknown name and a trigger of
another kind are the same 404, the trigger's own rate limit answers 429 with
Retry-After, and its ``max_body_bytes`` becomes the body limit. A trigger with
``secret_env`` is authenticated by its ``X-Hub-Signature-256`` signature instead of the
API key (so a remote sender with no key gets in, and only here); one without needs the
key as every API route does. Then the signature, the timestamp window and the replay
cache; a refusal is logged with its reason, never the secret or the body. A good
request starts a run through ``TriggerPort`` and is answered 202 with its id at once.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import msgspec

from runtime.config import TriggerConfig
from runtime.httpd.messages import HttpError, Request, Response, json_response, retry_after
from runtime.httpd.ratelimit import RateLimiter
from runtime.httpd.router import Admission, Router
from runtime.kernel.triggers.signature import SIGNATURE_HEADER, ReplayCache, TriggerAuthError, verify_hub_signature
from runtime.log import LogBudget, get_logger, register_secret
from runtime.ports import TriggerPort
from runtime.wire.depth import MAX_DEPTH, too_deep

__all__ = ["Hooks"]

log = get_logger("hooks")


class Hooks:
    """The route and its per-trigger state: a rate limiter and a replay cache for each
    webhook trigger that has been called (rebuilt when a reload changes their numbers)."""

    def __init__(self, triggers: Callable[[], TriggerPort | None]) -> None:
        """``triggers``: the daemon's triggers once they run (None: none yet, every hook is 404)."""
        self._triggers = triggers
        self._limiters: dict[str, tuple[int, RateLimiter]] = {}
        self._replays: dict[str, tuple[float, ReplayCache]] = {}
        self._log_budget = LogBudget()  # refusals are for anyone to cause: a flood must not flood the log

    def _refused(self, name: str, request: Request, reason: object) -> None:
        """Log one refusal: the trigger, the client and the reason, never the secret or the body."""
        now = time.monotonic()
        if self._log_budget.admit(now):
            log.warning("webhook %s refused from %s: %s", name, request.client[0], reason)
        dropped = self._log_budget.dropped(now)
        if dropped:
            log.warning("%d more webhook refusals were not logged", dropped)

    def add_routes(self, router: Router) -> None:
        router.add("POST", "/hooks/{name}", self.handle, admit=self.admit, scope="message",
                   summary="fire a webhook trigger: signed with X-Hub-Signature-256 (secret_env) or the API key; "
                           "202 and the run id")

    def _trigger(self, request: Request) -> TriggerConfig:
        port = self._triggers()
        trigger = port.webhook(request.params["name"]) if port is not None else None
        if trigger is None:
            raise HttpError(404, "no webhook trigger has this name")  # the same for every other kind
        return trigger

    def admit(self, request: Request) -> Admission:
        """404, 503 (a secret that is not set), 429; else whether the key is needed and the body limit."""
        trigger = self._trigger(request)
        if trigger.secret_env:
            self._secret(trigger, request)
        rate, limiter = self._limiters.get(trigger.name, (None, None))
        if limiter is None or rate != trigger.rate_limit_per_min:
            per_min = trigger.rate_limit_per_min
            limiter = RateLimiter(per_min / 60, max(1, math.ceil(per_min / 6)), max_keys=1)
            self._limiters[trigger.name] = (per_min, limiter)
        wait = limiter.check(trigger.name)
        if wait:
            self._refused(trigger.name, request, "over its rate limit")
            raise HttpError(429, f"this webhook takes at most {trigger.rate_limit_per_min} requests a minute",
                            retry_after(wait))
        request.state["trigger"] = trigger  # the handler judges by the trigger admitted, not a later lookup
        return Admission(key_required=not trigger.secret_env, max_body_bytes=trigger.max_body_bytes)

    async def handle(self, request: Request) -> Response:
        from runtime.errors import TriggerBusy, UnknownTrigger

        trigger: TriggerConfig = request.state["trigger"]
        if trigger.secret_env:
            try:
                self._verify(trigger, request)
            except TriggerAuthError as exc:
                self._refused(trigger.name, request, exc)
                raise
        context = {"body": _body(request.body)}
        try:
            run_id = self._triggers().fire(trigger.name, context, source="webhook")
        except (TriggerBusy, UnknownTrigger) as exc:  # answers with its own status: 409, 503, 404
            self._refused(trigger.name, request, exc)
            raise
        return json_response({"run_id": run_id}, 202)

    def _secret(self, trigger: TriggerConfig, request: Request) -> str:
        """The HMAC key; 503 when its variable is unset or empty (never an HMAC with an empty key)."""
        secret = os.environ.get(trigger.secret_env, "")
        if not secret:
            self._refused(trigger.name, request, f"its secret variable {trigger.secret_env} is not set")
            raise HttpError(503, f"this webhook's secret is not set on the server ({trigger.secret_env})")
        register_secret(secret)
        return secret

    def _verify(self, trigger: TriggerConfig, request: Request) -> None:
        secret = self._secret(trigger, request)
        header = request.header(SIGNATURE_HEADER.lower().encode())
        timestamp = None
        if trigger.timestamp_header:
            timestamp = request.header(trigger.timestamp_header.lower().encode()) or ""
        now = time.time()
        window = trigger.replay_window_secs
        verify_hub_signature(secret.encode(), request.body, header, timestamp=timestamp, now=now, window_secs=window)
        kept, cache = self._replays.get(trigger.name, (None, None))
        if cache is None or kept != window:
            cache = ReplayCache(window)
            self._replays[trigger.name] = (window, cache)
        cache.admit(header or "", now)


def _body(raw: bytes) -> Any:
    """The body for the template: its JSON value when it is JSON, else its text (so a
    form-encoded or plain body is still ``{{ body }}``); JSON deeper than the server
    reads anywhere is refused."""
    if too_deep(raw):
        raise HttpError(400, f"the request body is nested more than {MAX_DEPTH} levels deep")
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")
