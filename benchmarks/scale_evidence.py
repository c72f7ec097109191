"""A synthetic ARCHIVED run of a simulated site, through the project's own code (benchmarks/scale_run.py).

:func:`write_run` leaves ``run_dir`` as a run with the site's executor would: raw/ + results.json.

- the plan: plan.jobs.make_plan, as flow.execute makes it;
- each campaign step's output: as sim.prepare.simulate_step (sim's nccl-tests output and NCCL INFO lines
  from the fabric model, here with 2% noise), under the job's environment, with the meta the campaign
  driver gives it (node_entry._run_step, drive_campaign: the step's meta, round, round_wall_s,
  round_index), host = the step's subject;
- the port counter snapshots the driver takes before the first round and after each (node_entry._snapshot's
  meta), each taken by probes/counters.snapshot on a simulated host profile that sim/traffic.bump advances
  as each round's traffic would (every round a node is in bumps each of its rails once: a pair round runs
  one step per rail, a block round one step over every rail);
- the probe job's evidence: jobs.node_entry.collect_node once per distinct simulated host profile (one
  healthy node, and each node with an injected fault), cloned per node with the host renamed;
- each job's evidence archived as flow.execute archives a job outcome's, all at once:
  jobs.archive.archive_job(run_dir, job name, evidence) (redacted, in bundles);
- results.json with flow's header, one COMPLETED Slurm job record per planned job, and no verdicts yet:
  ``--rejudge`` makes them (and the fingerprint) and writes the record.

Campaigns sharing nodes run one after the other (the cross-block one after the blocks); the model times
(LAUNCH_S, ROUND_GAP_S, each step's duration from the fabric's busbw) only order the snapshots.
Generation is spread over worker processes (fork): the campaigns of a wave, then the last wave with the
probe job's nodes in chunks.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from clusteraccept import flow, hostio
from clusteraccept.evidence import Evidence
from clusteraccept.families import NODE_FAMILIES
from clusteraccept.jobs.archive import archive_job
from clusteraccept.jobs.node_entry import collect_node
from clusteraccept.jobs.submit import JobOutcome, node_rails
from clusteraccept.plan.jobs import Plan, Round, Step, make_plan
from clusteraccept.probes import counters
from clusteraccept.rundir import write_json
from clusteraccept.sim.fabric import BUS_FACTOR, Fabric, busbw_GBps, fabric_from_dict
from clusteraccept.sim.hosts import build_profiles, faults_for
from clusteraccept.sim.nccl_tests import install_bin_dir
from clusteraccept.sim.prepare import fabric_doc, simulate_step
from clusteraccept.sim.traffic import bump
from clusteraccept.site.env_file import exported
from clusteraccept.site.model import Site

NOISE = 0.02  # +-2% busbw noise (the fabric model's default is 1%)
LAUNCH_S = 4.0  # model: srun + NCCL init of one step
ROUND_GAP_S = 0.5  # model: the driver between two rounds (the counter snapshot)
FAMILIES = tuple(sorted(NODE_FAMILIES))  # every node family, in the suite files' order


@dataclass
class Context:
    """What every generating process shares (inherited through fork)."""

    site: Site
    plan: Plan
    fabric: Fabric
    run_dir: Path
    profile_of: dict[str, str]  # node -> the node whose simulated host profile it has
    probes: dict[str, list[Evidence]]  # profile node -> its probe job evidence
    counters: dict[str, list[Evidence]]  # profile node -> its snapshot after k rounds of traffic
    traffic_before: list[dict[str, int]]  # per campaign job: rounds of traffic each node had before it


@dataclass
class Done:
    """What one unit of generation wrote."""

    job: str
    evidence: int = 0
    end_t: float = 0.0
    simulate_s: float = 0.0
    archive_s: float = 0.0

    def archive(self, run_dir: Path, evidence: list[Evidence]) -> None:
        """As flow.execute archives one job outcome's evidence."""
        t0 = time.perf_counter()
        archive_job(run_dir, self.job, evidence)  # bundles: raw/<job>/<round | counters | host>.jsonl.gz
        self.archive_s += time.perf_counter() - t0
        self.evidence += len(evidence)


@dataclass
class Generated:
    evidence: int
    wall_s: float
    simulate_s: float  # summed over the workers
    archive_s: float  # summed over the workers: what flow.execute, archiving in one process, spends
    setup_s: float
    jobs: dict[str, int] = field(default_factory=dict)


_CTX: Context | None = None


@contextmanager
def as_host(profiles: Path, node: str) -> Iterator[None]:
    """hostio resolves to ``node``'s simulated host profile (as on that node of a simulated site)."""
    with exported({hostio.PROFILE_ENV: str(profiles), "CLUSTERACCEPT_HOSTNAME": node}):
        yield


def traffic_rounds(plan: Plan) -> tuple[list[dict[str, int]], int]:
    """Per campaign, the rounds of multi-node traffic each of its nodes had before it started (campaigns
    sharing nodes run one after the other, in plan order), and the most any node has by the end."""
    seen: dict[str, int] = {}
    before: list[dict[str, int]] = []
    for job in plan.campaign_jobs:
        before.append({n: seen.get(n, 0) for n in job.nodes})
        for rnd in job.rounds:
            for n in {n for s in rnd.steps if len(s.nodes) > 1 for n in s.nodes}:
                seen[n] = seen.get(n, 0) + 1
    return before, max(seen.values(), default=0)


def waves(plan: Plan) -> list[list[int]]:
    """Campaign jobs in waves: a job starts once every earlier job sharing a node with it has ended."""
    wave: list[int] = []
    for i, job in enumerate(plan.campaign_jobs):
        mine = set(job.nodes)
        earlier = [wave[j] for j in range(i) if mine & set(plan.campaign_jobs[j].nodes)]
        wave.append(1 + max(earlier) if earlier else 0)
    return [[i for i, w in enumerate(wave) if w == k] for k in range(max(wave, default=-1) + 1)]


def step_seconds(ctx: Context, step: Step) -> float:
    """Model duration of a step: nccl-tests' warmup + timed iterations, out-of-place and in-place, per
    size (the fabric's busbw -> algbw -> time), plus the launch."""
    n = ctx.site.nccl
    rpn = 1 if step.kind == "pair" else ctx.site.node_type(step.nodes[0]).gpus
    rails = None if step.rail is None else (step.rail,)
    factor = BUS_FACTOR.get(step.collective, BUS_FACTOR["all_reduce"])(len(step.nodes) * rpn)
    total, size = LAUNCH_S, n.min_bytes
    while size <= n.max_bytes:
        bus = busbw_GBps(ctx.fabric, step.collective, step.nodes, rails, size, ranks_per_node=rpn)
        total += 2 * (n.warmup_iters + n.iters) * size * factor / (bus * 1e9) if bus > 0 else 0.0
        size *= max(2, n.step_factor)
    return total


def _snapshots(
    ctx: Context, job_i: int, seq: int, after: Round | None, t: float, k: dict[str, int]
) -> list[Evidence]:
    """jobs/node_entry._snapshot: every node's counters now, labelled with the round that just ended."""
    job = ctx.plan.campaign_jobs[job_i]
    label = f"{job.name}-s{seq:03d}"
    meta = {"check": "nccl", "window": "traffic", "campaign": job.name, "seq": str(seq)}
    meta["of"] = str(len(job.rounds) + 1)
    during: dict[str, list[str]] = {}
    for s in after.steps if after else ():
        for n in s.nodes:
            during.setdefault(n, []).append(f"{s.collective}:{s.subject}")
    out = []
    for i, node in enumerate(job.nodes):
        snap = ctx.counters[ctx.profile_of[node]][k[node]]
        labels = {
            "snapshot": label,
            "t_s": f"{t + i * 1e-3:.3f}",
            "after_round": after.label if after else "",
        }
        labels["during"] = "|".join(during.get(node, ()))
        out.append(replace(snap, host=node, meta={**meta, **snap.meta, **labels}))
    return out


def _campaign(arg: tuple[int, float]) -> Done:
    """One campaign job as drive_campaign runs it (a snapshot, then per round its steps and a snapshot),
    archived as flow.execute archives its outcome: all of the job's evidence at once."""
    ctx, (job_i, t) = _CTX, arg
    assert ctx is not None
    job = ctx.plan.campaign_jobs[job_i]
    done, k = Done(job.name), dict(ctx.traffic_before[job_i])
    evidence = _snapshots(ctx, job_i, 0, None, t, k)
    for seq, rnd in enumerate(job.rounds, 1):
        t0 = time.perf_counter()
        seconds = [step_seconds(ctx, s) for s in rnd.steps]
        wall = max(seconds) + 0.05
        evidence += [
            replace(
                simulate_step(ctx.fabric, s, ctx.site.env),
                duration_s=round(sec, 3),
                meta={**s.meta(), "round": rnd.label, "round_wall_s": f"{wall:.3f}", "round_index": str(seq)},
            )
            for s, sec in zip(rnd.steps, seconds, strict=True)
        ]
        done.simulate_s += time.perf_counter() - t0
        t += wall + ROUND_GAP_S
        for n in {n for s in rnd.steps if len(s.nodes) > 1 for n in s.nodes}:
            k[n] += 1
        evidence += _snapshots(ctx, job_i, seq, rnd, t, k)
    done.archive(ctx.run_dir, evidence)
    done.end_t = t
    return done


def _probe(nodes: tuple[str, ...]) -> Done:
    """The probe job's evidence of ``nodes``: their profile's, with the host renamed."""
    ctx = _CTX
    assert ctx is not None
    done = Done("probe-nodes")
    evidence: list[Evidence] = []
    for node in nodes:
        p = ctx.profile_of[node]
        evidence += (
            ctx.probes[p]
            if node == p
            else [
                replace(ev, host=node, stdout=ev.stdout.replace(p, node), stderr=ev.stderr.replace(p, node))
                for ev in ctx.probes[p]
            ]
        )
    done.archive(ctx.run_dir, evidence)
    return done


def _templates(
    site: Site, families: tuple[str, ...], rounds: int
) -> tuple[dict[str, str], dict[str, list[Evidence]], dict[str, list[Evidence]]]:
    """Simulated host profiles of one healthy node and of each node with an injected fault; their probe
    evidence (collect_node) and their counter snapshots after 0..rounds rounds of traffic (each round
    bumps every rail of the node once: pair rounds use every rail, block rounds all of them at once)."""
    special = [n for n in site.nodes if faults_for(site, n)]
    template = next(n for n in site.nodes if n not in special)
    profile_of = {n: (n if n in special else template) for n in site.nodes}
    profiles = Path(site.env[hostio.PROFILE_ENV])
    build_profiles(replace(site, nodes=(template, *special)), profiles)
    options = flow.probe_options(site)
    rails = node_rails(site, [template, *special])
    probes: dict[str, list[Evidence]] = {}
    snaps: dict[str, list[Evidence]] = {}
    for p in (template, *special):
        with as_host(profiles, p):
            probes[p] = collect_node(families, options)
            snaps[p] = []
            for _ in range(rounds + 1):
                snaps[p].append(counters.snapshot(rails[p], 10.0, {}))
                bump(profiles, [p], [str(r["hca"]) for r in rails[p]])
    return profile_of, probes, snaps


def write_run(
    site: Site,
    run_dir: Path,
    *,
    families: tuple[str, ...] = FAMILIES,
    workers: int = 2,
    noise: float = NOISE,
) -> Generated:
    """Write a complete archived run of ``site`` into ``run_dir`` (raw/ + results.json), as a run of the
    node check ``families`` and every nccl campaign with the site's executor would leave it."""
    global _CTX
    t_start = time.perf_counter()
    sim = Path(site.env["CLUSTERACCEPT_FABRIC"]).parent
    doc = {**fabric_doc(site), "noise": noise}
    sim.mkdir(parents=True, exist_ok=True)
    (sim / "fabric.json").write_text(json.dumps(doc, indent=1))
    if site.tools.nccl_tests_bin:
        install_bin_dir(Path(site.tools.nccl_tests_bin), sys.executable)
    plan = make_plan(site, families=families, nccl=True)  # as flow.execute: campaigns for nccl and sharp
    before, most = traffic_rounds(plan)
    profile_of, probes, snaps = _templates(site, families, most)
    fabric = fabric_from_dict(doc, f"{site.file} (sim)")
    _CTX = Context(site, plan, fabric, run_dir, profile_of, probes, snaps, before)
    setup_s = time.perf_counter() - t_start
    chunk = max(1, len(site.nodes) // (4 * workers))
    chunks = [tuple(site.nodes[i : i + chunk]) for i in range(0, len(site.nodes), chunk)]
    done: list[Done] = []
    t0 = datetime.now(UTC).timestamp()
    ends: dict[int, float] = {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        nodes_done = None
        plan_waves = waves(plan)
        for w, wave in enumerate(plan_waves):
            starts = []
            for i in wave:
                mine = set(plan.campaign_jobs[i].nodes)
                prior = [ends[j] for j in ends if mine & set(plan.campaign_jobs[j].nodes)]
                starts.append((i, max(prior, default=t0) + 5.0))
            pending = pool.map_async(_campaign, starts, chunksize=1)
            if w == len(plan_waves) - 1:  # the probe job's nodes fill the workers the last wave leaves idle
                nodes_done = pool.map_async(_probe, chunks)
            for (i, _), d in zip(starts, pending.get(), strict=True):
                ends[i] = d.end_t
                done.append(d)
        done += (nodes_done or pool.map_async(_probe, chunks)).get()
    _CTX = None
    req = flow.Request(site, run_dir, families, nccl=True, executor=site.slurm.executor)
    results = flow._header(req, plan)
    jobs: dict[str, int] = {}
    for d in done:
        jobs[d.job] = jobs.get(d.job, 0) + d.evidence
    order = ["probe-nodes", *(j.name for j in plan.campaign_jobs)]
    results["jobs"] = [
        {
            **flow._outcome_dict(JobOutcome(name, str(7000 + i), "COMPLETED")),
            "message": f"Slurm job {7000 + i} ended COMPLETED",
            "evidence_count": jobs[name],
        }
        for i, name in enumerate(order)
    ]
    results["fingerprint"] = flow.fingerprint_of({})  # --rejudge recomputes it, and judges
    results["families"] = [*families, "nccl"]
    results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    write_json(run_dir / flow.RESULTS, results)
    return Generated(
        sum(d.evidence for d in done),
        time.perf_counter() - t_start,
        sum(d.simulate_s for d in done),
        sum(d.archive_s for d in done),
        setup_s,
        jobs,
    )
