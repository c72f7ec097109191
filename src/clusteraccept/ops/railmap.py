"""The rail map a node's own topology gives (for ``init``, issue 23): GPU k -> the NIC behind its PCIe switch.

A person writing ``node_types.<t>.rails`` by hand reads ``nvidia-smi topo -m`` for each GPU's closest NIC and
``ibdev2netdev``/``ibstat`` for its port, netdev, link layer and rate. This does the same reading and refuses
to guess where the capture does not decide:

- GPU k's rail is the one NIC at its best link class, if that class is PIX (the NIC and the GPU under one PCIe
  switch, no host bridge between them) or else PXB (several switches, still no host bridge): nvidia-smi's
  own legend for the classes, quoted in every capture under tests/data/nvidia-smi-topo/. Where the best a GPU
  has is PHB, NODE or SYS its traffic crosses a host bridge or the CPU: no NIC is GPU k's, and ``init`` asks.
- several NICs at a GPU's best class (Mooncake's node: mlx5_0..2 all PIX to GPU0, an InfiniBand rail beside
  two Ethernet ports) is a question, not a rail: which of them is the rail only the cluster's owner knows;
- one NIC the closest of two GPUs (DGX-1: four NICs for eight GPUs) is a rail of each, and a question: a
  shared rail halves each GPU's share of the line, which the site file must then say on purpose;
- NICs closest to no GPU (storage, management: Ethernet ports beside the rails) are no rail: listed, unused.

Pure: the parsed topology and ports in, the map and its questions out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from clusteraccept.parsers._ib import IbPort
from clusteraccept.parsers.nvidia_smi_topo import TopoMatrix, link_rank

# The link classes a rail may be at: PIX ("at most a single PCIe bridge") and PXB ("multiple PCIe bridges,
# without traversing the PCIe Host Bridge"), nvidia-smi topo -m's legend.
RAIL_LINKS = ("PIX", "PXB")


@dataclass(frozen=True)
class DerivedRail:
    """GPU ``gpu``'s rail as the topology gives it: the site file's ``rails.gpuK`` entry."""

    gpu: int
    hca: str  # the RDMA device ("mlx5_0")
    link: str  # how close it is to the GPU: "PIX" or "PXB"
    port: int = 1
    netdev: str | None = None
    link_layer: str | None = None  # "InfiniBand" | "Ethernet" | ...
    rate_Gbps: float | None = None
    shared_with: tuple[int, ...] = ()  # the other GPUs whose closest NIC this is too


@dataclass(frozen=True)
class RailMap:
    rails: tuple[DerivedRail, ...]  # GPU order; a GPU with a question and no rail is absent
    unused: tuple[str, ...]  # NICs closest to no GPU ("mlx5_3 (Ethernet, eth3)": storage, management)
    questions: tuple[str, ...]  # what the user must decide, one line each


def _port_of(hca: str, ports: Sequence[IbPort]) -> tuple[IbPort | None, str]:
    """The one port of ``hca`` (merged from ibstat and ibdev2netdev), or a question when it has several."""
    mine = [p for p in ports if p.device == hca]
    if len(mine) > 1:
        up = [p for p in mine if p.is_up()]
        if len(up) == 1:
            return up[0], ""
        listed = ", ".join(str(p.port) for p in mine)
        return mine[0], f"{hca} has {len(mine)} ports ({listed}), not one up: port {mine[0].port} written"
    return (mine[0] if mine else None), ""


def _describe(hca: str, ports: Sequence[IbPort]) -> str:
    port, _ = _port_of(hca, ports)
    facts = [f for f in ((port.link_layer, port.netdev) if port else ()) if f]
    return f"{hca} ({', '.join(facts)})" if facts else hca


def derive(topo: TopoMatrix, ports: Sequence[IbPort] = ()) -> RailMap:
    """GPU k -> its rail NIC from ``topo`` (one node's ``nvidia-smi topo -m``) and the NICs' ``ports``."""
    closest: dict[int, tuple[str, ...]] = {}
    questions: list[str] = []
    for k, gpu in enumerate(topo.gpus):
        nics = topo.closest_nics(gpu)
        link = topo.link(gpu, nics[0]) if nics else ""
        near = ", ".join(_describe(n, ports) for n in nics)
        if not nics:
            questions.append(f"GPU{k}: the node reports no NIC: no rail")
        elif link_rank(link) > max(link_rank(c) for c in RAIL_LINKS):
            questions.append(
                f"GPU{k}: no NIC behind its PCIe switch (the closest, {link}: {near}): no rail; name one by "
                "hand if its traffic is meant to cross the host bridge"
            )
        elif len(nics) > 1:
            questions.append(
                f"GPU{k}: {len(nics)} NICs at {link} ({near}): which one is its rail? (the others are "
                "storage or management, or a rail of several NICs)"
            )
        else:
            closest[k] = nics
    owners: dict[str, list[int]] = {}
    for k, (nic,) in closest.items():
        owners.setdefault(nic, []).append(k)
    rails: list[DerivedRail] = []
    for k, (nic,) in closest.items():
        port, said = _port_of(nic, ports)
        if said and said not in questions:
            questions.append(said)
        others = tuple(g for g in owners[nic] if g != k)
        rails.append(
            DerivedRail(
                gpu=k,
                hca=nic,
                link=topo.link(k, nic),
                port=port.port if port else 1,
                netdev=port.netdev if port else None,
                link_layer=port.link_layer if port else None,
                rate_Gbps=port.rate_Gbps if port else None,
                shared_with=others,
            )
        )
    for nic, gpus in owners.items():
        if len(gpus) > 1:
            questions.append(
                f"{nic} is the closest NIC of {' and '.join(f'GPU{g}' for g in gpus)}: a shared rail "
                f"(each GPU gets 1/{len(gpus)} of its line); keep it if that is the design"
            )
    asked = {n for k, gpu in enumerate(topo.gpus) if k not in closest for n in topo.closest_nics(gpu)}
    unused = tuple(_describe(n, ports) for n in topo.nics if n not in owners and n not in asked)
    return RailMap(tuple(sorted(rails, key=lambda r: r.gpu)), unused, tuple(questions))
