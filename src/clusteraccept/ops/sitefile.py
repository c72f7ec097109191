"""The site file ``init`` writes (issue 23): node types from the nodes' shapes (ops/shape.py), commented with
where each value came from, the questions the user must decide and the nodes that deviate.

Pure: shapes in, YAML text out. What the text holds is what the topology evidence decides: node types, GPU
count and model, link layer, the rail map (hca, port, rate), ``numa_expected``. No baselines (the first run
judges against peers and the line rate, then ``--propose-baselines``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import hostlist
import yaml

from clusteraccept.ops.railmap import DerivedRail
from clusteraccept.ops.shape import ABSENT, Deviation, NodeShape, deviations, majority, node_types


@dataclass(frozen=True)
class NodeTypeDraft:
    name: str
    shapes: tuple[NodeShape, ...]
    rails: tuple[DerivedRail, ...]  # the majority's rail map (a node whose rail fields all agree with it)
    questions: tuple[str, ...]
    unused: tuple[str, ...]
    deviations: tuple[Deviation, ...]
    numa_expected: bool

    @property
    def gpus(self) -> int:
        return int(majority(self.shapes)["gpus"])

    @property
    def gpu_model(self) -> str:
        return self.shapes[0].kind[0]

    @property
    def link_layer(self) -> str | None:
        """The rails' link layer by majority; None where no rail's is known."""
        layers = Counter(r.link_layer for r in self.rails if r.link_layer)
        return layers.most_common(1)[0][0] if layers else None

    @property
    def inventory(self) -> str:
        """The majority's: "8x NVIDIA H100 80GB HBM3, NICs: 8x InfiniBand (MT4129 InfiniBand)"."""
        common = majority(self.shapes)
        models = ", ".join(self.shapes[0].kind[1:])
        return f"{common['gpus']}x {self.gpu_model}, NICs: {common['nics']} ({models})"


def _type_name(model: str, taken: set[str]) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100``: the first word with a digit after the vendor; unique."""
    words = [w for w in re.split(r"[^A-Za-z0-9]+", model) if w and w.upper() not in ("NVIDIA", "TESLA")]
    base = next((w.lower() for w in words if re.search(r"[0-9]", w)), "gpu")
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    taken.add(name)
    return name


def _numa_expected(common: dict[str, str], rails: Sequence[DerivedRail]) -> bool:
    """True where, by the type's majority, every rail's GPU and NIC report one NUMA node each and they
    agree (a VM's GPUs without NUMA information, or a numa=off kernel, cannot be judged on it)."""
    pairs = [(common.get(f"gpu{r.gpu}.numa", ABSENT), common.get(f"{r.hca}.numa", ABSENT)) for r in rails]
    return bool(pairs) and all(g == n and g != ABSENT for g, n in pairs)


def _representative(members: Sequence[NodeShape], common: dict[str, str]) -> NodeShape:
    """The node whose rail map the type takes: one that agrees with the majority on the GPU count and every
    rail, else the one that disagrees on the fewest of them (never merely the first node)."""
    keys = [f for f in common if f.startswith("rail.") or f == "gpus"]

    def off(s: NodeShape) -> int:
        return sum(s.fields.get(f, ABSENT) != common[f] for f in keys)

    return min(members, key=off)  # min keeps node order among equals


def drafts(shapes: Sequence[NodeShape]) -> list[NodeTypeDraft]:
    """One draft per node type (kind), the largest first."""
    out: list[NodeTypeDraft] = []
    taken: set[str] = set()
    for kind, members in node_types(shapes).items():
        name = _type_name(kind[0], taken)
        common = majority(members)
        rm = _representative(members, common).rail_map
        out.append(
            NodeTypeDraft(
                name=name,
                shapes=tuple(members),
                rails=rm.rails if rm else (),
                questions=rm.questions if rm else ("nvidia-smi topo -m could not be read: no rail map",),
                unused=rm.unused if rm else (),
                deviations=tuple(deviations(name, members)),
                numa_expected=_numa_expected(common, rm.rails if rm else ()),
            )
        )
    return out


def _rate(shapes: Sequence[NodeShape], hca: str) -> str | None:
    rates = Counter(s.fields.get(f"{hca}.rate_Gbps", ABSENT) for s in shapes)
    rate = rates.most_common(1)[0][0] if rates else ABSENT
    return None if rate == ABSENT else rate


def render(
    name: str,
    slurm: Mapping[str, str],
    types: Sequence[NodeTypeDraft],
    source: str,
    env: Mapping[str, str] | None = None,
) -> str:
    """The site file's text. ``slurm``: its slurm section (executor, partition, access); ``source``: where
    the evidence is (the init run's directory); ``env``: what the probe jobs were given, every job's too."""
    all_nodes = [s.node for t in types for s in t.shapes]
    lines = [
        f"# Written by `python -m clusteraccept init` from the topology evidence of {len(all_nodes)} node(s)",
        f"# ({source}). Read every '# decide:' line before the first run; no baselines yet: the first run",
        "# judges against peers and the line rate, then `pytest suites/ --propose-baselines`.",
        f"name: {_scalar(name)}",
        "slurm:",
        *(f"  {k}: {_scalar(v)}" for k, v in slurm.items()),
    ]
    if env:
        lines += ["env:", *(f"  {k}: {json.dumps(v)}" for k, v in env.items())]
    lines += [f'nodes: "{hostlist.collect_hostlist(all_nodes)}"', "node_types:"]
    for t in types:
        nodes = [s.node for s in t.shapes]
        lines.append(f"  {t.name}:  # {len(nodes)} node(s); {t.inventory}")
        if len(types) > 1:
            lines.append(f'    nodes: "{hostlist.collect_hostlist(nodes)}"')
        lines += [f"    gpus: {t.gpus}", f"    gpu_model: {json.dumps(t.gpu_model)}"]
        layers = Counter(r.link_layer for r in t.rails if r.link_layer)
        # the rails this file can describe: ibverbs HCAs that are InfiniBand or RoCE ports (an EFA device's
        # link layer reads "Unspecified": its fabric section is the user's to write)
        known = t.link_layer in LINK_LAYERS
        if known:
            lines.append(f"    link_layer: {t.link_layer}")
            if len(layers) > 1:
                lines.append(f"    # decide: the rails' link layers differ: {dict(layers)}")
        elif t.rails:
            said = f"reads {t.link_layer}" if t.link_layer else "was not read (ibstat)"
            lines.append(
                f"    # decide: the rail NICs' link layer {said}: not InfiniBand or RoCE; write the node "
                "type's fabric (efa, slingshot, tcpx...) and its section, then the rails below"
            )
        lines.append(
            f"    numa_expected: {'true' if t.numa_expected else 'false'}"
            + (
                ""
                if t.numa_expected
                else "  # GPU and NIC NUMA nodes are not both known and equal on every rail"
            )
        )
        lead = "" if known else "# "
        if t.rails:
            lines.append(f"    {lead}rails:  # GPU k -> the NIC behind its PCIe switch (nvidia-smi topo -m)")
        for r in t.rails:
            keys = [f"hca: {_scalar(r.hca)}"] + ([f"port: {r.port}"] if r.port != 1 else [])
            keys += [f"netdev: {_scalar(r.netdev)}"] if r.netdev else []
            rate = _rate(t.shapes, r.hca)
            keys += [f"rate_Gbps: {rate}"] if rate else []
            shared = f"; shared with GPU{', GPU'.join(map(str, r.shared_with))}" if r.shared_with else ""
            lines.append(f"    {lead}  gpu{r.gpu}: {{{', '.join(keys)}}}  # {r.link}{shared}")
        lines += [f"    # decide: {q}" for q in t.questions]
        if t.unused:
            lines.append(f"    # not rails (closest to no GPU: storage, management): {', '.join(t.unused)}")
        if t.deviations:
            lines.append(
                f"    # {len(t.deviations)} deviation(s) from this type's majority: the .deviations.txt"
            )
    return "\n".join(lines) + "\n"


# The link layers whose rails a site file names by hca (site/nodes.py: InfiniBand, and Ethernet for RoCE).
LINK_LAYERS = ("InfiniBand", "Ethernet")

# The IOMMU modes GPUDirect peer-to-peer works under on bare metal: off, or passthrough (iommu=pt); a
# translating IOMMU (DMA, DMA-FQ) breaks or slows it (checks/gpudirect.py _iommu, NVIDIA's advice).
GPUDIRECT_IOMMU = ("none", "identity")


def gpudirect_lines(modes: Mapping[str, set[str]]) -> list[str]:
    """The ``gpudirect:`` section: the modes GPUDirect works under, not whatever the nodes run (a node in a
    translating mode would then pass); what was observed as a comment, a translating mode as a question."""
    if not modes:
        return ["# gpudirect: no node's GPU IOMMU mode was read; add gpudirect: {iommu: [none, identity]}"]
    seen = Counter(m for ms in modes.values() for m in ms)
    observed = ", ".join(f"{m} on {n} node(s)" for m, n in sorted(seen.items()))
    lines = [
        "gpudirect:",
        f"  iommu: [{', '.join(GPUDIRECT_IOMMU)}]  # off or passthrough; observed: {observed}",
    ]
    odd = sorted(m for m in seen if m not in GPUDIRECT_IOMMU)
    for m in odd:
        nodes = hostlist.collect_hostlist([n for n, ms in modes.items() if m in ms])
        lines.append(
            f"# decide: gpudirect.iommu: {nodes} run the GPUs' IOMMU in mode {m}: GPUDirect peer-to-peer "
            "breaks or slows there and the first run fails it; accept it here only on purpose"
        )
    return lines


def _scalar(value: str) -> str:
    """A YAML scalar as the site file's readers expect it: plain where YAML reads it back as the same
    string, else quoted (a path, a name YAML would read as a number or a boolean)."""
    return (
        value
        if yaml.safe_load(value) == value and re.fullmatch(r"[A-Za-z0-9_.-]+", value)
        else json.dumps(value)
    )


def deviation_table(types: Sequence[NodeTypeDraft]) -> str:
    """node, field, majority, value: one line each, in node order, aligned (the terminal and the file)."""
    rows = [("node", "node type", "field", "majority", "its value")]
    rows += [(d.node, d.node_type, d.field, d.majority, d.value) for t in types for d in t.deviations]
    if len(rows) == 1:
        return "no node deviates from its node type's majority\n"
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, [*widths, 0], strict=True)).rstrip() + "\n" for r in rows
    )
