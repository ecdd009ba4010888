"""``web_fetch``: fetch one http(s) URL through the SSRF guard and return its text.

The model picks the URL, so the address policy is strict by default: private networks
AND loopback are refused (whatever ``[security] block_private_networks`` and
``block_loopback`` say) unless ``[security] web_fetch_allow_private = true``; metadata
and link-local addresses are refused always. The guard runs at connect time
(``runtime.net.outbound.make_client``), on the resolved address, for every hop.

- Redirects: the client follows none; this tool follows up to ``MAX_REDIRECTS`` by
  hand, each hop a new request through the same guard, and only to http(s) URLs.
- Limits: the body is read in chunks and reading stops at
  ``[tools] web_fetch_max_bytes`` (the text then ends with ``[cut at N bytes]``); the
  whole fetch, redirects included, must finish within ``web_fetch_timeout_secs``.
- Content: HTML becomes plain text (``HtmlText``: title first, scripts, styles and the
  like dropped, block elements on their own lines, whitespace collapsed); other text
  types (``text/*``, JSON, XML, JavaScript, YAML ...) are decoded (charset from the
  headers, then an HTML ``<meta charset>``, else UTF-8; undecodable bytes replaced);
  anything else is described ("binary content, image/png, 12345 bytes"), never shown.
- A 4xx/5xx answer is returned with its text, as a tool error.

The result reads ``URL: <final url>\\nStatus: <code>\\n\\n<text>``. The pipeline adds the
general timeout, truncation, redaction, and marks the result untrusted (``web_fetch``
is in ``guards.NETWORK_TOOLS``).
"""

from __future__ import annotations

import codecs
import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

import trio

from runtime import __version__
from runtime.config import Config
from runtime.errors import TernError, ToolRefused
from runtime.ports import Tool, ToolContext, ToolResult
from runtime.kernel.registry import ToolRegistry
from runtime.net.guard import AddressPolicy, BlockedAddress, check_url

__all__ = ["WEB_FETCH", "MAX_REDIRECTS", "HtmlText", "html_to_text", "policy_for", "make_web_fetch", "register"]

MAX_REDIRECTS = 5
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_CHARS_LIMIT = 10_000_000

WEB_FETCH = Tool(
    "web_fetch",
    "Fetch an http or https URL and return its content as text (HTML is converted to plain "
    "text; binary content is only described). Follows up to 5 redirects. Private and "
    "internal network addresses are refused unless the operator allows them.",
    {
        "type": "object",
        "properties": {
            "url": {"type": "string", "minLength": 1, "maxLength": 8192,
                    "description": "An absolute http:// or https:// URL."},
            "max_chars": {"type": "integer", "minimum": 1, "maximum": MAX_CHARS_LIMIT,
                          "description": "Return at most this many characters of text."},
        },
        "required": ["url"],
        "additionalProperties": False,
    },
)


def policy_for(config: Config) -> AddressPolicy:
    """web_fetch's address policy: private and loopback blocked unless allowed for it."""
    allow = config.security.web_fetch_allow_private
    return AddressPolicy(block_private=not allow, block_loopback=not allow)


# --- HTML to text --------------------------------------------------------------------------

_SKIP = frozenset({"script", "style", "noscript", "template", "svg", "iframe"})
_PARAGRAPH = frozenset({
    "p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "table", "ul", "ol", "dl",
    "section", "article", "header", "footer", "nav", "aside", "main", "figure", "form",
    "fieldset", "details", "address", "hr",
})
_LINE = frozenset({
    "br", "div", "li", "tr", "dt", "dd", "figcaption", "summary", "caption", "option", "legend",
    "label", "td", "th", "body", "html",
})
_SPACES = re.compile(r"\s+")


class HtmlText(HTMLParser):
    """Collects the readable text of an HTML document. ``text()`` after ``close()``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self._parts: list[str | int] = []  # text, or a break: 1 newline or 2
        self._title: list[str] = []
        self._skip = 0  # depth inside dropped elements
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif self._skip:
            pass  # an <svg>'s <title> is no page title
        elif tag == "title":
            self._in_title = True
        else:
            self._block(tag)
            if tag == "li":
                self._parts.append("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif self._skip:
            pass
        elif tag == "title":
            self._in_title = False
        else:
            self._block(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIP and tag != "title" and not self._skip:
            self._block(tag)  # <br/>, <hr/>; a self-closed <svg/> or <script/> holds nothing

    def _block(self, tag: str) -> None:
        size = 2 if tag in _PARAGRAPH else 1 if tag in _LINE else 0
        if not size:
            return
        if self._parts and isinstance(self._parts[-1], int):  # adjacent breaks merge
            self._parts[-1] = max(self._parts[-1], size)
        else:
            self._parts.append(size)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self._title.append(data)
        else:
            text = _SPACES.sub(" ", data)
            if text != " " or (self._parts and isinstance(self._parts[-1], str)):
                self._parts.append(text)

    def title(self) -> str:
        return _SPACES.sub(" ", "".join(self._title)).strip()

    def text(self) -> str:
        joined = "".join("\n" * part if isinstance(part, int) else part for part in self._parts)
        lines = (line.strip() for line in joined.split("\n"))
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        title = self.title()
        return f"{title}\n\n{body}".strip() if title else body


def html_to_text(html: str) -> str:
    parser = HtmlText()
    try:
        parser.feed(html)
        parser.close()
    except Exception:  # pragma: no cover - html.parser is lenient; keep what it got
        pass
    return parser.text()


# --- content types and charsets --------------------------------------------------------------

_TEXT_APPLICATION = frozenset({
    "application/json", "application/xml", "application/javascript", "application/ecmascript",
    "application/x-javascript", "application/x-yaml", "application/yaml", "application/toml",
    "application/x-ndjson", "application/csv", "application/sql", "application/graphql",
    "application/x-sh", "application/x-www-form-urlencoded",
})
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


def _kind(mime: str, body: bytes) -> str:
    """"html", "text" or "binary"."""
    if mime in ("text/html", "application/xhtml+xml"):
        return "html"
    if mime.startswith("text/") or mime in _TEXT_APPLICATION or mime.endswith(("+json", "+xml")):
        return "text"
    if mime:
        return "binary"
    head = body[:1024]  # no Content-Type: sniff
    if b"\x00" in head:
        return "binary"
    if re.match(rb"\s*(<!doctype html|<html)", head, re.IGNORECASE):
        return "html"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        if error.start < len(head) - 4:  # not just a character cut at the window's end
            return "binary"
    return "text"


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except (LookupError, ValueError):
        return None


def _decode(body: bytes, header_charset: str | None, html: bool) -> str:
    if body.startswith(codecs.BOM_UTF8):
        return body[3:].decode("utf-8", errors="replace")
    encoding = _codec(header_charset)
    if encoding is None and html:
        found = _META_CHARSET.search(body[:4096])
        encoding = _codec(found.group(1).decode("ascii")) if found else None
    return body.decode(encoding or "utf-8", errors="replace")


def _blocked_message(error: BaseException) -> str | None:
    """The guard's message if ``error`` is (or was caused by) a blocked address, with
    the hint naming web_fetch's own setting rather than the general ones."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, BlockedAddress):
            return re.sub(r"allowed when \[security\] block_(?:loopback|private_networks) = false",
                          "web_fetch reaches it only when [security] web_fetch_allow_private = true",
                          str(current))
        current = current.__cause__ or current.__context__
    return None


# --- the tool --------------------------------------------------------------------------------


def _check_scheme(url: str) -> None:
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as error:
        raise ToolRefused(f"invalid URL {url!r}: {error}") from None
    if scheme not in ("http", "https"):
        raise ToolRefused(f"refused: {url!r}: web_fetch takes only http:// and https:// URLs")


async def _fetch(client: Any, url: str, policy: AddressPolicy, max_bytes: int) -> tuple[str, int, str, bool]:
    """(final url, status, text, http error?), following redirects by hand."""
    import httpx

    for hop in range(MAX_REDIRECTS + 1):
        _check_scheme(url)
        try:
            check_url(url, policy)  # a clear, early refusal; the connect-time check is the real one
        except TernError as error:
            raise ToolRefused((_blocked_message(error) or str(error)) + _after(hop)) from None
        try:
            async with client.stream("GET", url) as response:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_STATUSES and location:
                    try:
                        url = str(response.url.join(location))
                    except Exception as error:
                        raise ToolRefused(f"{url} redirects to an invalid URL {location!r}: {error}") from None
                    continue
                body, total, cut = await _read(response, max_bytes)
                return str(response.url), response.status_code, _render(response, body, total, cut, max_bytes), \
                    response.status_code >= 400
        except httpx.InvalidURL as error:  # what the guard let through but httpx cannot use
            raise ToolRefused(f"invalid URL {url!r}: {error}") from None
        except httpx.HTTPError as error:
            blocked = _blocked_message(error)
            if blocked:
                raise ToolRefused(blocked + _after(hop)) from None
            raise ToolRefused(f"fetching {url} failed: {type(error).__name__}: {error or 'no details'}") from None
    raise ToolRefused(f"too many redirects: more than {MAX_REDIRECTS}, last to {url}")


def _after(hop: int) -> str:
    return f" (after {hop} redirect{'s' * (hop != 1)})" if hop else ""


async def _read(response: Any, max_bytes: int) -> tuple[bytes, int, bool]:
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        if total + len(chunk) > max_bytes:
            chunks.append(chunk[:max_bytes - total])
            return b"".join(chunks), max_bytes, True
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks), total, False


def _render(response: Any, body: bytes, total: int, cut: bool, max_bytes: int) -> str:
    content_type = response.headers.get("content-type", "")
    mime = content_type.split(";", 1)[0].strip().lower()
    kind = _kind(mime, body)
    if kind == "binary":
        size = f"more than {max_bytes} bytes" if cut else f"{total} bytes"
        return f"[binary content, {mime}, {size}]"
    text = _decode(body, response.charset_encoding, kind == "html")
    if kind == "html":
        text = html_to_text(text)
    if cut:
        text += f"\n[cut at {max_bytes} bytes]"
    return text


def make_web_fetch(config: Config, *, client_factory: Any = None) -> Any:
    """The web_fetch handler for ``config``. ``client_factory(policy, timeout)`` makes the
    HTTP client (default: ``runtime.net.outbound.make_client``, the guarded one)."""
    policy = policy_for(config)
    timeout = config.tools.web_fetch_timeout_secs
    max_bytes = config.tools.web_fetch_max_bytes

    async def web_fetch(arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        url = arguments["url"].strip()
        max_chars = arguments.get("max_chars")
        if client_factory is None:
            from runtime.net.outbound import make_client

            client = make_client(policy, timeout=timeout, headers={"User-Agent": f"tern/{__version__} (web_fetch)"})
        else:
            client = client_factory(policy, timeout)
        try:
            with trio.move_on_after(timeout) as scope:
                async with client:
                    final, status, text, http_error = await _fetch(client, url, policy, max_bytes)
        except ToolRefused as error:
            return ToolResult(f"web_fetch: {error}", is_error=True)
        if scope.cancelled_caught:
            return ToolResult(f"web_fetch: no complete answer from {url} within {timeout:g} s", is_error=True)
        if max_chars is not None and len(text) > max_chars:
            text = text[:max_chars] + f"\n[cut at {max_chars} characters]"
        return ToolResult(f"URL: {final}\nStatus: {status}\n\n{text}", is_error=http_error)

    return web_fetch


def register(registry: ToolRegistry, config: Config, **deps: Any) -> None:
    """Register ``web_fetch``. ``deps``: ``client_factory`` (tests)."""
    registry.register(WEB_FETCH, make_web_fetch(config, client_factory=deps.get("client_factory")))
