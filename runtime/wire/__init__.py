"""Sans-IO wire formats: JSON-RPC 2.0, stream framing (NDJSON, Content-Length), SSE.

Everything here takes bytes or objects and returns bytes, objects or events; nothing
does I/O or imports trio, so it is all tested without sockets (the h11 model). The
trio shells in ``runtime.net`` and the protocol clients and servers move the bytes.
"""

# httpx's pattern: each module declares its public names once, in its ``__all__``.
from runtime.wire import framing as _framing, jsonrpc as _jsonrpc, sse as _sse
from runtime.wire.framing import *  # noqa: F401,F403
from runtime.wire.jsonrpc import *  # noqa: F401,F403
from runtime.wire.sse import *  # noqa: F401,F403

__all__ = [*_jsonrpc.__all__, *_framing.__all__, *_sse.__all__]
