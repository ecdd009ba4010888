"""The crypto under signed agent cards: Ed25519 on RFC 8032's vectors, RFC 8785 on its
examples, and both (with ES256 and RS256 verification) against the ``cryptography``
package and the a2a-sdk's own JCS, run in the a2a-sdk's venv. Bad keys and headers
are refused with a reason."""

from __future__ import annotations

import json
import struct
import subprocess

import pytest

from runtime.crypto import ed25519, jwk, jws
from runtime.crypto.jwk import BadKey, b64url
from runtime.wire.jcs import CanonicalError, canonicalize, number
from tests import peers

RFC8032 = [  # (secret key, public key, message, signature): RFC 8032 §7.1 TEST 1, 2, 3
    ("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
     "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
     "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46b"
     "d25bf5f0595bbe24655141438e7a100b"),
    ("4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
     "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
     "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c"
     "387b2eaeb4302aeeb00d291612bb0c00"),
    ("c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
     "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
     "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc659"
     "4a7c15e9716ed28dc027beceea1ec40a"),
]


@pytest.mark.parametrize("secret,public,message,signature", RFC8032)
def test_ed25519_rfc8032_vectors(secret: str, public: str, message: str, signature: str) -> None:
    seed, msg = bytes.fromhex(secret), bytes.fromhex(message)
    assert ed25519.public_key(seed).hex() == public
    assert ed25519.sign(seed, msg).hex() == signature
    assert ed25519.verify(bytes.fromhex(public), msg, bytes.fromhex(signature))
    bad = bytearray.fromhex(signature)
    bad[5] ^= 1
    assert not ed25519.verify(bytes.fromhex(public), msg, bytes(bad))
    assert not ed25519.verify(bytes.fromhex(public), msg + b"x", bytes.fromhex(signature))


def test_ed25519_refuses_malformed_input() -> None:
    public = bytes.fromhex(RFC8032[0][1])
    signature = bytes.fromhex(RFC8032[0][3])
    assert not ed25519.verify(public[:31], b"", signature)
    assert not ed25519.verify(public, b"", signature[:63])
    s_too_big = signature[:32] + (int.from_bytes(signature[32:], "little") + ed25519.L).to_bytes(32, "little")
    assert not ed25519.verify(public, b"", s_too_big)  # malleability: S >= L refused
    assert not ed25519.verify(b"\xff" * 32, b"", signature)  # not a point


def test_jcs_rfc8785_examples() -> None:
    # RFC 8785 §3.2.2 (the sample input) and §3.2.3 (sorting by UTF-16 code units)
    sample = {"numbers": [333333333.33333329, 1e30, 4.50, 2e-3, 0.000000000000000000000000001],
              "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"/", "literals": [None, True, False]}
    assert canonicalize(sample) == ('{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,'
                                    '1e-27],"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}').encode()
    keys = json.loads(r'{"\u20ac": 1, "\r": 2, "\ufb33": 3, "1": 4, "\ud83d\ude00": 5, "\u0080": 6, "\u00f6": 7}')
    assert list(json.loads(canonicalize(keys))) == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    # Appendix B: IEEE 754 doubles and their ECMAScript forms
    for bits, text in [("0000000000000000", "0"), ("8000000000000000", "0"), ("0000000000000001", "5e-324"),
                       ("8000000000000001", "-5e-324"), ("7fefffffffffffff", "1.7976931348623157e+308"),
                       ("4340000000000000", "9007199254740992"), ("4430000000000000", "295147905179352830000"),
                       ("44b52d02c7e14af5", "9.999999999999997e+22"), ("44b52d02c7e14af6", "1e+23"),
                       ("3eb0c6f7a0b5ed8d", "0.000001"), ("3eb0c6f7a0b5ed8c", "9.999999999999997e-7"),
                       ("41b3de4355555553", "333333333.3333332"), ("4415af1d78b58c40", "100000000000000000000")]:
        assert number(struct.unpack(">d", bytes.fromhex(bits))[0]) == text, bits


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 2**53, {1: "x"}, {"a": "\ud800"}, b"bytes",
                                   [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
def test_jcs_refuses_what_has_no_canonical_form(value: object) -> None:
    with pytest.raises(CanonicalError):
        canonicalize(value)


_CROSS = r"""
import json, random, struct, sys
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils
from a2a.utils._jcs import canonicalize
job = json.loads(sys.stdin.read())
out = {}
raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
ed = ed25519.Ed25519PrivateKey.from_private_bytes(bytes.fromhex(job["seed"]))
out["ed_public"] = ed.public_key().public_bytes(*raw).hex()
out["ed_sig"] = ed.sign(b"card").hex()
try:
    ed.public_key().verify(bytes.fromhex(job["tern_sig"]), b"tern")
    out["tern_sig_ok"] = True
except Exception:
    out["tern_sig_ok"] = False
p = ec.generate_private_key(ec.SECP256R1())
r, s = utils.decode_dss_signature(p.sign(b"card", ec.ECDSA(hashes.SHA256())))
nums = p.public_key().public_numbers()
out["ec"] = [nums.x, nums.y, (r.to_bytes(32, "big") + s.to_bytes(32, "big")).hex()]
for bits in (2048, 4096):
    k = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    n = k.public_key().public_numbers()
    out[f"rsa{bits}"] = [n.n, n.e, k.sign(b"card", padding.PKCS1v15(), hashes.SHA256()).hex()]
rnd = random.Random(8785)
doubles = [struct.unpack(">d", rnd.getrandbits(64).to_bytes(8, "big"))[0] for _ in range(3000)]
doubles = [d for d in doubles if d == d and abs(d) != float("inf")] + [rnd.uniform(-1e6, 1e6) for _ in range(1000)]
out["jcs"] = [[d, canonicalize(d)] for d in doubles]
print(json.dumps(out))
"""


def test_against_cryptography_and_the_sdk_jcs() -> None:
    """Signatures made by OpenSSL (through ``cryptography``) verify here, tern's Ed25519
    signature verifies there, and 4000 doubles print as the a2a-sdk's JCS prints them."""
    python = peers.require(peers.a2a_sdk_python)
    seed = bytes(range(32))
    job = {"seed": seed.hex(), "tern_sig": ed25519.sign(seed, b"tern").hex()}
    done = subprocess.run([str(python), "-c", _CROSS], input=json.dumps(job), capture_output=True, text=True,
                          timeout=120, check=True)
    out = json.loads(done.stdout)
    assert out["tern_sig_ok"] and out["ed_public"] == ed25519.public_key(seed).hex()
    assert ed25519.verify(bytes.fromhex(out["ed_public"]), b"card", bytes.fromhex(out["ed_sig"]))
    x, y, sig = out["ec"]
    ec_key = jwk.public_key({"kty": "EC", "crv": "P-256", "x": b64url(x.to_bytes(32, "big")),
                             "y": b64url(y.to_bytes(32, "big"))})
    assert ec_key.alg == "ES256" and ec_key.verify(b"card", bytes.fromhex(sig))
    assert not ec_key.verify(b"card!", bytes.fromhex(sig))
    for bits in (2048, 4096):
        n, e, sig = out[f"rsa{bits}"]
        key = jwk.public_key({"kty": "RSA", "n": b64url(n.to_bytes((n.bit_length() + 7) // 8, "big")),
                              "e": b64url(e.to_bytes(3, "big"))})
        assert key.alg == "RS256" and key.verify(b"card", bytes.fromhex(sig))
        assert not key.verify(b"card!", bytes.fromhex(sig))
    for value, text in out["jcs"]:
        assert canonicalize(value).decode() == text, value


def _rsa(bits: int, e: int = 65537) -> dict[str, str]:
    n = (1 << (bits - 1)) | 1
    return {"kty": "RSA", "n": b64url(n.to_bytes((bits + 7) // 8, "big")), "e": b64url(e.to_bytes(4, "big"))}


@pytest.mark.parametrize("bad,why", [
    (_rsa(8200), "8200 bits"),
    (_rsa(1024), "1024 bits"),
    (_rsa(2048, e=65536), "exponent"),
    (_rsa(2048, e=1), "exponent"),
    ({"kty": "EC", "crv": "P-256", "x": b64url(b"\x01" * 32), "y": b64url(b"\x02" * 32)}, "not a point"),
    ({"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}, "tern verifies"),
    ({"kty": "oct", "k": "c2VjcmV0"}, "private key member"),
    ({"kty": "OKP", "crv": "Ed25519", "x": b64url(b"\x01" * 32), "d": b64url(b"\x02" * 32)}, "private key member"),
    ({"kty": "OKP", "crv": "Ed25519", "x": b64url(b"\x01" * 31)}, "32 bytes"),
    ({"kty": "OKP", "crv": "Ed25519", "x": "a" * 5000}, "longer than"),
    ({"kty": "OKP", "crv": "Ed25519", "x": b64url(b"\x01" * 32), "alg": "ES256"}, "alg"),
    ({"kty": "OKP", "crv": "Ed25519", "x": b64url(b"\x01" * 32), "use": "enc"}, "not signatures"),
    ("not an object", "JSON object"),
])
def test_bad_keys_refused_with_a_reason(bad: object, why: str) -> None:
    with pytest.raises(BadKey, match=why):
        jwk.public_key(bad)


def test_jws_refuses_none_hmac_crit_and_confusion() -> None:
    pair = jwk.generate()
    assert jwk.signing_key(pair.private_jwk()).public.kid == pair.public.kid == jwk.thumbprint(pair.public.jwk)
    assert "d" not in pair.public.jwk and repr(pair).startswith("SigningKey(Ed25519")
    protected, signature = jws.sign(pair, {"typ": "JOSE"}, b"{}")
    assert jws.verify(pair.public, protected, b"{}", signature)
    assert not jws.verify(pair.public, protected, b"{ }", signature)

    def header(**fields: object) -> str:
        return b64url(json.dumps(fields).encode())

    for bad, why in [(header(alg="none"), "not accepted"), (header(alg="HS256"), "not accepted"),
                     (header(kid="x"), "not accepted"), (header(alg="EdDSA", crit=["b64"]), "critical"),
                     (header(alg="EdDSA", jku=["x"]), "jku is not a string"), ("e30", "not accepted"),
                     ("not base64!", "base64url"), (b64url(b"[1]"), "JSON object"), ("a" * 5000, "longer than"),
                     (b64url(b"{"), "not JSON"), (header(alg="ES256"), "the key is for EdDSA")]:
        with pytest.raises(jws.BadJws, match=why):
            jws.verify(pair.public, bad, b"{}", signature)
    with pytest.raises(jws.BadJws, match="longer than"):
        jws.verify(pair.public, protected, b"{}", "A" * 2000)
