"""What a node is made of, as ``init`` (issue 23) reads it from the topology probe's evidence, and the nodes
that differ from their type's majority: the first bring-up findings.

A node's *kind* is what makes a node type: its GPU model and the models of its RDMA NICs with their link
layers (ibstat's CA type: MT4129 is a ConnectX-7). Its *fields* are what every node of a type must share
and a site file fixes or the topology checks judge: the GPU and NIC inventory (how many; a GPU fallen off the
bus, a NIC not seen), the rail map (ops/railmap.py), each GPU's and NIC's NUMA node and PCIe link (width and
speed, as trained), each NIC's rate and firmware. Node state that is not shape (peermem, ACS, IOMMU mode)
is left to the run. A node whose kind differs is another node type (the hardware differs); a node whose
fields differ from its type's majority is a deviation, never folded into a type of its own: a node with 7
of its 8 GPUs is an 8-GPU node with a finding, not a 7-GPU type.

Pure: NodeEvidence in (checks/hostfacts.py: the same reading the topology checks use), shapes out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from clusteraccept.checks.hostfacts import NodeEvidence, Pci, gpu_addresses, parsed
from clusteraccept.ops.railmap import RailMap, derive
from clusteraccept.parsers import ibstat, nvidia_smi_topo
from clusteraccept.parsers._ib import IbPort
from clusteraccept.probes.topology import IB_CLASS_DIR, PCI_DEVICES

ABSENT = "absent"  # a field a node does not report (a GPU or NIC fewer, an unreadable attribute)


@dataclass(frozen=True)
class NodeShape:
    node: str
    kind: tuple[str, ...]  # ("NVIDIA H100 80GB HBM3", "MT4129 InfiniBand"): what makes a node type
    fields: Mapping[str, str]  # "gpu3.numa" -> "0", "rail.gpu3" -> "mlx5_3 port 1", ...
    rail_map: RailMap | None  # None where nvidia-smi topo -m could not be read
    problems: tuple[str, ...]  # evidence that could not be read, one line each


@dataclass(frozen=True)
class Deviation:
    """``node``'s ``field`` is ``value`` where most nodes of its type say ``majority``."""

    node: str
    node_type: str
    field: str
    majority: str
    value: str


def _pcie(dev: Pci) -> str:
    width, speed = dev.attr("current_link_width"), dev.attr("current_link_speed")
    return f"x{width} {speed}" if width and speed else ABSENT


def _with_netdev(port: IbPort, ne: NodeEvidence) -> IbPort:
    """``port`` with its network interface where ibstat does not say and its device has exactly one (the
    topology probe's listing of /sys/class/infiniband/<hca>/device/net); a device of several interfaces (a
    dual-port NIC) is left for the user."""
    names = ne.listing(f"{IB_CLASS_DIR}/{port.device}/device/net") or []
    return replace(port, netdev=names[0]) if port.netdev is None and len(names) == 1 else port


def shape(node: str, ne: NodeEvidence) -> NodeShape:
    """The shape of one node from its topology evidence."""
    problems: list[str] = []
    fields: dict[str, str] = {}
    addrs, why = gpu_addresses(ne)
    if addrs is None:
        problems.append(f"{node}: {why}")
    names = ne.gpu_names()
    named = Counter(names.values())
    model = named.most_common(1)[0][0] if named else "no GPU"
    for k, addr in sorted((addrs or {}).items()):
        dev = Pci(ne, f"{PCI_DEVICES}/{addr}")
        numa = dev.numa()
        fields[f"gpu{k}.numa"] = ABSENT if numa is None else str(numa)
        fields[f"gpu{k}.pcie"] = _pcie(dev)
        if names.get(k) != model:
            fields[f"gpu{k}.model"] = names.get(k, ABSENT)
    ports, ib_err = parsed(ibstat.parse, "ibstat", ne.command("ibstat"))
    if ib_err and ne.command("ibstat"):
        problems.append(f"{node}: {ib_err}")
    port_list = tuple(_with_netdev(p, ne) for p in (ports.ports() if ports else ()))
    ca_types = {ca.name: ca.ca_type for ca in ports.cas} if ports else {}
    hcas = ne.listing(IB_CLASS_DIR) or []
    layers: Counter[str] = Counter()
    models: set[str] = set()
    for hca in sorted(hcas):
        dev = Pci(ne, f"{IB_CLASS_DIR}/{hca}/device")
        numa = dev.numa()
        fields[f"{hca}.numa"] = ABSENT if numa is None else str(numa)
        fields[f"{hca}.pcie"] = _pcie(dev)
        port = next((p for p in port_list if p.device == hca), None)
        layer = (port.link_layer if port else None) or "unknown link layer"
        layers[layer] += 1
        if port and port.link_layer and ca_types.get(hca):  # an unread ibstat is a deviation, not a type
            models.add(f"{ca_types[hca]} {port.link_layer}")
        fields[f"{hca}.rate_Gbps"] = f"{port.rate_Gbps:g}" if port and port.rate_Gbps else ABSENT
        fields[f"{hca}.firmware"] = (port.fw_version if port else None) or ABSENT
    topo, topo_err = parsed(nvidia_smi_topo.parse, "nvidia-smi topo -m", ne.command("nvidia-smi-topo"))
    rail_map = derive(topo, port_list) if topo else None
    if topo_err:
        problems.append(f"{node}: {topo_err}")
    for r in rail_map.rails if rail_map else ():
        fields[f"rail.gpu{r.gpu}"] = f"{r.hca} port {r.port}"
    for k in range(len(addrs or {})):
        fields.setdefault(f"rail.gpu{k}", "none: " + _question(rail_map, k))
    fields["gpus"] = str(len(names))
    fields["nics"] = ", ".join(f"{n}x {layer}" for layer, n in sorted(layers.items())) or "none"
    kind = (model, *sorted(models))
    return NodeShape(node, kind, fields, rail_map, tuple(problems))


def _question(rail_map: RailMap | None, gpu: int) -> str:
    if rail_map is None:
        return "nvidia-smi topo -m unread"
    return next((q for q in rail_map.questions if q.startswith(f"GPU{gpu}:")), "no NIC")


def node_types(shapes: Sequence[NodeShape]) -> dict[tuple[str, ...], list[NodeShape]]:
    """Nodes grouped by kind, the largest group first (node order within each). A node whose NICs' models
    could not be read (no ibstat) joins the largest type of its GPU model: what it lacks is its deviation."""
    groups: dict[tuple[str, ...], list[NodeShape]] = {}
    for s in shapes:
        groups.setdefault(s.kind, []).append(s)
    for kind in [k for k in groups if len(k) == 1]:
        home = max(
            (k for k in groups if k[0] == kind[0] and len(k) > 1), key=lambda k: len(groups[k]), default=None
        )
        if home is not None:
            groups[home] = sorted(groups[home] + groups.pop(kind), key=shapes.index)
    return dict(sorted(groups.items(), key=lambda kv: -len(kv[1])))


def majority(shapes: Sequence[NodeShape]) -> dict[str, str]:
    """Each field's most common value over ``shapes`` (a tie: :func:`_tie_rank`)."""
    names = list(dict.fromkeys(f for s in shapes for f in s.fields))
    out: dict[str, str] = {}
    for f in names:
        counts = Counter(s.fields.get(f, ABSENT) for s in shapes)
        top = max(counts.values())
        tied = list(dict.fromkeys(v for s in shapes if counts[v := s.fields.get(f, ABSENT)] == top))
        out[f] = min(tied, key=lambda v: _tie_rank(f, v))
    return out


def _tie_rank(field: str, value: str) -> tuple[int, int]:
    """Among values as common as each other (two nodes, one of them broken): a value read before one that
    is absent, and the larger GPU count (a GPU falls off the bus; none appears), else the first node's."""
    more = -int(value) if field == "gpus" and value.isdigit() else 0
    return (value == ABSENT, more)


def deviations(type_name: str, shapes: Sequence[NodeShape]) -> list[Deviation]:
    """Every (node, field) of one node type that differs from the type's majority, in node order."""
    common = majority(shapes)
    return [
        Deviation(s.node, type_name, f, want, got)
        for s in shapes
        for f, want in common.items()
        if (got := s.fields.get(f, ABSENT)) != want
    ]
