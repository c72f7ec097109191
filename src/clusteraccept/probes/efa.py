"""AWS EFA (Elastic Fabric Adapter) on this node: evidence only (judged by checks/efa.py).

On the nodes whose type is ``fabric: efa`` (``options["efa_nodes"]``):
- ``fi_info -p efa`` (libfabric's fi_info(1), ``-p``: only that provider): the EFA devices libfabric
  offers, as NCCL's aws-ofi-nccl plugin will see them; where the provider is absent fi_info prints
  ``fi_getinfo: -61`` (AWS's EFA guide, "verify that EFA works");
- ``/sys/class/infiniband`` (the RDMA devices, EFA among them: rdma-core's udev rule names them
  ``rdmap<bus>s<slot>``) and each device's ``ports/1/state`` ("4: ACTIVE":
  Documentation/ABI/stable/sysfs-class-infiniband), and where its ``device`` link leads (its PCI address:
  aws-ofi-nccl names the devices it uses by address);
- ``/proc/self/limits``: the job's locked-memory limit, which every rank of this job inherits (EFA
  registers the buffers NCCL sends from; AWS ParallelCluster's slurmd unit sets LimitMEMLOCK=infinity).
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import IB_CLASS_DIR, listing, resolved, timeout_of

LIMITS = "/proc/self/limits"
PROVIDER = "efa"  # libfabric's EFA provider (fi_info -p efa; aws-ofi-nccl "Selected Provider is efa")


def collect(options: dict[str, object]) -> list[Evidence]:
    nodes = options.get("efa_nodes")
    if not isinstance(nodes, dict) or hostio.hostname() not in nodes:
        return []
    out = [hostio.run(["fi_info", "-p", PROVIDER], timeout_of(options), source="fi_info")]
    ev, names = listing(IB_CLASS_DIR)
    out.append(ev)
    for n in (n for n in names if "/" not in n):
        out += [hostio.read(f"{IB_CLASS_DIR}/{n}/ports/1/state"), resolved(f"{IB_CLASS_DIR}/{n}/device")]
    out.append(hostio.read(LIMITS, source="proc-limits"))
    return out
