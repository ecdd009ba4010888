"""A tiny OTLP/HTTP collector for the tests: a thread serving POST /v1/traces on loopback,
keeping each request body (and its headers), answering as told: 200, another status
(with ``Retry-After``), or never (``hang``: the request is read and left unanswered)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Collector:
    def __init__(self, status: int = 200, *, hang: bool = False, retry_after: str = "0") -> None:
        self.status, self.hang, self.retry_after = status, hang, retry_after
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.requests = 0
        self._release = threading.Event()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                collector.requests += 1
                if collector.hang:
                    collector._release.wait(60)
                    return
                if collector.status == 200 and self.path == "/v1/traces":
                    collector.bodies.append(body)
                    collector.headers.append(dict(self.headers))
                self.send_response(collector.status)
                if collector.status != 200:
                    self.send_header("Retry-After", collector.retry_after)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Collector:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def wait_for(self, predicate, within: float = 30.0) -> None:
        """Polls until ``predicate()`` holds (the exporters post on their own schedule)."""
        deadline = time.monotonic() + within
        while not predicate():
            assert time.monotonic() < deadline, f"the collector did not see it within {within} s"
            time.sleep(0.05)
