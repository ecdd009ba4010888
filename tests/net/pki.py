"""Certificates for client-certificate tests, made with the ``openssl`` command (CI
installs it): a CA, a server certificate for 127.0.0.1, a client certificate the CA
signed, one from another CA (untrusted), the client key encrypted, and a key that
belongs to no certificate here."""

from __future__ import annotations

import subprocess
from pathlib import Path

EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def ca(name: str, cwd: Path) -> None:
    """``name``.pem and .key: a CA certificate for two days."""
    openssl("req", "-x509", *EC, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2",
            "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def leaf(name: str, issuer: str, ext: str, cwd: Path, subject: str = "") -> None:
    """``name``.pem and .key, signed by the CA ``issuer`` (in ``cwd``), with the extensions
    ``ext`` (lines); the subject ``/CN=name`` unless given."""
    openssl("req", *EC, "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject or f"/CN={name}",
            cwd=cwd)
    (cwd / f"{name}.ext").write_text(ext + "basicConstraints=critical,CA:FALSE\n"
                                     "keyUsage=critical,digitalSignature\nsubjectKeyIdentifier=hash\n"
                                     "authorityKeyIdentifier=keyid\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.pem", "-CAkey", f"{issuer}.key", "-set_serial", "7",
            "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext", cwd=cwd)


def make_pki(here: Path) -> Path:
    """Into ``here``: ca.pem, server.pem/.key, client.pem/.key, stranger.pem/.key (signed by
    another CA), client-encrypted.key (password "pw"), other.key."""
    ca("ca", here)
    ca("rogue-ca", here)
    leaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n", here)
    leaf("client", "ca", "extendedKeyUsage=clientAuth\n", here)
    leaf("stranger", "rogue-ca", "extendedKeyUsage=clientAuth\n", here)
    openssl("pkey", "-in", "client.key", "-out", "client-encrypted.key", "-aes256", "-passout", "pass:pw", cwd=here)
    openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", "other.key",
            cwd=here)
    return here
