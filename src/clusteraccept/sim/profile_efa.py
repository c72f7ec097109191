"""Simulated host part for the efa family (sim/hosts.py): a node's EFA devices as libfabric and sysfs show
them, and the job's limits.

Built from REAL captures (tests/data/*/SOURCES.md):
- ``fi_info -p efa``: tests/data/fi_info/efa-2020-rdm-dgrm-plus-ofi_rxd-libfabric5689.txt, its ``-rdm``
  and ``-dgrm`` entries repeated per EFA device of the node type's rails (device names as rdma-core's
  udev rule gives them, ``rdmap<bus>s<slot>``; the site names them);
- ``/proc/self/limits``: tests/data/proc-limits/debian12-root-shell-memlock-8MiB.txt, its locked-memory
  limit unlimited (as AWS ParallelCluster's slurmd gives its jobs), or left at the capture's 8 MiB on a
  ``memlock_limited`` node;
- ``/sys/class/infiniband/<dev>/ports/1/state``: "4: ACTIVE" (the ABI's format).
(The device links under /sys/class/infiniband are the topology part's, sim/profile_topology.py.)

Faults: ``efa_device_missing {node, gpu}`` takes GPU k's rail devices away (fi_info, sysfs);
``memlock_limited {node}``; ``ofi_no_provider`` and ``ofi_plugin_missing`` change nothing here: the
node's own fi_info works, NCCL's plugin does not (sim/nccl_info.py).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import Part
from clusteraccept.site.model import Site

DATA = REPO_ROOT / "tests" / "data"
FI_INFO_FIXTURE = DATA / "fi_info" / "efa-2020-rdm-dgrm-plus-ofi_rxd-libfabric5689.txt"
LIMITS_FIXTURE = DATA / "proc-limits" / "debian12-root-shell-memlock-8MiB.txt"
_LOCK = re.compile(r"(?m)^(Max locked memory\s+)(\d+)(\s+)(\d+)(\s+bytes)")


@lru_cache(maxsize=2)
def fixture_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def missing_devices(site: Site, node: str, faults: list[dict[str, Any]]) -> set[str]:
    """The EFA devices (cxi NICs) an ``efa_device_missing`` (``cxi_device_missing``) fault takes from this
    node."""
    kinds = ("efa_device_missing", "cxi_device_missing")
    gpus = {int(f["gpu"]) for f in faults if f.get("kind") in kinds and "gpu" in f}
    return {n for r in site.node_type(node).rails if r.gpu in gpus for n in r.devices}


def present_devices(site: Site, node: str, faults: list[dict[str, Any]]) -> list[str]:
    """The node's rail devices (EFA devices, cxi NICs) that its faults left it, each once."""
    gone = missing_devices(site, node, faults)
    return [
        n for n in dict.fromkeys(n for r in site.node_type(node).rails for n in r.devices) if n not in gone
    ]


def fi_info_text(devices: list[str]) -> str:
    """The real capture's two EFA entries (rdm, dgrm) of its one device, once per device."""
    entries = fixture_text(str(FI_INFO_FIXTURE)).split("provider: efa;ofi_rxd")[0]
    return "".join(entries.replace("efa_0", dev) for dev in devices)


def limits_text(unlimited: bool) -> str:
    text = fixture_text(str(LIMITS_FIXTURE))
    if not unlimited:
        return text
    return _LOCK.sub(lambda m: f"{m[1]}{'unlimited'.ljust(len(m[2]))}{m[3]}{'unlimited'}{m[5]}", text)


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    if nt.efa is None:
        return part
    devices = present_devices(site, node, faults)
    part.commands.append(("fi_info -p efa", fi_info_text(devices), 0))
    part.files.update({f"/sys/class/infiniband/{d}/ports/1/state": "4: ACTIVE\n" for d in devices})
    memlock = any(f.get("kind") == "memlock_limited" for f in faults)
    part.files["/proc/self/limits"] = limits_text(unlimited=not memlock)
    return part
