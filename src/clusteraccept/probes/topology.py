"""GPU/NIC topology evidence: what is where on the PCIe tree, NUMA nodes, link states, NIC ports.

Commands (each optional on a given host; absence is recorded, not an error):
- ``nvidia-smi topo -m`` (link classes GPU<->NIC, NUMA affinity), ``nvidia-smi
  --query-gpu=index,name,pci.bus_id --format=csv,noheader`` (GPU index -> PCI address; nvidia-smi(1));
- ``lscpu`` (NUMA node CPU lists, for ``nvidia-smi`` outputs without a NUMA Affinity column);
- ``ibstat`` (infiniband-diags: port state, rate, link layer).
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


def nic_class_dir(fabric: str) -> str:
    """Where a node type's rail NICs are in sysfs: the cxi class on Slingshot, else the RDMA devices."""
    return CXI_CLASS_DIR if fabric == "slingshot" else IB_CLASS_DIR


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


def gpu_and_nic_devices(cxi: bool = False) -> tuple[list[Evidence], list[str], list[str]]:
    """Sysfs evidence of every NVIDIA GPU and RDMA device (and cxi NIC, ``cxi``), plus their resolved
    device paths."""
    gpu_list, bdfs = gpu_bdfs()
    hca_list, names = hcas()
    out = [gpu_list, hca_list]
    devices = [f"{PCI_DEVICES}/{bdf}" for bdf in bdfs] + [f"{IB_CLASS_DIR}/{h}/device" for h in names]
    if cxi:
        cxi_list, nics = listing(CXI_CLASS_DIR)
        out.append(cxi_list)
        devices += [f"{CXI_CLASS_DIR}/{n}/device" for n in nics if "/" not in n]
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
    slingshot = options.get("slingshot_nodes")
    devices, _, _ = gpu_and_nic_devices(cxi=isinstance(slingshot, dict) and hostio.hostname() in slingshot)
    out += devices
    if any(ev.source == "sysfs-listdir" and ev.path == IB_CLASS_DIR and ev.ok for ev in devices):
        out.append(hostio.run(["ibstat"], timeout_s, source="ibstat"))
    return out
