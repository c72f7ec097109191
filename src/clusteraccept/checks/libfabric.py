"""What the libfabric fabrics share (AWS EFA: checks/efa.py; HPE Slingshot: checks/slingshot.py), both
reached by NCCL through the aws-ofi-nccl net plugin: libfabric's listing of a provider's devices and the
PCI addresses of the devices the plugin names. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from clusteraccept.checks.hostfacts import (
    CANNOT_RUN,
    NodeEvidence,
    by_node,
    failure,
    judge_nodes,
    last_line,
)
from clusteraccept.errors import ParseError
from clusteraccept.judge.verdicts import Verdict, error, skip
from clusteraccept.parsers import fi_info
from clusteraccept.probes.topology import CXI_CLASS_DIR, IB_CLASS_DIR
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import NodeType

NicPci = Mapping[str, Mapping[str, str]]  # node -> PCI address ("0000:18:00.0") -> device (EFA, cxi)


def listing(
    ne: NodeEvidence, provider: str, what: str, where: str
) -> tuple[fi_info.FiInfo | None, str | None, bool]:
    """``fi_info -p <provider>``: (listing, why not, whether the why is a finding). fi_getinfo -61 is one
    (libfabric offers no such provider here); a missing or unreadable fi_info is not (nothing was
    measured). ``what``: the provider as a person names it (EFA, cxi); ``where``: where the site's
    installer puts fi_info, said when it is not found."""
    item = ne.command("fi_info")
    if item is None:
        return None, "no fi_info evidence came back", False
    ev, path = item
    if ev.returncode in CANNOT_RUN:
        return None, f"{failure('fi_info', ev)} ({where})", False
    if ev.returncode != 0:
        found = "fi_getinfo" in ev.stderr + ev.stdout
        why = f"libfabric offers no {what} provider (fi_info -p {provider}: {last_line(ev)})"
        return None, why if found else failure("fi_info", ev), found
    try:
        return fi_info.parse(ev.stdout), None, False
    except ParseError as exc:
        return None, f"could not parse fi_info output ({path}): {exc}", False


def offered(
    ne: NodeEvidence, nt: NodeType, declared: int, what: str, where: str
) -> tuple[tuple[str, ...], list[str] | None, str]:
    """The devices ``fi_info -p <provider>`` offers this node, what is wrong with them (None: cannot be
    judged) and what was seen: the count against the node type's (``declared``), every device the rail
    map names among them. ``what``/``where``: as :func:`listing` says them."""
    assert nt.provider is not None
    info, why, finding = listing(ne, nt.provider, what, where)
    if info is None:
        why = why or "fi_info gave nothing"
        return (), ([why] if finding else None), why
    devices = info.devices(nt.provider)
    return devices, _inventory(nt, devices, declared, what), seen(devices, what)


def incomplete(
    site: Site,
    evidence: Sequence[tuple[Any, str]],
    family: str,
    problems: Callable[[Site, str, NodeEvidence], tuple[list[str] | None, str]],
) -> dict[str, str]:
    """Node -> why its nccl steps are not judged: ``<family>.devices`` fails there (a device short, none
    offered, a link down), as ``problems`` finds it on the nodes whose fabric is ``family``."""
    out = {}
    for node, ne in by_node([a for a in evidence if a[0].meta.get("check") == family]).items():
        try:
            if site.node_type(node).family != family:
                continue
        except KeyError:  # a host the site does not list (a run re-judged with another site file)
            continue
        found, _ = problems(site, node, ne)
        if found:
            out[node] = f"{family}.devices on {node} ({found[0]})"
    return out


def judge(
    site: Site,
    evidence: Sequence[tuple[Any, str]],
    nodes: Sequence[str],
    family: str,
    checks: Sequence[str],
    label: str,
    per_node: Callable[[Site, str, NodeEvidence], list[Verdict]],
) -> list[Verdict]:
    """A fabric family's verdicts (efa, slingshot, tcpx: ``NodeType.family``): ``per_node`` on each node
    of that fabric, ERROR on every check of one whose evidence did not come back, SKIP on every check of
    a node of another fabric (``label``: the fabric as the message names it)."""

    def other(nt: NodeType, node: str) -> list[Verdict]:
        why = f"node type {nt.name} is fabric {nt.fabric}: no {label}"
        return [skip(c, family, node, why) for c in checks]

    def mine(site: Site, node: str, ne: NodeEvidence) -> list[Verdict]:
        nt = site.node_type(node)
        return per_node(site, node, ne) if nt.family == family else other(nt, node)

    def missing(site: Site, node: str, why: str) -> list[Verdict]:
        nt = site.node_type(node)
        return [error(c, family, node, why) for c in checks] if nt.family == family else other(nt, node)

    return judge_nodes(site, evidence, nodes, family, mine, missing)


def _inventory(nt: NodeType, devices: Sequence[str], declared: int, what: str) -> list[str]:
    """The count libfabric offers against the node type's, and every device the rail map names among them."""
    problems = []
    if len(devices) != declared:
        offers = f"fi_info -p {nt.provider} offers {len(devices)} {what} devices"
        problems.append(f"{offers}, node type {nt.name} has {declared}")
    for r in nt.rails:
        missing = [n for n in r.devices if n not in devices]
        if missing:
            problems.append(f"rail {r.index} (GPU{r.gpu})'s {', '.join(missing)} absent")
    return problems


def seen(devices: Sequence[str], what: str) -> str:
    return f"{len(devices)} {what} devices ({', '.join(devices[:4])}{', ...' if len(devices) > 4 else ''})"


def device_addresses(evidence: Sequence[tuple[Any, str]]) -> dict[str, dict[str, str]]:
    """Node -> PCI address -> device, from the efa and slingshot probes' resolved device links."""
    out: dict[str, dict[str, str]] = {}
    for ev, _ in evidence:
        path = ev.path or ""
        if ev.source != "sysfs-link" or not ev.ok:
            continue
        for root in (IB_CLASS_DIR, CXI_CLASS_DIR):
            if path.startswith(root + "/"):
                device = path[len(root) + 1 :].split("/", 1)[0]
                out.setdefault(ev.host, {})[ev.stdout.strip().rsplit("/", 1)[-1].lower()] = device
    return out
