"""The real peer of the OTLP tests: the official ``opentelemetry-proto`` messages, in
``.peers/otel-venv``, decoding what tern encodes by hand (``otlp_decode.py``)."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import peers

DECODER = Path(__file__).with_name("otlp_decode.py")


@pytest.fixture(scope="session")
def decode_otlp() -> Callable[..., list[dict]]:
    """``decode_otlp(body, ...)``: each request body as ``otlp_decode.py`` sees it, from one
    run of the official decoder."""
    python = peers.require(peers.otel_proto_python)

    def decode(*bodies: bytes) -> list[dict]:
        payload = json.dumps([base64.b64encode(b).decode() for b in bodies])
        done = subprocess.run([str(python), str(DECODER)], input=payload, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    return decode
