"""HPE Slingshot on every node whose type is ``fabric: slingshot``. Evidence: probes/slingshot.py. Pure.

Verdicts (on ``<node>``):
- ``slingshot.devices``: libfabric's ``fi_info -p cxi`` offers the cxi NICs the node type declares
  (``slingshot.devices``: 4 on an Alps GH200 node, one per GPU), every NIC the rail map names is among
  them, and each rail's network device (``hsn0``, ...) is up (sysfs operstate), as CSCS's node checks
  count "Link state: up" in cxi_stat. A node short of a NIC, or with a rail's link down, runs every
  collective slower on the GPUs that lost it: its nccl steps are not judged (:func:`incomplete`,
  checks/nccl.py), this verdict is the one finding;
- ``slingshot.env``: the job's environment gives every variable the site requires (``slingshot.env``:
  HPE's and the centre's settings for NCCL over the cxi provider, e.g. ``NCCL_NET="AWS Libfabric"``,
  ``FI_CXI_DISABLE_HOST_REGISTER=1``, ``FI_MR_CACHE_MONITOR=userfaultfd``: HewlettPackard/shs-ccl-docs
  ccl_env.sh, eth-cscs/cscs-docs docs/software/communication/nccl.md) its value: a job without them runs,
  slower or hanging under load, and a user cannot tell.

Nodes of another fabric get SKIP saying so; a node without evidence, or with fi_info missing or
unparseable, gets ERROR: nothing was measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusteraccept.checks import jobenv, libfabric, netdev
from clusteraccept.checks.hostfacts import NodeEvidence
from clusteraccept.judge.verdicts import Verdict, error, expect
from clusteraccept.probes.topology import CXI_CLASS_DIR, NET_CLASS_DIR
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import NodeType

FAMILY = "slingshot"
CHECKS = ("slingshot.devices", "slingshot.env")


def _links(nt: NodeType, devices: Sequence[str], ne: NodeEvidence) -> tuple[list[str], list[str]]:
    """Each rail's netdev: (what is wrong, what could not be read). A netdev that is not its NIC's (another
    PCI device: cxi_stat pairs them by it) judges the wrong link, which is a finding of its own."""
    problems: list[str] = []
    unknown: list[str] = []
    for r in nt.rails:
        if r.netdev is None or any(n not in devices for n in r.devices):
            continue  # the NIC itself is absent (said already)
        bad, unsure = netdev.link_state(ne, r.netdev, f"rail {r.index}'s {r.netdev} ({', '.join(r.devices)})")
        problems += [bad] if bad else []
        unknown += [unsure] if unsure else []
        nic = ne.link(f"{CXI_CLASS_DIR}/{r.devices[0]}/device")
        dev = netdev.pci_address(ne, r.netdev)
        if nic and dev and nic.rsplit("/", 1)[-1] != dev:
            problems.append(
                f"rail {r.index}'s {r.netdev} is not {r.devices[0]}'s network device (PCI "
                f"{dev}, the NIC {nic.rsplit('/', 1)[-1]}): fix the rail map's netdev"
            )
    return problems, unknown


def _problems(site: Site, node: str, ne: NodeEvidence) -> tuple[list[str] | None, str]:
    """What is wrong with the node's Slingshot NICs and links (None: cannot be judged), and what was seen."""
    nt = site.node_type(node)
    assert nt.slingshot is not None
    where = "the bin directory of the site's libfabric"
    devices, problems, seen = libfabric.offered(ne, nt, nt.slingshot.devices, "cxi", where)
    if problems is None:
        return None, seen
    bad, unknown = _links(nt, devices, ne)
    problems += bad
    if unknown and not problems:
        return None, "; ".join(unknown)
    return problems, seen


def _devices(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "slingshot.devices"
    nt = site.node_type(node)
    states = [ne.archived(f"{NET_CLASS_DIR}/{r.netdev}/operstate") for r in nt.rails if r.netdev]
    paths = tuple(p for p in (*ne.archived_command("fi_info"), ne.archived(CXI_CLASS_DIR), *states) if p)
    problems, seen = _problems(site, node, ne)
    if problems is None:
        return error(check, FAMILY, node, f"{node}: {seen}", paths)
    links = "every rail's link up"
    msg = (
        "; ".join(problems) if problems else f"{seen} offered by libfabric, every rail's among them, {links}"
    )
    return expect(check, FAMILY, node, not problems, f"{node}: {msg}", evidence=paths)


def _env(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    nt = site.node_type(node)
    assert nt.slingshot is not None
    hint = "the module or container hook that sets them did not reach this node's jobs"
    return jobenv.verdict("slingshot.env", FAMILY, node, nt.slingshot.env, ne, "Slingshot settings", hint)


def incomplete(site: Site, evidence: Sequence[tuple[Any, str]]) -> dict[str, str]:
    """Node -> why its nccl steps are not judged: slingshot.devices fails there (a NIC short, a link down)."""
    return libfabric.incomplete(site, evidence, FAMILY, _problems)


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    return libfabric.judge(
        site,
        evidence,
        nodes,
        FAMILY,
        CHECKS,
        "Slingshot",
        lambda s, node, ne: [_devices(s, node, ne), _env(s, node, ne)],
    )
