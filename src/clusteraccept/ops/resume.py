"""``--resume RUN_DIR``: rerun only what a run lost for reasons outside the hardware, into the same run.

What is rerun (:func:`what_to_rerun`, pure): the subjects listed in ``results.json`` ``jobs[].missing``
(node down, job timeout, preemption, sbatch refused), the subjects of ERROR verdicts (a step that timed
out, evidence that never came back), and the steps of a job Slurm ended early (NODE_FAIL, TIMEOUT,
PREEMPTED...) whose launch did not pass (a step killed with its job exits non-zero and is judged FAIL).
Probe nodes are collected again (every family of the run), campaign steps run again in reduced campaigns
on just the nodes they need. Verdicts already reached stay: their
evidence stays in raw/ and is judged again with the same site and baselines (a resume with other
baselines is refused: rejudge the run first). The evidence the rerun replaces moves to
``superseded/r<N>/`` (kept, never judged), and the old job records whose losses were all rerun move to
``results["resumes"][N]["superseded_jobs"]``, so a resumed run that is now whole is complete in every report.
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusteraccept.evidence import Evidence
from clusteraccept.families import PROBED
from clusteraccept.jobs import archive
from clusteraccept.plan import limits
from clusteraccept.plan.jobs import (
    CampaignJob,
    Plan,
    ProbeJob,
    kept_rounds,
    make_plan,
    nodes_used,
    step_names,
)
from clusteraccept.site.campaign import COLLECTIVES
from clusteraccept.site.model import Site

DONE = ("COMPLETED", "FINISHED", "DONE")


class ResumeError(Exception):
    """The run cannot be resumed (dry run, other baselines, no results.json)."""


@dataclass(frozen=True)
class Rerun:
    nodes: tuple[str, ...]  # probe nodes to collect again
    steps: frozenset[str]  # campaign steps "collective:subject" to run again
    unknown: tuple[str, ...] = ()  # lost items the current plan no longer has

    @property
    def empty(self) -> bool:
        return not self.nodes and not self.steps


def new_token() -> str:
    return uuid.uuid4().hex[:12]


def _step_of_item(item: str, by_subject: Mapping[str, list[str]]) -> list[str]:
    """A ``missing`` entry -> step names: ``sendrecv:a-b:rail0`` as is; a bare subject (sbatch refused a
    whole campaign) -> every planned step of that subject."""
    head = item.split(":", 1)[0]
    if head in COLLECTIVES and ":" in item:
        return [item]
    return by_subject.get(item, [])


def job_steps(
    results: Mapping[str, Any], recorded: Mapping[str, Sequence[Sequence[str]]]
) -> dict[str, set[str]]:
    """Campaign job name -> its step names, from the run's recorded plan and resumes (``recorded``: each
    job's rounds' step names, judge/record.step_names and resume_step_names) and its earlier resumes that
    did not record them apart (a resume that recorded its jobs' steps in results.json, ``job_steps``, says
    which shard ran which; before that, a ``campaign-leaf2-r1`` ran that campaign's steps that resume 1
    reran)."""
    out = {str(name): {s for r in rounds for s in r} for name, rounds in recorded.items()}
    for entry in results.get("resumes", []):
        if "job_step_counts" in entry:  # its jobs' names are in ``recorded`` (resume-r<N>-steps.json.gz)
            continue
        if "job_steps" in entry:
            out.update({name: set(steps) for name, steps in entry["job_steps"].items()})
            continue
        rerun = set(entry.get("rerun_steps", []))
        for name, steps in list(out.items()):
            if not re.search(r"-r\d+$", name):
                out[f"{name}-r{entry['resume']}"] = steps & rerun
    return out


def killed_steps(results: Mapping[str, Any], recorded: Mapping[str, Sequence[Sequence[str]]]) -> set[str]:
    """Steps of campaign jobs that Slurm ended early (NODE_FAIL, TIMEOUT, PREEMPTED, CANCELLED...) whose
    own launch did not pass: killed with their job, whatever the hardware did (pure)."""
    launch = {
        f"{collective}:{subject}": str(v["outcome"])
        for v in results.get("verdicts", [])
        if v["check"] == "nccl.launch"
        for subject, _, collective in [str(v["subject"]).rpartition(":")]
    }
    steps = job_steps(results, recorded)
    out: set[str] = set()
    for job in results.get("jobs", []):
        if job.get("state") in (*DONE, "SUBMIT_ERROR", "DRY_RUN"):
            continue
        out |= {s for s in steps.get(str(job.get("name")), set()) if launch.get(s, "pass") != "pass"}
    return out


def what_to_rerun(
    results: Mapping[str, Any], plan: Plan, recorded: Mapping[str, Sequence[Sequence[str]]]
) -> Rerun:
    """The lost part of a run (pure): missing subjects of its jobs, the subjects of ERROR verdicts, and
    the steps of jobs Slurm ended early (node failure, timeout, preemption) that did not pass (``recorded``:
    the step names of the run's campaign jobs as recorded, judge/record.step_names)."""
    planned = {s.name for s in plan.steps()}
    by_subject: dict[str, list[str]] = defaultdict(list)
    for name in planned:
        by_subject[name.split(":", 1)[1]].append(name)
    probe_nodes = {n for pj in plan.probe_jobs for n in pj.nodes}
    nodes: set[str] = set()
    steps: set[str] = set()
    unknown: list[str] = []

    def add(into: set[str], item: str, known: set[str] | dict[str, list[str]]) -> None:
        if item in known:
            into.add(item)
        else:
            unknown.append(item)

    for job in results.get("jobs", []):
        for item in job.get("missing", []):
            if str(job.get("name", "")).startswith("probe"):
                add(nodes, item, probe_nodes)
                continue
            found = _step_of_item(item, by_subject)
            steps.update(found)
            if not found:
                unknown.append(item)
    for v in results.get("verdicts", []):
        if v["outcome"] != "error":
            continue
        if v["check"] == "nccl.launch":
            # nccl.launch on "<subject>:<collective>" (the step's own verdict)
            subject, _, collective = str(v["subject"]).rpartition(":")
            add(steps, f"{collective}:{subject}", planned)
        elif v["family"] != "nccl":  # the other nccl verdicts follow from the steps (localization, counters)
            add(nodes, str(v["subject"]).split(":", 1)[0], probe_nodes)
    for name in killed_steps(results, recorded):
        add(steps, name, planned)
    order = [n for pj in plan.probe_jobs for n in pj.nodes]
    return Rerun(
        tuple(n for n in order if n in nodes), frozenset(steps & planned), tuple(dict.fromkeys(unknown))
    )


def reduced_plan(plan: Plan, rerun: Rerun, suffix: str) -> Plan:
    """The plan cut down to the rerun: probe jobs on the rerun nodes, campaigns with only the rerun steps
    (rounds kept in order, empty ones dropped) allocated on just the nodes those steps use."""
    probes = tuple(
        ProbeJob(f"{pj.name}-{suffix}", tuple(n for n in pj.nodes if n in rerun.nodes), pj.families)
        for pj in plan.probe_jobs
        if any(n in rerun.nodes for n in pj.nodes)
    )
    campaigns: list[CampaignJob] = []
    for cj in plan.campaign_jobs:
        kept = kept_rounds(cj.rounds, lambda s: s.name in rerun.steps)
        if kept:
            campaigns.append(CampaignJob(f"{cj.name}-{suffix}", cj.block, nodes_used(cj.nodes, kept), kept))
    return Plan(probes, tuple(campaigns))


def _covered(item: str, rerun: Rerun) -> bool:
    if item in rerun.nodes or item in rerun.steps:
        return True
    return any(s.split(":", 1)[1] == item for s in rerun.steps)  # a bare subject (sbatch refused)


def merge_jobs(
    old: Iterable[Mapping[str, Any]], new: list[dict[str, Any]], rerun: Rerun
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(jobs that still describe the run, old records superseded by the rerun). Pure.

    A complete old job stays; an incomplete one stays with the losses the rerun did not cover, or moves
    to the superseded list when the rerun covered them all.
    """
    jobs: list[dict[str, Any]] = []
    superseded: list[dict[str, Any]] = []
    for j in old:
        job = dict(j)
        if job.get("state") in DONE and not job.get("missing"):
            jobs.append(job)
            continue
        remaining = [m for m in job.get("missing", []) if not _covered(m, rerun)]
        if remaining:
            jobs.append({**job, "missing": remaining})
        else:
            superseded.append(job)
    return jobs + new, superseded


def supersede(run_dir: Path, rerun: Rerun, n: int) -> list[str]:
    """Move the evidence the rerun replaces out of raw/ into superseded/r<n>/ (same layout)."""
    nodes = set(rerun.nodes)

    def gone(ev: Evidence) -> bool:
        if ev.meta.get("check") in PROBED and ev.host in nodes and "subject" not in ev.meta:
            return True
        return f"{ev.meta.get('collective')}:{ev.meta.get('subject')}" in rerun.steps

    return archive.supersede(run_dir, gone, run_dir / "superseded" / f"r{n}")


def resume_run(
    site: Site, run_dir: Path, *, executor: str | None = None, token: str | None = None
) -> dict[str, Any]:
    """Rerun the lost part of ``run_dir`` and merge it in; returns the updated results (also written)."""
    from clusteraccept import flow
    from clusteraccept.flow import judged_nodes
    from clusteraccept.jobs.submit import JobLayer
    from clusteraccept.judge import record

    path = run_dir / flow.RESULTS
    if not path.exists():
        raise ResumeError(f"--resume {run_dir}: expected a run directory with results.json, got none there")
    results: dict[str, Any] = record.load(run_dir)
    resumes: list[dict[str, Any]] = results.setdefault("resumes", [])
    if token and resumes and resumes[-1].get("token") == token:
        return results  # another pytest-xdist worker of this session already resumed it
    if results.get("dry_run"):
        raise ResumeError(f"--resume {run_dir}: a dry run submitted nothing; run it for real instead")
    if results.get("baselines_sha256") and results["baselines_sha256"] != flow.baselines_hash(site):
        raise ResumeError(
            f"--resume {run_dir}: the site's baselines changed since this run (sha256 "
            f"{results['baselines_sha256']} -> {flow.baselines_hash(site)}); --rejudge it first"
        )
    families = tuple(f for f in results.get("families", []) if f != "nccl")
    nccl = "nccl" in results.get("families", [])
    plan = make_plan(site, families=families, nccl=nccl)
    recorded = {**record.step_names(run_dir, results), **record.resume_step_names(run_dir, results)}
    rerun = what_to_rerun(results, plan, recorded)
    n = len(resumes) + 1
    entry: dict[str, Any] = {
        "resume": n,
        "token": token or new_token(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "rerun_nodes": list(rerun.nodes),
        # the steps' names beside results.json (a whole campaign rerun is millions of them): counts here
        "n_rerun_steps": len(rerun.steps),
        "not_rerun": list(rerun.unknown),
    }
    if rerun.empty:
        entry["ended"] = entry["started"]
        resumes.append(entry)
        return record.write(run_dir, results, results.pop("verdicts", []))
    if site.simulated:
        from clusteraccept.sim.prepare import prepare

        prepare(site)
    if "interrupted" in results:  # the run this completes was interrupted: its record says so, not the run's
        entry["after_interrupted"] = results.pop("interrupted")
    # within the cluster's limits like the run itself (plan/limits.py): a rerun can be sharded too
    job_limits = flow.limits_of(site, executor or site.slurm.executor)
    small = limits.fit(reduced_plan(plan, rerun, f"r{n}"), site, job_limits)
    # the names first: a reports filesystem too full for them stops the resume before raw/ is touched
    record.write_step_names(run_dir, record.resume_section(n), step_names(small), sorted(rerun.steps))
    entry["job_step_counts"] = {cj.name: sum(len(r.steps) for r in cj.rounds) for cj in small.campaign_jobs}
    entry["superseded_evidence"] = supersede(run_dir, rerun, n)
    layer = JobLayer(site, run_dir, executor=executor, block_units=job_limits.block_units)
    for pj in small.probe_jobs:
        layer.submit_probes(pj, flow.probe_options(site))
    for cj in small.campaign_jobs:
        layer.submit_campaign(cj)
    outcomes = layer.wait()
    if layer.interrupted:  # this resume was interrupted too: what it lost is missing again
        results["interrupted"] = layer.interrupted
    for o in outcomes:
        archive.archive_job(run_dir, o.name, o.evidence)  # before anything parses it
    archived = flow.load_archived(run_dir)
    new_jobs = [flow._outcome_dict(o) for o in outcomes]
    results["jobs"], entry["superseded_jobs"] = merge_jobs(results.get("jobs", []), new_jobs, rerun)
    entry["jobs"] = [j["name"] for j in new_jobs]
    # a due-only run judges its due nodes only (flow.judged_nodes): the others were never probed
    nodes = judged_nodes(results, site.nodes)
    verdicts = [v.to_dict() for v in flow.judge_all(site, archived, families, nccl, nodes, run_dir)]
    results.pop("verdicts", None)
    results["fingerprint"] = flow.fingerprint_of(archived)
    entry["ended"] = results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    resumes.append(entry)
    return record.write(run_dir, results, verdicts)
