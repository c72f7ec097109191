"""The confirmation job (pure): after the first pass is judged, every suspect is re-tested with partners that
proved healthy, and every block collective that was slow while its pairs passed is bisected.

* **Retests**: each suspect node (of a node, node-rail or pair-path culprit) is paired with
  ``nccl.confirm.partners`` different healthy nodes from any block, one partner per round, all suspects of a
  round at once as a matching (each node in at most one pair per round; every rail of a pair at once). A
  path suspect's own pair runs again in the first round. Rounds: ``partners`` when there are at least as
  many healthy nodes as suspects, more when there are not, never more than ``nccl.confirm.max_rounds``
  (suspects left over are judged "not confirmed").
* **Bisection** of a straggler in a block of b nodes: for each bit j of a node's index (the block's order:
  its leaves in order, so the first split is between halves of the block and never splits a leaf where the
  block is leaves in order), the collective runs on the nodes whose bit is 0 and, at the same time, on
  those whose bit is 1: 2 * ceil(log2 b) steps in ceil(log2 b) rounds, decided on the submit host with no
  judging on the nodes (checks/confirm.py reads the slow side of each bit). A side with fewer than 2 nodes
  is not run (an intra-node collective is another measurement): that bit stays undecided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from clusteraccept.plan.jobs import CampaignJob, Round, Step, block_steps, pair_steps
from clusteraccept.site.model import Site

CONFIRM_JOB = "campaign-confirm"


@dataclass(frozen=True)
class Straggler:
    """A block collective slow while its pairs passed: who ran it, and in which order to halve them."""

    subject: str  # the block's name, or "all"
    scope: str  # block | all
    collective: str
    nodes: tuple[str, ...]


@dataclass(frozen=True)
class Suspects:
    nodes: tuple[str, ...]  # suspect nodes (of node, rail and path culprits), each retested
    paths: tuple[tuple[str, str], ...]  # pairs whose own path is suspect: run again as they were
    healthy: tuple[str, ...]  # nodes that proved healthy: the partners
    stragglers: tuple[Straggler, ...] = ()


def bisection_sets(nodes: Sequence[str]) -> list[tuple[int, tuple[str, ...], tuple[str, ...]]]:
    """(bit, nodes whose index has it 0, nodes whose index has it 1), most significant bit first; bits
    where a side has fewer than 2 nodes are left out."""
    bits = max(1, math.ceil(math.log2(len(nodes)))) if len(nodes) > 1 else 0
    out = []
    for j in reversed(range(bits)):
        a = tuple(n for i, n in enumerate(nodes) if not (i >> j) & 1)
        b = tuple(n for i, n in enumerate(nodes) if (i >> j) & 1)
        if len(a) >= 2 and len(b) >= 2:
            out.append((j, a, b))
    return out


def _retest_rounds(site: Site, s: Suspects) -> list[list[tuple[str, str]]]:
    """Rounds of pairs: the paths first, then each suspect with ``partners`` distinct healthy nodes."""
    want = {n: site.nccl.confirm.partners for n in s.nodes}
    used: dict[str, set[str]] = {n: set() for n in s.nodes}
    rounds: list[list[tuple[str, str]]] = []
    pending_paths = list(s.paths)
    healthy = [h for h in s.healthy if h not in want]
    while (pending_paths or any(want.values())) and len(rounds) < site.nccl.confirm.max_rounds:
        busy: set[str] = set()
        pairs: list[tuple[str, str]] = []
        for a, b in list(pending_paths):
            if a not in busy and b not in busy:
                pairs.append((a, b))
                busy.update((a, b))
                pending_paths.remove((a, b))
        free = [h for h in healthy if h not in busy]
        for n in s.nodes:
            if not want[n] or n in busy:
                continue
            partner = next((h for h in free if h not in used[n] and h not in busy), None)
            if partner is None:
                continue
            pairs.append((n, partner))
            busy.update((n, partner))
            used[n].add(partner)
            want[n] -= 1
        if not pairs:
            break  # no healthy partner left for anyone: the rest stays unconfirmed
        rounds.append(pairs)
    return rounds


def confirmation_job(site: Site, s: Suspects) -> CampaignJob | None:
    """The one job that re-tests the suspects and bisects the stragglers; None when there is nothing to do."""
    rounds: list[Round] = []
    retests = _retest_rounds(site, s)
    for collective in site.nccl.pair_collectives:  # a round per collective, as in the first pass
        for i, pairs in enumerate(retests):
            steps = []
            for a, b in pairs:
                scope = "pair_in_block" if site.block_of(a) == site.block_of(b) else "pair_cross_block"
                steps += [replace(st, attempt="retest") for st in pair_steps(site, a, b, scope, collective)]
            rounds.append(Round(len(rounds), f"{collective} retest {i + 1}", tuple(steps)))
    # stragglers of disjoint blocks bisect in the same rounds; "all" overlaps every block: its own rounds
    for group in (
        [g for g in s.stragglers if g.scope != "all"],
        [g for g in s.stragglers if g.scope == "all"],
    ):
        by_bit: dict[int, list[Step]] = {}
        for g in group:
            for level, (j, zeros, ones) in enumerate(bisection_sets(g.nodes)):
                for side, members in (("a", zeros), ("b", ones)):
                    step = next(
                        x
                        for x in block_steps(site, members, g.scope, g.subject)
                        if x.collective == g.collective
                    )
                    by_bit.setdefault(level, []).append(replace(step, attempt=f"bisect{j}{side}"))
        for level in sorted(by_bit):
            rounds.append(Round(len(rounds), f"bisect {level + 1}", tuple(by_bit[level])))
    if not rounds:
        return None
    used = {n for r in rounds for st in r.steps for n in st.nodes}
    nodes = tuple(n for n in site.nodes if n in used)
    return CampaignJob(CONFIRM_JOB, "confirm", nodes, tuple(rounds))
