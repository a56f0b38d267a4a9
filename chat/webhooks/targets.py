"""Where a webhook may be sent: public http(s) addresses only, checked when the URL is given and
again, on the address actually connected to, at every delivery.

A URL is refused when it is not http or https, carries credentials, names a port other than 80
and 443 (or one of ``WEBHOOK_ALLOWED_PORTS``), does not resolve, or resolves to any address that
is not a public unicast one: loopback, private, link-local, CGNAT, multicast, reserved,
unspecified, documentation, benchmarking — including such IPv4 addresses inside IPv6 (mapped,
NAT64, 6to4). The host is resolved by the system resolver, so every spelling it accepts
(``2130706433``, ``0x7f.1``, ``017700000001``, ``[::ffff:127.0.0.1]``) is judged by the address
it means. ``WEBHOOK_ALLOWED_CIDRS`` admits exactly the networks it lists (development, tests).

At delivery the name is resolved again and the connection goes to one of the addresses that
passed, with the original host in ``Host`` and TLS's SNI and certificate check: a name that
resolves to a public address when checked and to an internal one a second later (DNS
rebinding) never reaches the internal one.
"""

from __future__ import annotations

import concurrent.futures
import ipaddress
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from core.errors import ApplicationError

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
#: host, port → the addresses the host resolves to
Resolver = Callable[[str, int], Sequence[str]]

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_URL_CHARS = 2_000
RESOLVE_TIMEOUT_S = 3.0
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class WebhookUrlForbidden(ApplicationError):
    code = "webhook_url_forbidden"
    message = "Webhooks are only sent to public http(s) addresses on ports 80 and 443."


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL and the addresses a delivery may connect to."""

    url: str
    scheme: str
    host: str
    port: int
    addresses: tuple[Address, ...]

    @property
    def host_header(self) -> str:
        literal = f"[{self.host}]" if ":" in self.host else self.host
        return literal if self.port == DEFAULT_PORTS[self.scheme] else f"{literal}:{self.port}"

    def url_for(self, address: Address) -> str:
        """The URL with its host replaced by ``address`` (the path and query as given)."""
        parts = urlsplit(self.url)
        literal = f"[{address}]" if address.version == 6 else str(address)
        return parts._replace(netloc=f"{literal}:{self.port}").geturl()


@dataclass(frozen=True, slots=True)
class TargetPolicy:
    allowed_ports: frozenset[int] = frozenset()
    allowed_networks: tuple[Network, ...] = ()

    @classmethod
    def from_settings(cls, ports: Sequence[str | int], cidrs: Sequence[str]) -> TargetPolicy:
        return cls(
            frozenset(int(p) for p in ports),
            tuple(ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c.strip()),
        )

    def address_allowed(self, address: Address) -> bool:
        if any(address in network for network in self.allowed_networks if network.version == address.version):
            return True
        return _public(address)


def _public(address: Address) -> bool:
    if address.is_multicast or not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return _public(embedded)
    return True


def system_resolver(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


_pool = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="webhook-dns")


def check(url: str, policy: TargetPolicy, *, resolver: Resolver | None = None) -> Target:
    """The target of ``url``, or :class:`WebhookUrlForbidden` saying why not (never the address)."""
    parts = _parse(url)
    scheme, host = parts.scheme.lower(), (parts.hostname or "").rstrip(".")
    try:
        explicit_port = parts.port
    except ValueError:
        raise WebhookUrlForbidden(details={"reason": "bad_port"}) from None
    port = explicit_port if explicit_port is not None else DEFAULT_PORTS[scheme]
    if port not in DEFAULT_PORTS.values() and port not in policy.allowed_ports:
        raise WebhookUrlForbidden(details={"reason": "port"})
    try:
        found = _pool.submit(resolver or system_resolver, host, port).result(timeout=RESOLVE_TIMEOUT_S)
    except (OSError, UnicodeError, concurrent.futures.TimeoutError):
        raise WebhookUrlForbidden(details={"reason": "unresolvable"}) from None
    addresses: list[Address] = []
    for text in found:
        try:
            address = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            raise WebhookUrlForbidden(details={"reason": "unresolvable"}) from None
        if not policy.address_allowed(address):
            raise WebhookUrlForbidden(details={"reason": "address"})
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise WebhookUrlForbidden(details={"reason": "unresolvable"})
    return Target(url, scheme, host, port, tuple(addresses))


def _parse(url: str) -> SplitResult:
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise WebhookUrlForbidden(details={"reason": "malformed"})
    try:
        parts = urlsplit(url)
    except ValueError:
        raise WebhookUrlForbidden(details={"reason": "malformed"}) from None
    if parts.scheme.lower() not in DEFAULT_PORTS:
        raise WebhookUrlForbidden(details={"reason": "scheme"})
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise WebhookUrlForbidden(details={"reason": "credentials"})
    if not parts.hostname:
        raise WebhookUrlForbidden(details={"reason": "malformed"})
    return parts
