"""tern's HTTP server: h11 on trio, routing, access (keys, loopback, Host/Origin),
rate limits, metrics and WebSockets. It knows nothing of the kernel: the routes are
declared by the composition root (``runtime.host.api``) and the protocol servers."""
