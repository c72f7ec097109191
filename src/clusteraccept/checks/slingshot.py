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

from clusteraccept.checks import libfabric
from clusteraccept.checks.hostfacts import NodeEvidence, by_node
from clusteraccept.hostio import ENVIRON
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.probes.slingshot import NET_CLASS_DIR, PROVIDER
from clusteraccept.probes.topology import CXI_CLASS_DIR
from clusteraccept.site.model import Site

FAMILY = "slingshot"
CHECKS = ("slingshot.devices", "slingshot.env")


def _problems(site: Site, node: str, ne: NodeEvidence) -> tuple[list[str] | None, str]:
    """What is wrong with the node's Slingshot NICs (None: cannot be judged), and what was seen."""
    nt = site.node_type(node)
    assert nt.slingshot is not None
    info, why, finding = libfabric.listing(
        ne, PROVIDER, "cxi", "it comes with libfabric, e.g. /opt/cray/libfabric"
    )
    if info is None:
        why = why or "fi_info gave nothing"
        return ([why] if finding else None), why
    devices = info.devices(PROVIDER)
    problems = libfabric.inventory(nt, devices, nt.slingshot.devices, "cxi")
    for r in nt.rails:
        if r.netdev is None or any(n not in devices for n in r.devices):
            continue  # no netdev named, or the NIC itself is absent (said above)
        state = ne.text(f"{NET_CLASS_DIR}/{r.netdev}/operstate")
        if state is None:
            problems.append(f"rail {r.index}'s {r.netdev} is not in {NET_CLASS_DIR} (or unreadable)")
        elif state != "up":
            problems.append(
                f"rail {r.index}'s {r.netdev} ({', '.join(r.devices)}) link is {state}, expected up"
            )
    return problems, libfabric.seen(devices, "cxi")


def _devices(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "slingshot.devices"
    nt = site.node_type(node)
    states = [ne.archived(f"{NET_CLASS_DIR}/{r.netdev}/operstate") for r in nt.rails if r.netdev]
    paths = tuple(p for p in (*ne.archived_command("fi_info"), ne.archived(CXI_CLASS_DIR), *states) if p)
    problems, seen = _problems(site, node, ne)
    if problems is None:
        return error(check, FAMILY, node, f"{node}: {seen}", paths)
    links = "every rail's link up" if any(r.netdev for r in nt.rails) else "no rail netdev named"
    msg = (
        "; ".join(problems) if problems else f"{seen} offered by libfabric, every rail's among them, {links}"
    )
    return expect(check, FAMILY, node, not problems, f"{node}: {msg}", evidence=paths)


def _env(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check = "slingshot.env"
    nt = site.node_type(node)
    assert nt.slingshot is not None
    wanted = dict(nt.slingshot.env)
    if not wanted:
        return skip(check, FAMILY, node, f"node type {nt.name} requires no variables (slingshot.env)")
    item = ne.file(ENVIRON)
    if item is None or not item[0].ok:
        return error(check, FAMILY, node, f"{node}: the job's environment was not read")
    ev, path = item
    got = dict(line.split("=", 1) for line in ev.stdout.splitlines() if "=" in line)
    unset = [k for k in wanted if k not in got]
    other = [f"{k}={got[k]} (expected {v})" for k, v in wanted.items() if k in got and got[k] != v]
    bad = ([f"unset: {', '.join(unset)}"] if unset else []) + other
    if bad:
        msg = (
            f"{node}: the job's environment lacks the site's Slingshot settings: {'; '.join(bad)} (the "
            "module or container hook that sets them did not reach this node's jobs)"
        )
        return expect(check, FAMILY, node, False, msg, evidence=(path,))
    return expect(
        check,
        FAMILY,
        node,
        True,
        f"{node}: the job gets all {len(wanted)} required variables",
        evidence=(path,),
    )


def incomplete(site: Site, evidence: Sequence[tuple[Any, str]]) -> dict[str, str]:
    """Node -> why its nccl steps are not judged: slingshot.devices fails there (a NIC short, a link down)."""
    out = {}
    for node, ne in by_node([a for a in evidence if a[0].meta.get("check") == FAMILY]).items():
        try:
            if site.node_type(node).slingshot is None:
                continue
        except KeyError:  # a host the site does not list (a run re-judged with another site file)
            continue
        problems, _ = _problems(site, node, ne)
        if problems:
            out[node] = f"slingshot.devices on {node} ({problems[0]})"
    return out


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    grouped = by_node(evidence)
    out: list[Verdict] = []
    for node in nodes:
        nt = site.node_type(node)
        if nt.slingshot is None:
            out += [
                skip(c, FAMILY, node, f"node type {nt.name} is fabric {nt.fabric}: no Slingshot")
                for c in CHECKS
            ]
        elif (ne := grouped.get(node)) is None:
            out += [
                error(c, FAMILY, node, f"{node}: no slingshot evidence came back from this node")
                for c in CHECKS
            ]
        else:
            out += [_devices(site, node, ne), _env(site, node, ne)]
    return out
