"""What a runbook may name as a place to call: no credentials in a URI, no metadata endpoints.

A store URI or an endpoint with `user:password@` in it would put a secret in the runbook, the
logs and every error that quotes it: refused, and the refusal never repeats the URI. An
`endpoint_url` or a probe URL at a link-local or cloud metadata address (169.254.0.0/16,
fe80::/10, AWS's fd00:ec2::254, `metadata.google.internal`) would have Lifeboat's signed
requests or probes read the instance's own credentials: refused unless the runbook names
that host in `allow_hosts`. The check is on the host as written (every IPv4 spelling
`inet_aton` reads, IPv4-mapped IPv6, a trailing dot), not on what DNS answers at run time.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

METADATA_NAMES = frozenset(
    {"metadata.google.internal", "metadata.goog", "metadata", "instance-data", "instance-data.ec2.internal"}
)
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_METADATA_IPS = (ipaddress.ip_address("fd00:ec2::254"), ipaddress.ip_address("100.100.100.200"))


def has_credentials(uri: str) -> bool:
    """Whether `uri` carries userinfo (`user@` or `user:password@`) in its authority."""
    try:
        netloc = urlsplit(uri).netloc
    except ValueError:  # an unbalanced IPv6 bracket: not a URI we could call anyway
        return "@" in uri
    return "@" in netloc


def host_of(url: str) -> str | None:
    """The host `url` names, lower-case, without a trailing dot; None when it names none."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    return host.rstrip(".").lower() if host else None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        try:  # 2852039166, 0xa9fea9fe, 169.254.43518: spellings a resolver accepts
            ip = ipaddress.ip_address(socket.inet_aton(host))
        except (OSError, ValueError):
            return None
    mapped = getattr(ip, "ipv4_mapped", None)
    return mapped or ip


def metadata_host(url: str) -> str | None:
    """The host of `url` when it is a link-local or cloud metadata address, else None."""
    host = host_of(url)
    if host is None:
        return None
    if host in METADATA_NAMES:
        return host
    ip = _address(host)
    if ip is None:
        return None
    if ip in _METADATA_IPS or any(ip in net for net in _LINK_LOCAL if net.version == ip.version):
        return host
    return None


def refused_endpoint(url: str, allowed: frozenset[str] | set[str] = frozenset()) -> str | None:
    """Why `url` may not be called (one line that never repeats its credentials), or None."""
    if has_credentials(url):
        return "carries credentials (user:password@); give them to the SDK's own configuration"
    host = metadata_host(url)
    if host is not None and host not in {a.rstrip(".").lower() for a in allowed}:
        return (
            f"{host} is a link-local or cloud metadata address, which answers with this machine's "
            "credentials; name it in allow_hosts if it really is the endpoint"
        )
    return None
