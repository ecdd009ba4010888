"""The one TLS client context of the process.

httpx builds a fresh ``SSLContext`` from ``certifi.where()`` for every client unless it
is given one. From inside ``tern.pyz`` that is slow (30-37 ms per client) and
``certifi.where()`` copies ``cacert.pem`` to a new temporary file in every process
(``importlib.resources.as_file``), left behind if the process is killed. So tern builds
one context, once, from the bundled certifi data read in memory, and passes it as
``verify=ssl_context()`` to every ``httpx.AsyncClient`` (and to trio-websocket).

Like httpx, it honours ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` when they are set (both
may be; an empty value counts as unset). The environment is read on the first call
only; ``ssl_context.cache_clear()`` forgets the context (tests).

A peer that wants a client certificate gets its own context (``client_context``): the
same trust, plus that certificate, cached by the files' paths and modification times
(a renewed certificate is loaded on the next connection set-up; the rest share one).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections import OrderedDict

from runtime.errors import ConfigError

__all__ = ["ssl_context", "client_context"]

_CLIENT_CONTEXTS = 32  # distinct certificate files in use at once; an old one is rebuilt if needed


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """The shared client ``SSLContext``: certificate and hostname checks on.

    Raises ``ConfigError`` when ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` names CA
    certificates that cannot be loaded.
    """
    cafile = os.environ.get("SSL_CERT_FILE") or None
    capath = os.environ.get("SSL_CERT_DIR") or None
    if cafile or capath:
        try:
            return ssl.create_default_context(cafile=cafile, capath=capath)
        except (OSError, ssl.SSLError) as error:
            names = " and ".join(
                f"{var}={value!r}"
                for var, value in (("SSL_CERT_FILE", cafile), ("SSL_CERT_DIR", capath))
                if value
            )
            raise ConfigError(
                f"cannot load the CA certificates named by {names}: {error}; "
                "fix or unset the variable"
            ) from None
    # Works from inside the zip: read in memory, never a temporary cacert.pem.
    return ssl.create_default_context(cadata=_bundled_cadata())


_contexts: OrderedDict[tuple[str, str, int, int], ssl.SSLContext] = OrderedDict()


def client_context(cert: str, key: str) -> ssl.SSLContext:
    """The shared trust plus the client certificate ``cert`` with its ``key`` (PEM
    files); the shared context when ``cert`` is empty. ConfigError if they cannot be
    loaded (the config check at load catches that first; a file may change since)."""
    shared = ssl_context()  # also says clearly when SSL_CERT_FILE or SSL_CERT_DIR is broken
    if not cert:
        return shared
    try:
        stamp = (cert, key, os.stat(cert).st_mtime_ns, os.stat(key).st_mtime_ns)
    except OSError as error:
        raise ConfigError(f"cannot read the client certificate {cert} or its key {key}: "
                          f"{error.strerror or error}") from None
    context = _contexts.get(stamp)
    if context is None:
        cafile = os.environ.get("SSL_CERT_FILE") or None
        capath = os.environ.get("SSL_CERT_DIR") or None
        context = ssl.create_default_context(cafile=cafile, capath=capath) if cafile or capath else \
            ssl.create_default_context(cadata=_bundled_cadata())
        try:
            context.load_cert_chain(cert, key, password=_refuse_password)
        except (OSError, ssl.SSLError, ValueError) as error:
            raise ConfigError(f"cannot load the client certificate {cert} with the key {key}: {error}") from None
        _contexts[stamp] = context
        while len(_contexts) > _CLIENT_CONTEXTS:
            _contexts.popitem(last=False)
    _contexts.move_to_end(stamp)
    return context


def _refuse_password() -> bytes:
    raise ValueError("the key is encrypted (tern takes an unencrypted PEM key)")


@functools.cache
def _bundled_cadata() -> str:
    from importlib.resources import files

    return files("certifi").joinpath("cacert.pem").read_text(encoding="ascii")
