"""AWS EFA on every node whose type is ``fabric: efa``. Evidence: probes/efa.py. Pure.

Verdicts (on ``<node>``):
- ``efa.devices``: libfabric's ``fi_info -p efa`` offers the EFA devices the node type declares
  (``efa.devices``: 32 on a p5.48xlarge), every device the rail map names is among them, and each of
  their ports is ACTIVE in sysfs. AWS's own health check compares the same count with the instance
  type's and isolates a node that is short (aws-samples/awsome-distributed-training
  4.validation_and_observability/2.gpu-cluster-healthcheck, checks/2-efa-enumeration.sh). A node short of a
  device runs every collective slower on the GPUs that lost it: its nccl steps are not judged
  (:func:`incomplete`, checks/nccl.py), this verdict is the one finding;
- ``efa.memlock``: the job's locked-memory limit is unlimited (soft and hard): EFA registers the
  buffers NCCL sends from, and AWS's Slurm (ParallelCluster) runs slurmd with ``LimitMEMLOCK=infinity``
  (aws-parallelcluster-cookbook slurmd.service); the same health check warns below 16 GiB.

Nodes of another fabric get SKIP saying so; a node without evidence, or with fi_info missing or
unparseable, gets ERROR: nothing was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusteraccept.checks import libfabric
from clusteraccept.checks.hostfacts import NodeEvidence, last_line
from clusteraccept.errors import ParseError
from clusteraccept.judge.verdicts import Verdict, error, expect
from clusteraccept.parsers import proc_limits
from clusteraccept.probes.efa import LIMITS
from clusteraccept.probes.topology import IB_CLASS_DIR
from clusteraccept.site.model import Site

FAMILY = "efa"
CHECKS = ("efa.devices", "efa.memlock")


def _problems(site: Site, node: str, ne: NodeEvidence) -> tuple[list[str] | None, str]:
    """What is wrong with the node's EFA devices (None: cannot be judged), and what was seen."""
    nt = site.node_type(node)
    assert nt.efa is not None
    where = "the EFA installer puts it in /opt/amazon/efa/bin"
    devices, problems, seen = libfabric.offered(ne, nt, nt.efa.devices, "EFA", where)
    if problems is None:
        return None, seen
    for dev in devices:
        state = ne.text(f"{IB_CLASS_DIR}/{dev}/ports/1/state")
        if state is not None and not state.endswith("ACTIVE"):
            problems.append(f"{dev} port 1 is {state}, expected ACTIVE")
        elif state is None and ne.listing(IB_CLASS_DIR) is not None:
            problems.append(f"{dev} is not in {IB_CLASS_DIR} (or its port state is unreadable)")
    return problems, seen


def _devices(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "efa.devices"
    paths = tuple(p for p in (*ne.archived_command("fi_info"), ne.archived(IB_CLASS_DIR)) if p)
    problems, seen = _problems(site, node, ne)
    if problems is None:
        return error(check, FAMILY, node, f"{node}: {seen}", paths)
    msg = (
        "; ".join(problems)
        if problems
        else f"{seen} offered by libfabric, every rail's among them, ports ACTIVE"
    )
    return expect(check, FAMILY, node, not problems, f"{node}: {msg}", evidence=paths)


def _memlock(node: str, ne: NodeEvidence) -> Verdict:
    check = "efa.memlock"
    item = ne.file(LIMITS)
    if item is None or not item[0].ok:
        why = "not read" if item is None else last_line(item[0])
        return error(check, FAMILY, node, f"{node}: {LIMITS} {why}")
    ev, path = item
    try:
        lock = proc_limits.parse(ev.stdout).get("Max locked memory")
    except ParseError as exc:
        return error(check, FAMILY, node, f"{node}: could not parse {LIMITS} ({path}): {exc}", (path,))
    if lock is None:
        return error(check, FAMILY, node, f"{node}: {LIMITS} has no 'Max locked memory' line", (path,))
    if lock.soft is None and lock.hard is None:
        return expect(
            check, FAMILY, node, True, f"{node}: max locked memory unlimited in the job", evidence=(path,)
        )

    def shown(v: int | None) -> str:
        return "unlimited" if v is None else f"{v} {lock.unit or ''}".strip()

    msg = (
        f"{node}: max locked memory {shown(lock.soft)} (soft), {shown(lock.hard)} (hard) in the job, "
        "expected unlimited: EFA pins the memory NCCL registers (slurmd's LimitMEMLOCK, slurm.conf "
        "PropagateResourceLimits)"
    )
    return expect(check, FAMILY, node, False, msg, value=lock.soft, evidence=(path,))


def incomplete(site: Site, evidence: Sequence[tuple[Any, str]]) -> dict[str, str]:
    """Node -> why its nccl steps are not judged: efa.devices fails there (a device short, none offered)."""
    return libfabric.incomplete(site, evidence, FAMILY, _problems)


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    return libfabric.judge(
        site,
        evidence,
        nodes,
        FAMILY,
        CHECKS,
        "EFA",
        lambda s, node, ne: [_devices(s, node, ne), _memlock(node, ne)],
    )
