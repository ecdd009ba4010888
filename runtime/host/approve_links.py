"""``/approve/{token}``: the one-time links ``[[governance.notify]]`` sends (docs/approvals-notify.md).

No key: the token is the credential (``kernel.approval_links``: an HMAC bound to the
request, the decision, the arguments' hash and the expiry; single use). ``GET`` shows a
phone-sized page, what would be approved (tool, agent, caller, the arguments and their
SHA-256, the expiry) and a form; only its ``POST`` decides, so a link-preview bot or a
mail scanner that fetches the link decides nothing. A ``POST`` with no body makes the
token's own decision (ntfy's ``http`` action buttons); the form sends ``decision``. A
client whose links keep failing is answered 429 for a while (``FAILURES_PER_MIN`` per
address) before any look-up. The page has no script, may not be framed, sends its
address (the token is in it) to no other site, and is never cached. Not ``no-referrer``:
under it a browser sends ``Origin: null`` with the form's own POST, which the server's
origin check refuses (a phone's Approve did nothing; the first-hour test caught it).
"""

from __future__ import annotations

import html
import time
from urllib.parse import parse_qs

from runtime.host.node import Node
from runtime.httpd.messages import HttpError, Request, Response, retry_after
from runtime.wire.ratelimit import RateLimiter
from runtime.httpd.router import Router
from runtime.log import LogBudget, get_logger

__all__ = ["add_routes", "WAY"]

log = get_logger("approve_links")

WAY = "link"  # the way in: a notify link, authenticated by its token, never by a key
FAILURES_PER_MIN = 10  # refused links one client address may cause a minute (a burst of as many)
HTML = b"text/html; charset=utf-8"
HEADERS = [(b"cache-control", b"no-store"), (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY"),
           (b"x-content-type-options", b"nosniff"), (b"x-robots-tag", b"noindex"),
           (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                                        b"frame-ancestors 'none'; base-uri 'none'")]
_STYLE = ("body{font:16px/1.4 system-ui,sans-serif;margin:0 auto;max-width:32rem;padding:1rem;color:#111}"
          "pre{white-space:pre-wrap;word-break:break-all;background:#f3f3f3;padding:.5rem;border-radius:4px}"
          "code{word-break:break-all}dt{font-weight:600;margin-top:.5rem}dd{margin:0}"
          ".b{display:flex;gap:1rem;margin-top:1.5rem}button{flex:1;font-size:1.2rem;padding:1rem;border:0;"
          "border-radius:8px;color:#fff}.ok{background:#1a7f37}.no{background:#b42318}")


def _page(title: str, body: str, status: int = 200) -> Response:
    text = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width,initial-scale=1"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>{body}</body></html>")
    return Response(status, text.encode(), HEADERS, content_type=HTML)


def add_routes(router: Router, node: Node) -> None:
    from runtime.kernel.approval_links import LinkRefused

    failures = RateLimiter(FAILURES_PER_MIN / 60, FAILURES_PER_MIN)
    budget = LogBudget()

    def admitted(request: Request) -> None:
        wait = failures.peek(request.client[0])
        if wait:
            raise HttpError(429, "too many refused approval links from this address", retry_after(wait))

    def refused(request: Request, exc: LinkRefused) -> Response:
        failures.check(request.client[0])
        now = time.monotonic()
        if budget.admit(now):
            log.warning("approval link refused from %s: %s", request.client[0], exc)
        return _page("Link refused", f"<p>{html.escape(str(exc))}</p>", exc.http_status)

    async def show(request: Request) -> Response:
        admitted(request)
        try:
            approval, decision, channel = await node.kernel.approval_links.open(request.params["token"])
        except LinkRefused as exc:
            return refused(request, exc)
        from runtime.kernel.notify import _iso

        shown = html.escape(_pretty(approval.arguments))
        who = f"agent <b>{html.escape(approval.agent)}</b>" if approval.agent else "the operator"
        buttons = ('<button class="ok" name="decision" value="approve">Approve</button>' if decision == "approve"
                   else "") + '<button class="no" name="decision" value="deny">Deny</button>'
        body = (f"<p>{who} wants to call <b>{html.escape(approval.tool)}</b>.</p><dl>"
                f"<dt>arguments</dt><dd><pre>{shown}</pre></dd>"
                f"<dt>arguments SHA-256</dt><dd><code>{approval.arguments_sha256}</code></dd>"
                f"<dt>caller</dt><dd>{html.escape(approval.caller or '-')} (key {html.escape(approval.key)})</dd>"
                f"<dt>request</dt><dd><code>{html.escape(approval.id)}</code>, by {html.escape(channel)}</dd>"
                f"<dt>expires</dt><dd>{_iso(approval.expires)}</dd></dl>"
                f'<form method="post"><div class="b">{buttons}</div></form>'
                "<p><small>This link works once. Approving lets this one call run.</small></p>")
        return _page(f"Approve {approval.tool}?" if decision == "approve" else f"Deny {approval.tool}?", body)

    async def act(request: Request) -> Response:
        admitted(request)
        fields = parse_qs(request.body.decode("utf-8", "replace"), max_num_fields=4) if request.body else {}
        decision = (fields.get("decision") or [""])[0]
        try:
            approval = await node.kernel.approval_links.use(request.params["token"], decision,
                                                            client=request.client[0])
        except LinkRefused as exc:
            return refused(request, exc)
        done = "Approved" if approval.state == "approved" else "Denied"
        return _page(done, f"<p>{done}: {html.escape(approval.tool)} ({html.escape(approval.id)}). The waiting run "
                           "goes on.</p>")

    router.add("GET", "/approve/{token}", show, auth=False, way=WAY, secret_path=True,
               summary="a notify link's page: what would be approved, and the buttons (no key: the token)")
    router.add("POST", "/approve/{token}", act, auth=False, way=WAY, cost=5.0, secret_path=True,
               summary="decide through a one-time notify link (no key: the token; body decision=approve|deny)")


def _pretty(arguments: object) -> str:
    import json

    try:
        return json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(arguments)
