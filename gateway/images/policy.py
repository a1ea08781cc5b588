"""The rules a remote image URL must pass, before and after its host name is
resolved: the pure half of the remote-image trust boundary.

:func:`parse_target` turns a client's URL into a :class:`Target` (``http``
or ``https`` only, no user name or password, a valid host);
:class:`FetchRules` (from ``[images]``) says whether a host is on the
allow-list and whether a resolved address may be connected to: only a
globally routable one, or one inside an operator's ``allowed_networks``.
Every refusal is a :class:`FetchRefused` whose ``reason`` is safe to show
the client (it names at most the URL's host, never an address or an
internal error). No I/O, no threads: :mod:`gateway.images.http` does
the resolving and connecting.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from shared.config import ImagesConfig
from shared.config_values import host_pattern, normalize_host, parse_network, parse_size

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_DEFAULT_PORTS = {"http": 80, "https": 443}
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# printable ASCII but space: what a request target may hold as it is; the rest is percent-encoded
_TARGET_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in "%")
_PERCENT_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")


class FetchRefused(Exception):
    """A remote image that is not fetched, or whose fetch failed.

    ``reason``: one sentence safe to show the client. ``detail``: what
    only the server's log may see (a resolved address, an exception).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Target:
    """One URL to fetch: ``host`` normalised
    (:func:`shared.config_values.normalize_host`), ``path`` the request
    target (path and query, never empty, ASCII only)."""

    scheme: str
    host: str
    port: int
    path: str


def parse_target(url: str) -> Target:
    """The :class:`Target` ``url`` names.

    Raises:
        FetchRefused: not an ``http(s)`` URL, a user name or password in
            it, a missing or malformed host or port.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise FetchRefused("the image URL is not a valid URL") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise FetchRefused("only http and https image URLs are fetched")
    if "@" in parts.netloc:
        raise FetchRefused("image URLs with a user name or password are refused")
    if not parts.hostname:
        raise FetchRefused("the image URL has no host")
    try:
        host = normalize_host(parts.hostname)
    except ValueError:
        raise FetchRefused("the image URL's host is not a valid host name") from None
    path = _request_target(parts.path, parts.query)
    return Target(scheme, host, _DEFAULT_PORTS[scheme] if port is None else port, path)


def _request_target(path: str, query: str) -> str:
    """The ASCII request target of ``path`` and ``query``: characters that
    may not appear in a request line (spaces, controls, non-ASCII) are
    percent-encoded as UTF-8; existing ``%XX`` escapes are kept."""
    text = (path or "/") + (f"?{query}" if query else "")
    pieces = _PERCENT_ESCAPE.split(text)
    escapes = _PERCENT_ESCAPE.findall(text)
    out = [quote(pieces[0], safe=_TARGET_SAFE)]
    for escape, piece in zip(escapes, pieces[1:], strict=True):
        out.append(escape + quote(piece, safe=_TARGET_SAFE))
    return "".join(out)


def is_public(address: IPAddress) -> bool:
    """Whether ``address`` is globally routable: not loopback, private,
    link-local, shared (CGNAT), multicast, unspecified or reserved, and,
    for IPv6 forms that embed an IPv4 address (IPv4-mapped, 6to4, Teredo,
    NAT64 ``64:ff9b::/96``), the embedded address is public too."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public(address.ipv4_mapped)
        embedded: list[IPAddress] = []
        if address.sixtofour is not None:
            embedded.append(address.sixtofour)
        if address.teredo is not None:
            embedded.extend(address.teredo)
        if address in _NAT64:
            embedded.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
        if not all(is_public(inner) for inner in embedded):
            return False
    return address.is_global and not (
        address.is_multicast
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_reserved
    )


@dataclass(frozen=True)
class FetchRules:
    """``[images]`` in the form a fetch checks it.

    ``hosts``: normalised patterns (exact, or ``*.`` a suffix);
    ``networks``: where non-public addresses are allowed; ``timeout``:
    seconds for the whole fetch, redirects included.
    """

    hosts: tuple[str, ...]
    networks: tuple[IPNetwork, ...]
    max_bytes: int
    max_redirects: int
    timeout: float

    @classmethod
    def from_config(cls, images: ImagesConfig) -> FetchRules:
        """The rules of a validated ``[images]`` section.

        Raises:
            ValueError: a malformed pattern, network or size (which
                :func:`shared.config_loader.validate` refuses first).
        """
        return cls(
            hosts=tuple(host_pattern(p) for p in images.allowed_hosts),
            networks=tuple(parse_network(n) for n in images.allowed_networks),
            max_bytes=parse_size(images.max_bytes, 0),
            max_redirects=images.max_redirects,
            timeout=images.fetch_timeout,
        )

    def check_host(self, target: Target) -> None:
        """Refuse ``target`` unless its host matches an allowed pattern
        (``*.example.com`` matches names below ``example.com`` only, never
        an IP address).

        Raises:
            FetchRefused: the host is not allowed.
        """
        wildcards_apply = not _is_ip(target.host)
        for pattern in self.hosts:
            if pattern == target.host:
                return
            if wildcards_apply and pattern.startswith("*.") and target.host.endswith(pattern[1:]):
                return
        raise FetchRefused(f"image host {target.host!r} is not in the server's allowed hosts")

    def check_addresses(self, target: Target, addresses: list[IPAddress]) -> None:
        """Refuse ``target`` unless every address its host resolved to is
        public or inside an allowed network (one bad address is enough:
        a name must not mix public and internal addresses).

        Raises:
            FetchRefused: no address, or a non-public one outside
                ``networks`` (the address goes to ``detail`` only).
        """
        if not addresses:
            raise FetchRefused(f"image host {target.host!r} could not be resolved")
        for address in addresses:
            if not (self._in_networks(address) or is_public(address)):
                raise FetchRefused(
                    f"image host {target.host!r} resolves to a non-public address, which is not fetched",
                    detail=f"address {address}",
                )

    def _in_networks(self, address: IPAddress) -> bool:
        """Whether ``address`` (an IPv4-mapped one as its IPv4 form) is in
        an allowed network."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)


def _is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address rather than a name."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
