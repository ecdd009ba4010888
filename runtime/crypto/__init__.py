"""Pure-Python signatures for what tern signs and checks (JWS over agent cards): Ed25519
(RFC 8032), P-256 ECDSA and RSA PKCS#1 v1.5 verification, JWKs and JWS. Sans-IO, no
native code, so the pyz stays one self-contained file (docs/decisions.md says why)."""
