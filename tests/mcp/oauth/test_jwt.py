"""ES256 for private_key_jwt, with no crypto library: RFC 6979's test vector, keys
made by OpenSSL in both PEM forms, and refusals of keys tern cannot use. (The
conformance suite's client-credentials-jwt scenario checks a real verifier accepts it.)"""

from __future__ import annotations

import base64

import msgspec
import pytest

from runtime.crypto import p256
from runtime.mcp.client.oauth import jwt
from runtime.mcp.client.oauth.model import AuthError

# A throwaway key made for this test: `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`
PKCS8 = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgX3OVt0gWeEGSLpoS
aX6Ipq3H7yMIymqZ37fkrEoFgNuhRANCAARkYuVQ8fYOWv/bbPZMG6oqD8Rf5GOj
IMAGIR9m9v5PrrEmG2dabgapLPyTf8t4FN8vWf2qpe3LFJwDhFd3USB6
-----END PRIVATE KEY-----"""
SEC1 = """-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIF9zlbdIFnhBki6aEml+iKatx+8jCMpqmd+35KxKBYDboAoGCCqGSM49
AwEHoUQDQgAEZGLlUPH2Dlr/22z2TBuqKg/EX+RjoyDABiEfZvb+T66xJhtnWm4G
qSz8k3/LeBTfL1n9qqXtyxScA4RXd1Egeg==
-----END EC PRIVATE KEY-----"""
PUBLIC = ("6462e550f1f60e5affdb6cf64c1baa2a0fc45fe463a320c006211f66f6fe4fae"
          "b1261b675a6e06a92cfc937fcb7814df2f59fdaaa5edcb149c0384577751207a")


def test_rfc6979_p256_sha256_vector():
    key = jwt.EcKey(0xC9AFA9D845BA75166B5C215767B1D6934E50C3DB36E89B127B8A622B120F6721)
    assert jwt.public_point(key)[0] == 0x60FED4BA255A9D31C961EB74C6356D68C049B8923B61FA6CE669622E60F29FB6
    assert jwt.sign_es256(key, b"sample").hex() == (
        "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716"
        "f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8")


@pytest.mark.parametrize("pem", [PKCS8, SEC1])
def test_openssl_keys_load_and_sign(pem):
    key = jwt.load_private_key(pem)
    x, y = jwt.public_point(key)
    assert (x.to_bytes(32, "big") + y.to_bytes(32, "big")).hex() == PUBLIC
    token = jwt.client_assertion(key, "client-1", "https://as.example", 1000.0)
    header, claims, signature = token.split(".")
    body = msgspec.json.decode(base64.urlsafe_b64decode(claims + "=="))
    assert (body["iss"], body["sub"], body["aud"], body["exp"] - body["iat"]) == (
        "client-1", "client-1", "https://as.example", 300)
    assert p256.verify_es256((x, y), f"{header}.{claims}".encode(), base64.urlsafe_b64decode(signature + "=="))
    assert "d=" not in repr(key) and str(key.d) not in repr(key)


@pytest.mark.parametrize("pem", ["", "not pem", "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----",
                                 "-----BEGIN RSA PRIVATE KEY-----\nMAA=\n-----END RSA PRIVATE KEY-----",
                                 "-----BEGIN PRIVATE KEY-----\nMIIBAAA=\n-----END PRIVATE KEY-----",
                                 PKCS8.replace("AwEH", "AwEI")])
def test_unusable_keys_are_clear_errors(pem):
    with pytest.raises(AuthError, match="private key"):
        jwt.load_private_key(pem)
