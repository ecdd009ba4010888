"""The dashboard: ``GET /`` and ``GET /ui/{file}`` answer the files of ``host/dashboard/``.

They are read from the package (``importlib.resources``), so they are served from the
built pyz as from a checkout, once, and kept in memory (a few dozen KB). Only the
names found in that folder are served: a path parameter is looked up, never joined
to a path. No API key is needed (the page must load to show its sign-in form, and it
holds no data), but the Host/Origin checks apply, and every answer carries a strict
Content-Security-Policy (no inline script or style, nothing from elsewhere), refuses
framing and sniffing, and sends no referrer.
"""

from __future__ import annotations

import hashlib

from runtime.httpd.messages import HttpError, Request, Response
from runtime.httpd.router import Router

__all__ = ["CSP", "SECURITY_HEADERS", "add_routes", "load_assets"]

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# the server adds X-Frame-Options: DENY and X-Content-Type-Options: nosniff to every answer
SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"referrer-policy", b"no-referrer"),
                    (b"cache-control", b"no-cache")]
_TYPES = {"html": b"text/html; charset=utf-8", "css": b"text/css; charset=utf-8",
          "js": b"text/javascript; charset=utf-8", "svg": b"image/svg+xml", "png": b"image/png",
          "json": b"application/json", "ico": b"image/x-icon", "woff2": b"font/woff2"}
MAX_ASSET_BYTES = 150 * 1024  # the whole folder's budget (a test holds the files to it)


class _Asset:
    __slots__ = ("body", "content_type", "etag")

    def __init__(self, body: bytes, content_type: bytes) -> None:
        self.body = body
        self.content_type = content_type
        self.etag = b'"' + hashlib.sha256(body).hexdigest()[:20].encode() + b'"'


def load_assets() -> dict[str, _Asset]:
    """Every file of the folder with a known type, by name; subfolders and other files are not served."""
    from importlib.resources import files

    found: dict[str, _Asset] = {}
    folder = files("runtime.host") / "dashboard"
    for entry in folder.iterdir():
        kind = _TYPES.get(entry.name.rpartition(".")[2].lower())
        if kind is not None and entry.is_file() and not entry.name.startswith("."):
            found[entry.name] = _Asset(entry.read_bytes(), kind)
    return found


def add_routes(router: Router) -> None:
    cache: list[dict[str, _Asset]] = []

    def answer(request: Request, name: str) -> Response:
        if not cache:
            cache.append(load_assets())  # once: the folder is part of the installed package
        asset = cache[0].get(name)
        if asset is None:
            raise HttpError(404, "no such dashboard file", SECURITY_HEADERS)
        headers = [*SECURITY_HEADERS, (b"etag", asset.etag)]
        match = request.header(b"if-none-match")
        if match is not None and asset.etag.decode() in (tag.strip() for tag in match.split(",")):
            return Response(304, b"", headers, content_type=asset.content_type)
        return Response(200, asset.body, headers, content_type=asset.content_type)

    async def index(request: Request) -> Response:
        return answer(request, "index.html")

    async def asset(request: Request) -> Response:
        return answer(request, request.params["file"])

    router.add("GET", "/", index, auth=False, summary="the dashboard (needs no key to load: it holds no data)")
    router.add("GET", "/ui/{file}", asset, auth=False, summary="the dashboard's files (script, styles, icons)")
