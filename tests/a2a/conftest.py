"""Fixtures shared by the A2A tests: a real a2a-sdk 1.x server."""

import subprocess
from pathlib import Path

import pytest

from tests import peers

ROOT = Path(__file__).resolve().parent.parent.parent
SDK_SERVER = ROOT / "tests" / "fixtures" / "a2a_sdk_server.py"


@pytest.fixture(scope="module")
def sdk_url():
    python = str(peers.require(peers.a2a_sdk_python))
    process = subprocess.Popen([python, str(SDK_SERVER), "0"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    try:
        line = process.stdout.readline()  # "listening on http://127.0.0.1:PORT" once bound
        assert line.startswith("listening on "), line + process.stdout.read()
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(10)
