"""CIDR planning for a Tencent cluster (pure functions, no Pulumi; tested without mocks)."""

from __future__ import annotations

import ipaddress

_PRIVATE = [ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")]
TURBO_PREFIX = 24
"""Size of the range CFS Turbo takes for its service IPs. Unconfirmed: the provider doc (v1.82.42,
cfs_file_system `cidr_block`) only says it must not conflict with other ranges bound in the CCN; a
/24 leaves room for the Turbo mount targets of one file system."""
_TURBO_FALLBACK = ipaddress.ip_network("10.255.255.0/24")


def node_subnet(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The cluster subnet: the first half of the VPC range (spec.Network.cidr documents this)."""
    return next(vpc_cidr.subnets(prefixlen_diff=1))


def turbo_cidr(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """A range for CFS Turbo's CCN interface that cannot overlap the VPC.

    CFS Turbo joins the cluster through a CCN and needs a `cidr_block` "which cannot conflict with
    other IP ranges bound in CCN" (provider doc, cfs_file_system). The only other network in the
    cluster's own CCN is its VPC, so we take the VPC range's sibling — the other half of its parent
    range, same size — and use its first /24. 192.168.0.0/16 has no private sibling; it falls back
    to 10.255.255.0/24, which cannot overlap a 192.168 VPC either.
    """
    parent = vpc_cidr.supernet(prefixlen_diff=1)
    sibling = next(n for n in parent.subnets(prefixlen_diff=1) if n != vpc_cidr)
    if not any(sibling.subnet_of(p) for p in _PRIVATE):
        return _TURBO_FALLBACK
    if sibling.prefixlen >= TURBO_PREFIX:
        return sibling
    return next(sibling.subnets(new_prefix=TURBO_PREFIX))
