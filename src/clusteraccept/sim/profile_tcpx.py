"""Simulated host part for the tcpx family (sim/hosts.py): a GPUDirect-TCPX(O) node's GPU NICs as sysfs
shows them, and the environment its jobs get.

- ``/sys/class/net/<netdev>/operstate`` of every rail's GPU NIC: "up" (Documentation/ABI/testing/
  sysfs-class-net), "down" where a ``tcpx_nic_down {node, gpu}`` fault takes GPU k's NIC down (on A3
  High the NIC's other GPU loses it too); the device links are the topology part's
  (sim/profile_topology.py: the NIC class of a TCPX(O) node is /sys/class/net);
- ``environ.json`` (hostio.environ): the site's ``env`` reaches every job as it is, except on a
  ``tcpx_env_missing {node, setting: NAME}`` node, whose jobs lack NAME (a prolog or profile that did
  not run there).
- the receive-datapath manager's sockets: on TCPXO the ``/proc/net/unix`` line of its abstract socket
  ``@rxdm_uds_nic_mapping`` (in proc(5)'s form; the name zero-padded to the address size, shown as '@'),
  on TCPX ``rx_rule_manager`` in /tmp (the plugin's default prefix, where the site sets none); neither
  on an ``rxdm_down`` node, whose NCCL then fails (sim/nccl_tcp.py).
``net_plugin_missing`` changes nothing here: it is NCCL's.
"""

from __future__ import annotations

import json
from typing import Any

from clusteraccept.checks.tcpx import RX_RULE_MANAGER
from clusteraccept.probes.tcpx import PROC_NET_UNIX, RXDM_SOCKET, TCPX_DEFAULT_PREFIX
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
    if not any(f.get("kind") == "rxdm_down" for f in faults):
        if nt.fabric == "tcpxo":
            # proc(5): "Num RefCount Protocol Flags Type St Inode Path"; 00010000: a listening socket
            pad = "@" * (108 - 1 - len(RXDM_SOCKET))  # sizeof(sun_path) = 108 (unix(7)), leading NUL
            line = f"0000000000000000: 00000002 00000000 00010000 0001 01 31337 @{RXDM_SOCKET}{pad}\n"
            part.commands.append((f"grep -a -F {RXDM_SOCKET} {PROC_NET_UNIX}", line, 0))
        else:
            part.files[f"{TCPX_DEFAULT_PREFIX}/{RX_RULE_MANAGER}"] = ""
    elif nt.fabric == "tcpxo":
        part.commands.append((f"grep -a -F {RXDM_SOCKET} {PROC_NET_UNIX}", "", 1))
    unset = [str(f["setting"]) for f in faults if f.get("kind") == "tcpx_env_missing" and f.get("setting")]
    if unset:
        part.profile_files["environ.json"] = json.dumps(dict.fromkeys(unset))
    return part
