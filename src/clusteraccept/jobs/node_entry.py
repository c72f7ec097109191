"""Node-side entry points that submitit runs (pickled by reference, so the package must be importable there).

* :func:`collect_node` runs on every node of a probe job: the probes of each family, evidence only.
* :func:`drive_campaign` runs on the first node of a campaign allocation and launches the rounds' srun
  steps itself, all steps of a round at once, each bounded by the step timeout.

A step that timed out before its benchmark printed a line (ended by the driver's timeout or by Slurm's
step time limit, whichever came first) hung in its launch (the PMI fence of MPI_Init: nccl-tests
src/common.cu prints nothing before MPI_Init but option warnings), not in NCCL or the fabric.
Seen on Slurm 24.11's mpi/pmix_v5 with 16 concurrent --overlap pair steps in one allocation: 26 of 960
steps hung in MPI_Init ("pmixp_p2p_send: send failed, rc=2, exceeded the retry limit" in slurmd's log).
A step that failed before any rank printed its launch record never ran its program: srun could not
create it (a slurmctld restart longer than MessageTimeout: srun retries the connection that long, then
"Unable to contact slurm controller"). Such steps are launched once more, at the end of their wave, once
the controller answers and lists no earlier step of the job still running, with time for srun's own retry
of a step that still pends (plan/limits.STEPS_SETTLE_S, PENDING_RETRY_S say why); one such relaunch wave
per job, which plan/limits.job_seconds counts in the job's --time. The first attempt stays in the evidence
(``meta["relaunched"]``). A step that printed anything and then hung or failed is a measurement and is not
rerun.

SIGTERM to the driver means Slurm is ending its job (scancel, the job's --time, a preemption: "each task
in each job step is sent SIGTERM followed by SIGKILL", KillWait apart). submitit's own handler only logs
it ("Bypassing signal SIGTERM", submitit/core/job_environment.py) and the task would run on to SIGKILL,
launching rounds into a dying job whose steps fail at once ("Expired or invalid job"): the wave that was
really cut short would then not be the spool's last, and its failures would be judged as results
(jobs/spool.mark_killed). So the driver starts nothing more, waits for the wave in flight, marks its
failed steps ``job_ending`` and raises :class:`JobEnding`, so the job's evidence is read from the spool.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import hostlist

from clusteraccept import hostio
from clusteraccept.evidence import Evidence, slug
from clusteraccept.families import ALWAYS_PROBED
from clusteraccept.parsers.launch_record import benchmark_began, launched, step_time_limit
from clusteraccept.plan.jobs import CampaignJob, Round, Step
from clusteraccept.plan.limits import (
    CONTROLLER_WAIT_S,
    PENDING_RETRY_S,
    RELAUNCH_WAVES,
    STEPS_SETTLE_S,
    waves,
)
from clusteraccept.redact import redact_evidence

T = TypeVar("T")


class JobEnding(Exception):
    """SIGTERM reached the campaign driver: its Slurm job is ending (module docstring)."""


@contextlib.contextmanager
def _sigterm_noted() -> Iterator[list[str]]:
    """While inside: SIGTERM is noted in the yielded list, not acted on (the driver stops between waves).
    Only the main thread may set a handler (local executor threads note nothing)."""
    noted: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, frame: Any) -> None:
        noted.append(signal.Signals(signum).name)

    before = signal.signal(signal.SIGTERM, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGTERM, before)


def _end_if(noted: list[str], job: CampaignJob, seq: int) -> None:
    if noted:
        raise JobEnding(
            f"{noted[0]} reached the driver of {job.name} in round {seq} of {len(job.rounds)}: its Slurm job "
            "is ending (scancel, its --time or a preemption); no later step was started, what ran is in "
            "the spool"
        )


def with_env(env: dict[str, str], fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn`` with the site's environment (the ``local`` executor has no sbatch script to export it)."""
    import os

    os.environ.update(env)
    return fn(*args)


def collect_as(node: str, families: tuple[str, ...], options: dict[str, object]) -> list[Evidence]:
    """``collect_node`` for site node ``node`` on this machine (the ``local`` executor)."""
    import os

    os.environ["CLUSTERACCEPT_HOSTNAME"] = node
    return collect_node(families, options)


def _ignore_usr2() -> None:
    """Ignore submitit's USR2 in this task. Its handler treats any USR2 as "timed out" and raises, and Slurm
    22.05 delivered the job's --signal to every task early when a node of a --no-kill job failed (virtual
    cluster: the surviving tasks lost their results 4 s into a 2-minute job); submit.slurm_parameters sends
    it to the batch shell only, this is for a signal that reaches the task anyway. Slurm's own time limit
    ends a job that overruns. Only the main thread may set a handler (local executor threads skip it)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def collect_node(families: tuple[str, ...], options: dict[str, object]) -> list[Evidence]:
    """Gather the evidence of every requested check family on this node (never judges).

    The fingerprint always comes first, so a node that ran at all always returns something.
    ``options["hold_s"]`` keeps the task alive that long after collecting (tests take a node down mid-run).
    """
    from clusteraccept.probes import collect

    _ignore_usr2()  # a probe cannot be checkpointed: finish collecting
    out: list[Evidence] = []
    for family in (*ALWAYS_PROBED, *families):
        for ev in collect(family, options):
            out.append(replace(ev, meta={**ev.meta, "check": family}))
    hold_s = float(options.get("hold_s", 0))  # type: ignore[arg-type]
    if hold_s > 0:
        time.sleep(hold_s)
    return out


def local_argv(step: Step) -> tuple[str, ...]:
    """The step as this one machine runs it without srun (the ``local`` executor: every node is here).

    One process drives all of a node's ranks (nccl-tests ``-g <n>``, as on a single host built with MPI=0;
    the PyTorch fallback then starts one process per GPU itself),
    and the environment tells it the placement srun would have made (SLURM_STEP_* variables, srun(1)).
    """
    argv = list(step.argv)
    start = argv.index("env") + 1
    tasks = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--ntasks-per-node="))
    cmd = argv[start:]
    if tasks > 1 and "-g" in cmd:
        cmd[cmd.index("-g") + 1] = str(tasks)
    placement = [
        f"SLURM_STEP_NODELIST={','.join(step.nodes)}",
        f"SLURM_STEP_NUM_TASKS={len(step.nodes)}",
        "SLURM_STEP_TASKS_PER_NODE=" + ",".join("1" for _ in step.nodes),
        "SLURM_PROCID=0",
    ]
    return ("env", *placement, *cmd)


def _run_wave(
    wave: tuple[Step, ...],
    timeout_s: float,
    round_label: str,
    local: bool,
    interval_s: float,
    stop: Callable[[], bool] | None = None,
) -> list[Evidence]:
    """One wave's steps at once (paced ``interval_s`` apart), in one thread: no thread per step."""
    argvs = [local_argv(s) if local else s.argv for s in wave]
    allocation = os.environ.get("SLURM_JOB_NODELIST", "")
    envs = [{} if local else step_env(s, allocation) for s in wave]
    by_tool: dict[str, list[int]] = {}
    for i, s in enumerate(wave):
        by_tool.setdefault(s.tool, []).append(i)
    out: list[Evidence | None] = [None] * len(wave)
    for tool, idx in by_tool.items():  # one tool per campaign in practice: the evidence source
        evs = hostio.run_many(
            [argvs[i] for i in idx],
            timeout_s,
            source=tool,
            start_interval_s=interval_s,
            stop=stop,
            envs=[envs[i] for i in idx],
        )
        for i, ev in zip(idx, evs, strict=True):
            out[i] = ev
    return [
        replace(ev, host=s.subject, meta={**ev.meta, **s.meta(), "round": round_label})
        for s, ev in zip(wave, out, strict=True)
        if ev is not None
    ]


def step_env(step: Step, allocation: str = "") -> dict[str, str]:
    """srun's environment for a step: SLURM_JOB_NODELIST set to the step's own nodes, in the order Slurm
    lays the step out (:func:`slurm_order`).

    Slurm's mpi/pmix plugin (24.11, and 25.05's source) builds its job host list from the step
    environment's SLURM_JOB_NODELIST (pmixp_info.c _resources_set) and resolves some peers through it by
    their index in the *step* (pmixp_server.c pmixp_server_direct_conn_early: "(my_peerid + 1) %
    peers_cnt"; _slurm_send: "pmixp_info_job_host(ep->ep.nodeid)"): a step on node3,node4 of an allocation
    node[1-4] sends to node1 and node2, whose slurmd finds no such step socket ("pmixp_p2p_send: send
    failed, rc=2, exceeded the retry limit"). Each such step lost ~31 s to those retries and some hung in
    their fence. Measured on the virtual cluster (Slurm 24.11.5, PMIxDirectConnEarly=true,
    PMIxCollFence=ring), rounds of 16 concurrent 2-node mpi4py allgather steps in a 4-node job: without it
    320 steps, 3 hung, median 33 s; with it 480 steps, none hung or failed, median 3 s. srun
    --export=ALL,SLURM_JOB_NODELIST=... does not do it (the same 33 s): it has to be srun's own
    environment. The step's allocation (SLURM_JOB_ID) is unchanged.

    A one-node step is no exception: an intra-node step on node2 of a job on node[1-2] (peer 0 of its
    step) sent to node1, and took 33.8 s where the same step on node1 took 2.2 s (the demo, 3 runs). The
    order matters for the same reason: a confirmation retest pairs its suspect with a healthy partner
    ("node3-node1"); written "node3,node1", index 1 of the step (node3) is node1 in that list, so each
    node's early connection went to itself: such retests hung at launch in 3 of the 4 demo runs examined
    before this (1 to 3 of their 8 rails a run), and in none of the runs since."""
    return {"SLURM_JOB_NODELIST": ",".join(slurm_order(step.nodes, allocation))}


def slurm_order(nodes: Sequence[str], allocation: str) -> tuple[str, ...]:
    """``nodes`` in the order Slurm lists a step's nodes: slurmctld writes node lists hostlist-sorted
    (node_conf.c bitmap2node_name), and the job's own SLURM_JOB_NODELIST (``allocation``) shows that order
    for every node of the job. Slurm's sort compares the prefix before a name's last number as a string
    ("a10-n1" before "a9-n1"), which Python's numeric sort need not match: it orders only the nodes the
    allocation does not name (no Slurm job, a test)."""
    index = _allocation_index(allocation)
    return tuple(sorted(nodes, key=lambda n: (index.get(n, len(index)), hostlist.numeric_sort_key(n))))


@lru_cache(maxsize=4)
def _allocation_index(allocation: str) -> dict[str, int]:
    """Each node of a SLURM_JOB_NODELIST ("node[1-4]") by its position; {} for none or one that does not
    expand (then only the numeric order is used)."""
    try:
        return {n: i for i, n in enumerate(hostlist.expand_hostlist(allocation))} if allocation else {}
    except hostlist.BadHostlist:
        return {}


def never_started(ev: Evidence) -> bool:
    """The step's benchmark never ran: it hung in its launch (probes/launch.py prints a launch record
    before it execs the benchmark, so its output is launch records at most) and was ended there by the
    driver's timeout or by Slurm's step time limit (:func:`step_time_limit`); or it failed before any rank
    printed its launch record (srun could not create the step)."""
    if ev.returncode is None or step_time_limit(ev.returncode, ev.stderr):
        return not benchmark_began(ev.stdout)
    return ev.returncode != 0 and not launched(ev.stdout)


def _first_attempt(ev: Evidence) -> str:
    """What the first attempt leaves to keep: how it ended and what srun said (its stdout held at most
    launch records, which the relaunch prints again)."""
    said = [line for line in ev.stderr.strip().splitlines() if line.strip()]
    if ev.returncode is None:
        how = f"hung {ev.duration_s:.0f} s before the benchmark printed a line"
    elif step_time_limit(ev.returncode, ev.stderr):
        how = f"hung {ev.duration_s:.0f} s before the benchmark printed a line (Slurm's step time limit)"
    else:
        how = f"exited {ev.returncode} after {ev.duration_s:.0f} s before any rank started"
    return f"{how}; stderr: " + " | ".join(said[-6:])


def _controller_back(timeout_s: float, stop: Callable[[], bool], poll_s: float = 2.0) -> str:
    """Wait (at most ``timeout_s``, and not once told to stop) until slurmctld answers ``scontrol ping``
    ("Slurmctld(primary) at HOST is UP", src/scontrol/scontrol.c); what happened, for the evidence."""
    t0 = time.monotonic()
    while True:
        ev = hostio.run(["scontrol", "ping"], timeout_s=30, source="scontrol-ping")
        waited = time.monotonic() - t0
        if " is UP" in ev.stdout:
            return f"slurmctld answered after {waited:.0f} s"
        if waited + poll_s > timeout_s or stop():
            said = ((ev.stdout or ev.stderr).strip().splitlines() or ["no output"])[0][:120]
            return f"slurmctld did not answer within {waited:.0f} s ({said})"
        time.sleep(poll_s)


# Steps of a job that are not launched by the driver (squeue -s lists them as JOBID.batch etc.)
_NOT_OURS = ("batch", "extern", "interactive")


def _steps_ended(timeout_s: float, stop: Callable[[], bool], poll_s: float = 2.0) -> str:
    """Wait (at most ``timeout_s``) until slurmctld lists no step of this job but the driver's own and
    Slurm's (``squeue -h -s -j JOBID -o %i``: one JOBID.STEPID a line); what happened, "" when nothing was
    left to wait for or this is no Slurm job."""
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        return ""
    own = {*_NOT_OURS, os.environ.get("SLURM_STEP_ID") or "batch"}
    t0 = time.monotonic()
    while True:
        ev = hostio.run(["squeue", "-h", "-s", "-j", job_id, "-o", "%i"], timeout_s=30, source="squeue-steps")
        left = [s for s in ev.stdout.split() if s.partition(".")[2] not in own] if ev.ok else ["?"]
        waited = time.monotonic() - t0
        if not left:
            return f"its earlier steps ended after {waited:.0f} s" if waited >= poll_s else ""
        if waited + poll_s > timeout_s or stop():
            said = ", ".join(left[:4]) if ev.ok else (ev.stderr.strip().splitlines() or ["no output"])[0]
            return f"steps still listed after {waited:.0f} s ({said[:120]}); relaunched anyway"
        time.sleep(poll_s)


def _relaunch(
    wave: tuple[Step, ...],
    evs: list[Evidence],
    hung: list[int],
    timeout_s: float,
    round_label: str,
    local: bool,
    interval_s: float,
    stop: Callable[[], bool],
) -> list[Evidence]:
    """``evs`` with the steps at ``hung`` (they never started) run once more (one wave, at once). When srun
    could not create some of them, first wait for the controller (a slurmctld restart); then for the
    controller to have ended the job's earlier steps, whose CPUs the relaunch needs (STEPS_SETTLE_S)."""
    waited = ""
    if not local and any(
        evs[i].returncode is not None and not step_time_limit(evs[i].returncode, evs[i].stderr) for i in hung
    ):
        waited = "; " + _controller_back(CONTROLLER_WAIT_S, stop)
        timeout_s += PENDING_RETRY_S  # a step the restarted controller leaves pending: srun asks again
    if not local and (settled := _steps_ended(STEPS_SETTLE_S, stop)):
        waited += "; " + settled
    again = _run_wave(tuple(wave[i] for i in hung), timeout_s, round_label, local, interval_s, stop)
    out = list(evs)
    for i, ev in zip(hung, again, strict=True):
        out[i] = replace(ev, meta={**ev.meta, "relaunched": _first_attempt(evs[i]) + waited})
    return out


def _write(path: Path, ev: Evidence) -> None:
    """One spool file, replaced whole: a job killed mid-write leaves the old file or none, never half."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(redact_evidence(ev).to_dict()))  # the spool is evidence on disk: no secret
    tmp.replace(path)


def _snapshot(
    job: CampaignJob, snap: dict[str, Any], spool: Path, seq: int, after: Round | None, local: bool
) -> list[Evidence]:
    """Port counters of every node of the allocation now (probes/counters.py), labelled with the round
    that just ended and, per node, the steps it was in during that round (the delta's owners: one step per
    rail in a pair round, the whole node's in a block or intra-node round). A snapshot srun that fails is
    kept as evidence too (the judge then names the rounds it could not cover)."""
    from clusteraccept.probes import counters

    label = f"{job.name}-s{seq:03d}"
    meta = {
        "check": "nccl",
        "window": "traffic",
        "campaign": job.name,
        "seq": str(seq),
        "of": str(len(job.rounds) + 1),  # snapshots the campaign takes: a missing tail is visible
    }
    out_dir = spool / "counters"
    rails_file = spool / "meta" / "node-rails.json"  # not a step result: not beside them
    out: list[Evidence] = []
    if local:  # every node is this machine: one snapshot per simulated node, in turn
        was = os.environ.get("CLUSTERACCEPT_HOSTNAME")
        for node in job.nodes:
            os.environ["CLUSTERACCEPT_HOSTNAME"] = node
            counters.snapshot_to(out_dir, rails_file, label, meta, "--nvlink" in snap["argv"])
        if was is None:
            del os.environ["CLUSTERACCEPT_HOSTNAME"]
        else:
            os.environ["CLUSTERACCEPT_HOSTNAME"] = was
    else:
        argv = [*snap["argv"], "--rails", str(rails_file), "--out", str(out_dir), "--label", label]
        argv += ["--meta", json.dumps(meta)]
        ev = hostio.run(argv, timeout_s=float(snap["timeout_s"]), source="srun")
        if not ev.ok:
            out.append(replace(ev, host=job.name, meta={**meta, "role": "counters-srun", "snapshot": label}))
    for path in sorted(out_dir.glob(f"{slug(label)}-*.json")):
        ev = Evidence.from_dict(json.loads(path.read_text()))
        steps = [f"{s.collective}:{s.subject}" for s in (after.steps if after else ()) if ev.host in s.nodes]
        extra = {"after_round": after.label if after else "", "during": "|".join(steps)}
        ev = replace(ev, meta={**ev.meta, **extra})
        _write(path, ev)  # the spool copy carries the attribution too
        out.append(ev)
    return out


def drive_campaign(
    job: CampaignJob,
    step_timeout_s: float,
    spool: str | None = None,
    local: bool = False,
    snap: dict[str, Any] | None = None,
) -> list[Evidence]:
    """Run the campaign's rounds in order; the steps of one round run concurrently, in waves of at most
    ``job.max_concurrent`` (plan/limits.waves), their starts paced ``job.step_interval_s`` apart.

    Each finished step is also written to ``spool`` (on the shared filesystem) at once, so a campaign
    killed half-way still leaves the evidence of the steps it finished. With ``snap`` (``argv``: the srun
    of plan.commands.counters_argv, ``rails``: node -> rails, ``timeout_s``) the port counters of every node
    are snapshotted before the first round and after each one (rounds are matchings, so a node's delta over a
    round belongs to the steps it was in: one per rail in a pair round).
    """
    _ignore_usr2()  # must not end a measurement campaign half-way
    results: list[Evidence] = []
    spool_dir = Path(spool) if spool else None
    if spool_dir:
        spool_dir.mkdir(parents=True, exist_ok=True)
    counting = bool(snap and (snap.get("argv") or local) and spool_dir)
    if counting and snap and spool_dir:
        (spool_dir / "meta").mkdir(exist_ok=True)
        (spool_dir / "meta" / "node-rails.json").write_text(json.dumps(snap["rails"]))
        results += _snapshot(job, snap, spool_dir, 0, None, local)
    relaunches_left = RELAUNCH_WAVES
    with _sigterm_noted() as ending:
        stop = lambda: bool(ending)  # noqa: E731  (read by hostio between starts)
        for seq, rnd in enumerate(job.rounds, 1):
            parts = waves(rnd.steps, job.max_concurrent)
            for k, wave in enumerate(parts, 1):
                _end_if(ending, job, seq)
                t0 = time.monotonic()
                evs = _run_wave(wave, step_timeout_s, rnd.label, local, job.step_interval_s, stop)
                hung = [i for i, ev in enumerate(evs) if never_started(ev)]
                if relaunches_left and hung and not ending:
                    relaunches_left -= 1
                    evs = _relaunch(
                        wave, evs, hung, step_timeout_s, rnd.label, local, job.step_interval_s, stop
                    )
                wall = time.monotonic() - t0
                extra = {"round_wall_s": f"{wall:.3f}", "round_index": str(seq)}
                if len(parts) > 1:
                    extra["wave"] = f"{k}/{len(parts)}"
                for ev in evs:
                    dying = {"job_ending": ending[0]} if ending and ev.returncode != 0 else {}
                    ev = replace(ev, meta={**ev.meta, **extra, **dying})
                    results.append(ev)
                    if spool_dir:  # each wave's steps at once: a job killed mid-round keeps its earlier waves
                        _write(spool_dir / f"{slug(ev.meta['collective'] + '_' + ev.host)}.json", ev)
                _end_if(ending, job, seq)
            if counting and snap and spool_dir:
                results += _snapshot(job, snap, spool_dir, seq, rnd, local)
        _end_if(ending, job, len(job.rounds))  # during the last snapshot: the job did not end well either
    return results
