"""Tell a person who is not watching that a tool call waits for them (``[[governance.notify]]``).

Each channel gets the request (id, tool, agent, caller, the arguments as kept, their
SHA-256, the expiry) and two one-time links (``approval_links``): a ``webhook`` a signed
JSON POST, ``ntfy`` a message with ``http`` actions that POST to the links, ``smtp`` an
email. What is sent is built here without I/O (``notice``, ``webhook_request``,
``ntfy_request``, ``email_message``); sending is a thin shell: HTTP through the SSRF
guard's client (``net.outbound``), mail with the standard library's ``smtplib`` in a
worker thread, connected to the address the guard checked (the name is resolved once)
with TLS checking the configured host name. A channel is bounded by its
``timeout_secs``; a failure is logged and audited (``approval_notified``, outcome
``failed``) and never fails the call, which still waits for any other way to answer.
Secrets come from the variables the config names, are registered for redaction, and are
never logged.

Notifying runs beside the caller's own ``Ask`` while the request waits (``Approvals``
starts it) and is cancelled by the decision, so a channel with ``after_secs`` is not
used at all when someone answers in time.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from runtime.config import Config
from runtime.config.schema import NotifyChannel
from runtime.errors import TernError, TernTimeout
from runtime.kernel.approval_links import ApprovalLinks
from runtime.log import get_logger, register_secret
from runtime.net.guard import AddressPolicy
from runtime.ports import Approval

if TYPE_CHECKING:  # smtplib and email are imported when a mail is sent: not at every kernel's boot
    import smtplib
    import ssl
    from email.message import EmailMessage

__all__ = ["Notifier", "NotifyError", "notice", "webhook_request", "ntfy_request", "email_message", "base_url"]

log = get_logger("notify")

SIGNATURE_HEADER = "X-Tern-Signature-256"
DEFAULT_NTFY = "https://ntfy.sh"
MAX_ATTEMPTS = 3  # per channel and request, within its timeout_secs
MAX_SHOWN_CHARS = 2000  # the arguments as text in a message
MAX_BODY_ARGUMENTS = 16 * 1024  # the JSON body carries them whole up to this; past it, the link's page does


class NotifyError(TernError):
    """A channel could not deliver; the message is one line for the log and the audit.
    ``final``: trying again would fail the same way (a 4xx, an unset secret, a refusal)."""

    def __init__(self, message: str, *, final: bool = False) -> None:
        super().__init__(message)
        self.final = final

    def line(self) -> str:
        return " ".join(str(self).split())[:300]


def base_url(config: Config) -> str:
    """Where the links point: ``[governance] public_url``, else this tern's own listener."""
    if config.governance.public_url:
        return config.governance.public_url.rstrip("/")
    from runtime.config.checks import parse_listen

    host, port = parse_listen(config.server.listen)
    host = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else \
        f"[{host}]" if ":" in host else host
    return f"{'https' if config.server.tls_cert else 'http'}://{host}:{port}"


def _iso(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat(timespec="seconds")


def notice(approval: Approval, links: ApprovalLinks, channel: str, base: str) -> dict[str, Any]:
    """What every channel says about ``approval``, with its two links for ``channel``."""
    from runtime.kernel.approvals import describe

    shown = msgspec.json.encode(approval.arguments, order="sorted").decode() if approval.arguments is not None else "{}"
    return {"type": "approval_requested", "id": approval.id, "tool": approval.tool, "agent": approval.agent,
            "caller": approval.caller, "key": approval.key, "summary": describe(approval, width=300),
            # whole up to the text's bound; past it the page behind the link shows them whole
            "arguments": approval.arguments if len(shown) <= MAX_BODY_ARGUMENTS else None,
            "arguments_text": shown[:MAX_SHOWN_CHARS], "arguments_bytes": approval.arguments_bytes,
            "arguments_sha256": approval.arguments_sha256, "expires": approval.expires,
            "expires_at": _iso(approval.expires), "channel": channel,
            "approve_url": f"{base}/approve/{links.mint(approval, 'approve', channel)}",
            "deny_url": f"{base}/approve/{links.mint(approval, 'deny', channel)}"}


def _secret(channel: NotifyChannel, field: str) -> str:
    """The value of the variable ``channel.<field>`` names ("" when it names none)."""
    name = getattr(channel, field)
    if not name:
        return ""
    value = os.environ.get(name, "")
    if not value:
        raise NotifyError(f"{field} names {name}, which is not set", final=True)
    register_secret(value)
    return value


def webhook_request(channel: NotifyChannel, item: dict[str, Any], secret: str = "") -> tuple[str, bytes,
                                                                                           dict[str, str]]:
    """The POST: the notice as JSON; with a secret, ``X-Tern-Signature-256: sha256=<hex
    HMAC-SHA256 of the body>`` (as GitHub signs its hooks)."""
    body = msgspec.json.encode(item, order="sorted")
    headers = {"content-type": "application/json", "user-agent": "tern-notify", "x-tern-event": "approval_requested"}
    if secret:
        headers[SIGNATURE_HEADER] = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return channel.url, body, headers


def _header(text: str) -> str:
    """A header value that cannot break the head: ASCII, one line."""
    return " ".join(text.encode("ascii", "replace").decode().split())[:250]


def ntfy_request(channel: NotifyChannel, item: dict[str, Any], token: str = "") -> tuple[str, bytes, dict[str, str]]:
    """ntfy's publish (``POST {server}/{topic}``): the message as the body, ``Title``,
    ``Priority``, ``Tags``, ``Click`` (the approve page) and ``Actions``: an ``http``
    POST to each link, so the phone's buttons decide, and ``view`` for the page."""
    who = f"agent {item['agent']}" if item["agent"] else "the operator"
    body = (f"{who} wants to call {item['tool']}\n{item['arguments_text']}\n"
            f"sha256 {item['arguments_sha256']}\nexpires {item['expires_at']} ({item['id']})")
    actions = "; ".join((f"http, Approve, {item['approve_url']}, method=POST, clear=true",
                         f"http, Deny, {item['deny_url']}, method=POST, clear=true",
                         f"view, Open, {item['approve_url']}"))
    headers = {"Title": _header(f"tern: approve {item['tool']}?"), "Priority": "high", "Tags": "lock",
               "Click": item["approve_url"], "Actions": actions, "content-type": "text/plain; charset=utf-8"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return f"{(channel.url or DEFAULT_NTFY).rstrip('/')}/{channel.topic}", body.encode(), headers


def email_message(channel: NotifyChannel, item: dict[str, Any]) -> EmailMessage:
    """A plain-text mail: what waits, its hash and expiry, the two links."""
    from email.message import EmailMessage
    from email.utils import formatdate, make_msgid

    message = EmailMessage()
    message["Subject"] = _header(f"tern: approve {item['tool']} for {item['agent'] or 'the operator'}? "
                                 f"({item['id']})")
    message["From"] = channel.mail_from
    message["To"] = ", ".join(channel.to)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain=channel.mail_from.rpartition("@")[2] or None)
    text = (f"{item['summary']}\n\ncaller: {item['caller'] or '-'}\ntool: {item['tool']}\narguments:\n"
            f"{item['arguments_text']}\narguments sha256: {item['arguments_sha256']}\n"
            f"expires: {item['expires_at']}\n\nOpen to approve (the page shows it again first):\n"
            f"{item['approve_url']}\n\nOpen to deny:\n{item['deny_url']}\n\n"
            "Each link works once, until the request expires.\n")
    # 7bit keeps the links whole on one line each for any reader; other text needs encoding
    message.set_content(text, cte="7bit" if text.isascii() and max(map(len, text.splitlines())) < 990
                        else "quoted-printable")
    return message


def _policy(channel: NotifyChannel, config: Config) -> AddressPolicy:
    """The guard for this channel: private networks and loopback only with
    ``allow_private``, and never when ``[security]`` blocks them."""
    security = config.security
    return AddressPolicy(block_private=security.block_private_networks or not channel.allow_private,
                         block_loopback=security.block_loopback or not channel.allow_private)


async def _post(url: str, body: bytes, headers: dict[str, str], policy: AddressPolicy, timeout: float) -> None:
    import httpx

    from runtime.net.guard import BlockedAddress, check_url
    from runtime.net.outbound import make_client, reason

    check_url(url, policy)
    try:
        async with make_client(policy, timeout=timeout) as client:
            answer = await client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        blocked, chain = False, exc.__cause__ or exc.__context__
        while chain is not None and not blocked:  # the guard refused the address the name resolved to
            blocked, chain = isinstance(chain, BlockedAddress), chain.__cause__ or chain.__context__
        raise NotifyError(reason(exc), final=blocked) from None
    if not 200 <= answer.status_code < 300:
        raise NotifyError(f"answered {answer.status_code}", final=answer.status_code < 500 and
                          answer.status_code not in (408, 429))


def _pinned(address: str, channel: NotifyChannel, timeout: float, context: ssl.SSLContext) -> smtplib.SMTP:
    """An smtplib session connected to ``address``, the one the guard checked (smtplib
    would resolve the name again), TLS still checking the configured host name."""
    import smtplib
    import socket

    host = channel.host

    class Plain(smtplib.SMTP):
        def _get_socket(self, _host: str, port: int, timeout: float) -> socket.socket:
            return socket.create_connection((address, port), timeout)

    class Implicit(smtplib.SMTP_SSL):
        def _get_socket(self, _host: str, port: int, timeout: float) -> socket.socket:
            return context.wrap_socket(socket.create_connection((address, port), timeout), server_hostname=host)

    if channel.tls == "implicit":
        return Implicit(host, channel.port, timeout=timeout, context=context)
    return Plain(host, channel.port, timeout=timeout)


def _send_mail(channel: NotifyChannel, message: EmailMessage, address: str, password: str, timeout: float) -> None:
    """In a worker thread: one SMTP session, every step bounded by ``timeout``."""
    from runtime.net.tls import ssl_context

    context = ssl_context()
    with _pinned(address, channel, timeout, context) as smtp:
        smtp.ehlo()
        if channel.tls == "starttls":
            if not smtp.has_extn("starttls"):
                raise NotifyError(f"{channel.host} offers no STARTTLS; nothing was sent in the clear", final=True)
            smtp.starttls(context=context)
            smtp.ehlo()
        if channel.username:
            smtp.login(channel.username, password)
        smtp.send_message(message, from_addr=channel.mail_from, to_addrs=list(channel.to))


async def _mail(channel: NotifyChannel, message: EmailMessage, policy: AddressPolicy, timeout: float) -> None:
    import smtplib
    import ssl

    from runtime.net.guard import BlockedAddress, resolve_checked

    password = _secret(channel, "password_env")
    try:
        addresses = await resolve_checked(channel.host, channel.port, policy, timeout)
    except BlockedAddress as exc:
        raise NotifyError(str(exc), final=True) from None
    try:
        await trio.to_thread.run_sync(_send_mail, channel, message, addresses[0], password, timeout,
                                      abandon_on_cancel=True)
    except smtplib.SMTPException as exc:  # a refused login or address will be refused again; a 4xx reply may pass
        permanent = isinstance(exc, (smtplib.SMTPAuthenticationError, smtplib.SMTPNotSupportedError)) or \
            getattr(exc, "smtp_code", 0) >= 500
        raise NotifyError(f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}", final=permanent) from None
    except ssl.SSLError as exc:
        raise NotifyError(f"TLS: {exc.reason or exc}", final=True) from None


class Notifier:
    """The ``notify`` of ``Approvals``: every configured channel, at once, for one request."""

    def __init__(self, config: Callable[[], Config], links: ApprovalLinks, audit: Any = None) -> None:
        """``config``: the kernel's current config (read at each request: a reload applies)."""
        self.config = config
        self.links = links
        self.audit = audit

    async def __call__(self, approval: Approval) -> None:
        config = self.config()
        if not config.governance.notify or approval.form is not None or not approval.id:
            return  # a question takes an answer a link cannot carry
        async with trio.open_nursery() as nursery:
            for channel in config.governance.notify:
                nursery.start_soon(self.send, channel, approval, config)

    async def send(self, channel: NotifyChannel, approval: Approval, config: Config) -> bool:
        """Tell ``channel`` about ``approval``; whether it took it. A failure that may pass
        (a connection, a 5xx, a timeout of the mail server) is tried again after 1 s, then
        2 s, while ``timeout_secs`` lasts; a refusal (a 4xx, a blocked address, an unset
        secret) is not. The outcome is logged when it failed and always audited."""
        if channel.after_secs:
            await trio.sleep(channel.after_secs)
        outcome, why, attempts = "failed", "", 0
        with trio.move_on_after(channel.timeout_secs) as scope:
            while True:
                attempts += 1
                try:
                    await self._deliver(channel, approval, config)
                    outcome, why = "ok", ""
                    break
                except NotifyError as exc:
                    why = exc.line()
                    if exc.final:
                        break
                except (TernError, OSError) as exc:
                    why = " ".join(str(exc).split())[:300] or type(exc).__name__
                    if isinstance(exc, TernError) and not isinstance(exc, TernTimeout):
                        break  # a blocked address, a key refused: the same next time
                if attempts >= MAX_ATTEMPTS:
                    break
                await trio.sleep(float(attempts))
        if scope.cancelled_caught:
            why = f"took longer than {channel.timeout_secs:g} s" + (f" (last: {why})" if why else "")
        if outcome != "ok":
            log.warning("approval %s: the %s channel %s failed after %d attempts: %s", approval.id, channel.kind,
                        channel.name, attempts, why)
        if self.audit is not None:
            self.audit.record("approval_notified", id=approval.id, channel=f"notify:{channel.name}",
                              notify=channel.kind, outcome=outcome, attempts=attempts,
                              **({"reason": why} if why else {}))
        return outcome == "ok"

    async def _deliver(self, channel: NotifyChannel, approval: Approval, config: Config) -> None:
        item = notice(approval, self.links, channel.name, base_url(config))
        policy = _policy(channel, config)
        if channel.kind == "webhook":
            await _post(*webhook_request(channel, item, _secret(channel, "secret_env")), policy, channel.timeout_secs)
        elif channel.kind == "ntfy":
            await _post(*ntfy_request(channel, item, _secret(channel, "token_env")), policy, channel.timeout_secs)
        else:
            await _mail(channel, email_message(channel, item), policy, channel.timeout_secs)
