"""Google Cloud GPUDirect-TCPX (A3 High) and -TCPXO (A3 Mega) on every node whose type is ``fabric: tcpx``
or ``tcpxo``. Evidence: probes/tcpx.py. Pure.

Verdicts (on ``<node>``):
- ``tcpx.devices``: every GPU NIC the rail map names (the rails' netdevs: 4 on A3 High, each serving two
  GPUs; 8 on A3 Mega) is there, a PCI device (its sysfs ``device`` link), and up (operstate). A node
  short of one runs every collective slower on the GPUs that lost it: its nccl steps are not judged
  (:func:`incomplete`, checks/nccl.py), this verdict is the one finding;
- ``tcpx.env``: the job's environment gives every variable the site requires (``tcpx.env`` /
  ``tcpxo.env``: the plugin's settings, e.g. TCPXO's ``NCCL_FASTRAK_CTRL_DEV``, ``NCCL_FASTRAK_IFNAME``
  from Google's nccl-env-profile.sh, TCPX's ``NCCL_GPUDIRECTTCPX_SOCKET_IFNAME`` and
  ``NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX`` from cluster-toolkit's a3-highgpu-8g scripts) its value.

What NCCL chose (the plugin loaded, its version, the receive-datapath manager ready, no NET/Socket) is
read from the campaigns' NCCL logs: nccl.transport (checks/launch.py). Nodes of another fabric get SKIP
saying so; a node without evidence gets ERROR: nothing was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusteraccept.checks import jobenv, libfabric, netdev
from clusteraccept.checks.hostfacts import NodeEvidence
from clusteraccept.judge.verdicts import Verdict, error, expect
from clusteraccept.probes.topology import NET_CLASS_DIR
from clusteraccept.site.model import Site

FAMILY = "tcpx"
CHECKS = ("tcpx.devices", "tcpx.env")


def _nics(site: Site, node: str) -> dict[str, list[int]]:
    """GPU NIC -> the GPUs whose rail it is."""
    out: dict[str, list[int]] = {}
    for r in site.node_type(node).rails:
        if r.netdev:
            out.setdefault(r.netdev, []).append(r.gpu)
    return out


def _problems(site: Site, node: str, ne: NodeEvidence) -> tuple[list[str] | None, str]:
    """What is wrong with the node's GPU NICs (None: cannot be judged), and what was seen."""
    problems: list[str] = []
    unknown: list[str] = []
    nics = _nics(site, node)
    for nic, gpus in nics.items():
        who = f"GPU NIC {nic} (GPU{', GPU'.join(map(str, gpus))})"
        bad, unsure = netdev.link_state(ne, nic, who)
        problems += [bad] if bad else []
        unknown += [unsure] if unsure else []
        if bad is None and unsure is None and netdev.pci_address(ne, nic) is None:
            problems.append(f"{who} is no PCI device ({NET_CLASS_DIR}/{nic}/device leads nowhere)")
    if unknown and not problems:
        return None, "; ".join(unknown)
    return problems, f"{len(nics)} GPU NICs ({', '.join(nics)})"


def _devices(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "tcpx.devices"
    nics = _nics(site, node)
    paths = tuple(p for p in (ne.archived(f"{NET_CLASS_DIR}/{n}/operstate") for n in nics) if p)
    if not nics:
        return error(check, FAMILY, node, f"{node}: the rail map names no GPU NIC (rails.gpuK.netdev)")
    problems, seen = _problems(site, node, ne)
    if problems is None:
        return error(check, FAMILY, node, f"{node}: {seen}", paths)
    msg = "; ".join(problems) if problems else f"{seen}: each a PCI device, its link up"
    return expect(check, FAMILY, node, not problems, f"{node}: {msg}", evidence=paths)


def _env(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    nt = site.node_type(node)
    assert nt.tcp is not None
    hint = (
        "the prolog or profile that sets them (Google's nccl-env-profile.sh) did not reach this node's jobs"
    )
    return jobenv.verdict("tcpx.env", FAMILY, node, nt.tcp.env, ne, f"{nt.fabric.upper()} settings", hint)


def incomplete(site: Site, evidence: Sequence[tuple[Any, str]]) -> dict[str, str]:
    """Node -> why its nccl steps are not judged: tcpx.devices fails there (a GPU NIC gone or down)."""
    return libfabric.incomplete(site, evidence, FAMILY, _problems)


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    return libfabric.judge(
        site,
        evidence,
        nodes,
        FAMILY,
        CHECKS,
        "GPUDirect-TCPX(O)",
        lambda s, node, ne: [_devices(s, node, ne), _env(s, node, ne)],
    )
