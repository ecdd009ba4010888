"""Trio I/O: the HTTP server on h11, the SSRF guard, the TLS context, websockets.

Modules here move bytes and own time; protocol logic lives in ``runtime.wire``.
"""
