"""GPU/NIC topology evidence: what is where on the PCIe tree, NUMA nodes, link states, NIC ports.

Commands (each optional on a given host; absence is recorded, not an error):
- ``nvidia-smi topo -m`` (link classes GPU<->NIC, NUMA affinity), ``nvidia-smi
  --query-gpu=index,name,pci.bus_id --format=csv,noheader`` (GPU index -> PCI address; nvidia-smi(1));
- ``lscpu`` (NUMA node CPU lists, for ``nvidia-smi`` outputs without a NUMA Affinity column);
- ``ibstat`` (infiniband-diags: port state, rate, link layer).
Listings: each RDMA device's network interfaces (``/sys/class/infiniband/<hca>/device/net``).
Files: for every GPU bound to the ``nvidia`` driver (``/sys/bus/pci/drivers/nvidia/<BDF>`` links) and
every RDMA device (``/sys/class/infiniband/<hca>/device``), and on a Slingshot node every cxi NIC
(``/sys/class/cxi/<cxi>/device``: the cxi driver's class, HewlettPackard/shs-libcxi utils/cxi_stat.c and
heatsink_check.c read the NIC's PCI device and numa_node there): the resolved sysfs path (the bridges above
it), ``class``, ``numa_node`` and ``{current,max}_link_{speed,width}`` (Documentation/ABI/testing/
sysfs-bus-pci), and the link maxima of the port above it. No parsing here: the listings only say which
files to read next.
"""

from __future__ import annotations

import re

from clusteraccept import hostio
from clusteraccept.evidence import Evidence

NVIDIA_DRIVER_DIR = "/sys/bus/pci/drivers/nvidia"
IB_CLASS_DIR = "/sys/class/infiniband"
CXI_CLASS_DIR = "/sys/class/cxi"  # HPE Slingshot's NICs: no ibverbs devices, a class of their own
# network interfaces: a Slingshot NIC's hsn netdev, and a GPUDirect-TCPX(O) GPU NIC, which is only one
NET_CLASS_DIR = "/sys/class/net"


def nic_class_dir(fabric: str) -> str:
    """Where a node type's rail NICs are in sysfs: the cxi class on Slingshot, the network interfaces on
    GPUDirect-TCPX(O), else the RDMA devices."""
    return {"slingshot": CXI_CLASS_DIR, "tcpx": NET_CLASS_DIR, "tcpxo": NET_CLASS_DIR}.get(
        fabric, IB_CLASS_DIR
    )


def fabric_nics(options: dict[str, object]) -> tuple[list[Evidence], list[str]]:
    """This node's rail NICs that are no RDMA devices: (the listing of their class, their device links).
    A Slingshot node's every cxi NIC (``slingshot_nodes``); a TCPX(O) node's rail netdevs (``tcpx_nodes``:
    of every interface in /sys/class/net only those the rail map names are GPU NICs)."""
    me = hostio.hostname()
    for key, where in (("slingshot_nodes", CXI_CLASS_DIR), ("tcpx_nodes", NET_CLASS_DIR)):
        nodes = options.get(key)
        if isinstance(nodes, dict) and me in nodes:
            ev, names = listing(where)
            if where == NET_CLASS_DIR:
                names = rail_netdevs(options)
            return [ev], [f"{where}/{n}/device" for n in names if "/" not in n]
    return [], []


def rail_netdevs(options: dict[str, object]) -> list[str]:
    """The network interfaces this node's rails name (``node_rails``), each once."""
    rails = options.get("node_rails")
    mine = rails.get(hostio.hostname(), []) if isinstance(rails, dict) else []
    return list(dict.fromkeys(str(r["netdev"]) for r in mine if r.get("netdev")))


def netdev_states(names: list[str]) -> list[Evidence]:
    """Each network interface's ``operstate`` (RFC 2863's states as sysfs prints them, "up" ... "down":
    Documentation/ABI/testing/sysfs-class-net) and where its ``device`` link leads (its PCI device)."""
    out: list[Evidence] = []
    for netdev in names:
        out += [
            hostio.read(f"{NET_CLASS_DIR}/{netdev}/operstate"),
            resolved(f"{NET_CLASS_DIR}/{netdev}/device"),
        ]
    return out


PCI_DEVICES = "/sys/bus/pci/devices"
LINK_ATTRS = ("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
DEVICE_ATTRS = ("class", "numa_node", *LINK_ATTRS)
_BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def timeout_of(options: dict[str, object]) -> float:
    value = options.get("timeout_s", 60)
    return float(value) if isinstance(value, int | float | str) else 60.0


def listing(path: str) -> tuple[Evidence, list[str]]:
    """A directory listing as Evidence (one name per line; returncode 1 when absent or empty)."""
    names = hostio.listdir(path)
    ev = Evidence(
        hostio.hostname(),
        "sysfs-listdir",
        path=path,
        returncode=0 if names else 1,
        stdout="".join(n + "\n" for n in names),
        stderr="" if names else f"{path}: no entries (absent, or nothing there)",
    )
    return ev, names


def resolved(path: str) -> Evidence:
    """Where a sysfs link points (``/sys/bus/pci/devices/0000:19:00.0`` -> ``/sys/devices/pci.../``)."""
    target = hostio.realpath(path)
    ok = target != path and target.startswith("/sys/devices/")
    return Evidence(
        hostio.hostname(),
        "sysfs-link",
        path=path,
        returncode=0 if ok else 1,
        stdout=target + "\n" if ok else "",
        stderr="" if ok else f"{path}: not a device link",
    )


def gpu_bdfs() -> tuple[Evidence, list[str]]:
    ev, names = listing(NVIDIA_DRIVER_DIR)
    return ev, [n for n in names if _BDF.fullmatch(n)]


def hcas() -> tuple[Evidence, list[str]]:
    return listing(IB_CLASS_DIR)


def device_path(link: Evidence) -> str | None:
    return link.stdout.strip() if link.ok else None


def pci_device(dev: str, attrs: tuple[str, ...] = DEVICE_ATTRS) -> list[Evidence]:
    """The link evidence of ``dev`` (a sysfs device link), its attributes, and its parent port's maxima."""
    link = resolved(dev)
    out = [link] + [hostio.read(f"{dev}/{a}") for a in attrs]
    path = device_path(link)
    if path is not None:
        parent = path.rsplit("/", 1)[0]
        if _BDF.fullmatch(parent.rsplit("/", 1)[-1]):  # a bridge above, not the host bridge "pci0000:17"
            out += [hostio.read(f"{parent}/{a}") for a in ("max_link_speed", "max_link_width")]
    return out


def gpu_and_nic_devices(options: dict[str, object]) -> tuple[list[Evidence], list[str], list[str]]:
    """Sysfs evidence of every NVIDIA GPU and RDMA device (and of the rail NICs that are none:
    :func:`fabric_nics`), plus their resolved device paths."""
    gpu_list, bdfs = gpu_bdfs()
    hca_list, names = hcas()
    nic_lists, nic_links = fabric_nics(options)
    out = [gpu_list, hca_list, *nic_lists]
    devices = [f"{PCI_DEVICES}/{bdf}" for bdf in bdfs] + [f"{IB_CLASS_DIR}/{h}/device" for h in names]
    devices += nic_links
    paths: list[str] = []
    for dev in devices:
        evs = pci_device(dev)
        out += evs
        paths += [p for p in [device_path(evs[0])] if p]
    return out, bdfs, paths


def collect(options: dict[str, object]) -> list[Evidence]:
    timeout_s = timeout_of(options)
    out = [
        hostio.run(["nvidia-smi", "topo", "-m"], timeout_s, source="nvidia-smi-topo"),
        hostio.run(
            ["nvidia-smi", "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"],
            timeout_s,
            source="nvidia-smi-query",
        ),
        hostio.run(["lscpu"], timeout_s, source="lscpu"),
    ]
    devices, _, _ = gpu_and_nic_devices(options)
    out += devices
    # each RDMA device's network interfaces: the ``net`` class directory under its PCI function, as
    # /sys/class/net/<iface>/device points back to it (Documentation/ABI/testing/sysfs-class-net); scripts
    # that map RDMA devices to interfaces list it the same way (``ls /sys/class/infiniband/$d/device/net``)
    names = next((ev.stdout.split() for ev in devices if ev.path == IB_CLASS_DIR and ev.ok), [])
    out += [listing(f"{IB_CLASS_DIR}/{h}/device/net")[0] for h in names if "/" not in h]
    if any(ev.source == "sysfs-listdir" and ev.path == IB_CLASS_DIR and ev.ok for ev in devices):
        out.append(hostio.run(["ibstat"], timeout_s, source="ibstat"))
    return out
