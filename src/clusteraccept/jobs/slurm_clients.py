"""Every Slurm client command the submit host runs beside submitit (which stays in submit.py).

- ``sacct -j ID -X -n -P -o State``: a job's own state;
- ``squeue -h -j ID,ID... -o '%i|%T|%S|%r'``: when queued jobs started, or why not yet;
- ``squeue -h -j ID -t all -o %T``: a job's state as the controller holds it, when sacct cannot answer
  (slurmdbd down): squeue(1) ``--states=all`` also lists the jobs that ended (kept for MinJobAge);
- ``scontrol show config`` and ``scontrol show partition``: the cluster's limits on a job (plan/limits.py);
- ``scontrol show topology``: the blocks (``blocks: slurm``);
- ``sinfo -N -h -o '%N|%T|%E'``: sinfo(1) -N one line per node, -h no header, %N node name, %T extended
  state (``drained``, ``draining``, ``idle``...), %E reason (``none`` when there is none): the run's
  preflight (nodes Slurm will not run a job on) and the drain guards;
- ``sinfo -N -h -p P -o '%N|%f'``: the nodes of partition P and their features (``init``);
- ``scontrol update NodeName=X State=DRAIN|UNDRAIN ...``: drain and undrain (ops/drain.py decides which).

Every command goes through the process seam, ``hostio.run``, with the site's SLURM_CONF where it is given
(without it the clients try "configless" DNS SRV look-ups).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from clusteraccept import hostio
from clusteraccept.errors import ParseError, SubmitError
from clusteraccept.evidence import Evidence
from clusteraccept.parsers import scontrol_config, scontrol_topology
from clusteraccept.plan.limits import ClusterLimits
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import REST_BLOCK

# Slurm states after which a job will not produce more results (squeue/sacct JOB STATE CODES).
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}


def sacct_state(job_id: str) -> str:
    """The allocation's own state (sacct -X: the job record, not its steps), e.g. TIMEOUT."""
    ev = hostio.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], timeout_s=30, source="sacct")
    line = ev.stdout.strip().splitlines()[0] if ev.ok and ev.stdout.strip() else "UNKNOWN"
    return line.split()[0]  # "CANCELLED by 0" -> CANCELLED


def controller_state(job_id: str) -> str:
    """The job's state from slurmctld's memory (squeue), for when accounting (sacct) does not answer."""
    ev = hostio.run(["squeue", "-h", "-j", job_id, "-t", "all", "-o", "%T"], timeout_s=30, source="squeue")
    line = ev.stdout.strip().splitlines()[0] if ev.ok and ev.stdout.strip() else "UNKNOWN"
    return line.split()[0]


@dataclass(frozen=True)
class JobStart:
    state: str
    start_epoch: float | None  # None: not started yet
    reason: str  # why it pends (sacct Reason: Resources, Priority, Dependency...), "" when none


def job_starts(job_ids: Sequence[str], slurm_conf: str | None = None) -> dict[str, JobStart]:
    """Each queued or running job's state, start time and pending reason (squeue: the controller's own
    view; sacct's Reason stays ``None`` for a pending job). Jobs squeue no longer lists are left out."""
    argv = ["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i|%T|%S|%r"]
    # squeue(1) SLURM_TIME_FORMAT: "a valid strftime() format": %s, seconds since the epoch, whatever the
    # user's own format, time zone or daylight saving time
    env = {**(slurm_env(slurm_conf) or {}), "SLURM_TIME_FORMAT": "%s"}
    ev = hostio.run(argv, timeout_s=30, source="squeue", env=env)
    return parse_squeue_starts(ev.stdout) if ev.ok else {}


def parse_squeue_starts(text: str) -> dict[str, JobStart]:
    """``squeue -h -o '%i|%T|%S|%r'`` lines (squeue(1): job id, state, start time, reason). %S is the
    actual start of a job that runs and only the expected one of a pending job: a start is taken only
    from a job that is no longer PENDING. Times are epoch seconds (SLURM_TIME_FORMAT=%s, job_starts)
    or Slurm's standard ``2026-12-01T14:35:13`` (local time)."""
    from datetime import datetime

    out: dict[str, JobStart] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 4 or not parts[0]:
            continue
        job_id, state, start, reason = parts
        epoch: float | None = None
        if state not in ("PENDING", "CONFIGURING"):
            try:
                epoch = float(start) if start.isdigit() else datetime.fromisoformat(start).timestamp()
            except ValueError:  # N/A, Unknown
                epoch = None
        out[job_id] = JobStart(state or "UNKNOWN", epoch, "" if reason == "None" else reason)
    return out


def cluster_limits(site: Site) -> ClusterLimits:
    """What this cluster says about one job's limits; a cluster that cannot be asked says nothing.

    Asked only where a slurm.conf is found (the site's ``slurm_conf``, $SLURM_CONF, or Slurm's default
    /etc/slurm/slurm.conf): without one the clients fall back to "configless" DNS SRV look-ups."""
    import os
    from pathlib import Path

    conf = site.slurm.slurm_conf or os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
    if not Path(conf).is_file():
        return ClusterLimits(source=f"not asked: no slurm.conf at {conf}")
    env = {"SLURM_CONF": conf}
    ev = hostio.run(["scontrol", "show", "config"], timeout_s=30, source="scontrol-config", env=env)
    if not ev.ok:
        return ClusterLimits(
            source=f"scontrol show config failed: {(ev.stderr or 'no output').strip()[:120]}"
        )
    try:
        cfg = scontrol_config.parse(ev.stdout)
        ports = cfg.srun_port_range
        rl = cfg.slurmctld_parameters
        refill: float | None = None
        if "rl_enable" in rl:  # src/slurmctld/rate_limit.c: 2 tokens per 1 s unless set
            refill = float(rl.get("rl_refill_rate") or 2) / float(rl.get("rl_refill_period") or 1)
        max_time: int | None = None
        argv = ["scontrol", "show", "partition", *([site.slurm.partition] if site.slurm.partition else [])]
        pev = hostio.run(argv, timeout_s=30, source="scontrol-partition", env=env)
        if pev.ok:
            parts = scontrol_config.parse_partitions(pev.stdout)
            chosen = parts.get(site.slurm.partition or "") or next(
                (p for p in parts.values() if p.default), None
            )
            max_time = chosen.max_time_min if chosen else None
    except (ParseError, ValueError) as exc:
        return ClusterLimits(source=f"scontrol show config: {exc}")
    version = cfg.get("SLURM_VERSION") or "?"
    units: tuple[tuple[int, tuple[str, ...]], ...] = ()
    if cfg.get("TopologyPlugin") == "topology/block":
        tev = hostio.run(["scontrol", "show", "topology"], timeout_s=30, source="scontrol-topology", env=env)
        try:
            topo = scontrol_topology.parse(tev.stdout) if tev.ok else None
        except ParseError:
            topo = None
        units = tuple((b.size, b.nodes) for b in topo.block_records) if topo else ()
    return ClusterLimits(
        max_step_count=cfg.max_step_count,
        srun_ports=None if ports is None else ports[1] - ports[0] + 1,
        rpc_refill_per_s=refill,
        max_time_min=max_time,
        source=f"scontrol show config (Slurm {version})",
        block_units=units,
    )


def slurm_blocks(site: Site) -> dict[str, tuple[str, ...]]:
    """The site's blocks as Slurm knows them (``blocks: slurm``): ``scontrol show topology`` (topology/tree
    leaf switches or topology/block blocks), restricted to the site's nodes; nodes in no block form "rest"."""
    ev = hostio.run(["scontrol", "show", "topology"], timeout_s=30, source="scontrol-topology")
    if not ev.ok:
        why = (ev.stderr or "no output").strip()
        raise SubmitError(f"blocks: slurm needs `scontrol show topology`: {why}")
    try:
        topo = scontrol_topology.parse(ev.stdout)
    except ParseError as exc:
        raise SubmitError(f"scontrol show topology: {exc}") from None
    wanted = set(site.nodes)
    # A node under several leaf switches (a rail-optimized topology.conf lists every node under each of
    # its rails' leaves) belongs to the first that lists it: a second block would campaign it twice.
    placed_once: set[str] = set()
    blocks: dict[str, tuple[str, ...]] = {}
    for name, nodes in topo.blocks.items():
        mine = tuple(n for n in nodes if n in wanted and n not in placed_once)
        placed_once.update(mine)
        if mine:
            blocks[name] = mine
    placed = {n for nodes in blocks.values() for n in nodes}
    rest = tuple(n for n in site.nodes if n not in placed)
    if rest:
        blocks[REST_BLOCK] = rest
    return blocks


# sinfo %T states of a node Slurm will not start a job on (the run's preflight, a shard's release)
UNUSABLE = ("down", "drain", "fail", "maint", "not_responding", "unknown", "future", "inval")


def unusable(states: dict[str, NodeState], nodes: Sequence[str]) -> dict[str, NodeState]:
    """The nodes of ``nodes`` that Slurm will not run a job on now."""
    return {n: states[n] for n in nodes if n in states and any(u in states[n].state for u in UNUSABLE)}


def why_unusable(bad: dict[str, NodeState]) -> str:
    """``node3 is down* (not responding); node7 is drained`` (what a report says of left-out nodes)."""
    return "; ".join(f"{n} is {st.state}" + (f" ({st.reason})" if st.reason else "") for n, st in bad.items())


# The Reason every node clusteraccept drains carries: what it may undrain (never a reason of someone else).
REASON_PREFIX = "clusteraccept:"
SINFO = ("sinfo", "-N", "-h", "-o", "%N|%T|%E")


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # sinfo %T, lower case: idle, drained, draining, down, mixed+drain...
    reason: str  # "" when Slurm has none

    @property
    def drained(self) -> bool:
        return "drain" in self.state

    @property
    def ours(self) -> bool:
        return self.reason.startswith(REASON_PREFIX)


def parse_sinfo(text: str) -> dict[str, NodeState]:
    """``node1|drained|admin: PSU swap`` lines -> states (a node in several partitions appears once)."""
    out: dict[str, NodeState] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) != 3 or not parts[0]:
            continue
        reason = parts[2].strip()
        out.setdefault(
            parts[0], NodeState(parts[0], parts[1].strip().lower(), "" if reason == "none" else reason)
        )
    return out


def export_client_env(site: Site) -> None:
    """Make every Slurm client this process starts, and submitit's, the site's: its slurm.conf (without
    SLURM_CONF the clients try "configless" DNS SRV look-ups) and its clients' folder first on PATH (a
    cluster whose Slurm is not the one on this host's PATH, such as the 24.11 virtual cluster)."""
    if site.slurm.slurm_conf:
        os.environ["SLURM_CONF"] = site.slurm.slurm_conf
    if site.slurm.bin_dir:
        path = os.environ.get("PATH", "")
        if path.split(os.pathsep)[0] != site.slurm.bin_dir:
            os.environ["PATH"] = os.pathsep.join([site.slurm.bin_dir, path] if path else [site.slurm.bin_dir])


def slurm_env(slurm_conf: str | None) -> dict[str, str] | None:
    return {"SLURM_CONF": slurm_conf} if slurm_conf else None


def node_states(slurm_conf: str | None) -> dict[str, NodeState]:
    ev = hostio.run(list(SINFO), timeout_s=30, source="sinfo", env=slurm_env(slurm_conf))
    if not ev.ok:
        raise SubmitError(f"{shlex.join(SINFO)} failed: {(ev.stderr or 'no output').strip()}")
    return parse_sinfo(ev.stdout)


def partition_nodes(partition: str, slurm_conf: str | None) -> dict[str, str]:
    """The nodes of ``partition`` in sinfo's order, each once, with their features (sinfo(1) %f: "Features
    available on the nodes"; "(null)" where none); empty: no such partition, or no nodes."""
    argv = ["sinfo", "-N", "-h", "-p", partition, "-o", "%N|%f"]
    ev = hostio.run(argv, timeout_s=30, source="sinfo", env=slurm_env(slurm_conf))
    if not ev.ok:
        raise SubmitError(f"{shlex.join(argv)} failed: {(ev.stderr or 'no output').strip()}")
    out: dict[str, str] = {}
    for line in ev.stdout.splitlines():
        name, _, features = line.strip().partition("|")
        if name:
            out.setdefault(name, features.strip())
    return out


def scontrol_update(argv: Sequence[str], slurm_conf: str | None) -> Evidence:
    """Run one ``scontrol update ...`` command line (drain, undrain) and return what it printed."""
    return hostio.run(list(argv), timeout_s=30, source="scontrol", env=slurm_env(slurm_conf))
