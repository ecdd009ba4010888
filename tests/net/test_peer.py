"""net/peer.py: the uid owning a loopback client socket, read from /proc/net/tcp(6)."""

from __future__ import annotations

import os
import socket

import pytest

from runtime.net.peer import PEER_UID_ENV, listener_uid, loopback_peer_uid

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/net"), reason="Linux /proc/net only")


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"),
                                          (socket.AF_INET6, "::")])
def test_the_peer_socket_owner_is_found_for_ipv4_ipv6_and_dual_stack(family, host, monkeypatch):
    monkeypatch.delenv(PEER_UID_ENV, raising=False)
    try:
        server = socket.socket(family)
        server.bind((host, 0))
    except OSError:
        pytest.skip(f"no {host} here")
    with server:
        server.listen()
        port = server.getsockname()[1]
        target = "127.0.0.1" if host == "::" else host  # an IPv4 client of a dual-stack listener
        with socket.create_connection((target, port), timeout=5) as client:
            accepted, peer = server.accept()
            with accepted:
                assert loopback_peer_uid(peer[:2], accepted.getsockname()[:2]) == os.geteuid()
                assert loopback_peer_uid((peer[0], 1), accepted.getsockname()[:2]) is None  # no such socket
                assert listener_uid(target, port) == os.geteuid()
                monkeypatch.setenv(PEER_UID_ENV, "off")  # the documented knob: act as if /proc said nothing
                assert loopback_peer_uid(peer[:2], accepted.getsockname()[:2]) is None
                client.close()
