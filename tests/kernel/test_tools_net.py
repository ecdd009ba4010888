"""web_fetch against a local HTTP server on 127.0.0.1: the guard (loopback refused by
default, metadata always), manual redirects, HTML to text, charsets, size and time caps,
binary content."""

from __future__ import annotations

import functools

import pytest
import trio

from runtime.config import Config, SecurityConfig, ToolsConfig
from runtime.kernel import tools_net
from runtime.kernel.pipeline import ToolPipeline
from runtime.ports import ToolContext
from runtime.kernel.registry import ToolRegistry
from runtime.kernel.tools_net import html_to_text, make_web_fetch

CTX = ToolContext(agent="a")


def response(status: int, body: bytes = b"", content_type: str = "text/plain; charset=utf-8",
             headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    head = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", "Connection: close"]
    if content_type:
        head.append(f"Content-Type: {content_type}")
    head += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def redirect(location: str, status: int = 302) -> bytes:
    return response(status, b"", headers=(("Location", location),))


class Server:
    """Canned answers by path; a path mapped to None never answers."""

    def __init__(self) -> None:
        self.routes: dict[str, object] = {}
        self.port = 0
        self.requests: list[str] = []

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def handle(self, stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode()
        self.requests.append(path)
        answer = self.routes.get(path, response(404, b"not found"))
        if answer is None:
            await trio.sleep_forever()
        try:
            await stream.send_all(answer)  # type: ignore[arg-type]
            await stream.aclose()
        except trio.BrokenResourceError:
            pass


@pytest.fixture
async def server(nursery):
    srv = Server()
    listeners = await nursery.start(functools.partial(trio.serve_tcp, srv.handle, 0, host="127.0.0.1"))
    srv.port = listeners[0].socket.getsockname()[1]
    return srv


def config(*, allow: bool = True, max_bytes: int = 2 * 1024 * 1024, timeout: float = 10.0) -> Config:
    return Config(tools=ToolsConfig(web_fetch_max_bytes=max_bytes, web_fetch_timeout_secs=timeout),
                  security=SecurityConfig(web_fetch_allow_private=allow))


async def fetch(url: str, cfg: Config = None, **extra):  # type: ignore[assignment]
    return await make_web_fetch(cfg or config())({"url": url, **extra}, CTX)


# --- the guard -------------------------------------------------------------------------------


async def test_loopback_is_refused_by_default(server):
    server.routes["/"] = response(200, b"secret internal page")
    result = await fetch(server.url("/"), config(allow=False))
    assert result.is_error
    assert "blocked" in result.text and "loopback" in result.text
    assert "web_fetch_allow_private = true" in result.text and "block_loopback" not in result.text
    assert "secret internal page" not in result.text and server.requests == []


async def test_localhost_name_is_refused_at_connect(server):
    server.routes["/"] = response(200, b"secret internal page")
    result = await fetch(f"http://localhost:{server.port}/", config(allow=False))
    assert result.is_error and "blocked" in result.text and server.requests == []


async def test_metadata_is_refused_even_with_allow_private():
    for url in ["http://169.254.169.254/latest/meta-data/", "http://metadata.google.internal/"]:
        result = await fetch(url, config(allow=True))
        assert result.is_error and "blocked" in result.text, url


async def test_non_http_schemes_are_refused():
    for url in ["file:///etc/passwd", "ftp://example.com/x", "gopher://127.0.0.1/", "javascript:alert(1)",
                "/relative/path"]:
        result = await fetch(url)
        assert result.is_error and "only http:// and https://" in result.text, url


async def test_schema_is_precise(server):
    registry = ToolRegistry()
    tools_net.register(registry, config())
    pipeline = ToolPipeline(registry, config())
    for bad in [{}, {"url": 5}, {"url": "http://x/", "max_chars": 0}, {"url": "http://x/", "extra": 1},
                {"url": "http://x/", "max_chars": "5"}]:
        result = await pipeline.call("web_fetch", bad)
        assert result.is_error and "invalid arguments" in result.text, bad
    server.routes["/"] = response(200, b"through the pipeline")
    ok = await pipeline.call("web_fetch", {"url": server.url("/")})
    assert not ok.is_error and "through the pipeline" in ok.text


# --- content ---------------------------------------------------------------------------------

PAGE = b"""<!DOCTYPE html><html><head><title>The  Title</title>
<style>body { color: red }</style><script>var secret = "script text";</script></head>
<body><h1>Heading</h1><p>First   paragraph
 spans lines.</p><p>Second<br>line two</p><ul><li>one</li><li>two</li></ul>
<noscript>enable js</noscript><template><p>hidden</p></template><svg><text>drawn</text></svg>
<div>caf&eacute; &amp; more</div></body></html>"""


async def test_html_is_converted_to_text(server):
    server.routes["/page"] = response(200, PAGE, "text/html; charset=utf-8")
    result = await fetch(server.url("/page"))
    assert not result.is_error
    assert result.text == (f"URL: {server.url('/page')}\nStatus: 200\n\n"
                           "The Title\n\nHeading\n\nFirst paragraph spans lines.\n\nSecond\nline two\n\n"
                           "- one\n- two\n\ncafé & more")
    for dropped in ["script text", "color: red", "enable js", "hidden", "drawn"]:
        assert dropped not in result.text


def test_html_to_text_edge_cases():
    assert html_to_text("<p>a</p><p>b</p>") == "a\n\nb"
    assert html_to_text("<svg><title>icon</title></svg><p>x</p>") == "x"  # no page title from an svg
    assert html_to_text("no tags at all") == "no tags at all"
    assert html_to_text("<script>unclosed") == ""


async def test_charset_from_headers_meta_and_fallback(server):
    text = "Grüße, €uro"
    server.routes["/latin1"] = response(200, "Grüße".encode("latin-1"), "text/plain; charset=ISO-8859-1")
    server.routes["/cp1252"] = response(200, text.encode("cp1252"), "text/plain; charset=windows-1252")
    server.routes["/meta"] = response(200, b'<html><head><meta charset="iso-8859-1"></head><body><p>'
                                      + "Grüße".encode("latin-1") + b"</p></body></html>", "text/html")
    server.routes["/none"] = response(200, text.encode("utf-8"), "text/plain")
    server.routes["/bogus"] = response(200, text.encode("utf-8"), "text/plain; charset=no-such-codec")
    server.routes["/bad"] = response(200, b"ok \xff\xfe end", "text/plain; charset=utf-8")
    server.routes["/json"] = response(200, '{"k": "ü"}'.encode(), "application/json")
    assert (await fetch(server.url("/latin1"))).text.endswith("\n\nGrüße")
    assert (await fetch(server.url("/cp1252"))).text.endswith("\n\n" + text)
    assert (await fetch(server.url("/meta"))).text.endswith("\n\nGrüße")
    assert (await fetch(server.url("/none"))).text.endswith("\n\n" + text)
    assert (await fetch(server.url("/bogus"))).text.endswith("\n\n" + text)
    assert (await fetch(server.url("/bad"))).text.endswith("\n\nok \ufffd\ufffd end")
    assert (await fetch(server.url("/json"))).text.endswith('\n\n{"k": "ü"}')


async def test_binary_content_is_described_not_returned(server):
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 48
    server.routes["/img"] = response(200, png, "image/png")
    server.routes["/untyped"] = response(200, b"\x00\x01\x02binary", "")
    result = await fetch(server.url("/img"))
    assert not result.is_error
    assert result.text.endswith(f"\n\n[binary content, image/png, {len(png)} bytes]")
    assert "PNG" not in result.text
    untyped = await fetch(server.url("/untyped"))
    assert "binary content" in untyped.text and "binary\n" not in untyped.text


async def test_size_cap(server):
    server.routes["/big"] = response(200, b"a" * 5000 + b"TAIL", "text/plain")
    result = await fetch(server.url("/big"), config(max_bytes=1000))
    assert not result.is_error
    assert result.text.endswith("\n\n" + "a" * 1000 + "\n[cut at 1000 bytes]")
    assert "TAIL" not in result.text


async def test_max_chars(server):
    server.routes["/"] = response(200, b"0123456789" * 10, "text/plain")
    result = await fetch(server.url("/"), max_chars=15)
    assert result.text.endswith("\n\n012345678901234\n[cut at 15 characters]")


async def test_http_error_status_is_a_tool_error_with_the_page(server):
    result = await fetch(server.url("/missing"))
    assert result.is_error and "Status: 404" in result.text and "not found" in result.text


# --- redirects -------------------------------------------------------------------------------


async def test_redirect_chain_is_followed(server):
    server.routes["/a"] = redirect(server.url("/b"), 301)
    server.routes["/b"] = redirect("/c", 307)  # relative Location
    server.routes["/c"] = redirect("d", 308)
    server.routes["/d"] = response(200, b"arrived")
    result = await fetch(server.url("/a"))
    assert not result.is_error
    assert result.text == f"URL: {server.url('/d')}\nStatus: 200\n\narrived"
    assert server.requests == ["/a", "/b", "/c", "/d"]


async def test_redirect_to_metadata_is_refused_even_with_allow_private(server):
    server.routes["/go"] = redirect("http://169.254.169.254/latest/meta-data/")
    result = await fetch(server.url("/go"), config(allow=True))
    assert result.is_error and "blocked" in result.text and "169.254.169.254" in result.text
    assert "after 1 redirect" in result.text


async def test_redirect_to_another_scheme_is_refused(server):
    server.routes["/go"] = redirect("file:///etc/passwd")
    result = await fetch(server.url("/go"))
    assert result.is_error and "only http:// and https://" in result.text


async def test_too_many_redirects(server):
    for i in range(10):
        server.routes[f"/r{i}"] = redirect(f"/r{i + 1}")
    result = await fetch(server.url("/r0"))
    assert result.is_error and "too many redirects" in result.text
    assert len(server.requests) == tools_net.MAX_REDIRECTS + 1
    server.routes["/r5"] = response(200, b"five hops is fine")
    ok = await fetch(server.url("/r0"))
    assert not ok.is_error and "five hops is fine" in ok.text


# --- time ------------------------------------------------------------------------------------


async def test_timeout_when_the_server_never_answers(server, loopback_clock):
    """On the virtual clock (server and client in this process): given up at 0.5 s exactly."""
    server.routes["/slow"] = None
    started = trio.current_time()
    result = await fetch(server.url("/slow"), config(timeout=0.5))
    assert trio.current_time() - started == pytest.approx(0.5)
    assert result.is_error and "within 0.5 s" in result.text
