"""The client's address: who sent a request, as every throttle counts it (docs/decisions/0036).

``REMOTE_ADDR`` is the direct peer. Behind a reverse proxy that is the proxy, for every client, so
the proxy's ``X-Forwarded-For`` is read, but only when the peer is one of
``MEMORY_TRUSTED_PROXIES``: anyone else could write that header. Each proxy appends the address
it was called from, so the chain is read from the right, skipping trusted proxies; the first
address that is not one is the client (the ones to its left were written by the client itself
and prove nothing).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from memory_platform.conf import memory_settings

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

UNKNOWN = "unknown"
# A value a proxy wrote that is not an address still names the client; it is cut so that it
# cannot make a counter's key long.
_MAX_TOKEN = 64


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses and CIDRs (``10.0.0.0/8``, ``::1``); ValueError names the one that is neither."""
    networks = []
    for value in values:
        text = str(value).strip()
        if not text:
            continue
        try:
            networks.append(ipaddress.ip_network(text, strict=False))
        except ValueError:
            raise ValueError(f"{text!r} is not an IP address or a CIDR such as 10.0.0.0/8") from None
    return tuple(networks)


@functools.lru_cache(maxsize=8)
def _trusted(values: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_networks(values)


def _address(text: str) -> Address | None:
    """An address as proxies write it: bare, ``v4:port``, ``[v6]`` or ``[v6]:port``."""
    text = text.strip()
    if text.startswith("["):
        text = text[1 : text.find("]")] if "]" in text else text
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _is_trusted(address: Address | None, trusted: tuple[Network, ...]) -> bool:
    return address is not None and any(address in network for network in trusted)


def client_address(meta: Mapping[str, Any], trusted_proxies: Iterable[str] | None = None) -> str:
    """The client's address for a request's ``META`` (``MEMORY_TRUSTED_PROXIES`` unless
    ``trusted_proxies`` is given)."""
    peer_text = str(meta.get("REMOTE_ADDR") or "")
    peer = _address(peer_text)
    configured = memory_settings.TRUSTED_PROXIES if trusted_proxies is None else trusted_proxies
    trusted = _trusted(tuple(str(value) for value in configured))
    if not _is_trusted(peer, trusted):
        return str(peer) if peer is not None else (peer_text[:_MAX_TOKEN] or UNKNOWN)
    # Repeated headers arrive joined by commas.
    chain = [hop.strip() for hop in str(meta.get("HTTP_X_FORWARDED_FOR") or "").split(",")]
    for hop in reversed([hop for hop in chain if hop]):
        address = _address(hop)
        if address is None:
            # Written by a trusted proxy (every hop to its right is one), so it names the client,
            # however oddly ("unknown", "unix:").
            return hop[:_MAX_TOKEN]
        if not _is_trusted(address, trusted):
            return str(address)
    # Every hop is a proxy (a proxy's own health check): the left-most one is the caller.
    first = next((hop for hop in chain if hop), "")
    address = _address(first)
    return str(address) if address is not None else str(peer)


def throttle_key(address: str) -> str:
    """What the throttles count an address as: an IPv6 client by its /64, the block one machine
    or site is usually given, since it can take a new address in it for every request."""
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return address
