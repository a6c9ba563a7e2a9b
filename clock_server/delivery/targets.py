"""Which URLs a webhook may go to, and which addresses it may connect to.

A webhook URL is chosen by an admin but fetched by the server, so a URL naming an address
inside the network (a database, a cloud's metadata service at 169.254.169.254) would let the
server be used to reach it. Unless private addresses are allowed, a URL is refused when its
host is, or resolves to, such an address. The sender checks the address it actually connected
to once more, at every new connection, since a name may resolve differently later.
"""

from __future__ import annotations

import re
import socket
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address
from urllib.parse import SplitResult, urlsplit, urlunsplit

from clock_server.errors import ValidationError

FIELD = "webhook_url"
MAX_URL_LENGTH = 2048

IPAddress = IPv4Address | IPv6Address

_DEFAULT_PORTS = {"http": 80, "https": 443}
_HOST_NAME = re.compile(r"[a-z0-9_.-]+")

_PRIVATE = (
    IPv4Network("10.0.0.0/8"),
    IPv4Network("172.16.0.0/12"),
    IPv4Network("192.168.0.0/16"),
    IPv6Network("fc00::/7"),
    IPv6Network("fec0::/10"),  # site-local, deprecated but still routed by some networks
)
_CARRIER_GRADE_NAT = IPv4Network("100.64.0.0/10")
# NAT64 gateways translate these to the IPv4 address in their last 32 bits.
_NAT64 = IPv6Network("64:ff9b::/96")
# The local-use NAT64 prefix (RFC 8215): a gateway inside some network, never public.
_LOCAL_NAT64 = IPv6Network("64:ff9b:1::/48")


def forbidden_kind(address: IPAddress) -> str | None:
    """The kind of a non-public address ("loopback", "private", "link-local", ...), or None
    for a public one, which a webhook may connect to. An IPv6 form of an IPv4 address is
    judged by its IPv4 address: IPv4-mapped (::ffff:0:0/96), 6to4 (2002::/16), NAT64
    (64:ff9b::/96). A Teredo address (2001::/32) and one of the local-use NAT64 prefix
    (64:ff9b:1::/48) are refused: named by the IPv4 address they carry when that one is
    refused, else "non-public" and "local-use NAT64"."""
    if isinstance(address, IPv6Address):
        return _ipv6_kind(address)
    return _kind(address)


def _ipv6_kind(address: IPv6Address) -> str | None:
    embedded = address.ipv4_mapped or address.sixtofour
    if embedded is None and address in _NAT64:
        embedded = _last_32_bits(address)
    if embedded is not None:
        return _kind(embedded)
    if address.teredo is not None:
        server, client = address.teredo
        return _kind(client) or _kind(server) or "non-public"
    if address in _LOCAL_NAT64:
        return _kind(_last_32_bits(address)) or "local-use NAT64"
    return _kind(address)


def _last_32_bits(address: IPv6Address) -> IPv4Address:
    return IPv4Address(int(address) & 0xFFFF_FFFF)


def _kind(address: IPAddress) -> str | None:
    if address.is_loopback:
        return "loopback"
    if address.is_unspecified:
        return "unspecified"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address in _CARRIER_GRADE_NAT:
        return "carrier-grade NAT"
    if any(address in network for network in _PRIVATE):
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        # Documentation, benchmarking and other special-purpose ranges.
        return "non-public"
    return None


def with_article(kind: str) -> str:
    """A kind as forbidden_kind gives it, with its article: "a private", "an unspecified"."""
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


ALLOW_PRIVATE_SETTING = "CLOCK_WEBHOOK_ALLOW_PRIVATE"


def check_target(url: str, allow_private: bool) -> str:
    """The URL in normal form (scheme and host in lower case, no default port, no fragment),
    if a webhook may be sent to it.

    http and https only, with a host, without user name or password, at most 2,048 ASCII
    characters. A host name must resolve, and unless `allow_private` neither the host nor any
    address it resolves to may be non-public (`forbidden_kind`). Raises ValidationError on
    the field webhook_url, saying what is wrong.
    """
    parts = _split(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        given = f", not {scheme}://" if scheme else ""
        raise _refused(f"must start with http:// or https://{given}")
    if "@" in parts.netloc:
        raise _refused("must not carry a user name or password")
    host = parts.hostname
    if not host:
        raise _refused("has no host")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise _refused("has an invalid port")
    literal = _ip_literal(host)
    if literal is None and not _HOST_NAME.fullmatch(host):
        raise _refused(f"has an invalid host: {host}")
    addresses = [literal] if literal is not None else _resolve(host, port or _DEFAULT_PORTS[scheme])
    if not allow_private:
        for address in addresses:
            kind = forbidden_kind(address)
            if kind is None:
                continue
            where = (
                f"points to {host}" if literal is not None else f"host {host} resolves to {address}"
            )
            raise _refused(
                f"{where}, {with_article(kind)} address, which this server does not call"
                f" (its operator allows such targets with {ALLOW_PRIVATE_SETTING}=true)"
            )
    netloc = f"[{host}]" if isinstance(literal, IPv6Address) else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def _split(url: str) -> SplitResult:
    if len(url) > MAX_URL_LENGTH:
        raise _refused(f"is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(ch.isspace() or not ch.isprintable() for ch in url):
        raise _refused(
            "must be ASCII without spaces or control characters "
            "(percent-encode the path, give the host in its punycode form)"
        )
    try:
        return urlsplit(url)
    except ValueError as error:
        raise _refused(f"is not a valid URL: {error}") from None


def _ip_literal(host: str) -> IPAddress | None:
    try:
        return ip_address(host)
    except ValueError:
        return None


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise _refused(f"host {host} does not resolve") from None
    return [ip_address(str(info[4][0])) for info in infos]


def _refused(problem: str) -> ValidationError:
    return ValidationError(f"{FIELD} {problem}", field=FIELD)
