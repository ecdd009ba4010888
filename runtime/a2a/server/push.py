"""A2A push notifications: webhooks a client registers per task, which tern POSTs on each
status and artifact event.

- Each config gets its own bounded queue and one delivery task, so events reach a
  webhook in order and a slow webhook delays nobody else; past the bound the oldest
  waiting event is dropped (and logged).
- A delivery is retried with backoff (``ATTEMPTS``, 0.5 s doubling) on a connection
  error, a timeout or a 5xx/429; a 4xx is final.
- URLs pass the SSRF guard twice: checked when registered (a clear error at once), and
  every connection goes through tern's guarded HTTP client (no DNS-rebinding gap).
- The body follows the spec of the dialect the config was registered in: 1.0, the
  event as a ``StreamResponse``; 0.3, the ``Task`` as it is after the event (0.3 spec
  §9.5, and what a2a-sdk 0.3 posts); 0.1, the event. The token goes in ``X-A2A-Notification-Token``, credentials
  in ``Authorization``, each at most ``MAX_SECRET_CHARS``. They are the caller's
  secrets, which tern only forwards and never puts in a log line, so they are *not*
  registered as log secrets: a registered value masks every log line it appears in,
  and a caller could otherwise blank out any text it likes (``ERROR``, its own address,
  a task id) from tern's logs, and grow that set without end.
- A webhook whose registration carries no credentials of its own, at an origin and path
  under a ``[[a2a.push_webhooks]]`` ``url_prefix``, gets that entry's: a bearer token or
  a client-credentials token (A2A lets the server obtain a token for the schemes the
  client names; these say from where), and its client certificate. A 401 to a token of
  tern's drops it and the event is sent once more with a fresh one.
- With ``shared`` (``[state] store = "postgres"``) the configs are rows every node reads
  and writes (``shared.py``), and only the node running a task's work POSTs its events:
  it loads the task's configs when it takes the task and again when another node
  changes them, so each event goes out once, not once per node.
"""

from __future__ import annotations

import itertools
from typing import Any
from urllib.parse import urlsplit

import msgspec
import trio

from runtime.a2a import dialects, protocol
from runtime.a2a.dialects import Dialect
from runtime.a2a.server.engine import A2aError, InvalidTaskRequest, TaskEngine
from runtime.a2a.model import Event, Task, new_id
from runtime.log import get_logger
from runtime.wire.retry import Backoff
from runtime.wire.limits import check_id

__all__ = ["PushNotifier", "ConfigNotFound"]

log = get_logger("a2a.push")

ATTEMPTS = 4
QUEUE_EVENTS = 64
MAX_CONFIGS_PER_TASK = 10
MAX_SECRET_CHARS = 4096  # a token or credentials: opaque short strings; a JWT fits
TIMEOUT_SECS = 10.0
_encoder = msgspec.json.Encoder()


class ConfigNotFound(A2aError):
    code = protocol.TASK_NOT_FOUND  # the spec has no own code: TaskNotFound's is what the SDKs answer


class _Config:
    def __init__(
        self, config_id: str, task_id: str, url: str, token: str, auth: dict[str, Any], dialect: Dialect
    ) -> None:
        self.id, self.task_id, self.url, self.token, self.auth, self.dialect = (
            config_id,
            task_id,
            url,
            token,
            auth,
            dialect,
        )
        self.send, self.receive = trio.open_memory_channel[Any](QUEUE_EVENTS)

    def stored(self) -> str:
        """The row body in the shared store."""
        return _encoder.encode({"id": self.id, "url": self.url, "token": self.token, "auth": self.auth,
                                "dialect": self.dialect}).decode()

    @classmethod
    def from_stored(cls, task_id: str, body: str) -> _Config:
        raw = msgspec.json.decode(body)
        return cls(raw["id"], task_id, raw["url"], raw["token"], raw["auth"], raw["dialect"])

    def render(self, dialect: Dialect) -> dict[str, Any]:
        if dialect == "1.0":
            out: dict[str, Any] = {"id": self.id, "taskId": self.task_id, "url": self.url}
            if self.token:
                out["token"] = self.token
            if self.auth:
                out["authentication"] = self.auth
            return out
        config: dict[str, Any] = {"id": self.id, "url": self.url}
        if self.token:
            config["token"] = self.token
        if self.auth:
            config["authentication"] = {
                "schemes": [self.auth.get("scheme", "Bearer")],
                **({"credentials": self.auth["credentials"]} if "credentials" in self.auth else {}),
            }
        return {"taskId": self.task_id, "pushNotificationConfig": config}


class _Hook:
    """A ``[[a2a.push_webhooks]]`` entry once running: its HTTP client (its own with a
    client certificate), its credential, or why it has none."""

    def __init__(self, entry: Any) -> None:
        self.entry = entry
        self.client: Any = None
        self.credential: Any = None
        self.error = ""


def _origin_and_path(url: str) -> tuple[tuple[str, str, int | None], str]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(scheme)), parts.path


def matches(prefix: str, url: str) -> bool:
    """Whether ``url`` is under ``prefix``: the same origin (never a longer host name that
    starts alike) and a path at or below the prefix's."""
    try:
        (origin, path), (want, under) = _origin_and_path(url), _origin_and_path(prefix)
    except ValueError:
        return False
    under = under.rstrip("/")
    return origin == want and (not under or path == under or path.startswith(under + "/"))


class PushNotifier:
    def __init__(self, engine: TaskEngine, policy: Any, webhooks: Any = ()) -> None:
        self.engine = engine
        self.policy = policy
        self.hooks = [_Hook(entry) for entry in webhooks]
        self._configs: dict[str, dict[str, _Config]] = {}
        self._ids = itertools.count(1)
        self._nursery: trio.Nursery | None = None
        self._client: Any = None
        self.delivered = 0
        self.failed = 0
        self.shared: Any = None  # the engine's SharedTasks, if any (share)
        engine.listeners.append(self._on_event)

    def share(self, shared: Any) -> None:
        """Keep the configs in the shared store; load a task's when this node takes it."""
        self.shared = shared
        shared.on_hold.append(self._load)
        shared.on_release.append(self._release)

    def _release(self, task_id: str) -> None:
        """This node no longer runs the task: what is queued still goes out, then its workers end."""
        for config in self._configs.pop(task_id, {}).values():
            config.send.close()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        from contextlib import AsyncExitStack

        from runtime.errors import TernError
        from runtime.net.credentials import TokenCache, credential_for
        from runtime.net.outbound import make_client
        from runtime.net.tls import client_context

        async with AsyncExitStack() as stack:
            self._client = await stack.enter_async_context(make_client(self.policy, timeout=TIMEOUT_SECS))
            cache = await stack.enter_async_context(TokenCache(self.policy, timeout_secs=TIMEOUT_SECS))
            for hook in self.hooks:
                owner = f"a2a.push_webhooks '{hook.entry.url_prefix}'"
                try:
                    hook.client = self._client if not hook.entry.tls_client_cert else await stack.enter_async_context(
                        make_client(self.policy, timeout=TIMEOUT_SECS,
                                    tls=client_context(hook.entry.tls_client_cert, hook.entry.tls_client_key)))
                    if hook.entry.auth is not None:
                        hook.credential = credential_for(hook.entry.auth, owner, cache)
                except TernError as exc:  # a variable unset, a certificate gone: its webhooks fail, named
                    hook.error = str(exc)
                    log.error("%s", exc)
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()

    # --- Configs ------------------------------------------------------------------------------

    async def set(self, task_id: str, raw: Any, dialect: Dialect) -> dict[str, Any]:
        """Register a webhook from its wire form (any dialect); returns it rendered."""
        from runtime.net.guard import BlockedAddress, check_url

        task = await self.engine.find(task_id)
        if not isinstance(raw, dict):
            raise InvalidTaskRequest("the push notification config must be an object")
        url = raw.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidTaskRequest("the push notification config needs an http(s) url")
        try:
            check_url(url, self.policy)
        except (BlockedAddress, ValueError) as exc:
            raise InvalidTaskRequest(f"webhook {url} refused: {exc}") from None
        configs = self._configs.get(task.id, {})
        config_id = str(check_id(raw.get("id"), "the push notification config id")
                        or (f"push-{next(self._ids)}" if self.shared is None else f"push-{new_id()[:8]}"))
        if self.shared is None and config_id not in configs and len(configs) >= MAX_CONFIGS_PER_TASK:
            raise InvalidTaskRequest(f"task {task.id} has {MAX_CONFIGS_PER_TASK} webhooks already")
        auth = raw.get("authentication") if isinstance(raw.get("authentication"), dict) else {}
        scheme = auth.get("scheme") or (auth.get("schemes") or [None])[0]
        auth = {k: v for k, v in (("scheme", scheme), ("credentials", auth.get("credentials"))) if isinstance(v, str)}
        token = raw.get("token") if isinstance(raw.get("token"), str) else ""
        for what, secret in (("token", token), ("authentication credentials", auth.get("credentials", ""))):
            if len(secret) > MAX_SECRET_CHARS:
                raise InvalidTaskRequest(f"the push notification {what} is {len(secret)} characters long "
                                         f"(at most {MAX_SECRET_CHARS})")
        config = _Config(config_id, task.id, url, token, auth, dialect)
        if self.shared is not None:
            await self.shared.put_push(task.id, config_id, config.stored(), MAX_CONFIGS_PER_TASK)
            if self.engine.peek(task.id) is None:
                return config.render(dialect)  # the node running the work (or taking it next) loads it
        self._register(config)
        return config.render(dialect)

    def _register(self, config: _Config) -> None:
        configs = self._configs.setdefault(config.task_id, {})
        old = configs.pop(config.id, None)
        if old is not None:
            old.send.close()
        configs[config.id] = config
        assert self._nursery is not None, "PushNotifier.run() first"
        self._nursery.start_soon(self._deliver, config)

    async def _load(self, task_id: str) -> None:
        """This node runs ``task_id``'s work now (or another node changed its configs):
        deliver to the configs the shared store has for it, as they are there."""
        stored = {c.id: c for c in await self._stored(task_id)}
        configs = self._configs.get(task_id, {})
        for config_id in [i for i, c in configs.items() if i not in stored or c.stored() != stored[i].stored()]:
            configs.pop(config_id).send.close()
        for config_id, config in stored.items():
            if config_id not in configs:
                self._register(config)

    async def _stored(self, task_id: str) -> list[_Config]:
        return [_Config.from_stored(task_id, body) for body in await self.shared.push_rows(task_id)]

    async def _configs_of(self, task_id: str) -> dict[str, _Config]:
        if self.shared is not None:
            return {c.id: c for c in await self._stored(task_id)}
        return self._configs.get(task_id, {})

    async def get(self, task_id: str, config_id: str | None, dialect: Dialect) -> dict[str, Any]:
        await self.engine.find(task_id)
        configs = await self._configs_of(task_id)
        config = configs.get(config_id) if config_id else None
        if config is None and (not config_id or config_id == "default"):
            config = next(iter(configs.values()), None)  # 0.3 clients ask for "default": the first one
        if config is None:
            raise ConfigNotFound(f"task {task_id} has no push notification config {config_id or ''}".rstrip())
        return config.render(dialect)

    async def list(self, task_id: str, dialect: Dialect) -> list[dict[str, Any]]:
        await self.engine.find(task_id)
        return [c.render(dialect) for c in (await self._configs_of(task_id)).values()]

    async def delete(self, task_id: str, config_id: str) -> None:
        await self.engine.find(task_id)
        if self.shared is not None:
            await self.shared.delete_push(task_id, config_id)
        config = self._configs.get(task_id, {}).pop(config_id, None)
        if config is not None:  # deleting what is not there succeeds: delete is idempotent
            config.send.close()

    # --- Delivery ------------------------------------------------------------------------------

    def _on_event(self, task: Task, event: Event) -> None:
        snapshot: dict[str, Any] | None = None
        for config in list(self._configs.get(task.id, {}).values()):
            item: Event | dict[str, Any] = event
            if config.dialect == "0.3":  # 0.3 posts the Task as it is now (rendered now: it changes on)
                snapshot = snapshot if snapshot is not None else dialects.render_task(task, "0.3")
                item = snapshot
            try:
                config.send.send_nowait(item)
            except trio.WouldBlock:
                log.warning("webhook %s for task %s is too slow: an event was dropped", config.url, task.id)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                pass
        if task.terminal:  # nothing more will come: let the queues drain and the workers end
            for config in self._configs.pop(task.id, {}).values():
                config.send.close()

    async def _deliver(self, config: _Config) -> None:
        async with config.receive:
            async for item in config.receive:
                body = item if isinstance(item, dict) else dialects.render_event(item, config.dialect)
                await self._post(config, _encoder.encode(body))

    def _hook_for(self, url: str) -> _Hook | None:
        """The ``[[a2a.push_webhooks]]`` entry for ``url``: the longest prefix it is under."""
        found = [hook for hook in self.hooks if matches(hook.entry.url_prefix, url)]
        return max(found, key=lambda hook: len(hook.entry.url_prefix), default=None)

    async def _post(self, config: _Config, body: bytes) -> None:
        import httpx

        from runtime.errors import TernError

        headers = {"Content-Type": "application/json"}
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        hook = self._hook_for(config.url)
        if hook is not None and hook.error:
            self.failed += 1
            log.warning("webhook %s for task %s: not sent: %s", config.url, config.task_id, hook.error)
            return
        client = hook.client if hook is not None and hook.client is not None else self._client
        # The registration's own credentials win; else the entry's, if it has any.
        credential = hook.credential if hook is not None and not config.auth.get("credentials") else None
        if config.auth.get("credentials"):
            headers["Authorization"] = f"{config.auth.get('scheme') or 'Bearer'} {config.auth['credentials']}"
        backoff = Backoff(0.5, 0.5 * 2 ** ATTEMPTS)
        refreshed = False
        attempt = 0
        while attempt < ATTEMPTS:
            attempt += 1
            why = ""
            try:
                sent = await credential.headers() if credential is not None else {}
                with trio.fail_after(TIMEOUT_SECS):
                    response = await client.post(config.url, content=body, headers={**headers, **sent})
                if response.status_code < 300:
                    self.delivered += 1
                    return
                why = f"HTTP {response.status_code}"
                if response.status_code == 401 and credential is not None and not refreshed \
                        and await credential.refused(sent):
                    refreshed, attempt = True, attempt - 1  # once, with a fresh token, at once
                    continue
                if response.status_code < 500 and response.status_code != 429:
                    break  # the webhook refuses it: retrying will not help
            except (httpx.HTTPError, trio.TooSlowError, OSError, TernError) as exc:
                why = str(exc) or type(exc).__name__
            if attempt < ATTEMPTS:
                await trio.sleep(backoff.next())
        self.failed += 1
        log.warning("webhook %s for task %s: delivery failed (%s)", config.url, config.task_id, why)
