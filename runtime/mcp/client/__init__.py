"""tern as an MCP client: transports (``stdio``, ``streamable_http``, ``legacy_sse``),
the session (ids, waiters, era probe), ``client`` (one connection), and the
``supervisor`` that keeps every configured server connected and offers its tools to
the kernel as a ``runtime.ports.ToolSource``."""
