"""Address sets as sorted integer intervals: does a set of allowed sources reach the whole internet?

A source "reaches the internet" when the union of what is allowed covers every publicly routable
address of its family: all of IPv4 except the special-purpose blocks of the IANA IPv4 Special-Purpose
Address Registry (RFC 6890 and updates: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24,
192.0.2/24, 192.168/16, 198.18/15, 198.51.100/24, 203.0.113/24, 224/4, 240/4), and for IPv6 all of the
global unicast block 2000::/3 (RFC 4291 §2.4). So 0.0.0.0/0, ::/0, 0.0.0.0/1 + 128.0.0.0/1, or every
public /8 listed one by one, all reach it; 203.0.113.0/24 or 10.0.0.0/8 do not.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable, Optional

Interval = tuple[int, int]  # inclusive [lo, hi]

_V4_SPECIAL = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
               "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
               "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4")
_V6_GLOBAL = "2000::/3"


def parse(text: str) -> Optional[tuple[int, Interval]]:
    """(family 4 | 6, interval) of a CIDR, a single address or a Tencent range "a.b.c.d-e.f.g.h"; None if neither."""
    text = text.strip()
    if not text:
        return None
    try:
        if "-" in text and "/" not in text:
            lo_s, _, hi_s = text.partition("-")
            lo, hi = ipaddress.ip_address(lo_s.strip()), ipaddress.ip_address(hi_s.strip())
            if lo.version != hi.version or int(hi) < int(lo):
                return None
            return lo.version, (int(lo), int(hi))
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    return net.version, (int(net.network_address), int(net.broadcast_address))


def union(intervals: Iterable[Interval]) -> list[Interval]:
    out: list[Interval] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """a − b, both unions."""
    out: list[Interval] = []
    for lo, hi in a:
        cur = lo
        for blo, bhi in b:
            if bhi < cur or blo > hi:
                continue
            if blo > cur:
                out.append((cur, blo - 1))
            cur = max(cur, bhi + 1)
            if cur > hi:
                break
        if cur <= hi:
            out.append((cur, hi))
    return out


def _space(version: int) -> list[Interval]:
    if version == 4:
        special = [parse(c)[1] for c in _V4_SPECIAL]  # type: ignore[index]
        return subtract([(0, 2 ** 32 - 1)], union(special))
    return [parse(_V6_GLOBAL)[1]]  # type: ignore[index]


PUBLIC = {4: _space(4), 6: _space(6)}


def public_part(version: int, allowed: list[Interval]) -> list[Interval]:
    """The publicly routable addresses among `allowed` (a union)."""
    out = []
    for lo, hi in allowed:
        for plo, phi in PUBLIC[version]:
            a, b = max(lo, plo), min(hi, phi)
            if a <= b:
                out.append((a, b))
    return union(out)


def reaches_internet(version: int, allowed: list[Interval]) -> bool:
    return not subtract(PUBLIC[version], union(allowed))


BROAD_PREFIX = {4: 16, 6: 32}
"""A source that opens more public addresses than one prefix of this length holds (a /16 of IPv4, 65,536
addresses; a /32 of IPv6) is treated as the internet too: an office or VPN range is far smaller, and
0.0.0.0/1, "everything but one address" or a whole public /8 must not pass because some addresses are
left out."""


def too_broad(version: int, allowed: list[Interval], prefix: Optional[int] = None) -> bool:
    """More public addresses among `allowed` than one /BROAD_PREFIX holds (or than /`prefix`)."""
    bits = 32 if version == 4 else 128
    limit = 2 ** (bits - (BROAD_PREFIX[version] if prefix is None else prefix))
    return sum(hi - lo + 1 for lo, hi in public_part(version, allowed)) > limit


def open_to_internet(version: int, allowed: list[Interval], prefix: Optional[int] = None) -> bool:
    """Every public address, or more of them than a /BROAD_PREFIX holds."""
    return reaches_internet(version, allowed) or too_broad(version, allowed, prefix)
