"""tern as an MCP server: one dispatcher for both eras (``dispatch``), what is exposed
(``exposure``), and two thin shells: ``stdio`` (``tern mcp``) and ``streamable_http``
(``POST /mcp``). It sees the kernel only through ``runtime.ports``."""
