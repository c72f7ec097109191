"""The ONE module that uses submitit: site + planned job -> executor, submission, results (Slurm's own
clients, sacct/sinfo/scontrol, are in slurm_clients.py).

Two job shapes (DESIGN.md §3): a per-node probe job (one task on every node, ``job.task(i).result()`` per
node) and a campaign driver (one allocation, ``slurm_use_srun=False``: the driver launches its own steps).
``dry_run`` writes each sbatch script (submitit's own text) and each inner step line into ``jobs/``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import hostlist
import submitit
from submitit.core.utils import FailedJobError, FailedSubmissionError, UncompletedJobError
from submitit.slurm.slurm import _make_sbatch_string

from clusteraccept.errors import SubmitError
from clusteraccept.evidence import Evidence
from clusteraccept.jobs.slurm_clients import FINAL_STATES, controller_state, job_starts, sacct_state
from clusteraccept.jobs.spool import mark_killed, read_spool
from clusteraccept.plan import commands, limits
from clusteraccept.plan.jobs import CampaignJob, ProbeJob, Step, kept_rounds, nodes_used
from clusteraccept.render import render
from clusteraccept.site.env_file import exported, read_env_file
from clusteraccept.site.model import Site

GRACE_S = 120.0
OK_STATES = ("COMPLETED", "FINISHED", "DONE")  # a job that ran to its end (Slurm's, the local executors')


@dataclass(frozen=True)
class JobOutcome:
    """What came back from one planned job. ``missing`` names the nodes/steps that returned nothing."""

    name: str
    job_id: str | None
    state: str
    evidence: tuple[Evidence, ...] = ()
    missing: tuple[str, ...] = ()
    message: str = ""
    script: str | None = None


@dataclass
class _Pending:
    name: str
    job: Any
    nodes: tuple[str, ...]  # what must come back: node names (probe job) or step names (campaign)
    kind: str
    time_s: float  # the job's --time: its run is bounded from its start, not from its submission
    hosts: tuple[str, ...] = ()  # the nodes it runs on
    spool: Path | None = None
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None  # monotonic time of its start (squeue %S); None: still queued
    reason: str = ""  # why it still pends (squeue %r)
    extra: dict[str, Any] = field(default_factory=dict)


# squeue(1) JOB REASON CODES a job never leaves by waiting: its time or size is outside a limit.
NEVER_STARTS = (
    "PartitionTimeLimit",
    "PartitionNodeLimit",
    "QOSMaxWallDurationPerJobLimit",
    "AssocMaxWallDurationPerJobLimit",
)
START_POLL_S = 5.0  # how often squeue is asked which queued jobs have started


def slurm_parameters(
    site: Site,
    *,
    name: str,
    nodes: int,
    tasks_per_node: int,
    use_srun: bool,
    time_min: int,
    nodelist: Sequence[str] = (),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """submitit SlurmExecutor parameters (names of ``_make_sbatch_string``) for one job. Pure.

    ``time_min`` is the job's own --time (plan/limits.fit: its worst case, within slurm.time_limit_min);
    the site may not set --time in sbatch_options (site/slurm.py refuses it)."""
    s = site.slurm
    params: dict[str, Any] = {
        "job_name": f"clusteraccept-{name}",
        "nodes": nodes,
        "ntasks_per_node": tasks_per_node,
        "time": time_min,
        "use_srun": use_srun,
        # ... and the batch shell ignores the warning signal below (bash dies of an untrapped USR2).
        "setup": ["trap '' USR2", *render("sbatch_setup.j2", setup=site.setup, env=site.env).splitlines()],
        "stderr_to_stdout": False,
    }
    gpus = min(nt.gpus for nt in site.node_types)
    if gpus:
        params["gpus_per_node"] = gpus
    for key in ("partition", "account", "qos", "constraint"):
        value = getattr(s, key)
        if value:
            params[key] = value
    # submitit writes --wckey=submitit unless told otherwise (None drops it): refused where
    # AccountingStorageEnforce includes wckeys (slurm.conf(5)) and that key was never created
    params["wckey"] = s.wckey
    if s.exclusive:
        params["exclusive"] = True
    # sbatch(1) --signal=[{R|B}:]<sig_num>[@sig_time]: "B:" signals only the batch shell. submitit's default
    # (USR2 to every task and step 90 s before the limit) would kill a campaign's nccl-tests steps, and Slurm
    # 22.05 delivered it to every task of a --no-kill probe job seconds after one node failed (virtual
    # cluster), killing the survivors with their results. Slurm's time limit ends a job that overruns; the
    # finished steps are in the spool.
    additional: dict[str, Any] = {"signal": f"B:USR2@{min(90, time_min * 15)}"}
    if s.reservation:
        additional["reservation"] = s.reservation
    if nodelist:
        params["nodelist"] = hostlist.collect_hostlist(list(nodelist))  # node[001-128]: short at any scale
    if s.exclusive and not {"mem", "mem-per-cpu", "mem-per-gpu", "mem_per_cpu", "mem_per_gpu"} & set(
        s.sbatch_options
    ):
        # sbatch(1) --exclusive: "the job allocation is allocated all CPUs and GRES on all nodes ..., but is
        # only allocated as much memory as it requested ... To request all the memory on a node, use --mem=0"
        additional["mem"] = "0"
    additional.update(extra or {})
    additional.update(s.sbatch_options)
    if additional:
        params["additional_parameters"] = additional
    return params


def for_executor(site: Site, executor: str | None) -> Site:
    """The site as ``executor`` runs it. The local and debug executors run every node's work on this
    machine, under this interpreter: the nodes' python (``slurm.python``) and the Slurm clients' folder
    (``slurm.bin_dir``) of a real or virtual cluster do not apply there."""
    if (executor or site.slurm.executor) == "slurm":
        return site
    return replace(site, slurm=replace(site.slurm, python=None, bin_dir=None))


def python_of(site: Site) -> str:
    return site.slurm.python or sys.executable


@functools.lru_cache(maxsize=1 << 16)
def _quote(token: str) -> str:
    return shlex.quote(token)


@functools.lru_cache(maxsize=1 << 12)
def _around_nodes(
    shape: tuple[str, ...], node_pos: int, env_pos: tuple[int, ...], env: tuple[tuple[str, str], ...]
) -> tuple[str, str]:
    """A step's line before and after its node list (the whole line first where it has none), every other
    word quoted and its environment in place. Steps share their shape (plan/commands.argv_shape) and a pair's
    rails share their environment tuples (plan/jobs.pair_steps): a few dozen of these per site."""
    words = [_quote(w) for w in shape]
    for pos, (k, v) in zip(env_pos, env, strict=True):
        words[pos] = _quote(f"{k}={v}")
    if node_pos < 0:
        return " ".join(words), ""
    return " ".join([*words[:node_pos], ""]), " ".join(["", *words[node_pos + 1 :]])


def _step_line(step: Step) -> str:
    """``shlex.join(step.argv)``: a 16,384-node campaign writes ~4 million step lines of ~34 words, nearly
    all of them repeats; only a step's nodes are its own."""
    head, tail = _around_nodes(step.shape, step.node_pos, step.env_pos, step.env)
    return head + _quote(commands.nodelist(step.nodes)) + tail if step.node_pos >= 0 else head


class JobLayer:
    """Submits planned jobs and gathers what they return. ``executor``: slurm | local | debug."""

    def __init__(
        self,
        site: Site,
        run_dir: Path,
        *,
        dry_run: bool = False,
        executor: str | None = None,
        block_units: Sequence[tuple[int, Sequence[str]]] = (),
    ) -> None:
        self.site = site
        self.run_dir = run_dir
        self.dry_run = dry_run
        self.executor_name = executor or site.slurm.executor
        self.jobs_dir = run_dir / "jobs"
        self.submitit_dir = run_dir / "submitit"
        self._pending: list[_Pending] = []
        self._deferred: list[CampaignJob] = []  # shards waiting for the shard before them to end
        self.outcomes: list[JobOutcome] = []
        self._starts_asked = 0.0
        self.grace_s = GRACE_S  # past a job's --time before the run gives up on it (tests shorten it)
        # topology/block's blocks, (BlockSize, nodes): where Slurm will place a job that names its nodes
        self.block_units = tuple(block_units)
        # credentials (site/env_file.py): read now, in the submitting process only, never written
        self._secrets = read_env_file(site.env_file, site.file) if site.env_file else {}
        self.interrupted: str | None = None  # the signal that ended the wait (SIGINT, SIGTERM), if one did

    # --- executors -------------------------------------------------------------------------------------
    def _executor(self, name: str, params: dict[str, Any]) -> Any:
        folder = self.submitit_dir / name / "%j"
        if self.executor_name == "slurm":
            ex = submitit.SlurmExecutor(
                folder=folder, python=shlex.quote(python_of(self.site)), max_num_timeout=0
            )
            ex.update_parameters(**params)
            return ex
        auto = submitit.AutoExecutor(folder=folder, cluster=self.executor_name)
        auto.update_parameters(timeout_min=params["time"], tasks_per_node=1, nodes=1)
        return auto

    def _script(self, name: str, params: dict[str, Any]) -> str:
        command = " ".join(
            [
                shlex.quote(python_of(self.site)),
                "-u -m submitit.core._submit",
                shlex.quote(str(self.submitit_dir / name / "%j")),
            ]
        )
        return _make_sbatch_string(command=command, folder=self.submitit_dir / name / "%j", **params)

    def _write_script(self, name: str, text: str) -> Path:
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        path = self.jobs_dir / f"{name}.sbatch"
        path.write_text(text)
        return path

    def _submit(self, name: str, params: dict[str, Any], fn: Any, *args: Any, node: str | None = None) -> Any:
        if self.executor_name != "slurm":
            from clusteraccept.jobs.node_entry import with_env

            env = dict(self.site.env)
            if node:  # where Slurm would run it: a campaign driver runs on the first node of its allocation
                env["CLUSTERACCEPT_HOSTNAME"] = node
            # submitit's local executor sets CUDA_VISIBLE_DEVICES="" (no GPU) in its jobs unless asked for
            # gpus_per_node (submitit/local/local.py start_controller): the jobs see what the caller sees.
            every_gpu = ",".join(map(str, range(max(nt.gpus for nt in self.site.node_types))))
            env.setdefault("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES", every_gpu))
            fn, args = with_env, (env, fn, *args)
        try:
            with exported(self._secrets):  # sbatch (and the local executor) pass them on to the job
                return self._executor(name, params).submit(fn, *args)
        except (FailedSubmissionError, FailedJobError, OSError) as exc:
            text = str(exc)
            lines = [ln for ln in text.splitlines() if "sbatch:" in ln or "error" in ln.lower()]
            raise SubmitError(f"sbatch refused job {name}: {(lines or [text])[-1].strip()}") from None

    def _time_min(self, job: CampaignJob | ProbeJob) -> int:
        """The job's --time: the plan's (plan/limits.fit), else its worst case within the site's cap."""
        if job.time_min:
            return job.time_min
        lim = limits.resolve(self.site.slurm)
        if isinstance(job, ProbeJob):
            return limits.probe_time_min(lim)
        worst = limits.job_time_min(job, lim, limits.snapshots_of(self.site, job.nodes))
        return worst if lim.time_limit_min is None else min(worst, lim.time_limit_min)

    # --- submission ------------------------------------------------------------------------------------
    def submit_probes(self, job: ProbeJob, options: dict[str, object]) -> None:
        from clusteraccept.jobs.node_entry import collect_node

        local = self.executor_name != "slurm"
        parts = limits.block_parts(job.nodes, self.block_units) if not local else []
        if len(parts) > 1 and limits.block_nodes(job.nodes, self.block_units) != job.nodes:
            # topology/block would refuse (or widen) a job across blocks, and every node of a probe job runs
            # a task: one job per block instead (probes need no companions).
            for i, part in enumerate(parts):
                self.submit_probes(replace(job, name=f"{job.name}-b{i}", nodes=part), options)
            return
        time_min = self._time_min(job)
        params = slurm_parameters(
            self.site,
            name=job.name,
            nodes=1 if local else len(job.nodes),
            tasks_per_node=1,
            use_srun=True,
            time_min=time_min,
            nodelist=() if local else job.nodes,
            extra={"no-kill": True},
        )
        # srun(1) --no-kill: a failed node does not end the job step either, so the other nodes'
        # tasks finish and return their results.
        if not local:
            # --mpi=none: the collectors are no MPI program; where MpiDefault=pmix a PMIx server per node
            # would only add a way to lose a node's probes (docs/vcluster.md)
            params["srun_args"] = ["--no-kill", "--mpi=none"]
        script = self._script(job.name, params)
        self._write_script(job.name, script)
        if self.dry_run:
            self.outcomes.append(JobOutcome(job.name, None, "DRY_RUN", script=script))
            return
        if local:  # every node of the site is this machine: one local task per node
            from clusteraccept.jobs.node_entry import collect_as

            for node in job.nodes:
                sub = self._submit(f"{job.name}-{node}", params, collect_as, node, job.families, options)
                self._pending.append(_Pending(job.name, sub, (node,), "probe", time_min * 60.0, (node,)))
            return
        try:
            sub = self._submit(job.name, params, collect_node, job.families, options)
        except SubmitError as exc:
            self.outcomes.append(
                JobOutcome(job.name, None, "SUBMIT_ERROR", missing=job.nodes, message=str(exc))
            )
            return
        self._pending.append(_Pending(job.name, sub, job.nodes, "probe", time_min * 60.0, job.nodes))

    def submit_campaign(self, job: CampaignJob) -> None:
        """Write the job's scripts and submit it; a shard whose shard before it has not ended yet is
        submitted when that one ends (``wait``): its queue time counts from then, and two shards never
        measure each other."""
        try:
            params = self._campaign_params(job)
        except SubmitError as exc:
            self._refused(job, str(exc))
            return
        script = self._write_campaign_files(job, params)
        if self.dry_run:
            self.outcomes.append(JobOutcome(job.name, None, "DRY_RUN", script=script))
        elif job.after and job.after in {q.name for q in self._pending} | {d.name for d in self._deferred}:
            self._deferred.append(job)  # its shard before it is running or itself waiting
        else:
            self._start_campaign(job, params)

    def _start_campaign(
        self, job: CampaignJob, params: dict[str, Any], left_out: tuple[str, ...] = (), note: str = ""
    ) -> None:
        from clusteraccept.jobs.node_entry import drive_campaign
        from clusteraccept.plan.commands import counters_argv

        spool = self.run_dir / "spool" / job.name
        snap_argv = counters_argv(self.site, job.nodes)
        try:
            sub = self._submit(
                job.name,
                params,
                drive_campaign,
                job,
                float(self.site.slurm.step_timeout_s),
                str(spool),
                self.executor_name != "slurm",
                # 110 s: inside the snapshot step's own srun -t 2 (templates/counters_step.j2)
                {"argv": list(snap_argv), "rails": node_rails(self.site, job.nodes), "timeout_s": 110.0},
                node=job.nodes[0],
            )
        except SubmitError as exc:
            self._refused(job, str(exc))
            return
        # left-out steps (their nodes went down while an earlier shard ran) are expected, so they come
        # out as missing: not tested
        steps = tuple(s.name for r in job.rounds for s in r.steps) + left_out
        time_s = params["time"] * 60.0
        pending = _Pending(job.name, sub, steps, "campaign", time_s, job.nodes, spool)
        if note:
            pending.extra["note"] = note
        self._pending.append(pending)

    def _refused(self, job: CampaignJob, message: str, left_out: tuple[str, ...] = ()) -> None:
        missing = tuple(s.subject for r in job.rounds for s in r.steps) + left_out
        self.outcomes.append(JobOutcome(job.name, None, "SUBMIT_ERROR", missing=missing, message=message))
        self._release(job.name, "SUBMIT_ERROR")

    def _campaign_params(self, job: CampaignJob) -> dict[str, Any]:
        # Under topology/block a job across blocks names the smallest block that holds all of its nodes, or
        # Slurm refuses it (limits.block_nodes); its steps still run on its own nodes only.
        placed = limits.block_nodes(job.nodes, self.block_units)
        if placed is None:
            raise SubmitError(
                f"topology/block: no block of the cluster holds all of {job.name}'s nodes "
                f"({hostlist.collect_hostlist(list(job.nodes))}), and Slurm refuses a job across blocks "
                "(Requested node configuration is not available): add a BlockSizes level that holds them, "
                "or give the site blocks that match Slurm's (blocks: slurm)"
            )
        return slurm_parameters(
            self.site,
            name=job.name,
            nodes=len(placed),
            tasks_per_node=1,
            use_srun=False,
            time_min=self._time_min(job),
            nodelist=placed,
            # sbatch(1) --no-requeue: a campaign hit by a node failure must end (NODE_FAIL) with what it
            # finished in the spool, not restart from round 0 minutes later (JobRequeue=1 is Slurm's
            # default); `--resume RUN_DIR` then reruns only the lost steps (clusteraccept.ops.resume).
            extra={"no-requeue": True},
        )

    def _write_campaign_files(self, job: CampaignJob, params: dict[str, Any]) -> str:
        """The sbatch script and the step lines the driver will run, wave by wave (``jobs/``)."""
        from clusteraccept.plan.commands import counters_argv

        script = self._script(job.name, params)
        self._write_script(job.name, script)
        snap_argv = counters_argv(self.site, job.nodes)
        snap_line = (
            # a comment: the driver fills the spool paths and labels in (the file stays valid bash)
            f"# port counters (jobs/node_entry.py): {shlex.join(snap_argv)} "
            "--rails SPOOL/meta/node-rails.json --out SPOOL/counters --label JOB-sK --meta LABELS\n"
            if snap_argv
            else ""
        )
        head = "#!/bin/bash\n# Inner job steps the campaign driver launches, round by round.\n"
        if job.after:
            head += f"# submitted when {job.after} has ended (a shard of the same campaign)\n"
        if job.step_interval_s:
            head += f"# step starts paced {job.step_interval_s:g} s apart (slurm.step_rate_per_s)\n"
        lines = [head, snap_line]
        for r in job.rounds:
            parts = limits.waves(r.steps, job.max_concurrent)
            many = f"{len(r.steps)} steps in {len(parts)} waves" if len(parts) > 1 else ""
            lines.append(f"# round {r.index}: {r.label} ({many or f'{len(r.steps)} concurrent steps'})\n")
            for k, wave in enumerate(parts, 1):
                if len(parts) > 1:
                    lines.append(f"# wave {k}/{len(parts)}: {len(wave)} steps\n")
                lines.append("".join(_step_line(s) + " &\n" for s in wave) + "wait\n")
            lines.append(snap_line)
        (self.jobs_dir / f"{job.name}.steps.sh").write_text("".join(lines))
        return script

    def _release(self, name: str, state: str = "COMPLETED") -> None:
        """Submit the shards that were waiting for job ``name`` to end (in ``state``). After a job that
        did not complete (a node failed, it timed out), the shard's steps on nodes Slurm will no longer
        run a job on are left out (they would hold it in the queue, ReqNodeNotAvail, for
        ``queue_timeout_min``) and reported as not tested."""
        ready = [j for j in self._deferred if j.after == name]
        self._deferred = [j for j in self._deferred if j.after != name]
        for job in ready:
            left: tuple[str, ...] = ()
            note = ""
            if state.split(" ")[0] not in OK_STATES and self.executor_name == "slurm":
                job, left, note = self._without_unusable(job, name, state)
            if not job.rounds:
                self.outcomes.append(
                    JobOutcome(job.name, None, "NODES_UNAVAILABLE", missing=left, message=note)
                )
                self._release(job.name, "NODES_UNAVAILABLE")
                continue
            try:
                params = self._campaign_params(job)
            except SubmitError as exc:
                self._refused(job, "; ".join(m for m in (str(exc), note) if m), left)
                continue
            self._start_campaign(job, params, left, note)

    def _without_unusable(
        self, job: CampaignJob, after: str, state: str
    ) -> tuple[CampaignJob, tuple[str, ...], str]:
        """``job`` without the steps on nodes sinfo says are down, drained or failing (as the preflight)."""
        from clusteraccept.jobs.slurm_clients import node_states, unusable, why_unusable

        try:
            bad = unusable(node_states(self.site.slurm.slurm_conf), job.nodes)
        except SubmitError:
            return job, (), ""
        if not bad:
            return job, (), ""
        left = tuple(s.name for r in job.rounds for s in r.steps if set(s.nodes) & set(bad))
        rounds = kept_rounds(job.rounds, lambda s: not set(s.nodes) & set(bad))
        note = f"not tested, left out after {after} ended {state.split(' ')[0]}: {why_unusable(bad)}"
        return replace(job, rounds=rounds, nodes=nodes_used(job.nodes, rounds)), left, note

    # --- results ---------------------------------------------------------------------------------------
    def wait(self, poll_s: float | None = None) -> list[JobOutcome]:
        """Wait (bounded) for every submitted job and turn what came back into outcomes.

        A job's run is bounded from its start (its --time plus a grace), its wait in the queue separately
        (``slurm.queue_timeout_min``): a job queued behind another of the run's jobs on the same nodes
        is not timed out for waiting. Polling asks Slurm (submitit's sacct) about every pending job every
        0.5 s, and squeue which queued jobs have started every 5 s. A local job's state is its process's
        and files' on this machine, cheap to ask: every 0.05 s, so a run on one host (and every unit test
        through the local executor) does not wait up to half a second for each job."""
        try:
            with _sigterm_interrupts():
                self._wait(poll_s)
        except (KeyboardInterrupt, Interrupted) as exc:
            self._interrupt("SIGINT" if isinstance(exc, KeyboardInterrupt) else str(exc))
        return self.outcomes

    def _interrupt(self, signal_name: str) -> None:
        """Ctrl-C (SIGINT) or SIGTERM while jobs ran: cancel every job of the run (an exclusive campaign
        left running holds its nodes until its --time), keep what each returned, and report the rest as
        not tested, so that the run is INCOMPLETE and ``--resume RUN_DIR`` completes it."""
        self.interrupted = signal_name
        why = f"the run was interrupted ({signal_name}) and cancelled it"
        for p in self._pending:
            _cancel(p.job)  # all at once first: collecting waits for each job to end
        pending, self._pending = self._pending, []
        for p in pending:
            self.outcomes.append(self._collect(p, timed_out=True, why="CANCELLED", note=why))
        for job in self._deferred:  # shards never submitted: every step of them untested
            steps = tuple(s.name for r in job.rounds for s in r.steps)
            self.outcomes.append(
                JobOutcome(job.name, None, "CANCELLED", missing=steps, message=f"not submitted: {why}")
            )
        self._deferred = []

    def _wait(self, poll_s: float | None) -> None:
        slurm = self.executor_name == "slurm"
        if poll_s is None:
            poll_s = 0.5 if slurm else 0.05
        while self._pending:
            if slurm:
                self._refresh_starts()
            for p in list(self._pending):
                done = _job_done(p.job)
                if not slurm and p.started is None:
                    p.started = p.submitted  # a local job starts when it is submitted
                why = "" if done else self._overdue(p)
                if done or why:
                    self._pending.remove(p)
                    self.outcomes.append(self._collect(p, timed_out=bool(why), why=why))
                    self._release(p.name, self.outcomes[-1].state)
            if self._pending:
                time.sleep(poll_s)

    def _refresh_starts(self) -> None:
        asked = [p for p in self._pending if str(getattr(p.job, "job_id", ""))]
        if not asked or time.monotonic() - self._starts_asked < START_POLL_S:
            return
        self._starts_asked = time.monotonic()
        starts = job_starts([str(p.job.job_id) for p in asked], self.site.slurm.slurm_conf)
        for p in asked:
            st = starts.get(str(p.job.job_id))
            if p.started is not None:
                if st is None or st.state in ("COMPLETING", "COMPLETED"):
                    # squeue no longer lists it: it ended. submitit's own sacct watch asks less and less
                    # often while a job runs (every 60 s at most, its InfoWatcher): ask it now, or the run
                    # waits up to a minute for each job, and the confirmation job after the campaigns
                    _force_check(p.job)
                continue
            if st is None:  # squeue does not say: submitit's sacct may (a start no earlier than now)
                if _job_state(p.job) == "RUNNING":
                    p.started = time.monotonic()
                continue
            p.reason = st.reason
            if st.start_epoch is not None:  # Slurm's wall clock -> this process's monotonic clock
                p.started = time.monotonic() - max(0.0, time.time() - st.start_epoch)

    def _overdue(self, p: _Pending) -> str:
        """Why ``p`` is given up on now (its state then: WAIT_TIMEOUT or QUEUE_TIMEOUT), "" if it is not."""
        now = time.monotonic()
        if p.started is not None:
            if now > p.started + p.time_s + self.grace_s:
                return "WAIT_TIMEOUT"
            return ""
        queue_s = self.site.slurm.queue_timeout_min * 60.0
        if now > p.submitted + queue_s or p.reason in NEVER_STARTS:
            return "QUEUE_TIMEOUT"
        return ""

    def _queue_message(self, p: _Pending) -> str:
        waited = time.monotonic() - p.submitted
        hours, mins = divmod(int(waited // 60), 60)
        behind = [q.name for q in self._pending if q.started is not None and set(q.hosts) & set(p.hosts)]
        said = f" (Slurm: {p.reason})" if p.reason else ""
        if p.reason in NEVER_STARTS:
            return f"never started{said}: the job is outside a limit of its partition, QOS or account"
        return (
            f"waited {hours} h {mins} min in the queue without starting{said}"
            + (f", behind {', '.join(behind)} (running on the same nodes)" if behind else "")
            + f"; slurm.queue_timeout_min={self.site.slurm.queue_timeout_min}"
        )

    def _collect(self, p: _Pending, timed_out: bool, why: str = "", note: str = "") -> JobOutcome:
        job_id = str(getattr(p.job, "job_id", "")) or None
        queue_msg = self._queue_message(p) if why == "QUEUE_TIMEOUT" else ""
        if timed_out:
            _cancel(p.job)
            _no_result_wait(p.job)
        state = (why or "WAIT_TIMEOUT") if timed_out else _final_state(p.job)
        evidence: list[Evidence] = []
        errors: list[str] = []
        if queue_msg:  # never started: nothing ran, nothing to fetch
            missing = p.nodes
        elif p.kind == "probe":
            for i in range(len(p.nodes) if self.executor_name == "slurm" else 1):  # local: one per node
                task = p.job.task(i)
                if timed_out:
                    _no_result_wait(task)  # each task's own wait: 15 s x 1,000 nodes of a cancelled job
                try:
                    evidence.extend(task.result())
                except (UncompletedJobError, FailedJobError, OSError, EOFError) as exc:
                    errors.append(f"task {i}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
            got = {ev.host for ev in evidence}
            missing = tuple(n for n in p.nodes if n not in got)
        else:
            try:
                evidence.extend(p.job.result())
            except (UncompletedJobError, FailedJobError, OSError, EOFError) as exc:
                errors.append(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
                # only here: a driver that returned ran every round to its end, nothing was killed
                evidence.extend(mark_killed(read_spool(p.spool), state))
            got = {f"{ev.meta.get('collective')}:{ev.host}" for ev in evidence}
            missing = tuple(s for s in p.nodes if s not in got)
        msg = f"Slurm job {job_id} ended {state}" + (f": {queue_msg}" if queue_msg else "")
        for said in (p.extra.get("note"), note):
            if said:
                msg += f"; {said}"
        if missing:
            msg += f"; nothing came back from {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}"
        if errors and (missing or state not in OK_STATES):
            msg += f" ({errors[0]})"
        return JobOutcome(p.name, job_id, state, tuple(evidence), missing, msg)


class Interrupted(BaseException):
    """SIGTERM while the run waits for its jobs (SIGINT is Python's KeyboardInterrupt).

    A BaseException, as KeyboardInterrupt is: the handler raises it wherever the wait loop is, mostly inside
    submitit's ``job.done()`` and its sacct call, which ``_job_done`` guards with ``except Exception``
    (submitit raises various errors while sacct lags). Derived from Exception it was swallowed there as
    "not done yet", and the run went on to its end, exit 0, with the signal lost (seen in CI)."""


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (a `kill`, Slurm ending the scrontab job at its --time) raises :class:`Interrupted` in the
    waiting loop instead of ending the process at once with the run's jobs still holding their nodes."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers are the main thread's only
        return

    def raise_interrupted(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    before = signal.signal(signal.SIGTERM, raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def _no_result_wait(job: Any) -> None:
    """submitit's Job._get_outcome_and_result waits ``_results_timeout_s`` (15 s) for a result pickle "if
    filesystem is slow": a job (or task) this run cancelled writes none, and the spool has what it ran."""
    with contextlib.suppress(AttributeError):
        job._results_timeout_s = 0


def _force_check(job: Any) -> None:
    """submitit's Job.done(force_check=True): "Forces the slurm state update" (a failed one is asked
    again at the next poll)."""
    with contextlib.suppress(Exception):
        job.done(force_check=True)


def _job_done(job: Any) -> bool:
    try:
        return bool(job.done())
    except Exception:  # submitit raises various errors while sacct lags; treat as not done yet
        return False


def _final_state(job: Any, settle_s: float = 15.0) -> str:
    """The job's state once Slurm has it final: submitit reports done as soon as the result pickles
    exist, while Slurm may still show the job RUNNING/COMPLETING for a moment (and sacct lags)."""
    deadline = time.monotonic() + settle_s
    job_id = str(getattr(job, "job_id", ""))
    is_slurm = type(job).__name__ == "SlurmJob"

    def state_now() -> str:
        if not (is_slurm and job_id.isdigit()):
            return _job_state(job)
        # sacct asks slurmdbd; with accounting down the controller still knows the job (docs/faults.md)
        state = sacct_state(job_id)
        return state if state != "UNKNOWN" else controller_state(job_id)

    state = state_now()
    while state not in FINAL_STATES and state not in ("FINISHED", "DONE") and time.monotonic() < deadline:
        time.sleep(0.5)
        state = state_now()
    if state in ("RUNNING", "COMPLETING", "UNKNOWN", "PENDING"):
        return f"{state} (results back, final state not yet known)"
    return state


def _job_state(job: Any) -> str:
    try:
        return str(job.state).split()[0]
    except Exception:
        return "UNKNOWN"


def _cancel(job: Any) -> None:
    with contextlib.suppress(Exception):  # best effort: the job may already be gone
        job.cancel(check=False)


def node_rails(site: Site, nodes: Sequence[str]) -> dict[str, list[dict[str, object]]]:
    """What node-side probes need to know of each node's rails (plain data: it is pickled to the nodes)."""
    out: dict[str, list[dict[str, object]]] = {}
    for n in nodes:
        nt = site.node_type(n)
        # a libfabric fabric's rails (EFA, Slingshot) name their devices, a TCPX(O) rail its netdev;
        # probes/counters reads per fabric
        out[n] = [
            {
                "gpu": r.gpu,
                "hca": r.hca,
                "port": r.port,
                "netdev": r.netdev,
                **({"fabric": nt.fabric, "nics": list(r.nics)} if nt.family else {}),
            }
            for r in nt.rails
        ]
    return out
