"""Simulated host part for the topology family: an 8x H100 + 8x ConnectX-7 node (sim/hosts.py).

Built from REAL captures (tests/data/*/SOURCES.md):
- ``nvidia-smi topo -m``: tests/data/nvidia-smi-topo/h100-8nic-sglang30401.txt (8x H100, mlx5_0..7, GPU k
  PIX to NIC k, GPUs/NICs 0-3 on NUMA node 0 and 4-7 on node 1), NIC legend renamed to the site's rails;
- ``ibstat``: tests/data/ibstat/h100-8xcx7-ndr400-ib-plus-cx6dx-eth-mooncake2039.txt, its 8 ConnectX-7
  InfiniBand CAs (Rate 400, Active/LinkUp) renamed to the site's rail HCAs, the 4 Ethernet CAs dropped;
- ``nvidia-smi --query-gpu=index,name,pci.bus_id`` in the format of the real 2x H200 capture.
The PCI addresses of that sglang machine are not published: the tree below is PLAUSIBLE, documented as
such. Each rail k has its own root complex ``pci0000:RR`` (R = NIC bus - 3, NIC bus from the rail's
``ibp<bus>s0`` netdev name, else a default), a PCIe switch (upstream port RR+1:00.0, downstream ports
RR+2:00.0 -> NIC at RR+3:00.0 and RR+2:01.0 -> GPU at RR+4:00.0): one switch between GPU k and NIC k,
which nvidia-smi reports as PIX; rail roots on the two sockets give NODE within and SYS across sockets.
Links are Gen5 x16 ("32.0 GT/s PCIe", as the real H200 sysfs prints it).

A node type of 4 GPUs with a rail each is modelled as a GB200 compute tray (:data:`GRACE4`): two Grace
CPUs (72 cores each, no SMT: "0-71" and "72-143", the CPU Affinity of the real 4x GB200 ``nvidia-smi topo
-m`` in sgl-project/sglang#11208), GPUs 0-1 and rails 0-1 on the first, 2-3 on the second. A Grace GPU
hangs off its CPU by NVLink-C2C, not behind a PCIe switch with a NIC: the model gives every GPU and every
NIC a root complex of its own (PCI domains 0008/0009/0018/0019 for GPUs as NVIDIA's GB200 rdma_topo
example numbers them, 0000/0002/0010/0012 for NICs), so nvidia-smi reports NODE on one socket and SYS
across (the classes Mellanox/ngc_multinode_perf#129 reports for GB200 + CX-7). That tray's matrix is
SYNTHETIC, written in the real fixture's layout and legend; its NUMA Affinity and GPU NUMA ID columns
are the sglang capture's (GPU memory is NUMA nodes of its own there; GPU3's row is cut in the issue and
follows GPU2's pattern).

An EFA node type with one device per GPU (``fabric: efa``, a p6-b200's shape) is the HGX node with its
rail NICs named after the site's EFA devices; an ``efa_device_missing`` device has no sysfs entry (its
column stays in the matrix: the judge reads sysfs first and leaves it to efa.devices). A Slingshot node type
(``fabric: slingshot``) is the same node with its rail NICs the site's cxi NICs, linked from
/sys/class/cxi and listed in the matrix under their names; whether a real nvidia-smi topo -m lists cxi
NICs is not documented (the judge accepts either: checks/topology.py), and ibstat has nothing to say.

Faults: ``nic_wrong_numa {node, gpu}`` moves GPU k's rail NIC to a root port of the other socket
(numa_node, PCI path and nvidia-smi link classes change); ``pcie_x8 {node, gpu}`` trains GPU k's link at
x8 (``{node, rail}``: the rail NIC's link).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from clusteraccept.probes.topology import nic_class_dir
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_efa import missing_devices
from clusteraccept.site.model import Site

DATA = REPO_ROOT / "tests" / "data"
TOPO_FIXTURE = DATA / "nvidia-smi-topo" / "h100-8nic-sglang30401.txt"
IBSTAT_FIXTURE = DATA / "ibstat" / "h100-8xcx7-ndr400-ib-plus-cx6dx-eth-mooncake2039.txt"
GPU_MODEL = "NVIDIA H100 80GB HBM3"  # the sglang machine's GPUs
DEFAULT_NIC_BUS = (0x18, 0x28, 0x53, 0x5C, 0x98, 0xAD, 0xBE, 0xCE)  # plausible, == the demo's netdevs
GEN5 = "32.0 GT/s PCIe"
_NETDEV = re.compile(r"ibp([0-9]+)s[0-9]+")
CELL = 8  # nvidia-smi topo -m space-aligned column width in the fixture


@dataclass(frozen=True)
class Slot:
    """One rail's PCIe branch: its root complex, switch ports, NIC and GPU (sysfs directories)."""

    rail: int
    gpu: int
    hca: str
    socket: int
    root: str  # "pci0000:15"
    bridges_gpu: tuple[str, ...]  # root port, switch upstream port, downstream port above the GPU
    bridges_nic: tuple[str, ...]
    gpu_bdf: str
    nic_bdf: str
    nic_socket: int  # != socket when the NIC sits on the other socket (nic_wrong_numa)
    nic_root: str

    @property
    def gpu_dir(self) -> str:
        return "/".join(["/sys/devices", self.root, *self.bridges_gpu, self.gpu_bdf])

    @property
    def nic_dir(self) -> str:
        return "/".join(["/sys/devices", self.nic_root, *self.bridges_nic, self.nic_bdf])

    @property
    def moved(self) -> bool:
        return self.nic_socket != self.socket


def _bdf(bus: int, dev: int = 0) -> str:
    return f"0000:{bus:02x}:{dev:02x}.0"


@dataclass(frozen=True)
class Shape:
    """A node shape the simulator models: its GPU count (one rail NIC each) and its sockets' CPUs."""

    name: str
    gpus: int
    socket_cpus: tuple[str, str]  # sysfs local_cpulist of devices on socket 0 and 1
    all_cpus: str


# The real fixture's two sockets (its "CPU Affinity" column, GPUs 0-3 / 4-7)
HGX8 = Shape("hgx8", 8, ("0-47,96-143", "48-95,144-191"), "0-191")
GRACE4 = Shape("grace4", 4, ("0-71", "72-143"), "0-143")
GRACE_GPU_DOMAINS = (0x0008, 0x0009, 0x0018, 0x0019)
GRACE_NIC_DOMAINS = (0x0000, 0x0002, 0x0010, 0x0012)
# from the real 4x GB200 capture (sglang#11208): CPU Affinity, NUMA Affinity, GPU NUMA ID per GPU
GRACE_AFFINITY = (
    ("0-71", "0,3-9,11-17", "2"),
    ("0-71", "0,3-9,11-17", "10"),
    ("72-143", "1,19-25,27-33", "18"),
    ("72-143", "1,19-25,27-33", "26"),
)


def shape(site: Site, node: str) -> Shape | None:
    """The modelled shape of the node's type (rail k <-> GPU k), None when the simulator has none."""
    nt = site.node_type(node)
    for sh in (HGX8, GRACE4):
        if nt.gpus == sh.gpus and [(r.index, r.gpu) for r in nt.rails] == [(k, k) for k in range(sh.gpus)]:
            return sh
    return None


def supported(site: Site, node: str) -> bool:
    return shape(site, node) is not None


def wrong_numa_gpus(faults: list[dict[str, Any]]) -> set[int]:
    return {int(f["gpu"]) for f in faults if f.get("kind") == "nic_wrong_numa" and "gpu" in f}


def _dom_bdf(domain: int, bus: int) -> str:
    return f"{domain:04x}:{bus:02x}:00.0"


def _grace_layout(site: Site, node: str, faults: list[dict[str, Any]]) -> list[Slot]:
    """Each GPU and NIC under its own root port (``<domain>:00:00.0``), device on bus 01."""
    moved = wrong_numa_gpus(faults)
    slots = []
    for r in site.node_type(node).rails:
        socket, gdom, ndom = r.index // 2, GRACE_GPU_DOMAINS[r.index], GRACE_NIC_DOMAINS[r.index]
        nic_socket = socket
        if r.gpu in moved:  # into a free root complex of the other socket, beside rail (k+2)%4's
            ndom, nic_socket = GRACE_NIC_DOMAINS[(r.index + 2) % 4] + 1, 1 - socket
        slots.append(
            Slot(
                r.index,
                r.gpu,
                r.hca,
                socket,
                f"pci{gdom:04x}:00",
                (_dom_bdf(gdom, 0),),
                (_dom_bdf(ndom, 0),),
                _dom_bdf(gdom, 1),
                _dom_bdf(ndom, 1),
                nic_socket,
                f"pci{ndom:04x}:00",
            )
        )
    return slots


def layout(node: str, site: Site, faults: list[dict[str, Any]]) -> list[Slot]:
    if shape(site, node) is GRACE4:
        return _grace_layout(site, node, faults)
    rails = site.node_type(node).rails
    buses = []
    for r in rails:
        m = _NETDEV.fullmatch(r.netdev or "")
        buses.append(int(m.group(1)) if m else DEFAULT_NIC_BUS[r.index])
    moved = wrong_numa_gpus(faults)
    slots = []
    for r, nic_bus in zip(rails, buses, strict=True):
        root, socket = nic_bus - 3, r.index // 4
        up = (_bdf(root, 1), _bdf(root + 1))
        nic_bridges: tuple[str, ...] = (*up, _bdf(root + 2))
        nic_socket, nic_bdf, nic_root = socket, _bdf(nic_bus), root
        if r.gpu in moved:  # into a free root port of the other socket, after that socket's rail (k+4)%8
            nic_root = buses[(r.index + 4) % 8] - 3 + 5
            nic_socket, nic_bridges, nic_bdf = 1 - socket, (_bdf(nic_root, 1),), _bdf(nic_root + 1)
        slots.append(
            Slot(
                r.index,
                r.gpu,
                r.hca,
                socket,
                f"pci0000:{root:02x}",
                (*up, _bdf(root + 2, 1)),
                nic_bridges,
                _bdf(root + 4),
                nic_bdf,
                nic_socket,
                f"pci0000:{nic_root:02x}",
            )
        )
    return slots


def _set(lines: list[str], row: int, col: int, value: str) -> None:
    line = lines[row].ljust(CELL * (col + 2))
    start = CELL * (col + 1)
    lines[row] = (line[:start] + value.ljust(CELL) + line[start + CELL :]).rstrip() + (
        " " if lines[row].endswith(" ") else ""
    )


@lru_cache(maxsize=4)
def _fixture(path: str) -> str:
    return Path(path).read_text()


def grace_topo_text(slots: list[Slot], nvlinks: int) -> str:
    """A Grace tray's matrix (SYNTHETIC, module docstring): GPUs joined by ``NV<links>``, GPU/NIC and
    NIC/NIC NODE on one socket and SYS across, in the real fixture's layout, legend and NIC legend."""
    n = len(slots)
    head = "".ljust(CELL) + "".join(f"GPU{s.gpu}".ljust(CELL) for s in slots)
    head += "".join(f"NIC{s.rail}".ljust(CELL) for s in slots) + "CPU Affinity    NUMA Affinity   GPU NUMA ID"

    def cls(a: int, b: int) -> str:
        return "NODE" if a == b else "SYS"

    rows = [head]
    for g in slots:
        cells = [" X" if h is g else f"NV{nvlinks}" for h in slots]
        cells += [cls(g.socket, s.nic_socket) for s in slots]
        cpu, numa, gnid = GRACE_AFFINITY[g.gpu]
        rows.append(
            f"GPU{g.gpu}".ljust(CELL)
            + "".join(c.ljust(CELL) for c in cells)
            + f"{cpu.ljust(16)}{numa.ljust(24)}{gnid}"
        )
    for m in slots:
        cells = [cls(m.nic_socket, g.socket) for g in slots]
        cells += [" X" if s is m else cls(m.nic_socket, s.nic_socket) for s in slots]
        rows.append((f"NIC{m.rail}".ljust(CELL) + "".join(c.ljust(CELL) for c in cells)).rstrip())
    legend = _fixture(str(TOPO_FIXTURE)).split("\nLegend:", 1)[1].split("\nNIC Legend:", 1)[0]
    nic_legend = "".join(f"  NIC{s.rail}: {s.hca}\n" for s in slots)
    assert n == len(GRACE_AFFINITY)
    return "\n".join(rows) + "\n\nLegend:" + legend + "\nNIC Legend:\n\n" + nic_legend


def topo_text(slots: list[Slot]) -> str:
    """The real matrix, NIC legend renamed, link classes of moved NICs recomputed."""
    lines = _fixture(str(TOPO_FIXTURE)).split("\n")
    n = len(slots)
    for s in slots:
        if not s.moved:
            continue
        nic_col = n + s.rail
        for j in slots:  # GPUs, then the other NICs, as seen from the moved NIC
            cls = "NODE" if j.socket == s.nic_socket else "SYS"
            _set(lines, 1 + j.gpu, nic_col, cls)
            _set(lines, 1 + nic_col, j.gpu, cls)
            if j.rail != s.rail:
                other = "NODE" if j.nic_socket == s.nic_socket else "SYS"
                _set(lines, 1 + nic_col, n + j.rail, other)
                _set(lines, 1 + n + j.rail, nic_col, other)
    names = {f"NIC{s.rail}": s.hca for s in slots}
    out = [
        re.sub(r"^(\s+)(NIC[0-9]+): \S+$", lambda m: f"{m.group(1)}{m.group(2)}: {names[m.group(2)]}", ln)
        for ln in lines
    ]
    return "\n".join(out)


def ibstat_text(hcas: list[str], link_layer: str = "InfiniBand") -> str:
    """The real ibstat output's InfiniBand CAs renamed, in ibstat's (string-sorted) order; on an Ethernet
    (RoCE) node type the same ConnectX-7 ports report ``Link layer: Ethernet``."""
    blocks = re.split(r"(?m)^(?=CA ')", _fixture(str(IBSTAT_FIXTURE)))
    ib = [
        b.replace("Link layer: InfiniBand", f"Link layer: {link_layer}")
        for b in blocks
        if "Link layer: InfiniBand" in b
    ]
    names = sorted(hcas)
    return "".join(re.sub(r"^CA '[^']*'", f"CA '{name}'", b) for name, b in zip(names, ib, strict=False))


def _device(part: Part, path: str, cls: str, numa: int, width: int, sh: Shape) -> None:
    attrs = {
        "class": cls,
        "numa_node": str(numa),
        "local_cpulist": sh.socket_cpus[numa],
        "current_link_speed": GEN5,
        "max_link_speed": GEN5,
        "current_link_width": str(width),
        "max_link_width": "16",
    }
    part.files.update({f"{path}/{k}": v + "\n" for k, v in attrs.items()})


def _bridges(part: Part, parent: str, bdfs: tuple[str, ...]) -> None:
    for b in bdfs:
        parent = f"{parent}/{b}"
        part.files[f"{parent}/max_link_speed"] = GEN5 + "\n"
        part.files[f"{parent}/max_link_width"] = "16\n"
        part.links[f"/sys/bus/pci/devices/{b}"] = parent


def _nvlinks(site: Site, node: str) -> int:
    nv = site.node_type(node).nvlink
    return nv.links_per_gpu if nv is not None else 18  # GB200: NV18 in the sglang capture


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    sh = shape(site, node)
    if sh is None:
        return part  # not a modelled shape: the node looks like a host with none of these tools
    slots = layout(node, site, faults)
    x8_gpu = {int(f["gpu"]) for f in faults if f.get("kind") == "pcie_x8" and "gpu" in f}
    x8_rail = {int(f["rail"]) for f in faults if f.get("kind") == "pcie_x8" and "rail" in f}
    nt = site.node_type(node)
    model = nt.gpu_model or GPU_MODEL
    gone = missing_devices(site, node, faults)  # an EFA device the node lost (efa_device_missing)
    query = "".join(f"{s.gpu}, {model}, 0000{s.gpu_bdf.upper()}\n" for s in slots)
    for s in slots:
        _bridges(part, f"/sys/devices/{s.root}", s.bridges_gpu)
        _device(part, s.gpu_dir, "0x030200", s.socket, 8 if s.gpu in x8_gpu else 16, sh)
        part.links[f"/sys/bus/pci/devices/{s.gpu_bdf}"] = s.gpu_dir
        part.links[f"/sys/bus/pci/drivers/nvidia/{s.gpu_bdf}"] = s.gpu_dir
        _bridges(part, f"/sys/devices/{s.nic_root}", s.bridges_nic)
        _device(part, s.nic_dir, "0x020700", s.nic_socket, 8 if s.rail in x8_rail else 16, sh)
        part.links[f"/sys/bus/pci/devices/{s.nic_bdf}"] = s.nic_dir
        if s.hca not in gone:
            part.links[f"{nic_class_dir(nt.fabric)}/{s.hca}/device"] = s.nic_dir
            netdev = next((r.netdev for r in nt.rails if r.index == s.rail), None)
            if nt.fabric == "slingshot" and netdev:  # the NIC's Ethernet function: its hsn netdev
                part.links[f"/sys/class/net/{netdev}/device"] = s.nic_dir
            if nt.fabric in ("infiniband", "roce") and netdev:  # its IPoIB / Ethernet interface
                part.files[f"{s.nic_dir}/net/{netdev}/dev_port"] = "0\n"
    part.commands += [
        (
            "nvidia-smi topo -m",
            grace_topo_text(slots, _nvlinks(site, node)) if sh is GRACE4 else topo_text(slots),
            0,
        ),
        ("nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader", query, 0),
    ]
    if nt.verbs:  # a cxi NIC or a TCPX GPU NIC is no ibverbs device: the topology probe runs no ibstat
        part.commands.append(("ibstat", ibstat_text([s.hca for s in slots], nt.link_layer), 0))
    return part
