"""HPE Slingshot on this node: evidence only (judged by checks/slingshot.py).

On the nodes whose type is ``fabric: slingshot`` (``options["slingshot_nodes"]``: node -> its node type;
``options["slingshot_env"]``: node type -> the variable names its jobs must get):
- ``fi_info -p cxi`` (libfabric's fi_info(1), ``-p``: only that provider): the cxi devices libfabric
  offers, as NCCL's aws-ofi-nccl plugin will see them (one entry per NIC, domain ``cxi0``, ...; where the
  provider is not working fi_info prints ``fi_getinfo: -61 (No data available)``: CSCS, "resource hook",
  eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md);
- ``/sys/class/cxi`` (the cxi driver's NICs) and where each one's ``device`` link leads (its PCI address:
  aws-ofi-nccl names the devices it uses by address, "NIC group G device #D <PCI address>");
- each rail's network device (``hsn0``, ...): its ``/sys/class/net/<netdev>/operstate`` (RFC 2863's
  states, "up" ... "down": Documentation/ABI/testing/sysfs-class-net) and where its ``device`` link
  leads: cxi_stat pairs a cxi NIC with its netdev by that PCI device (HewlettPackard/shs-libcxi
  utils/cxi_stat.c). That the hsn netdev's operstate follows the Slingshot link (what CSCS's node checks
  count as cxi_stat's "Link state: up") is UNVERIFIED: a state that says nothing ("unknown") is judged
  as not measured, never as a link down;
- the job's environment, only the variables the site requires (``slingshot.env``: HPE's and the centre's
  libfabric/NCCL settings, which a module or container hook must give every job).
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import (
    CXI_CLASS_DIR,
    listing,
    netdev_states,
    rail_netdevs,
    resolved,
    timeout_of,
)

PROVIDER = "cxi"  # libfabric's Slingshot provider (fi_info -p cxi; lf prov/cxi: fabric and provider "cxi")


def collect(options: dict[str, object]) -> list[Evidence]:
    nodes = options.get("slingshot_nodes")
    me = hostio.hostname()
    if not isinstance(nodes, dict) or me not in nodes:
        return []
    out = [hostio.run(["fi_info", "-p", PROVIDER], timeout_of(options), source="fi_info")]
    ev, names = listing(CXI_CLASS_DIR)
    out.append(ev)
    out += [resolved(f"{CXI_CLASS_DIR}/{n}/device") for n in names if "/" not in n]
    out += netdev_states(rail_netdevs(options))
    env = options.get("slingshot_env")
    wanted = env.get(str(nodes[me]), []) if isinstance(env, dict) else []
    out.append(hostio.environ([str(n) for n in wanted]))
    return out
