"""The composition root: where the kernel is built and handed, as ports, to the
protocol servers. ``daemon`` (``tern serve``), ``node`` (a kernel plus the A2A
service), ``api`` (the HTTP routes), ``openapi``, and ``mcp_stdio`` (``tern mcp``:
a relay to the daemon or an in-process kernel). Nothing below imports this."""
