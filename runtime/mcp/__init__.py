"""MCP: the client side (external servers' tools for tern's agents) and, later, the
server side (tern's agents for desktop assistants and IDEs).

Pure protocol code lives in ``names`` and ``protocol`` (sans-IO); trio code in the
``client``/``transports`` modules moves bytes and owns time.
"""
