"""The subjects a check is judged on, known from the site and the plan before anything runs.

Suite tests are parametrized by these (so ``-k node07`` and ``-k rail3`` select), and judges name their
verdicts with the same strings.
"""

from __future__ import annotations

from collections.abc import Callable

from clusteraccept.plan.jobs import Plan, make_plan
from clusteraccept.site.model import Site

PER = ("node", "gpu", "rail", "pair_rail", "intra_node", "block")


def gpu_subject(node: str, gpu: int) -> str:
    return f"{node}:gpu{gpu}"


def rail_subject(node: str, rail: int) -> str:
    return f"{node}:rail{rail}"


def rail_steps(pairs: list[str], picked: frozenset[str]) -> frozenset[str]:
    """The pair steps (``a-b:railK``) through the ``node:railK`` subjects in ``picked``: a node rail's
    counters are judged over the traffic of its pairs (checks/counters.py). Node names may hold '-'."""
    known = set(pairs)
    rails: dict[str, list[str]] = {}
    for s in picked:
        if not isinstance(s, str):  # pytest's NOTSET: a per-rail test on a site without rails
            continue
        node, _, rail = s.rpartition(":")
        if node and rail.startswith("rail") and s not in known:
            rails.setdefault(rail, []).append(node)
    return frozenset(
        pair
        for pair in pairs
        for ends, _, rail in [pair.rpartition(":")]
        if any(ends.startswith(f"{n}-") or ends.endswith(f"-{n}") for n in rails.get(rail, ()))
    )


def item_subjects(site: Site, per: str) -> list[str]:
    """The subjects of the pytest items (judge/items.py): every node, or every block and the whole set."""
    if per == "node":
        return list(site.nodes)
    if per == "block":
        return list(dict.fromkeys([*site.blocks, "all"]))
    if per == "domain":  # the NVLink domains that span nodes (NVL72 racks); judged as block-like owners
        return list(site.nvlink_domains)
    raise ValueError(f"unknown item kind {per!r}; known: node, block, domain")


def not_applicable(site: Site, family: str) -> str | None:
    """Why a family has no items on this site (None: it applies)."""
    if family == "roce" and site.roce is None:
        return f"{site.name} has no roce: section (not a RoCE fabric)"
    if family == "nvlink" and not any(nt.nvlink for nt in site.node_types):
        return f"{site.name} declares no NVLink (node_types.<type>.nvlink)"
    if family == "efa" and not any(nt.fabric == "efa" for nt in site.node_types):
        return f"{site.name} has no EFA node type (node_types.<type>.fabric: efa)"
    if family == "slingshot" and not any(nt.fabric == "slingshot" for nt in site.node_types):
        return f"{site.name} has no Slingshot node type (node_types.<type>.fabric: slingshot)"
    if family == "tcpx" and not any(nt.tcp for nt in site.node_types):
        return f"{site.name} has no GPUDirect-TCPX(O) node type (node_types.<type>.fabric: tcpx or tcpxo)"
    if family == "sharp" and not site.sharp.enabled:
        return f"SHARP is not enabled on {site.name} (sharp.enabled)"
    return None


def pick_steps(plan: Plan, keep: Callable[[str, str, tuple[str, ...]], bool]) -> frozenset[str]:
    """The nccl step subjects ``keep(per, subject, nodes)`` keeps; ``per`` is the kind of item that judges
    the step (``node``: pair and intra-node steps, through the nodes' items; ``block``: block steps)."""
    out: set[str] = set()
    seen: set[str] = set()
    for step in plan.steps():
        if step.family != "nccl" or step.subject in seen:
            continue
        seen.add(step.subject)
        if keep("block" if step.kind == "block" else "node", step.subject, step.nodes):
            out.add(step.subject)
    return frozenset(out)


def subjects(site: Site, per: str, plan: Plan | None = None) -> list[str]:
    if per == "node":
        return list(site.nodes)
    if per == "gpu":
        return [gpu_subject(n, g) for n in site.nodes for g in range(site.node_type(n).gpus)]
    if per == "rail":
        return [rail_subject(n, r.index) for n in site.nodes for r in site.node_type(n).rails]
    steps = (plan or make_plan(site, families=())).steps()
    if per == "pair_rail":
        return list(dict.fromkeys(s.subject for s in steps if s.kind == "pair"))
    if per == "intra_node":
        return list(dict.fromkeys(s.subject for s in steps if s.kind == "node"))
    if per == "block":
        return list(dict.fromkeys(s.subject for s in steps if s.kind == "block"))
    raise ValueError(f"unknown subject kind {per!r}; known: {', '.join(PER)}")
