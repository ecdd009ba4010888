"""Which OS user owns the other end of a loopback TCP connection (Linux).

With no API key, tern serves only its own OS user. The kernel lists every TCP socket
of this network namespace in ``/proc/net/tcp`` (``tcp6`` for IPv6) with its owner's
uid; the peer's socket is the row whose local address is the peer's and whose remote
address is ours. One lookup per connection, only when a request needs it, reading
``tcp6`` only for an IPv6 peer and at most ``MAX_PROC_BYTES``: a peer not found is
unknown (None), and unknown peers must present the local token instead.

``TERN_PEER_UID=off`` turns the lookup off (every peer is unknown): what tern does
where it cannot identify a peer (macOS, Windows, a /proc without ``net``); the tests
use it to drive the token fallback.
"""

from __future__ import annotations

import os
import socket
import struct
import weakref
from typing import Any

__all__ = ["loopback_peer_uid", "lookup_enabled", "listener_uid", "PEER_UID_ENV", "mark_outbound", "is_outbound"]

PEER_UID_ENV = "TERN_PEER_UID"
MAX_PROC_BYTES = 8 * 1024 * 1024  # ~55,000 sockets; past that the peer counts as unknown
_GONE_STATES = {b"06", b"07", b"0A", b"0C"}  # TIME_WAIT, CLOSE, LISTEN, NEW_SYN_RECV: no live owner


def lookup_enabled() -> bool:
    return os.path.isdir("/proc/net") and os.environ.get(PEER_UID_ENV, "").lower() != "off"


def _hex(host: str, port: int, v6: bool) -> bytes:
    """An address as /proc/net/tcp prints it: 32-bit words in host byte order, then the port."""
    if v6:
        words = struct.unpack("=4I", socket.inet_pton(socket.AF_INET6, host))
        return ("".join(f"{w:08X}" for w in words) + f":{port:04X}").encode()
    return (f"{struct.unpack('=I', socket.inet_aton(host))[0]:08X}:{port:04X}").encode()


def _unmapped(host: str) -> str | None:
    host = host.split("%")[0]
    return host[7:] if host.lower().startswith("::ffff:") and "." in host else None


def _scan(table: str, local: bytes, remote: bytes | None, listening: bool) -> int | None:
    """The uid of the first row matching (local, remote), reading at most MAX_PROC_BYTES.

    The table is read whole and searched for the address (``bytes.find``, at memory
    speed); only the rows that hold it are split. A host with tens of thousands of
    sockets (a connection churn leaves as many in TIME_WAIT) then costs about a
    millisecond a lookup, not one split per row: 30,000 rows made 1,000 new loopback
    connections take over two minutes."""
    try:
        with open(f"/proc/net/{table}", "rb") as rows:
            data = rows.read(MAX_PROC_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_PROC_BYTES:
        return None
    needle = b" " + local + b" "
    at = data.find(needle)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        fields = data[start:end if end >= 0 else len(data)].split()
        try:
            if len(fields) >= 8 and fields[1] == local:
                if listening:
                    if fields[3] == b"0A":
                        return int(fields[7])
                elif fields[2] == remote and fields[3] not in _GONE_STATES:
                    return int(fields[7])
        except ValueError:
            return None
        at = data.find(needle, at + len(needle))
    return None


_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, _NLMSG_ERROR = 4, 20, 1, 2
_DIAG_TIMEOUT_SECS = 0.5


def _diag_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The client socket's uid from the kernel's socket table by its exact address pair
    (netlink ``sock_diag``, one look-up whatever the number of sockets); None when the
    kernel cannot answer it (then ``_scan`` reads ``/proc/net/tcp``, whose cost grows
    with every socket of the host: tens of thousands in TIME_WAIT made each read slow)."""
    v6 = ":" in peer[0]
    family = socket.AF_INET6 if v6 else socket.AF_INET

    def words(host: str) -> bytes:
        packed = socket.inet_pton(family, host.split("%")[0])
        return packed + b"\0" * (16 - len(packed))

    sockid = struct.pack("!HH16s16s", peer[1], local[1], words(peer[0]), words(local[0])) + \
        struct.pack("=IQ", 0, 0xFFFFFFFFFFFFFFFF)  # any interface, no cookie
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
    header = struct.pack("=IHHII", 16 + len(request), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as diag:
            diag.settimeout(_DIAG_TIMEOUT_SECS)
            diag.sendto(header + request, (0, 0))
            answer = diag.recv(65536)
    except (OSError, AttributeError):
        return None
    if len(answer) < 16:
        return None
    _, kind, _, _, _ = struct.unpack_from("=IHHII", answer)
    if kind != _SOCK_DIAG_BY_FAMILY or len(answer) < 16 + 72:
        return None  # NLMSG_ERROR (no such socket, or sock_diag not there): unknown
    state = answer[16 + 1]
    if state in (6, 7, 10, 12):  # TIME_WAIT, CLOSE, LISTEN, NEW_SYN_RECV: no live owner
        return None
    return struct.unpack_from("=I", answer, 16 + 64)[0]  # inet_diag_msg.idiag_uid


def loopback_peer_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the client socket ``peer`` connected to our socket ``local``; None
    when it cannot be told (lookup off, not Linux, not found)."""
    if not lookup_enabled():
        return None
    try:
        peer_v4, local_v4 = _unmapped(peer[0]), _unmapped(local[0])
        found = _diag_uid((peer_v4, peer[1]), (local_v4, local[1])) if peer_v4 and local_v4 else None
        if found is None:
            found = _diag_uid((peer[0].split("%")[0], peer[1]), (local[0].split("%")[0], local[1]))
        if found is not None:
            return found
    except (OSError, ValueError, struct.error):
        pass
    try:
        peer_v4, local_v4 = _unmapped(peer[0]), _unmapped(local[0])
        if peer_v4 is not None and local_v4 is not None:  # an IPv4 client of a dual-stack listener
            uid = _scan("tcp", _hex(peer_v4, peer[1], False), _hex(local_v4, local[1], False), False)
            if uid is not None:
                return uid
        v6 = ":" in peer[0]
        return _scan("tcp6" if v6 else "tcp", _hex(peer[0].split("%")[0], peer[1], v6),
                     _hex(local[0].split("%")[0], local[1], v6), False)
    except (OSError, ValueError, struct.error):
        return None


#: tern's own open outbound sockets by local address (``mark_outbound``); weak, so a closed
#: and collected socket leaves by itself, and bounded by the sockets tern holds open.
_OUTBOUND: weakref.WeakValueDictionary[tuple[str, int], Any] = weakref.WeakValueDictionary()


def _key(address: tuple[str, int]) -> tuple[str, int]:
    host = address[0].split("%")[0]
    return (_unmapped(host) or host, address[1])


def mark_outbound(sock: Any) -> None:
    """Remember a socket tern itself opened (every outbound HTTP connection: the guarded
    backend calls this), so that tern's own server never takes it for the owner."""
    try:
        _OUTBOUND[_key(sock.getsockname()[:2])] = sock
    except (OSError, TypeError, AttributeError, IndexError):
        pass  # a socket that cannot say its address, or takes no weak reference: nothing to mark


def is_outbound(peer: tuple[str, int]) -> bool:
    """Whether the client ``peer`` is one of tern's own open outbound sockets (a model's
    ``web_fetch`` of tern's own API, an A2A peer entry that points back at tern): such a
    client has tern's uid, but it speaks for whatever fed it the URL, never for the owner."""
    sock = _OUTBOUND.get(_key(peer))
    try:
        return sock is not None and sock.fileno() != -1
    except OSError:
        return False


def listener_uid(host: str, port: int) -> int | None:
    """The uid owning the socket listening on ``host:port`` (an IP address), or None."""
    if not lookup_enabled():
        return None
    try:
        v6 = ":" in host
        uid = _scan("tcp6" if v6 else "tcp", _hex(host, port, v6), None, True)
        if uid is None and not v6:  # a dual-stack listener on :: also takes IPv4
            for any_host in ("::", "::ffff:0.0.0.0"):
                uid = _scan("tcp6", _hex(any_host, port, True), None, True)
                if uid is not None:
                    break
        if uid is None:  # a wildcard listener
            uid = _scan("tcp6" if v6 else "tcp", _hex("::" if v6 else "0.0.0.0", port, v6), None, True)
        return uid
    except (OSError, ValueError, struct.error):
        return None
