"""Google Cloud GPUDirect-TCPX (A3 High) and -TCPXO (A3 Mega) on every node whose type is ``fabric: tcpx``
or ``tcpxo``. Evidence: probes/tcpx.py. Pure.

Verdicts (on ``<node>``):
- ``tcpx.devices``: every GPU NIC the rail map names (the rails' netdevs: 4 on A3 High, each serving two
  GPUs; 8 on A3 Mega) is there, a PCI device (its sysfs ``device`` link), and up (operstate). A node
  short of one runs every collective slower on the GPUs that lost it: its nccl steps are not judged
  (:func:`incomplete`, checks/nccl.py), this verdict is the one finding;
- ``tcpx.rxdm``: the receive-datapath manager (RxDM, the container slurm-gcp's prolog starts for every job
  of more than one node) serves this node's jobs: TCPXO's listens on the abstract unix socket
  ``@rxdm_uds_nic_mapping`` (without it FasTrak waits 30 s, then aborts the process), TCPX's sockets are
  in the directory the job's ``NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX`` names (without them the receiving
  side cannot program its flow-steering rule and every connection to the node fails). A probe job of one
  node gets SKIP: the prolog starts no RxDM for it;
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
from clusteraccept.checks.hostfacts import NodeEvidence, failure
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.probes.tcpx import (
    JOB_NODES,
    PROC_NET_UNIX,
    RXDM_SOCKET,
    TCPX_DEFAULT_PREFIX,
    TCPX_PREFIX,
)
from clusteraccept.probes.topology import NET_CLASS_DIR
from clusteraccept.site.model import Site

FAMILY = "tcpx"
CHECKS = ("tcpx.devices", "tcpx.rxdm", "tcpx.env")
RX_RULE_MANAGER = "rx_rule_manager"  # one of the TCPX RxDM's sockets in its --uds_path (google/tcpgpudmarxd)


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
        link = f"{NET_CLASS_DIR}/{nic}/device"
        if bad is None and unsure is None and ne.file(link) is None:
            unknown.append(f"{who}: its {link} was not read")
        elif bad is None and unsure is None and netdev.pci_address(ne, nic) is None:
            problems.append(f"{who} is no PCI device ({link} leads nowhere)")
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


def _rxdm(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "tcpx.rxdm"
    nt = site.node_type(node)
    env = jobenv.read(ne)
    if env is not None and env.get(JOB_NODES) == "1":
        why = f"{node}: the probe job ran on one node, and slurm-gcp's prolog starts no RxDM for such a job"
        return skip(check, FAMILY, node, why)
    if nt.fabric == "tcpxo":
        item = ne.command("rxdm-socket")
        if item is None:
            return error(check, FAMILY, node, f"{node}: no evidence of the RxDM's socket came back")
        ev, path = item
        if ev.returncode == 0 and RXDM_SOCKET in ev.stdout:
            msg = f"{node}: the RxDM listens on @{RXDM_SOCKET} ({PROC_NET_UNIX})"
            return expect(check, FAMILY, node, True, msg, evidence=(path,))
        if ev.returncode != 1 or ev.stdout.strip():
            return error(check, FAMILY, node, f"{node}: {failure('grep', ev)}", (path,))
        msg = (
            f"{node}: nothing listens on @{RXDM_SOCKET} ({PROC_NET_UNIX}): the receive-datapath manager is "
            "not running here (slurm-gcp's prolog starts its container); FasTrak waits for it, then aborts "
            "every job of this node"
        )
        return expect(check, FAMILY, node, False, msg, evidence=(path,))
    if env is None:  # where the RxDM's sockets are is the job's own setting
        return error(check, FAMILY, node, f"{node}: the job's environment was not read ({TCPX_PREFIX})")
    prefix = env.get(TCPX_PREFIX) or TCPX_DEFAULT_PREFIX
    names = ne.listing(prefix)
    paths = tuple(p for p in [ne.archived(prefix)] if p)
    if names is None:
        return error(check, FAMILY, node, f"{node}: {prefix}, where the RxDM's sockets are, was not listed")
    if RX_RULE_MANAGER in names:
        msg = f"{node}: the RxDM's sockets are in {prefix} ({RX_RULE_MANAGER}, ...)"
        return expect(check, FAMILY, node, True, msg, evidence=paths)
    unset = "" if env.get(TCPX_PREFIX) else f" ({TCPX_PREFIX} unset: the plugin's default)"
    msg = (
        f"{node}: no RxDM socket ({RX_RULE_MANAGER}) in {prefix}{unset}: the receive-datapath manager is not "
        "running here, or the prefix is not its --uds_path; every connection to this node will fail"
    )
    return expect(check, FAMILY, node, False, msg, evidence=paths)


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
        lambda s, node, ne: [_devices(s, node, ne), _rxdm(s, node, ne), _env(s, node, ne)],
    )
