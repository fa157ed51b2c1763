"""The SSRF guard's rules: which addresses are public, and which URLs may be called (no DNS here).

``engine.outbound.http`` applies them to every connection it opens (resolve once, check every
address, connect to exactly those); channel and task settings use ``check_url`` when saved.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from engine.errors import OutboundRefusedError

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# --- which addresses are public -------------------------------------------------------------------

_METADATA = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254",   # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
    "169.254.170.2",     # AWS ECS task metadata
    "100.100.100.200",   # Alibaba Cloud
    "168.63.129.16",     # Azure wire server (a public address, so listed by name)
    "fd00:ec2::254",     # AWS IMDS over IPv6
))


def _nets(*pairs: tuple[str, str]) -> tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...]:
    return tuple((ipaddress.ip_network(net), kind) for net, kind in pairs)


# Checked in order; the first match names the kind. Python's own is_global is the final catch-all.
_V4_BLOCKED = _nets(
    ("0.0.0.0/32", "unspecified"), ("0.0.0.0/8", "reserved"), ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "private"), ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"), ("192.0.0.0/24", "reserved"), ("192.0.2.0/24", "reserved"),
    ("192.88.99.0/24", "reserved"), ("192.168.0.0/16", "private"), ("198.18.0.0/15", "reserved"),
    ("198.51.100.0/24", "reserved"), ("203.0.113.0/24", "reserved"), ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
)
_V6_BLOCKED = _nets(
    ("::/128", "unspecified"), ("::1/128", "loopback"), ("fe80::/10", "link-local"),
    ("fc00::/7", "private"), ("fec0::/10", "private"), ("ff00::/8", "multicast"),
    ("64:ff9b:1::/48", "private"), ("100::/64", "reserved"), ("2001::/23", "reserved"),
    ("2001:db8::/32", "reserved"), ("3fff::/20", "reserved"),
)
_V6_GLOBAL_UNICAST = ipaddress.ip_network("2000::/3")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_refusal(address: str | IpAddress) -> str | None:
    """Why ``address`` must not be contacted: 'loopback', 'private', 'link-local', 'metadata',
    'multicast', 'reserved' or 'unspecified'; None when it is a public address."""
    ip = ipaddress.ip_address(address.split("%", 1)[0] if isinstance(address, str) else address)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id:
            ip = ipaddress.IPv6Address(ip.compressed.split("%", 1)[0])
        if ip.ipv4_mapped is not None:                     # ::ffff:a.b.c.d is a.b.c.d
            return address_refusal(ip.ipv4_mapped)
        embedded = None
        if ip in _NAT64:                                    # 64:ff9b::a.b.c.d reaches a.b.c.d
            embedded = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        elif ip.sixtofour is not None:                      # 2002:AABB:CCDD::/48 reaches a.b.c.d
            embedded = ip.sixtofour
        if embedded is not None and (kind := address_refusal(embedded)):
            return kind
    if ip in _METADATA:
        return "metadata"
    for net, kind in (_V4_BLOCKED if ip.version == 4 else _V6_BLOCKED):
        if ip in net:
            return kind
    if ip.version == 6 and ip not in _V6_GLOBAL_UNICAST and ip not in _NAT64:
        return "reserved"                                   # includes ::/96 (IPv4-compatible)
    if ip.is_multicast:
        return "multicast"
    if not ip.is_global and ip not in _NAT64:
        return "reserved"
    return None


# --- URL checks (no DNS) --------------------------------------------------------------------------

_LOCAL_NAMES = ("localhost", "localdomain", "local", "internal", "home.arpa")
_NUMERIC_HOST = re.compile(r"^[0-9a-fx.]+$")        # inet_aton forms: 2130706433, 0x7f.1, 0177.0.0.1
_HOST_NAME = re.compile(r"^[a-z0-9_](?:[a-z0-9_.-]{0,251}[a-z0-9_])?$")


def refused(message: str, what: str = "URL") -> OutboundRefusedError:
    return OutboundRefusedError(f"The outbound {what} is not allowed: {message}.")


def _literal_address(host: str) -> IpAddress | None:
    """The IP address a host names literally (any notation getaddrinfo accepts), else None."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    if _NUMERIC_HOST.match(host) and not host.endswith("."):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return None
    return None


def parse_url(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an acceptable URL, or OutboundRefusedError."""
    if not isinstance(url, str) or not url:
        raise refused("the URL is empty")
    if len(url) > 8192:
        raise refused("the URL is too long")
    if any(ord(c) <= 0x20 or c in "\\\x7f" for c in url):
        raise refused("the URL contains spaces, control characters or backslashes")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise refused("the URL's port is not a number from 1 to 65535") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise refused("only http and https URLs can be called")
    if "@" in parts.netloc:
        raise refused("the URL must not carry a user name or password")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise refused("the URL has no host")
    if port is None:
        port = 443 if scheme == "https" else 80
    elif not 1 <= port <= 65535:
        raise refused("the URL's port is not a number from 1 to 65535")
    if parts.netloc.startswith("["):
        if "%" in host:
            raise refused("IPv6 zone identifiers are not allowed")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise refused("the address in brackets is not an IPv6 address") from None
        return scheme, host, port
    try:
        ascii_host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise refused("the host name is not valid") from None
    if not _HOST_NAME.match(ascii_host) or any(not label for label in ascii_host.split(".")):
        raise refused("the host name is not valid")
    return scheme, ascii_host, port


def checked_host(url: str, *, allow_private: bool) -> tuple[str, int]:
    """(host, port) of a URL that may be called (no DNS: names are checked again when resolved).

    Unless private addresses are allowed: no IP literal (any notation) that is not public and no
    ``localhost``/``.local``/``.internal`` style name."""
    _scheme, host, port = parse_url(url)
    if allow_private:
        return host, port
    literal = _literal_address(host)
    if literal is not None:
        kind = address_refusal(literal)
        if kind:
            raise refused(f"{host} is a {kind} address")
    elif any(host == name or host.endswith("." + name) for name in _LOCAL_NAMES):
        raise refused(f"{host} is a local name")
    return host, port
