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
"""

from __future__ import annotations

import functools
import os
import ssl

from runtime.errors import ConfigError

__all__ = ["ssl_context"]


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
    from importlib.resources import files

    # Works from inside the zip: read in memory, never a temporary cacert.pem.
    cadata = files("certifi").joinpath("cacert.pem").read_text(encoding="ascii")
    return ssl.create_default_context(cadata=cadata)
