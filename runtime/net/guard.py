"""The SSRF guard: which addresses tern may open a connection to.

A URL from a model, a config file or a peer must not reach the cloud metadata service
(its credentials are the machine's) or, when the operator says so, private networks
and loopback. Checking the URL's host name is not enough: a public name can resolve to
169.254.169.254, and resolve differently the second time (DNS rebinding). So the check
runs on the addresses themselves, at connect time: ``resolve_checked`` resolves once,
checks every address, and ``runtime.net.outbound`` connects only to an address it returned.

Metadata, link-local, unspecified, multicast and reserved addresses are always blocked;
private networks and loopback follow ``[security]``. IPv6 forms that carry an IPv4
address (mapped, compatible, 6to4, NAT64) are judged by that IPv4 address.

Everything here is sans-IO except ``resolve_checked``.
"""

from __future__ import annotations

import ipaddress
import math
import re
import socket
from urllib.parse import urlsplit

import msgspec
import trio

from runtime.config import SecurityConfig
from runtime.errors import ProtocolError, TernTimeout

__all__ = [
    "BlockedAddress",
    "AddressPolicy",
    "METADATA_HOSTS",
    "check_ip",
    "check_hostname",
    "check_url",
    "resolve_checked",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Names that reach a cloud metadata service without DNS tricks (GCE, AWS).
METADATA_HOSTS = frozenset({
    "metadata.google.internal",
    "metadata.goog",
    "metadata",
    "instance-data",
    "instance-data.ec2.internal",
})

_ALWAYS, _PRIVATE, _LOOPBACK = "always", "private", "loopback"

# First match wins, so the single metadata addresses come before the private ranges
# that contain them. Written out rather than taken from ``ipaddress.is_private`` and
# friends, whose ranges changed between Python patch releases.
_RANGES: tuple[tuple[str, str, str], ...] = (
    ("169.254.0.0/16", _ALWAYS, "link-local / cloud metadata"),
    ("100.100.100.200/32", _ALWAYS, "Alibaba Cloud metadata"),
    ("0.0.0.0/8", _ALWAYS, "unspecified / 'this network'"),
    ("224.0.0.0/4", _ALWAYS, "multicast"),
    ("240.0.0.0/4", _ALWAYS, "reserved / broadcast"),
    ("127.0.0.0/8", _LOOPBACK, "loopback"),
    ("10.0.0.0/8", _PRIVATE, "private network"),
    ("172.16.0.0/12", _PRIVATE, "private network"),
    ("192.168.0.0/16", _PRIVATE, "private network"),
    ("100.64.0.0/10", _PRIVATE, "shared address space (carrier-grade NAT)"),
    ("192.0.0.0/24", _PRIVATE, "IETF protocol assignments"),
    ("198.18.0.0/15", _PRIVATE, "benchmarking network"),
    ("192.0.2.0/24", _PRIVATE, "documentation network"),
    ("198.51.100.0/24", _PRIVATE, "documentation network"),
    ("203.0.113.0/24", _PRIVATE, "documentation network"),
    ("::/128", _ALWAYS, "unspecified"),
    ("::1/128", _LOOPBACK, "loopback"),
    ("fd00:ec2::254/128", _ALWAYS, "AWS cloud metadata"),
    ("fe80::/10", _ALWAYS, "link-local"),
    ("ff00::/8", _ALWAYS, "multicast"),
    ("::/8", _ALWAYS, "reserved"),
    ("fc00::/7", _PRIVATE, "unique local network"),
    ("fec0::/10", _PRIVATE, "site-local network"),
    ("100::/64", _PRIVATE, "discard-only network"),
    ("2001:db8::/32", _PRIVATE, "documentation network"),
)
_NETWORKS = tuple((ipaddress.ip_network(net), kind, label) for net, kind, label in _RANGES)

# IPv6 prefixes whose last 32 bits are an IPv4 address the packet ends up at.
_EMBEDDING_LOW32 = tuple(ipaddress.ip_network(net) for net in (
    "::ffff:0:0/96",    # IPv4-mapped
    "::ffff:0:0:0/96",  # IPv4-translated (SIIT)
    "64:ff9b::/96",     # NAT64, well-known prefix
    "64:ff9b:1::/48",   # NAT64, local-use prefix (assumed /96 layout)
))
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible, minus :: and ::1

# What inet_aton would accept: 127.1, 0x7f.0.0.1, 2130706433, 0177.0.0.1 ...
_LEGACY_IPV4 = re.compile(r"[0-9a-fx.]+", re.IGNORECASE)


class BlockedAddress(ProtocolError):
    """A connection the SSRF guard refuses. The message names the host, the address
    and why, and for a configurable block which ``[security]`` key allows it."""

    http_status = 403

    def __init__(self, message: str, *, host: str = "", ip: str = "") -> None:
        super().__init__(message)
        self.host = host
        self.ip = ip


class AddressPolicy(msgspec.Struct, frozen=True):
    """Which of the configurable blocks apply. The always-blocked ranges are not here:
    no setting opens the metadata service."""

    block_private: bool = False
    block_loopback: bool = False

    @classmethod
    def from_security(cls, security: SecurityConfig) -> AddressPolicy:
        return cls(block_private=security.block_private_networks,
                   block_loopback=security.block_loopback)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address delivers to, if it is one of the embedding forms."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in _EMBEDDING_LOW32) or (ip in _COMPATIBLE and int(ip) > 1):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def _classify(ip: IPAddress) -> tuple[str, str] | None:
    for net, kind, label in _NETWORKS:
        if ip.version == net.version and ip in net:
            return kind, label
    return None


def _blocked(kind: str, policy: AddressPolicy) -> bool:
    if kind == _PRIVATE:
        return policy.block_private
    if kind == _LOOPBACK:
        return policy.block_loopback
    return True


def _reason(kind: str, label: str) -> str:
    if kind == _PRIVATE:
        return f"{label}; allowed when [security] block_private_networks = false"
    if kind == _LOOPBACK:
        return f"{label}; allowed when [security] block_loopback = false"
    return label


def check_ip(ip: str, policy: AddressPolicy, host: str = "") -> None:
    """Raise ``BlockedAddress`` unless ``policy`` lets tern connect to ``ip``.

    ``host`` is the name that resolved to ``ip``, for the message only.
    """
    subject = f"{host} resolves to {ip}" if host and host != ip else ip
    try:
        address: IPAddress = ipaddress.ip_address(ip)
    except ValueError:
        raise BlockedAddress(f"blocked: {subject} is not an IP address",
                             host=host, ip=ip) from None
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            found = _classify(inner)
            if found and _blocked(found[0], policy):
                raise BlockedAddress(
                    f"blocked: {subject} (carries IPv4 {inner}: {_reason(*found)})",
                    host=host, ip=ip)
            return
    found = _classify(address)
    if found and _blocked(found[0], policy):
        raise BlockedAddress(f"blocked: {subject} ({_reason(*found)})", host=host, ip=ip)


def _normal_host(host: str) -> str:
    return host.strip("[]").rstrip(".").lower()


def check_hostname(host: str) -> None:
    """Raise ``BlockedAddress`` for the names of cloud metadata services, before any DNS."""
    if _normal_host(host) in METADATA_HOSTS:
        raise BlockedAddress(f"blocked: {host} is a cloud metadata host", host=host)


def _ip_literal(host: str) -> str | None:
    """``host`` as an IP address if it is one, in any form the C resolver accepts."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        pass
    if _LEGACY_IPV4.fullmatch(host):
        try:
            return socket.inet_ntoa(socket.inet_aton(host))
        except OSError:
            pass
    return None


def _idna(host: str, url: str) -> str:
    """A non-ASCII host in its IDNA (ASCII) form, encoded exactly as httpx encodes it
    (IDNA 2008, no compatibility mapping): ``①②⑦.0.0.1`` is no name, not 127.0.0.1."""
    import idna

    try:
        return idna.encode(host).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError) as error:
        raise ProtocolError(f"invalid URL {url!r}: the host is not a valid internationalized name ({error})") from None


def check_url(url: str, policy: AddressPolicy) -> tuple[str, int]:
    """Check what can be checked without DNS; return ``(host, port)`` to resolve.

    A quick refusal for obviously bad URLs, with a clear message. The authoritative
    check is ``resolve_checked`` at connect time, which every tern HTTP client runs.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ProtocolError(f"invalid URL {url!r}: {error}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise BlockedAddress(f"blocked: {url!r}: only http and https URLs are allowed")
    host = parts.hostname  # lowercased, IPv6 brackets removed
    if not host:
        raise ProtocolError(f"invalid URL {url!r}: no host")
    if not host.isascii():  # checked as the name httpx would resolve, or refused as httpx would
        host = _idna(host, url)
    check_hostname(host)
    literal = _ip_literal(host)
    if literal is not None:
        check_ip(literal, policy, host)
    return host, port if port is not None else (443 if scheme == "https" else 80)


async def resolve_checked(host: str, port: int, policy: AddressPolicy,
                          timeout: float = 10.0) -> list[str]:
    """Resolve ``host`` and return its addresses, in resolver order, once each, if
    every one is allowed.

    One blocked address refuses the whole name: a name that resolves to the metadata
    service anywhere is not one to trust with the others. IP literals skip DNS.
    Raises ``BlockedAddress``, ``TernTimeout`` after ``timeout`` seconds, or the
    resolver's ``OSError`` (``socket.gaierror``).
    """
    check_hostname(host)
    name = host.strip("[]")
    try:
        literal = str(ipaddress.ip_address(name))
    except ValueError:
        pass
    else:
        check_ip(literal, policy)
        return [literal]
    try:
        with trio.fail_after(timeout if timeout is not None else math.inf):
            infos = await trio.socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except trio.TooSlowError:
        raise TernTimeout(f"resolving {host} took longer than {timeout:g} s") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{host} has no addresses")
    for address in addresses:
        check_ip(address, policy, host)
    return addresses
