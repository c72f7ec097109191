"""``--only-due``: a run restricted to what is attestation-due (:mod:`clusteraccept.ops.attest`).

What is submitted (:meth:`Scope.restrict`, pure): the probe job on the due nodes only; a pair step (every
rail of the pair) where one of its nodes is due or one of the pair's links is; intra-node steps of due
nodes; block and SHARP steps whose nodes include a due node; whole-set steps only when every node is
due. Campaigns are allocated on just
the nodes their kept steps use, so the rest of the cluster stays free. The node checks judge only the due
nodes (:func:`clusteraccept.flow.judged_nodes`): the others were not probed, and calling them ERROR would
be a lie.

Suite tests of subjects outside the scope skip with the attestation they still hold
(:meth:`Scope.skip_reason`); results.json ``scope`` records what was due and why, and the banner says the
run is not a full acceptance (``report.model.banner``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusteraccept.flow import only_due
from clusteraccept.judge.items import split_pair
from clusteraccept.ops.attest import Attestation, Due, attestations, load_runs, site_due
from clusteraccept.plan.jobs import CampaignJob, Plan, Step
from clusteraccept.report.model import NOTHING_DUE, not_planned_reason
from clusteraccept.site.model import Site

if TYPE_CHECKING:
    from clusteraccept.jobs.submit import JobOutcome


@dataclass(frozen=True)
class Scope:
    due: tuple[Due, ...]
    nodes: frozenset[str]  # the due nodes
    pairs: frozenset[str]  # "a-b" of every pair with a due link (any rail)
    as_of: str  # when "due" was decided (ISO 8601, UTC)
    site_nodes: tuple[str, ...]
    blocks: Mapping[str, tuple[str, ...]]
    held: Mapping[str, Attestation]  # the attestations then: what the skipped subjects still hold
    known: frozenset[str] = frozenset()  # site_nodes as a set: pair names split on them, once per test

    @property
    def n_links(self) -> int:
        return sum(1 for d in self.due if d.subject not in self.nodes)

    def keeps(self, step: Step) -> bool:
        """Whether a campaign step is in scope: it runs on a due node, or it is a pair with a due link.
        A whole-set step (scope ``all``: every node of the cluster, exclusive) runs only when every node is
        due: one expired node must not take the whole cluster for a night; its block collective covers it."""
        if step.scope == "all" and not self.nodes >= set(self.site_nodes):
            return False
        if any(n in self.nodes for n in step.nodes):
            return True
        return step.kind == "pair" and step.subject.rpartition(":")[0] in self.pairs

    def restrict(self, plan: Plan) -> Plan:
        """The plan cut down to the scope (job names kept: resume and the reports know them by name)."""
        probes = tuple(
            replace(pj, nodes=tuple(n for n in pj.nodes if n in self.nodes))
            for pj in plan.probe_jobs
            if any(n in self.nodes for n in pj.nodes)
        )
        kept = (self._campaign(cj) for cj in plan.campaign_jobs)
        return Plan(probes, tuple(cj for cj in kept if cj is not None))

    def _campaign(self, job: CampaignJob) -> CampaignJob | None:
        rounds = (replace(r, steps=tuple(s for s in r.steps if self.keeps(s))) for r in job.rounds)
        kept = tuple(replace(r, index=i) for i, r in enumerate(r for r in rounds if r.steps))
        if not kept:
            return None
        used = {n for r in kept for s in r.steps for n in s.nodes}
        return replace(job, nodes=tuple(n for n in job.nodes if n in used), rounds=kept)

    def unplanned(self, plan: Plan) -> tuple[str, ...]:
        """Due subjects that nothing in ``plan`` (the restricted plan) verifies: a due node with no probe
        and no step, a due link with no pair step (its pair left the site's pair selection, -k filtered
        it, or the preflight dropped a node). They stay due; the run must say so, not pass over them."""
        steps = list(plan.steps())
        nodes = {n for pj in plan.probe_jobs for n in pj.nodes} | {n for s in steps for n in s.nodes}
        links = {s.subject for s in steps if s.kind == "pair"}
        return tuple(
            d.subject for d in self.due if d.subject not in (nodes if d.subject in self.nodes else links)
        )

    def unavailable(self, outcome: JobOutcome | None) -> JobOutcome | None:
        """The preflight's unusable nodes that this run misses: the due ones. A node outside the scope that
        Slurm will not run on (someone's maintenance) does not make a due-only run incomplete."""
        if outcome is None:
            return None
        return replace(outcome, missing=tuple(n for n in outcome.missing if n in self.nodes))

    def covers(self, per: str, subject: str) -> bool:
        """Whether the run judges a suite test's subject (``per`` as in ``subjects.PER``)."""
        if per == "pair_rail":
            pair = subject.rpartition(":")[0]
            a, b = split_pair(pair, self.known)
            return a in self.nodes or b in self.nodes or pair in self.pairs
        if per == "block":
            return any(n in self.nodes for n in self._members(subject))
        return subject.split(":", 1)[0] in self.nodes

    def skip_reason(self, per: str, subject: str) -> str | None:
        """None for a subject in scope; else why its test skips: the attestation it still holds."""
        if self.covers(per, subject):
            return None
        a = self._attestation(per, subject)
        if a is None:  # not due yet no attestation: the reports dir changed since the run decided
            return f"not due at {self.as_of} (--only-due)"
        return f"attestation valid until {a.valid_until} (run {a.run_id})"

    def _members(self, block: str) -> tuple[str, ...]:
        return self.blocks.get(block) or (self.site_nodes if block == "all" else ())

    def _attestation(self, per: str, subject: str) -> Attestation | None:
        if per == "pair_rail":
            return self.held.get(subject)
        if per == "block":  # a block holds what its first-expiring node holds
            held = [a for n in self._members(subject) if (a := self.held.get(n)) is not None]
            return min(held, key=lambda a: a.valid_until, default=None)
        return self.held.get(subject.split(":", 1)[0])

    def record(self, plan: Plan | None = None) -> dict[str, Any]:
        """results.json ``scope`` (``not_planned``: :meth:`unplanned` of the run's restricted ``plan``)."""
        return {
            "not_planned": list(self.unplanned(plan)) if plan is not None else [],
            "only_due": True,
            "as_of": self.as_of,
            "nodes": [n for n in self.site_nodes if n in self.nodes],
            "n_links": self.n_links,
            # every node due: every step has a due node, so nothing was left out (a full acceptance)
            "all_due": self.nodes >= set(self.site_nodes),
            "due": [{"subject": d.subject, "why": d.why} for d in self.due],
        }


def build(site: Site, due: Sequence[Due], held: Mapping[str, Attestation], as_of: str) -> Scope:
    known = frozenset(site.nodes)
    nodes = frozenset(d.subject for d in due if d.subject in known)
    pairs = frozenset(d.subject.rpartition(":")[0] for d in due if d.subject not in known)
    return Scope(tuple(due), nodes, pairs, as_of, tuple(site.nodes), dict(site.blocks), held, known)


def compute(site: Site, root: Path, run_id: str | None, now: datetime) -> Scope:
    """What is due now from the runs under ``root`` (``<reports-dir>/<site>``), leaving out ``run_id``."""
    found = site_due(site, root, now, exclude_run=run_id)
    return build(site, found.due, found.state[0], now.isoformat(timespec="seconds"))


def of_results(site: Site, results: Mapping[str, Any], root: Path) -> Scope | None:
    """The scope a due-only run recorded (None for a full run), with the attestations that held then:
    for the processes that did not decide it (xdist workers, --rejudge, --resume)."""
    rec = results.get("scope") or {}
    if not rec.get("only_due"):
        return None
    as_of = str(rec.get("as_of") or results.get("started") or "")
    runs = [
        r
        for r in (load_runs(root) if root.is_dir() else [])
        if r.get("run_id") != results.get("run_id") and str(r.get("started") or "") <= as_of
    ]
    held = attestations(runs, site.nodes, site.ops.attest.ttl_days)[0]
    return build(site, [Due(str(d["subject"]), str(d["why"])) for d in rec.get("due", [])], held, as_of)


def due_partial(results: Mapping[str, Any]) -> bool:
    """A due-only run that left something out (not every node was due). report.model.partial also counts
    -k subsets; the nightly never runs one."""
    return only_due(results) and not results["scope"].get("all_due")


def nothing_due(results: Mapping[str, Any]) -> bool:
    """A due-only run that found nothing due: it submitted nothing, on purpose."""
    return only_due(results) and not results["scope"].get("due")


def summary_line(results: Mapping[str, Any], shown: int = 3) -> str | None:
    """One line for the terminal and the nightly summary (``shown`` due subjects named); None: a full run."""
    if not only_due(results):
        return None
    rec = results["scope"]
    if not rec.get("due"):
        return NOTHING_DUE
    head = f"only due: {len(rec.get('nodes', ()))} node(s) and {rec.get('n_links', 0)} link(s)"
    named = [f"{d['subject']} ({d['why']})" for d in rec["due"][:shown]]
    more = [f"... {len(rec['due']) - shown} more"] if named and len(rec["due"]) > shown else []
    lost = rec.get("not_planned") or []
    tail = f"; {not_planned_reason(lost)}" if lost else ""
    return (f"{head}: {'; '.join(named + more)}" if named else head) + tail
