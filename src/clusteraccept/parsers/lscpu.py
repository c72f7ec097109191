"""``lscpu`` (util-linux): the NUMA section, plus the CPU counts a topology check needs.

util-linux sys-utils/lscpu.c ``print_summary()`` prints "Key: value" lines; since 2.37 grouped
under section lines ("NUMA:", "Caches (sum of all):") and indented, before that flat::

    NUMA node(s):          2            new:  NUMA:
    NUMA node0 CPU(s):     0-15,32-47          NUMA node(s):          4
    NUMA node1 CPU(s):     16-31,48-63         NUMA node2 CPU(s):          (memory-only node: empty)

The NUMA section is left out when the kernel reports no nodes (``numa_nodes`` is then 0). CPU lists
use the kernel cpulist syntax (``print_cpuset()`` -> ``cpulist_create()``). Lines that are not
"Key: value" (wrapped Flags on a narrow terminal, "..." elisions in pasted output) are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._cpulist import parse_ids

_FIELD = re.compile(r"\s*([A-Za-z][^:]*?):(?:\s+(.*?))?\s*")
_NODE_KEY = re.compile(r"NUMA node([0-9]+) CPU\(s\)")
_INT_KEYS = {
    "CPU(s)": "cpus_total",
    "Thread(s) per core": "threads_per_core",
    "Core(s) per socket": "cores_per_socket",
    "Socket(s)": "sockets",
    "NUMA node(s)": "numa_nodes",
}


@dataclass(frozen=True)
class LscpuNode:
    node: int
    cpus: tuple[int, ...]  # empty for memory-only nodes


@dataclass(frozen=True)
class Lscpu:
    """What ``lscpu`` says about CPUs and NUMA; a count is None when lscpu did not print it."""

    numa_nodes: int  # "NUMA node(s):" (0 when the NUMA section is absent)
    nodes: tuple[LscpuNode, ...]  # "NUMA nodeN CPU(s):" lines, in printed order
    cpus_total: int | None  # "CPU(s):"
    online_cpus: tuple[int, ...] | None  # "On-line CPU(s) list:"
    sockets: int | None
    cores_per_socket: int | None
    threads_per_core: int | None
    model_name: str | None
    architecture: str | None

    def cpus(self, node: int) -> frozenset[int]:
        """CPUs of NUMA node ``node`` (KeyError if lscpu listed no such node)."""
        for n in self.nodes:
            if n.node == node:
                return frozenset(n.cpus)
        raise KeyError(f"no NUMA node {node} (known: {[n.node for n in self.nodes]})")

    def node_of_cpu(self, cpu: int) -> int | None:
        return next((n.node for n in self.nodes if cpu in n.cpus), None)


def parse(text: str) -> Lscpu:
    """Parse ``lscpu`` output (new grouped or old flat layout)."""
    ints: dict[str, int] = {}
    strs: dict[str, str] = {}
    nodes: list[LscpuNode] = []
    online: tuple[int, ...] | None = None
    dashes: set[str] = set()
    seen_any = False
    last_no = 0
    for no, raw in enumerate(text.split("\n"), start=1):
        m = _FIELD.fullmatch(raw.rstrip("\r"))
        if m is None:
            continue
        key, value = m.group(1), m.group(2) or ""
        nm = _NODE_KEY.fullmatch(key)
        if nm is not None:
            ids = parse_ids(value)
            if ids is None:
                raise ParseError(no, f"a CPU list like 0-15,32-47 for NUMA node{nm.group(1)}", value)
            if any(n.node == int(nm.group(1)) for n in nodes):
                raise ParseError(no, f"NUMA node{nm.group(1)} once", raw.strip())
            nodes.append(LscpuNode(node=int(nm.group(1)), cpus=ids))
            seen_any, last_no = True, no
        elif key in _INT_KEYS:
            # lscpu prints "-" where it cannot count (Socket(s) on some arm64 boards).
            if not re.fullmatch(r"[0-9]+|-", value):
                raise ParseError(no, f"a number or '-' after '{key}:'", value)
            if _INT_KEYS[key] in ints or _INT_KEYS[key] in dashes:
                raise ParseError(no, f"'{key}:' once", raw.strip())
            if value == "-":
                dashes.add(_INT_KEYS[key])
            else:
                ints[_INT_KEYS[key]] = int(value)
            seen_any, last_no = True, no
        elif key == "On-line CPU(s) list":
            online = parse_ids(value)
            if online is None:
                raise ParseError(no, "a CPU list after 'On-line CPU(s) list:'", value)
            seen_any = True
        elif key in ("Model name", "Architecture") and key not in strs:
            strs[key] = value
            seen_any = True
    if not seen_any:
        raise ParseError(0, "lscpu 'Key: value' lines (CPU(s):, NUMA node(s):, ...)", text[:80])
    numa = ints.get("numa_nodes", 0)
    if numa != len(nodes):
        raise ParseError(
            last_no,
            f"{numa} 'NUMA nodeN CPU(s):' lines after 'NUMA node(s): {numa}'",
            f"{len(nodes)} such lines",
        )
    return Lscpu(
        numa_nodes=numa,
        nodes=tuple(nodes),
        cpus_total=ints.get("cpus_total"),
        online_cpus=online,
        sockets=ints.get("sockets"),
        cores_per_socket=ints.get("cores_per_socket"),
        threads_per_core=ints.get("threads_per_core"),
        model_name=strs.get("Model name"),
        architecture=strs.get("Architecture"),
    )
