"""The limits a real Slurm puts on one job, and the plan cut to fit them (pure).

A campaign at cluster scale breaks Slurm's own limits long before it breaks the fabric: the cross-block
job of a 4,096-node site is 65,540 steps (MaxStepCount defaults to 40,000), one of its rounds starts
12,536 sruns at once (each listens on ports of SrunPortRange), and a site with ``rl_enable`` throttles a
burst of step creations. So:

* **Which limit wins.** Each limit is the site's key where the site sets one, the cluster's own value
  (``scontrol show config``) where it says one, and the smaller of the two where both do: a site may ask
  for less than Slurm allows, never for more (Slurm would refuse the step, or the port, and the campaign
  would measure nothing). Neither: the documented fallback. Every choice is written down in ``notes``.
* **Waves.** A round with more steps than ``max_concurrent_steps`` runs as waves, one after the other;
  the steps of one node set (a pair's rails) stay in one wave, so a pair still measures every rail at
  once, and a wave is part of a matching, so no node runs two steps on a rail at a time.
* **Pacing.** With ``step_rate_per_s`` the drivers space their step starts: the rate is the user's (the
  controller's rate limit counts RPCs per user), so the campaigns that may run at once share it, each
  starting a step every ``campaigns/rate`` seconds.
* **Time.** A job's ``--time`` is its worst case: per round, its waves times the step bound plus its
  paced starts; a counter snapshot before the first round and after each; a margin for the driver itself.
* **Shards.** A campaign whose steps (counter snapshots included: each is a step too) exceed
  ``max_steps_per_job``, or whose worst case exceeds ``time_limit_min``, is cut into consecutive jobs
  (``campaign-cross-p1``, ``-p2``...) at wave boundaries, each submitted when the one before has ended
  (jobs/submit.py), so two shards never measure each other and every pair is measured once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from clusteraccept.errors import SiteConfigError
from clusteraccept.plan.jobs import CampaignJob, Plan, Round, Step, nodes_used
from clusteraccept.site.model import Site
from clusteraccept.site.slurm import Slurm

# Fallbacks where neither the site nor the cluster says (docs: README "Slurm's limits").
MAX_STEPS_FALLBACK = 40_000  # slurm.conf(5) MaxStepCount default
MAX_CONCURRENT_FALLBACK = 256
# An srun of up to 48 hosts listens on 4 ports of SrunPortRange, 2 more per further 48 (SchedMD's testsuite,
# the SrunPortRange test of bug 17619: "4 + 2 * ((hosts-1)//48)"; slurm.conf(5) says 3 + 2 per 48).
PORTS_PER_SRUN = 4
# An srun inside an allocation sends more than one RPC of its own to slurmctld (it looks the allocation up,
# then creates its step): pace at half the user's refill rate so the bucket never runs dry.
RPCS_PER_STEP = 2
SNAPSHOT_S = 120  # a counter snapshot step: its own srun -t 2 (templates/counters_step.j2)
DRIVER_MARGIN_S = 300  # the driver's start (imports, spool) and its results pickled back
# Waves of steps that hung before their benchmark began (in the PMI fence of MPI_Init) or that srun could not
# create, which the driver launches once more (jobs/node_entry.py): each may take one more step timeout.
RELAUNCH_WAVES = 1
# Before such a wave the driver waits this long at most for an unreachable slurmctld to answer again (a
# restart of a large controller recovers its state for tens of seconds; srun gives up after MessageTimeout).
CONTROLLER_WAIT_S = 60
# ...then this long at most for the controller to have ended the job's earlier steps. A step that ended while
# slurmctld was down still holds its CPUs in the restarted controller until its slurmstepd's completion
# message gets through, and slurmstepd retries that every 60 s (src/slurmd/slurmstepd/mgr.c,
# _one_step_complete_msg: "sleep(60)"); a step created before then pends, and an srun whose wake-up
# (SRUN_STEP_SIGNAL) is lost retries only after MIN(300, MAX(60, SlurmctldTimeout)) s (src/srun/launch.c),
# past the step's timeout (seen in CI: eight relaunched steps "hung at launch" 120 s).
STEPS_SETTLE_S = 90
# ...and a step relaunched after the controller was away may still pend (seen in CI with no earlier step
# listed: the restarted controller did not create it until srun asked again). A pending srun asks again by
# itself after MIN(300, MAX(60, SlurmctldTimeout)) s plus its pid modulo 10 (src/srun/launch.c,
# step_ctx_create_timeout's step_wait), whether or not a wake-up came: the relaunch's timeout gets that much
# more, so the step it waits for is the measurement, not srun's retry.
PENDING_RETRY_S = 310
PROBE_TIME_MIN = 30  # the probe job: ~30 commands per node, each bounded by 60 s, run in turn


@dataclass(frozen=True)
class ClusterLimits:
    """What the cluster says about a job's limits (``scontrol show config``/``show partition``); None:
    it does not say (no Slurm here, a dry run on a laptop, or the parameter is unset)."""

    max_step_count: int | None = None
    srun_ports: int | None = None  # how many ports SrunPortRange holds; None: ephemeral ports
    rpc_refill_per_s: float | None = None  # rl_refill_rate / rl_refill_period where rl_enable is set
    max_time_min: int | None = None  # the partition's MaxTime; None: UNLIMITED or not known
    source: str = "not read"
    # topology/block: every block and aggregated block as (BlockSize, its nodes); () under other plugins
    block_units: tuple[tuple[int, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Limits:
    max_steps_per_job: int
    max_concurrent_steps: int
    step_rate_per_s: float | None
    time_limit_min: int | None
    step_timeout_s: int
    notes: tuple[str, ...] = ()
    block_units: tuple[tuple[int, tuple[str, ...]], ...] = ()  # ClusterLimits.block_units

    def as_dict(self) -> dict[str, object]:
        d = {**asdict(self), "notes": list(self.notes)}
        d["block_units"] = len(self.block_units)  # how many; their node lists are the cluster's to keep
        return d


def _pick(
    key: str, site_value: float | None, cluster_value: float | None, cluster_says: str, fallback: float | None
) -> tuple[float | None, str]:
    if site_value is not None and cluster_value is not None:
        if site_value > cluster_value:
            return cluster_value, (
                f"slurm.{key}={site_value:g} is above the cluster's {cluster_says}: {cluster_value:g} is used"
            )
        return site_value, f"slurm.{key}={site_value:g} (the cluster's {cluster_says} allows more)"
    if site_value is not None:
        return site_value, f"slurm.{key}={site_value:g} (site file)"
    if cluster_value is not None:
        return cluster_value, f"{key}={cluster_value:g} from the cluster's {cluster_says}"
    said = "unpaced" if fallback is None else f"{fallback:g}"
    return fallback, f"{key}={said}: fallback (neither the site nor the cluster says)"


def resolve(slurm: Slurm, cluster: ClusterLimits | None = None) -> Limits:
    """The limits a run plans with (which wins: the module's docstring)."""
    c = cluster or ClusterLimits()
    steps, n1 = _pick(
        "max_steps_per_job",
        slurm.max_steps_per_job,
        c.max_step_count,
        f"MaxStepCount={c.max_step_count}",
        MAX_STEPS_FALLBACK,
    )
    port_cap = None if c.srun_ports is None else max(1, c.srun_ports // PORTS_PER_SRUN)
    # SrunPortRange unset (0-0): the kernel's ephemeral ports, so the cluster says no number
    concurrent, n2 = _pick(
        "max_concurrent_steps",
        slurm.max_concurrent_steps,
        port_cap,
        f"SrunPortRange ({c.srun_ports} ports / {PORTS_PER_SRUN} per srun)",
        MAX_CONCURRENT_FALLBACK,
    )
    rl_rate = None if c.rpc_refill_per_s is None else c.rpc_refill_per_s / RPCS_PER_STEP
    rate, n3 = _pick(
        "step_rate_per_s",
        slurm.step_rate_per_s,
        rl_rate,
        f"rl_enable ({c.rpc_refill_per_s} RPC/s per user / {RPCS_PER_STEP} per srun)",
        None,
    )
    cap, n4 = _pick(
        "time_limit_min", slurm.time_limit_min, c.max_time_min, f"partition MaxTime={c.max_time_min}", None
    )
    assert steps is not None and concurrent is not None  # both have fallbacks
    return Limits(
        int(steps),
        int(concurrent),
        rate,
        None if cap is None else int(cap),
        slurm.step_timeout_s,
        (f"cluster: {c.source}", n1, n2, n3, n4),
        c.block_units,
    )


def block_nodes(nodes: Sequence[str], units: Sequence[tuple[int, Sequence[str]]]) -> tuple[str, ...] | None:
    """The ``--nodelist`` under which Slurm's topology/block accepts a job whose steps run on ``nodes``.

    Slurm places a job of N nodes inside one block of the smallest BlockSize >= N (topology.html, "Block
    Topology"), and refuses a job whose named nodes are not all inside one such block ("Requested node
    configuration is not available", with or without --exclusive=topo). Asking for more nodes than it
    names does not do either: in a job of ``-N4 -w node1,node3`` a step ``-w node1,node3`` ran on node1
    and node2 (24.11.5; docs/vcluster.md). So such a job names the whole smallest block that holds its
    nodes: Slurm places it there, its steps run on its own nodes, and the block's others stay idle for the
    job's life. ``units``: (BlockSize, nodes) of every block and aggregated block; none (another
    plugin): ``nodes`` as they are. None: no block holds them all, and Slurm will refuse the job.
    """
    wanted = tuple(nodes)
    if not units or not wanted:
        return wanted
    fit = next((s for s in sorted({size for size, _ in units}) if s >= len(wanted)), None)
    need = set(wanted)
    holding = sorted((size, tuple(members)) for size, members in units if need <= set(members))
    if not holding:
        return None
    size, members = holding[0]
    return wanted if size == fit else members


def block_parts(nodes: Sequence[str], units: Sequence[tuple[int, Sequence[str]]]) -> list[tuple[str, ...]]:
    """``nodes`` grouped by the smallest block that holds each (nodes in no block: one group at the end),
    in their order: jobs whose nodes need no companions, each inside one block."""
    smallest = sorted(units, key=lambda u: u[0])
    groups: dict[int, list[str]] = {}
    for node in nodes:
        index = next((i for i, (_, members) in enumerate(smallest) if node in members), len(smallest))
        groups.setdefault(index, []).append(node)
    return [tuple(groups[i]) for i in sorted(groups)]


def waves(steps: Sequence[Step], cap: int) -> list[tuple[Step, ...]]:
    """A round's steps as waves of at most ``cap`` steps, a node set's steps (a pair's rails) kept in one
    wave (split only where one node set alone has more than ``cap``)."""
    if cap <= 0 or len(steps) <= cap:
        return [tuple(steps)] if steps else []
    groups: list[list[Step]] = []
    for s in steps:  # the plan lists a pair's rails one after the other
        if groups and groups[-1][0].nodes == s.nodes:
            groups[-1].append(s)
        else:
            groups.append([s])
    out: list[list[Step]] = [[]]
    for g in groups:
        for i in range(0, len(g), cap):
            part = g[i : i + cap]
            if len(out[-1]) + len(part) > cap:
                out.append([])
            out[-1].extend(part)
    return [tuple(w) for w in out if w]


def _wave_s(n_steps: int, limits: Limits) -> float:
    return limits.step_timeout_s + (n_steps / limits.step_rate_per_s if limits.step_rate_per_s else 0.0)


def _relaunch_s(limits: Limits) -> float:
    """The relaunch of steps that never started: one step timeout per relaunch wave, after waiting for the
    controller and for the job's earlier steps to end, and srun's own retry of a step that still pends."""
    return RELAUNCH_WAVES * (limits.step_timeout_s + CONTROLLER_WAIT_S + STEPS_SETTLE_S + PENDING_RETRY_S)


def job_seconds(job: CampaignJob, limits: Limits, snapshots: bool) -> float:
    """The worst case of ``job``: every step running to its bound, and the relaunch (:func:`_relaunch_s`)."""
    total = sum(
        _wave_s(len(w), limits) for r in job.rounds for w in waves(r.steps, limits.max_concurrent_steps)
    )
    total += _relaunch_s(limits)
    return total + (len(job.rounds) + 1) * SNAPSHOT_S * snapshots + DRIVER_MARGIN_S


def job_time_min(job: CampaignJob, limits: Limits, snapshots: bool) -> int:
    """``job``'s --time: its worst case in whole minutes."""
    return math.ceil(job_seconds(job, limits, snapshots) / 60)


def probe_time_min(limits: Limits) -> int:
    """The probe job's --time: PROBE_TIME_MIN, or the cap where it is lower."""
    return min(PROBE_TIME_MIN, limits.time_limit_min or PROBE_TIME_MIN)


def job_steps(job: CampaignJob, snapshots: bool) -> int:
    """The srun steps ``job`` creates (what MaxStepCount counts): its own and its counter snapshots."""
    return sum(len(r.steps) for r in job.rounds) + (len(job.rounds) + 1) * snapshots


def snapshots_of(site: Site, nodes: Sequence[str]) -> bool:
    """Whether a campaign on ``nodes`` snapshots port counters (plan/commands.counters_argv's rule)."""
    return any(site.node_type(n).rails for n in nodes)


def fit(plan: Plan, site: Site, limits: Limits) -> Plan:
    """The plan within ``limits``: campaigns sharded where needed, every job's waves, pacing and --time."""
    cap_s = None if limits.time_limit_min is None else limits.time_limit_min * 60
    if limits.step_rate_per_s:
        # the rate is the user's (rl_enable counts RPCs per user): the campaigns that may run at once
        # share it (a campaign's shards run one after the other)
        limits = replace(limits, step_rate_per_s=limits.step_rate_per_s / max(1, len(plan.campaign_jobs)))
    interval = 1.0 / limits.step_rate_per_s if limits.step_rate_per_s else 0.0
    probes = tuple(replace(pj, time_min=probe_time_min(limits)) for pj in plan.probe_jobs)
    campaigns: list[CampaignJob] = []
    for job in plan.campaign_jobs:
        snaps = snapshots_of(site, job.nodes)
        # a wave must fit a shard with its two snapshots (the shard's first, the one after its round)
        room = max(1, limits.max_steps_per_job - 2 * snaps)
        job_limits = replace(limits, max_concurrent_steps=min(limits.max_concurrent_steps, room))
        shards = _shard(job, job_limits, snaps, cap_s, site.file)
        for i, shard in enumerate(shards):
            campaigns.append(
                replace(
                    shard,
                    max_concurrent=job_limits.max_concurrent_steps,
                    step_interval_s=interval,
                    time_min=job_time_min(shard, job_limits, snaps),
                    after=shards[i - 1].name if i else "",
                    snapshots=snaps,
                )
            )
    return Plan(probes, tuple(campaigns))


def _shard(
    job: CampaignJob, limits: Limits, snaps: bool, cap_s: float | None, site_file: str
) -> list[CampaignJob]:
    """``job`` cut at wave boundaries into consecutive jobs within the step limit and the time cap."""
    # the first snapshot, the relaunch (job_seconds counts it in every job) and the margin
    fixed_s = float(SNAPSHOT_S * snaps + DRIVER_MARGIN_S) + _relaunch_s(limits)
    max_steps = limits.max_steps_per_job
    if job_steps(job, snaps) <= max_steps and (cap_s is None or job_seconds(job, limits, snaps) <= cap_s):
        return [job]
    shards: list[list[Round]] = [[]]
    used_steps: int = int(snaps)
    used_s: float = fixed_s
    for rnd in job.rounds:
        parts = waves(rnd.steps, limits.max_concurrent_steps)
        taken: list[Step] = []
        part_no = 0
        for wave in parts:
            # this wave costs its steps, and a snapshot when it opens a new round part in the shard
            cost_steps = len(wave) + (0 if taken else int(snaps))
            cost_s: float = _wave_s(len(wave), limits) + (0 if taken else SNAPSHOT_S * snaps)
            too_many = used_steps + cost_steps > max_steps
            too_long = cap_s is not None and used_s + cost_s > cap_s
            if (too_many or too_long) and (taken or shards[-1]):
                if taken:
                    part_no += 1
                    shards[-1].append(_part(rnd, taken, part_no, len(parts) > 1))
                    taken = []
                shards.append([])
                used_steps, used_s = int(snaps), fixed_s
                cost_steps, cost_s = len(wave) + int(snaps), _wave_s(len(wave), limits) + SNAPSHOT_S * snaps
            if used_steps + cost_steps > max_steps:
                raise SiteConfigError(
                    site_file,
                    "slurm.max_steps_per_job",
                    f"room for one wave of {len(wave)} steps and its counter snapshots",
                    str(max_steps),
                )
            if cap_s is not None and used_s + cost_s > cap_s:
                raise SiteConfigError(
                    site_file,
                    "slurm.time_limit_min",
                    f"room for one wave of {job.name} ({math.ceil((used_s + cost_s) / 60)} min: "
                    "step_timeout_s, the counter snapshots, a relaunch wave and the driver's margin)",
                    str(limits.time_limit_min),
                )
            taken.extend(wave)
            used_steps += cost_steps
            used_s += cost_s
        if taken:
            part_no += 1
            shards[-1].append(_part(rnd, taken, part_no, part_no > 1 or len(taken) < len(rnd.steps)))
    shards = [s for s in shards if s]
    return [
        replace(
            job,
            name=f"{job.name}-p{i}",
            nodes=nodes_used(job.nodes, rounds),
            rounds=tuple(replace(r, index=k) for k, r in enumerate(rounds)),
        )
        for i, rounds in enumerate(shards, 1)
    ]


def _part(rnd: Round, steps: list[Step], part_no: int, split: bool) -> Round:
    label = f"{rnd.label} (part {part_no})" if split else rnd.label
    return Round(rnd.index, label, tuple(steps))


def summary_line(plan: Mapping[str, Any], lim: Mapping[str, Any]) -> str:
    """What a dry run says of the fitted plan (from results.json ``plan`` and ``limits``)."""
    jobs = plan.get("campaign_jobs", [])
    if not jobs:
        return ""
    steps = [sum(r["n_steps"] for r in j["rounds"]) + (len(j["rounds"]) + 1) * j["snapshots"] for j in jobs]
    waves = [min(r["n_steps"], j["max_concurrent"] or r["n_steps"]) for j in jobs for r in j["rounds"]]
    shards = sum(1 for j in jobs if re.search(r"-p\d+$", j["name"]))
    rate = lim.get("step_rate_per_s")
    interval = max(j["step_interval_s"] for j in jobs)
    return (
        f"  limits: {len(jobs)} campaign jobs ({shards} shards), the largest {max(steps):,} steps "
        f"(max_steps_per_job {lim.get('max_steps_per_job'):,}), at most {max(waves):,} at once "
        f"(max_concurrent_steps {lim.get('max_concurrent_steps'):,}), "
        + (
            f"a step start every {interval:g} s per campaign (step_rate_per_s {rate:g})"
            if rate
            else "unpaced"
        )
        + f", the longest --time {max(j['time_min'] for j in jobs)} min"
    )
