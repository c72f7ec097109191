"""Linux cpu/node list syntax ("0-47,96-143", "4,6,8", "0-0,8-8"), shared by the topology parsers.

The kernel's cpulist format (Documentation/admin-guide/cputopology.rst, also what ``lscpu``
``NUMA nodeN CPU(s):`` and ``nvidia-smi topo -m`` ``CPU Affinity`` print): comma-separated decimal
numbers or inclusive ``a-b`` ranges. ``numactl -H`` prints the same ids space-separated.
"""

from __future__ import annotations

import re

# Far above any Linux CONFIG_NR_CPUS (x86 max 8192); a bound keeps a garbage range like 0-99999999999
# from turning into a giant set.
MAX_ID = 1 << 16

_ITEM = re.compile(r"([0-9]+)(?:-([0-9]+))?")


def parse_ids(text: str, sep: str = ",") -> tuple[int, ...] | None:
    """The sorted ids of a cpulist, or None when ``text`` is not one. Empty text is the empty list.

    ``sep`` is the item separator: "," (cpulist) or None-like whitespace when given as " ".
    """
    text = text.strip()
    if not text:
        return ()
    items = text.split() if sep == " " else text.split(sep)
    ids: set[int] = set()
    for item in items:
        m = _ITEM.fullmatch(item.strip())
        if m is None:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi > MAX_ID:
            return None
        ids.update(range(lo, hi + 1))
    return tuple(sorted(ids))
