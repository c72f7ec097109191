"""Simulated host part for the launch record (probes/launch.py, through hostio's CPU-affinity seam).

- ``affinity.json``: the CPUs Slurm gives a step's task on that node: all of the node's CPUs (a step
  without --exact, templates/srun_step.j2), the modelled shape's two sockets (sim/profile_topology.py);
- the GPUs' ``local_cpulist`` comes with the topology part.

Faults: ``cpu_pinned {node}``: every task on the node ends up on CPU 0 whatever it asks (a task prolog
or a site's --cpu-bind that pins everything there); ``nccl_conf {node, setting}``: the node's
/etc/nccl.conf holds ``setting`` (default ``NCCL_ALGO=Ring``), which NCCL reads as if from the environment.
"""

from __future__ import annotations

import json
from typing import Any

from clusteraccept.parsers._cpulist import parse_ids
from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_topology import shape
from clusteraccept.site.model import Site


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    sh = shape(site, node)
    if sh is None:
        return part
    affinity: dict[str, list[int]] = {"allowed": list(parse_ids(sh.all_cpus) or ())}
    if any(f.get("kind") == "cpu_pinned" for f in faults):
        affinity["forced"] = [0]
    part.profile_files["affinity.json"] = json.dumps(affinity)
    settings = [str(f.get("setting") or "NCCL_ALGO=Ring") for f in faults if f.get("kind") == "nccl_conf"]
    if settings:
        part.files["/etc/nccl.conf"] = "".join(f"{s}\n" for s in settings)
    return part
