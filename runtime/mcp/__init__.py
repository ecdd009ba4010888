"""MCP, both directions.

- ``protocol``, ``names``: sans-IO facts both sides share (both eras' messages and
  results, ``mcp_{server}_{tool}`` and ``tern_agent_{name}`` names).
- ``client/``: tern as an MCP client: external servers' tools for tern's agents
  (stdio, Streamable HTTP and legacy SSE transports, the supervisor). Below the kernel.
- ``server/``: tern as an MCP server: tern's agents and chosen tools for desktop
  assistants and IDEs (``tern mcp``, ``POST /mcp``). Above the kernel, which it sees
  only through ``runtime.ports``.
"""
