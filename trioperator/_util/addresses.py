"""Host names versus IP addresses: both the peering identity and the webhook certificates
prefer a name to an address where they have both."""

from __future__ import annotations

import ipaddress

__all__ = ["is_ip_address"]


def is_ip_address(name: str) -> bool:
    """Whether ``name`` is an IPv4 or IPv6 address (not a host name)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True
