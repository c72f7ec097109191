"""``scontrol show topology``: the switches (topology/tree), blocks (topology/block) or rings (topology/ring).

One record per line, ``Key=Value`` pairs, from SchedMD/slurm ``_print_topo_record()`` in
src/plugins/topology/tree/topology_tree.c, .../block/topology_block.c and .../ring/topology_ring.c
(and src/api/topo_info.c ``slurm_print_topo_record()`` before 23.11)::

    SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]
    SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-4] Switches=leaf[1-2]
    BlockName=b1 BlockIndex=0 Nodes=node[01-16] BlockSize=16                      (23.11+)
    AggregatedBlock=b[1-2] BlockIndex=2 Nodes=node[01-32] BlockSize=32            (24.05.5+, BlockSizes)
    RingName=r1 Nodes=node[1-4] RingSize=4                                        (26.05+)

``blocks`` maps each base block (BlockName) or leaf switch (Level 0) to its node names, expanded with
python-hostlist. topology/flat prints nothing: empty output parses to no records. Lines before the first
record (a shell prompt, a command echo) are skipped; anything else that is not a record is an error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import hostlist

from clusteraccept.errors import ParseError


@dataclass(frozen=True)
class Switch:
    name: str
    level: int
    link_speed: int
    nodes: tuple[str, ...]
    switches: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    name: str
    index: int
    nodes: tuple[str, ...]
    size: int  # BlockSize: the smallest block size configured (nodes may be fewer when nodes are missing)
    aggregated: bool  # an AggregatedBlock line (a higher BlockSizes level), not a base block


@dataclass(frozen=True)
class Ring:
    name: str
    nodes: tuple[str, ...]
    size: int


@dataclass(frozen=True)
class ScontrolTopology:
    plugin: str | None  # "tree", "block", "ring"; None for empty output (topology/flat)
    switches: tuple[Switch, ...]
    block_records: tuple[Block, ...]
    rings: tuple[Ring, ...]
    blocks: Mapping[str, tuple[str, ...]]  # base block / leaf switch -> node names

    def block_of(self, node: str) -> str | None:
        return next((b for b, nodes in self.blocks.items() if node in nodes), None)


_KIND = {"SwitchName": "tree", "BlockName": "block", "AggregatedBlock": "block", "RingName": "ring"}
_PAIR = re.compile(r"([A-Za-z]+)=(\S*)")
_REQUIRED = {
    "SwitchName": ("Level", "LinkSpeed"),
    "BlockName": ("BlockIndex", "BlockSize"),
    "AggregatedBlock": ("BlockIndex", "BlockSize"),
    "RingName": ("RingSize",),
}
_KEYS = {
    "tree": {"SwitchName", "Level", "LinkSpeed", "Nodes", "Switches"},
    "block": {"BlockName", "AggregatedBlock", "BlockIndex", "Nodes", "BlockSize"},
    "ring": {"RingName", "Nodes", "RingSize"},
}


def _expand(expr: str, no: int) -> tuple[str, ...]:
    if not expr or expr == "(null)":
        return ()
    try:
        return tuple(hostlist.expand_hostlist(expr))
    except (hostlist.BadHostlist, ValueError, IndexError, OverflowError, RecursionError) as exc:
        raise ParseError(no, "a Slurm hostlist", f"{expr[:60]} ({exc})") from None


def _int(fields: dict[str, str], key: str, no: int) -> int:
    v = fields[key]
    if not re.fullmatch(r"[0-9]+", v):
        raise ParseError(no, f"{key}=<unsigned integer>", f"{key}={v}")
    return int(v)


def parse(text: str) -> ScontrolTopology:
    """Parse ``scontrol show topology`` (tree, block or ring plugin)."""
    plugin: str | None = None
    switches: list[Switch] = []
    blocks: list[Block] = []
    rings: list[Ring] = []
    started = False
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        first = _PAIR.match(line)
        kind = _KIND.get(first.group(1)) if first else None
        if kind is None:
            if not started:
                continue  # a prompt or command echo before the records
            raise ParseError(no, "a SwitchName=, BlockName=, AggregatedBlock= or RingName= record", line[:80])
        assert first is not None
        started = True
        if plugin not in (None, kind):
            raise ParseError(no, f"records of one topology plugin ({plugin})", line[:80])
        plugin = kind
        fields: dict[str, str] = {}
        for tok in line.split():
            m = _PAIR.fullmatch(tok)
            if not m or m.group(1) not in _KEYS[kind] or m.group(1) in fields:
                raise ParseError(no, f"Key=Value pairs of a {kind} record", tok[:60])
            fields[m.group(1)] = m.group(2)
        key = first.group(1)
        missing = [k for k in _REQUIRED[key] if k not in fields]
        if missing or not fields[key]:
            raise ParseError(no, f"{key}=<name> with {', '.join(_REQUIRED[key])}", line[:80])
        nodes = _expand(fields.get("Nodes", ""), no)
        if kind == "tree":
            switches.append(
                Switch(
                    fields[key],
                    _int(fields, "Level", no),
                    _int(fields, "LinkSpeed", no),
                    nodes,
                    _expand(fields.get("Switches", ""), no),
                )
            )
        elif kind == "block":
            blocks.append(
                Block(
                    fields[key],
                    _int(fields, "BlockIndex", no),
                    nodes,
                    _int(fields, "BlockSize", no),
                    key == "AggregatedBlock",
                )
            )
        else:
            rings.append(Ring(fields[key], nodes, _int(fields, "RingSize", no)))
    if text.strip() and plugin is None:
        raise ParseError(0, "scontrol show topology records (or no output at all)", text.strip()[:80])
    if plugin == "tree":
        groups = {s.name: s.nodes for s in switches if s.level == 0}
    elif plugin == "block":
        groups = {b.name: b.nodes for b in blocks if not b.aggregated}
    else:
        groups = {r.name: r.nodes for r in rings}
    return ScontrolTopology(plugin, tuple(switches), tuple(blocks), tuple(rings), groups)
