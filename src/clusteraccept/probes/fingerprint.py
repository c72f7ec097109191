"""The node's software/firmware fingerprint (always collected): differences between nodes are findings.

Commands and files (all optional on a given host; absence is recorded, not an error):
- ``uname -r`` (kernel), ``/proc/driver/nvidia/version`` (NVIDIA kernel module),
- ``nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv,noheader``
  (nvidia-smi(1): --query-gpu / --format=csv,noheader),
- ``ofed_info -s`` (MLNX_OFED / DOCA-OFED version string),
- ``/sys/class/infiniband/<hca>/fw_ver`` for every HCA present.
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence


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
    ]
    out += [
        hostio.read(f"/sys/class/infiniband/{hca}/fw_ver", source="hca-fw")
        for hca in hostio.listdir("/sys/class/infiniband")
    ]
    return out
