"""``POST /hooks/{name}``: a webhook trigger's door (docs/triggers-webhooks.md).

Nothing is spent before the sender is authenticated, and an unauthenticated sender
learns nothing. Before the body is read (the route's ``admit``): a client that has failed
too often lately (``FAILURES_PER_MIN`` per client address) gets 429, and the trigger's
``max_body_bytes`` becomes the body limit. A trigger with ``secret_env`` is authenticated
by its ``X-Hub-Signature-256`` signature instead of the API key (so a remote sender with
no key gets in, and only here); one without needs a key as every API route does, and its
run acts for that key (the kernel decides whether it may reach the trigger's agent). An
unknown name, a trigger of another kind and a bad signature are one answer: 401 with the
same sentence, each counted against the client's failures, never against a trigger. Only
an authenticated delivery spends the trigger's own rate limit (429 with Retry-After),
then the replay cache. A refusal is logged with its reason, never the secret or the body.
A good request starts a run through ``TriggerPort`` and is answered 202 with its id at once.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

import msgspec

from runtime.config import TriggerConfig
from runtime.errors import Forbidden
from runtime.httpd.messages import HttpError, Request, Response, json_response, retry_after
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.router import Admission, Router
from runtime.kernel.triggers.signature import SIGNATURE_HEADER, ReplayCache, TriggerAuthError, verify_hub_signature
from runtime.log import LogBudget, get_logger, register_secret
from runtime.ports import TriggerPort
from runtime.wire.depth import MAX_DEPTH, too_deep

__all__ = ["Hooks"]

log = get_logger("hooks")

FAILURES_PER_MIN = 30  # refused deliveries one client address may cause a minute (a burst of as many)
UNKNOWN_BODY_BYTES = 64 * 1024  # what is read of a delivery to a name no webhook has
NOT_VALID = "this webhook does not exist, or the request's signature or key is not valid for it"


class Hooks:
    """The route and its per-trigger state: a rate limiter and a replay cache for each
    webhook trigger that has been called (rebuilt when a reload changes their numbers)."""

    def __init__(self, triggers: Callable[[], TriggerPort | None]) -> None:
        """``triggers``: the daemon's triggers once they run (None: none yet, every hook is 404)."""
        self._triggers = triggers
        self._limiters: dict[str, tuple[int, RateLimiter]] = {}
        self._replays: dict[str, tuple[float, ReplayCache]] = {}
        self._failures = RateLimiter(FAILURES_PER_MIN / 60, FAILURES_PER_MIN)  # per client address
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

    def admit(self, request: Request) -> Admission:
        """429 for a client that keeps failing, 503 (a secret that is not set); else whether
        the key is needed and the body limit. An unknown name is decided by ``handle``,
        after a small body, as a bad signature is: the same answer."""
        client = request.client[0]
        wait = self._failures.peek(client)  # a look: failures spend it, in _fail
        if wait:
            raise HttpError(429, "too many refused webhook deliveries from this address", retry_after(wait))
        port = self._triggers()
        trigger = port.webhook(request.params["name"]) if port is not None else None
        request.state["trigger"] = trigger  # the handler judges by the trigger admitted, not a later lookup
        if trigger is None:
            return Admission(key_required=False, max_body_bytes=UNKNOWN_BODY_BYTES)
        if trigger.secret_env:
            self._secret(trigger, request)
        return Admission(key_required=not trigger.secret_env, max_body_bytes=trigger.max_body_bytes)

    def _fail(self, request: Request, name: str, reason: object) -> None:
        """A refused delivery: logged, and counted against its client address."""
        self._failures.check(request.client[0])
        self._refused(name, request, reason)

    async def handle(self, request: Request) -> Response:
        from runtime.errors import TriggerBusy, UnknownTrigger

        trigger: TriggerConfig | None = request.state["trigger"]
        if trigger is None:
            self._fail(request, request.params["name"][:64], "no webhook trigger has this name")
            raise TriggerAuthError(NOT_VALID)
        who = None  # a signed delivery acts for the trigger's own identity; a keyed one for its key
        if trigger.secret_env:
            try:
                self._verify(trigger, request)
            except TriggerAuthError as exc:  # the reason is the log's; the sender hears what a stranger would
                self._fail(request, trigger.name, exc)
                raise TriggerAuthError(NOT_VALID) from None
        else:
            who = request.caller
        self._spend(trigger, request)
        if trigger.secret_env:
            try:
                self._not_replayed(trigger, request)
            except TriggerAuthError as exc:
                self._fail(request, trigger.name, exc)
                raise
        context = {"body": _body(request.body)}
        try:
            run_id = self._triggers().fire(trigger.name, context, source="webhook", who=who)
        except (TriggerBusy, UnknownTrigger, Forbidden) as exc:  # answers with its own status: 409, 503, 404, 403
            self._refused(trigger.name, request, exc)
            raise
        return json_response({"run_id": run_id}, 202)

    def _spend(self, trigger: TriggerConfig, request: Request) -> None:
        """The trigger's own rate limit, spent by authenticated deliveries only (429)."""
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
        verify_hub_signature(secret.encode(), request.body, header, timestamp=timestamp, now=time.time(),
                             window_secs=trigger.replay_window_secs)

    def _not_replayed(self, trigger: TriggerConfig, request: Request) -> None:
        """``Replayed`` (409) for a signature accepted within the window; else it is remembered."""
        window = trigger.replay_window_secs
        kept, cache = self._replays.get(trigger.name, (None, None))
        if cache is None or kept != window:
            cache = ReplayCache(window)
            self._replays[trigger.name] = (window, cache)
        cache.admit(request.header(SIGNATURE_HEADER.lower().encode()) or "", time.time())


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
