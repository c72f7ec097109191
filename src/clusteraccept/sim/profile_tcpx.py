"""Simulated host part for the tcpx family (sim/hosts.py): a GPUDirect-TCPX(O) node's GPU NICs as sysfs
shows them, and the environment its jobs get.

- ``/sys/class/net/<netdev>/operstate`` of every rail's GPU NIC: "up" (Documentation/ABI/testing/
  sysfs-class-net), "down" where a ``tcpx_nic_down {node, gpu}`` fault takes GPU k's NIC down (on A3
  High the NIC's other GPU loses it too); the device links are the topology part's
  (sim/profile_topology.py: the NIC class of a TCPX(O) node is /sys/class/net);
- ``environ.json`` (hostio.environ): the site's ``env`` reaches every job as it is, except on a
  ``tcpx_env_missing {node, setting: NAME}`` node, whose jobs lack NAME (a prolog or profile that did
  not run there).
``rxdm_down`` and ``net_plugin_missing`` change nothing here: they are NCCL's (sim/nccl_tcp.py).
"""

from __future__ import annotations

import json
from typing import Any

from clusteraccept.sim.hosts import Part
from clusteraccept.site.model import Site


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    if nt.tcp is None:
        return part
    down_gpus = {int(f["gpu"]) for f in faults if f.get("kind") == "tcpx_nic_down" and "gpu" in f}
    down = {r.netdev for r in nt.rails if r.gpu in down_gpus}
    for netdev in dict.fromkeys(r.netdev for r in nt.rails if r.netdev):
        part.files[f"/sys/class/net/{netdev}/operstate"] = "down\n" if netdev in down else "up\n"
    unset = [str(f["setting"]) for f in faults if f.get("kind") == "tcpx_env_missing" and f.get("setting")]
    if unset:
        part.profile_files["environ.json"] = json.dumps(dict.fromkeys(unset))
    return part
