"""OAuth 2.1 for HTTP MCP servers: a sans-IO core (``challenge``, ``discovery``,
``grant``, ``model``) under one trio shell (``shell``) and a private token store
(``store``). See docs/architecture.md, "MCP authorization"."""
