"""tern as an A2A client: ``client`` (discover, send, get, cancel, stream, in any
dialect) and ``external`` (configured external agents as ``a2a_*`` tools and the peers
of ``remote`` agents)."""
