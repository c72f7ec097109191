"""Simulated host part for the slingshot family (sim/hosts.py): a node's cxi NICs as libfabric and sysfs
show them, and the environment its jobs get.

Built from REAL captures (tests/data/*/SOURCES.md):
- ``fi_info -p cxi``: tests/data/fi_info/cxi-slingshot-cscs-working-single-entry.txt (Alps: one entry,
  domain ``cxi0``), repeated per cxi NIC of the node type's rails (the site names them);
- ``/sys/class/net/<netdev>/operstate``: "up" (Documentation/ABI/testing/sysfs-class-net), "down" on a
  ``slingshot_link_down`` rail;
- ``environ.json`` (hostio.environ): the site's ``env`` reaches every job as it is, except on a
  ``slingshot_env_missing {node, setting: NAME}`` node, whose jobs lack NAME (a module or container hook
  that did not run there).
(The device links under /sys/class/cxi are the topology part's, sim/profile_topology.py.)

Faults: ``cxi_device_missing {node, gpu}`` takes GPU k's rail NIC away (fi_info, sysfs);
``slingshot_link_down {node, gpu}`` its link; ``slingshot_env_missing``; ``ofi_no_provider`` and
``ofi_plugin_missing`` change nothing here: the node's own fi_info works, NCCL's plugin does not
(sim/nccl_info.py).
"""

from __future__ import annotations

import json
from typing import Any

from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_efa import DATA, fixture_text, present_devices
from clusteraccept.site.model import Site

FI_INFO_FIXTURE = DATA / "fi_info" / "cxi-slingshot-cscs-working-single-entry.txt"


def fi_info_text(devices: list[str]) -> str:
    """The real capture's one cxi entry, once per NIC."""
    entry = fixture_text(str(FI_INFO_FIXTURE))
    return "".join(entry.replace("cxi0", dev) for dev in devices)


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    if nt.slingshot is None:
        return part
    devices = present_devices(site, node, faults)
    part.commands.append(("fi_info -p cxi", fi_info_text(devices), 0))
    down = {int(f["gpu"]) for f in faults if f.get("kind") == "slingshot_link_down" and "gpu" in f}
    for r in nt.rails:
        if r.netdev and set(r.devices) <= set(devices):
            part.files[f"/sys/class/net/{r.netdev}/operstate"] = "down\n" if r.gpu in down else "up\n"
    unset = [
        str(f["setting"]) for f in faults if f.get("kind") == "slingshot_env_missing" and f.get("setting")
    ]
    if unset:
        part.profile_files["environ.json"] = json.dumps(dict.fromkeys(unset))
    return part
