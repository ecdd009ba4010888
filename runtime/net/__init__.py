"""Trio I/O below the protocols: the SSRF guard and the one outgoing HTTP client
factory (``guard``, ``outbound``), configured headers (``headers``), the TLS context,
and direct pipe reading and writing (``pipes``).

Modules here move bytes and own time; protocol logic lives in ``runtime.wire`` and the
sans-IO modules of ``runtime.mcp`` and ``runtime.a2a``. The HTTP *server* is
``runtime.httpd``.
"""
