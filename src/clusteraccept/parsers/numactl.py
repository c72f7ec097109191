"""``numactl -H`` / ``numactl --hardware``: NUMA nodes, their CPUs and memory, the distance matrix.

Layout (numactl.c ``hardware()``, ``print_node_cpus()``, ``print_distances()``)::

    available: 2 nodes (0-1)            ("(0,2-3)" when node ids have holes)
    node 0 cpus: 0 1 2 ... 15           (empty for memory-only nodes: HBM, CXL, GPU memory)
    node 0 size: 256924 MB              ("<not available>" when the kernel does not say)
    node 0 free: 249438 MB
    ...
    node distances:                     (or "No distance information available.")
    node   0   1
      0:  10  11
      1:  11  10

``--cpu-compress`` prints ranges instead: ``node 0 cpus: 0-15, 32-47 (32)``. Rows may carry a
trailing space. ``No NUMA available on this system`` parses to zero nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._cpulist import parse_ids

_AVAILABLE = re.compile(r"available:\s*([0-9]+) nodes?\s*\(([0-9,\-]*)\)")
_NODE = re.compile(r"node ([0-9]+) (cpus|size|free):(.*)")
_MB = re.compile(r"([0-9]+) MB")
_COMPRESSED = re.compile(r"(.*?)\s*\(([0-9]+)\)")
_DIST_ROW = re.compile(r"([0-9]+):((?:\s+[0-9]+)*)")


@dataclass(frozen=True)
class NumaNode:
    """One node: its CPUs (empty for memory-only nodes) and memory in MiB (numactl's "MB" is >> 20)."""

    node: int
    cpus: tuple[int, ...]
    size_MB: int | None  # None: "<not available>"
    free_MB: int | None


@dataclass(frozen=True)
class NumactlHardware:
    """``numactl -H``. ``distances[i][j]`` is between ``nodes[i]`` and ``nodes[j]`` (empty if not given)."""

    nodes: tuple[NumaNode, ...]
    distances: tuple[tuple[int, ...], ...]

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.node for n in self.nodes)

    def node(self, node: int) -> NumaNode:
        """The node with id ``node`` (KeyError if absent)."""
        for n in self.nodes:
            if n.node == node:
                return n
        raise KeyError(f"no NUMA node {node} (known: {self.node_ids})")

    def cpus(self, node: int) -> frozenset[int]:
        return frozenset(self.node(node).cpus)

    def node_of_cpu(self, cpu: int) -> int | None:
        """The node whose CPU list holds ``cpu``, None if none does."""
        return next((n.node for n in self.nodes if cpu in n.cpus), None)

    def distance(self, a: int, b: int) -> int | None:
        """SLIT distance between two nodes (10 = local); None when numactl printed no distances."""
        if not self.distances:
            return None
        ids = self.node_ids
        return self.distances[ids.index(self.node(a).node)][ids.index(self.node(b).node)]


def _cpus(value: str, no: int) -> tuple[int, ...]:
    value = value.strip()
    m = _COMPRESSED.fullmatch(value)
    if m is not None:  # --cpu-compress: "0-15, 32-47 (32)"
        ids = parse_ids(m.group(1).replace(" ", ""))
        if ids is None or len(ids) != int(m.group(2)):
            raise ParseError(no, "CPU ranges with their count, like '0-15, 32-47 (32)'", value)
        return ids
    ids = parse_ids(value, sep=" ")
    if ids is None:
        raise ParseError(no, "space-separated CPU ids", value)
    return ids


def _mem(value: str, no: int) -> int | None:
    value = value.strip()
    if value == "<not available>":
        return None
    m = _MB.fullmatch(value)
    if m is None:
        raise ParseError(no, "'<number> MB' or '<not available>'", value)
    return int(m.group(1))


def parse(text: str) -> NumactlHardware:
    """Parse ``numactl -H`` output; noise before ``available:`` and after the matrix is skipped."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith("available:")), None)
    if start is None:
        if any(ln.strip() == "No NUMA available on this system" for ln in lines):
            return NumactlHardware(nodes=(), distances=())
        raise ParseError(0, "an 'available: N nodes (...)' line", text[:80])
    m = _AVAILABLE.fullmatch(lines[start].strip())
    ids = parse_ids(m.group(2)) if m else None
    if m is None or ids is None or len(ids) != int(m.group(1)):
        raise ParseError(start + 1, "'available: N nodes (ids)' with N ids", lines[start].strip())

    fields: dict[int, dict[str, tuple[str, int]]] = {}
    i = start + 1
    while i < len(lines):
        s = lines[i].strip()
        no = i + 1
        nm = _NODE.fullmatch(s)
        if nm is None:
            break
        node, key = int(nm.group(1)), nm.group(2)
        if node not in ids or key in fields.setdefault(node, {}):
            raise ParseError(no, f"one '{key}' line per node of {m.group(2)}", s)
        fields[node][key] = (nm.group(3), no)
        i += 1
    nodes = []
    for node in ids:
        got = fields.get(node, {})
        for key in ("cpus", "size", "free"):
            if key not in got:
                raise ParseError(
                    i + 1 if i < len(lines) else len(lines),
                    f"'node {node} {key}:' line",
                    lines[i].strip() if i < len(lines) else "end of input",
                )
        nodes.append(
            NumaNode(
                node=node, cpus=_cpus(*got["cpus"]), size_MB=_mem(*got["size"]), free_MB=_mem(*got["free"])
            )
        )
    return NumactlHardware(nodes=tuple(nodes), distances=_distances(lines, i, ids))


def _distances(lines: list[str], i: int, ids: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    end = "end of input"
    s = lines[i].strip() if i < len(lines) else end
    if s == "No distance information available.":
        return ()
    if s != "node distances:":
        raise ParseError(min(i + 1, len(lines)), "'node distances:'", s)
    head = lines[i + 1].split() if i + 1 < len(lines) else [end]
    if head[:1] != ["node"] or head[1:] != [str(n) for n in ids]:
        raise ParseError(min(i + 2, len(lines)), f"'node {' '.join(map(str, ids))}'", " ".join(head))
    rows: list[tuple[int, ...]] = []
    for k, node in enumerate(ids):
        j = i + 2 + k
        s = lines[j].strip() if j < len(lines) else end
        dm = _DIST_ROW.fullmatch(s)
        values = tuple(int(v) for v in dm.group(2).split()) if dm else ()
        if dm is None or int(dm.group(1)) != node or len(values) != len(ids):
            raise ParseError(min(j + 1, len(lines)), f"'{node}:' and {len(ids)} distances", s)
        rows.append(values)
    return tuple(rows)
