"""The node's software/firmware fingerprint (always collected): differences between nodes are findings.

Commands and files (all optional on a given host; absence is recorded, not an error):
- ``uname -r`` (kernel), ``/proc/driver/nvidia/version`` (NVIDIA kernel module),
- ``nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader``
  (nvidia-smi(1): --query-gpu / --format=csv,noheader),
- ``ofed_info -s`` (MLNX_OFED / DOCA-OFED version string),
- ``/sys/class/infiniband/<hca>/fw_ver`` for every HCA present,
- ``/proc/sys/kernel/random/boot_id`` (random(4): a UUID "generated once" per boot): with the versions it is
  the node's identity, which every campaign step's launch record carries too (probes/launch.py), so a node
  that rebooted or was re-imaged during a run is seen (checks/fingerprint.changed_mid_run).
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def collect(options: dict[str, object]) -> list[Evidence]:
    timeout_s = float(options.get("timeout_s", 60))  # type: ignore[arg-type]
    out = [
        hostio.run(["uname", "-r"], timeout_s, source="uname"),
        hostio.run(
            ["nvidia-smi", "--query-gpu=index,name,driver_version,pci.bus_id", "--format=csv,noheader"],
            timeout_s,
            source="nvidia-smi-query",
        ),
        hostio.run(["ofed_info", "-s"], timeout_s, source="ofed_info"),
        hostio.read("/proc/driver/nvidia/version", source="nvidia-driver"),
        hostio.read(BOOT_ID, source="boot-id"),
    ]
    out += [
        hostio.read(f"/sys/class/infiniband/{hca}/fw_ver", source="hca-fw")
        for hca in hostio.listdir("/sys/class/infiniband")
    ]
    return out
