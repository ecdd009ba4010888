"""tern's HTTP server: h11 on trio, routing, auth, limits, the API."""
