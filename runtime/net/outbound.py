"""The one factory for tern's outgoing HTTP clients (MCP, A2A, web_fetch).

Every client it makes connects through ``GuardedBackend``: the host is resolved once by
``resolve_checked``, every address is checked, and the socket is opened to one of those
checked addresses, never to the name. A second lookup, which DNS rebinding would
answer differently, never happens. The same holds for redirects, if a caller turns
them on: each hop is a new connection through the same backend.

Imports httpx and httpcore at the top: import this module only where a client is made,
not from ``runtime/__init__`` or the CLI's top level.
"""

from __future__ import annotations

import math
import ssl
import typing

import httpcore
import httpx
import trio

from runtime.errors import TernTimeout
from runtime.net.guard import AddressPolicy, BlockedAddress, resolve_checked
from runtime.net.peer import mark_outbound
from runtime.net.tls import ssl_context

__all__ = ["GuardedBackend", "make_client", "reason"]

_RESOLVE_TIMEOUT = 10.0


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that connects only to addresses the guard allowed.

    Wraps ``httpcore.TrioBackend``, which is what httpcore's default (the private
    ``AutoBackend``) picks under trio; the guard resolves with trio, so trio it is.

    TLS still checks the URL's host name, not the IP connected to: httpcore's
    ``AsyncHTTPConnection._connect`` (httpcore/_async/connection.py, 1.0.9) calls
    ``stream.start_tls(server_hostname=sni_hostname or self._origin.host)`` on the stream
    this method returns; the origin host is the URL's, whatever ``connect_tcp`` did.

    Errors come out as httpcore's, so httpx maps them: a blocked address is an
    ``httpx.ConnectError`` whose message is the ``BlockedAddress`` message. The
    ``BlockedAddress`` itself is further down the chain: httpx raises ``from`` the
    httpcore error, whose ``__context__`` it is (httpcore's pool re-raises ``from None``).
    """

    def __init__(self, policy: AddressPolicy,
                 inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.policy = policy
        self._inner = inner if inner is not None else httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Resolve and check ``host``, then connect to the first checked address that
        accepts, in resolver order, all within ``timeout``."""
        deadline = trio.current_time() + (math.inf if timeout is None else timeout)
        resolve_timeout = _RESOLVE_TIMEOUT if timeout is None else min(timeout, _RESOLVE_TIMEOUT)
        try:
            addresses = await resolve_checked(host, port, self.policy, resolve_timeout)
        except BlockedAddress as error:
            raise httpcore.ConnectError(str(error)) from error
        except TernTimeout as error:
            raise httpcore.ConnectTimeout(str(error)) from error
        except OSError as error:  # the resolver failed, as httpcore's own backends map it
            raise httpcore.ConnectError(f"cannot resolve {host}: {error}") from error
        last: Exception | None = None
        for address in addresses:
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                break
            try:
                stream = await self._inner.connect_tcp(
                    address, port, timeout=None if math.isinf(remaining) else remaining,
                    local_address=local_address, socket_options=socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last = error
            else:
                mark_outbound(stream.get_extra_info("socket"))  # tern's own server never takes it for the owner
                return stream
        if last is None:
            raise httpcore.ConnectTimeout(f"connecting to {host} took longer than {timeout} s")
        raise last

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: typing.Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Unix sockets name a local file from config, not a network address: no check."""
        return await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def make_client(policy: AddressPolicy, *, timeout: float = 30.0,
                headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` that goes through the SSRF guard and the shared TLS
    context (or ``tls``: a peer's own, with its client certificate), follows no
    redirects and ignores proxy and netrc environment variables."""
    tls = tls or ssl_context()
    transport = httpx.AsyncHTTPTransport(verify=tls, trust_env=False)
    # httpx has no public way to pass an httpcore network backend, so swap the pool
    # it built (unused, holds nothing yet). Fail loudly if a new httpx renames it.
    if not isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
        raise RuntimeError(
            f"httpx {httpx.__version__}: AsyncHTTPTransport has no _pool connection pool; "
            "runtime.net.outbound.make_client must be updated for this httpx version"
        )
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=tls,
        network_backend=GuardedBackend(policy),
        http1=True,
        http2=False,
        max_connections=100,
        max_keepalive_connections=20,  # httpx's default limits, as the replaced pool had
        keepalive_expiry=5.0,
    )
    return httpx.AsyncClient(
        transport=transport,
        headers=headers,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        follow_redirects=False,
        trust_env=False,
    )


def reason(exc: BaseException) -> str:
    """What went wrong with a connection, in words: a TLS refusal is often an empty
    ``httpx`` error whose cause is the ``ssl.SSLError`` (a server that wanted a client
    certificate says so only in its alert)."""
    chain: BaseException | None = exc
    while chain is not None:
        if isinstance(chain, ssl.SSLError):
            return f"TLS: {chain.reason or chain}"
        chain = chain.__cause__ or chain.__context__
    return str(exc) or type(exc).__name__
