"""up / down / status of the virtual cluster (see the package docstring for the shape)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from clusteraccept.vcluster import config, daemons, netns, start
from clusteraccept.vcluster.config import Layout
from clusteraccept.vcluster.daemons import Proc
from clusteraccept.vcluster.install import ensure_installed
from clusteraccept.vcluster.netns import Net
from clusteraccept.vcluster.record import Record, default_state_dir, event, load, machine_lock

# Processes of a dead cluster that we may end when we take its slot over.
_OUR_COMMS = frozenset(
    {"munged", "mariadbd", "slurmdbd", "slurmctld", "slurmscriptd", "slurmd", "slurmstepd"}
)


@dataclass(frozen=True)
class ClusterInfo:
    """A running virtual cluster, as clients (sbatch, srun, submitit) need it.

    Clients run on this host (the submit host) with ``{**os.environ, **env}``; ``env`` holds SLURM_CONF,
    without which Slurm clients go "configless" and send DNS SRV look-ups out of the machine.
    """

    state_dir: Path
    slurm_conf: Path
    nodes: tuple[str, ...]
    partition: str
    controller_ip: str
    submit_ip: str
    shared_dir: Path  # on the filesystem every node sees: put submitit folders here
    log_dir: Path
    gpus_per_node: int
    env: dict[str, str] = field(hash=False)
    up_s: float = 0.0  # wall time the `up` call took
    reused: bool = False  # True if `up` found this cluster healthy and reused it


def _info(lay: Layout, net: Net, gpus_per_node: int, up_s: float, reused: bool) -> ClusterInfo:
    return ClusterInfo(
        state_dir=lay.root,
        slurm_conf=lay.slurm_conf,
        nodes=config.node_names(net.n_nodes),
        partition=config.PARTITION,
        controller_ip=net.ctl_ip,
        submit_ip=net.submit_ip,
        shared_dir=lay.shared,
        log_dir=lay.logs,
        gpus_per_node=gpus_per_node,
        env={"SLURM_CONF": str(lay.slurm_conf)},
        up_s=up_s,
        reused=reused,
    )


def _layout(state_dir: Path | None) -> Layout:
    return Layout((state_dir or default_state_dir()).resolve())


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the virtual cluster needs root (network namespaces, bridge, bind mounts)")


def up(state_dir: Path | None = None, n_nodes: int = 4, gpus_per_node: int = 8) -> ClusterInfo:
    """Bring the cluster up (or reuse a healthy one from the same state dir) and return how to reach it."""
    t0 = time.monotonic()
    if not 1 <= n_nodes <= 200 or not 0 <= gpus_per_node <= 64:
        raise ValueError(f"need 1..200 nodes and 0..64 GPUs per node, got {n_nodes} and {gpus_per_node}")
    _require_root()
    lay = _layout(state_dir)
    lay.logs.mkdir(parents=True, exist_ok=True)
    ensure_installed(lay.logs / "apt.log")
    with machine_lock():
        rec = load(lay)
        if rec is not None and _healthy(lay, rec, n_nodes, gpus_per_node):
            net = Net(rec.slot, n_nodes)
            up_s = time.monotonic() - t0
            event(lay, f"up: reused healthy cluster in slot {rec.slot} ({up_s:.2f} s)")
            return _info(lay, net, gpus_per_node, up_s, reused=True)
        if rec is not None or lay.record.parent.exists():
            event(lay, "up: previous state is stale or partial; rebuilding from clean")
        _teardown(lay, rec)
        net = Net(_choose_slot(lay), n_nodes)
        _clean_slot(net.slot, lay)
        try:
            _build(lay, net, gpus_per_node)
        except BaseException as exc:
            event(lay, f"up failed: {exc!r}; tearing down (logs kept in {lay.logs})")
            _teardown(lay, load(lay))
            raise
    up_s = time.monotonic() - t0
    event(lay, f"up: {n_nodes} nodes in slot {net.slot} ({net.subnet}) in {up_s:.2f} s")
    return _info(lay, net, gpus_per_node, up_s, reused=False)


def _build(lay: Layout, net: Net, gpus_per_node: int) -> None:
    shutil.rmtree(lay.run, ignore_errors=True)  # pid files, sockets, spool of the previous life
    config.write_all(lay, net, gpus_per_node)
    # The record exists from the first process on, so a failure half-way can still be cleaned up.
    started: list[Proc] = []

    def on_start(p: Proc) -> None:
        started.append(p)
        Record(net.slot, net.n_nodes, gpus_per_node, tuple(started)).save(lay)

    Record(net.slot, net.n_nodes, gpus_per_node, ()).save(lay)
    netns.create(net, lay.root)
    procs = start.start_all(lay, net, on_start)
    Record(net.slot, net.n_nodes, gpus_per_node, tuple(procs)).save(lay)


def _healthy(lay: Layout, rec: Record, n_nodes: int, gpus_per_node: int) -> bool:
    if (rec.n_nodes, rec.gpus_per_node) != (n_nodes, gpus_per_node):
        return False
    net = Net(rec.slot, rec.n_nodes)
    if not rec.procs or not all(daemons.running(p) for p in rec.procs):
        return False
    if not netns.intact(net, lay.root):
        return False
    # A config written by another version of this code means a rebuild, not a silent reuse.
    try:
        if lay.slurm_conf.read_text() != config.slurm_conf(lay, net, gpus_per_node):
            return False
    except OSError:
        return False
    # Busy nodes count as healthy: a second `up` must not kill the jobs of a working cluster.
    return start.nodes_usable(lay, list(config.node_names(n_nodes)))


def _choose_slot(lay: Layout) -> int:
    """Our slot if a bridge names our state dir; else the first slot free or held by a dead cluster."""
    for slot in range(netns.MAX_SLOTS):
        if netns.bridge_owner(f"cabr{slot}") == str(lay.root):
            return slot
    for slot in range(netns.MAX_SLOTS):
        if not netns.slot_usable(Net(slot, 1)):
            continue
        owner = netns.bridge_owner(f"cabr{slot}")
        if owner is None or not _owner_alive(owner):
            return slot
    raise RuntimeError(f"all {netns.MAX_SLOTS} virtual cluster slots are held by running clusters")


def _owner_alive(owner: str) -> bool:
    if not owner:
        return False
    rec = load(Layout(Path(owner)))
    return rec is not None and any(daemons.alive(p) for p in rec.procs)


def _clean_slot(slot: int, lay: Layout) -> None:
    """End what a dead cluster left in ``slot`` (our daemons and job steps only), then drop its network."""
    for note in _end_processes(lay, [], [slot], cancel=False):
        event(lay, f"clean slot {slot}: {note}")
    netns.destroy_slot(slot)


def cancel_jobs(lay: Layout, timeout_s: float = 30.0) -> None:
    env = start.client_env(lay)

    def queue() -> list[str]:
        out = subprocess.run(
            ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env, timeout=10, check=False
        )
        return out.stdout.split() if out.returncode == 0 else []

    jobs = queue()
    if not jobs:
        return
    event(lay, f"down: cancelling jobs {' '.join(jobs)}")
    subprocess.run(["scancel", *jobs], capture_output=True, env=env, timeout=10, check=False)
    try:
        daemons.wait_until("cancelled jobs to finish", lambda: not queue(), timeout_s)
    except TimeoutError as exc:
        event(lay, f"down: {exc}")


def _in_slots(slots: list[int], mnt: set[int]) -> list[Proc]:
    """Processes in the slots' namespaces that are our daemons or share a daemon's mount namespace
    (job steps and their children: everything a slurmd starts inherits its private mount namespace)."""
    namespaces = [ns for slot in slots for ns in netns.slot_namespaces(slot)]
    return [
        p
        for pid, ns in netns.pids_in_namespaces(namespaces).items()
        if (p := daemons.snapshot(pid, ns)) is not None
        and (p.comm in _OUR_COMMS or daemons.mnt_ns_of(pid) in mnt)
    ]


def _end_processes(lay: Layout, recorded: list[Proc], slots: list[int], cancel: bool = True) -> list[str]:
    """Cancel jobs while slurmctld lives, then stop daemons in order, then whatever of ours is left.

    ``cancel=False`` for a dead cluster's slot, whose slurm.conf is not ours.
    """
    found = _in_slots(slots, set())
    known = {p.pid for p in recorded}
    procs = [p for p in recorded if daemons.is_ours(p)] + [p for p in found if p.pid not in known]
    if cancel and any(p.comm == "slurmctld" and daemons.alive(p) for p in procs):
        # slurmstepd ignores SIGTERM: let slurmctld end the jobs while it can.
        cancel_jobs(lay)
    mnt = {p.mnt_ns for p in recorded if p.mnt_ns} | {
        ino for p in procs if (ino := daemons.mnt_ns_of(p.pid)) is not None
    }
    mnt.discard(daemons.mnt_ns_of(os.getpid()) or 0)  # a daemon still in its launch chain: host's namespace
    # Jobs and nodes first, then the controller (it still talks to slurmdbd on its way out), then the rest.
    stages = (("slurmstepd", "slurmd"), ("slurmctld", "slurmscriptd"), ("slurmdbd",), ("mariadbd", "munged"))
    notes: list[str] = []
    for comms in stages:
        notes += daemons.stop([p for p in procs if p.comm in comms])
    rest = [p for p in _in_slots(slots, mnt) if daemons.alive(p)]
    if rest:
        notes.append(f"ended {len(rest)} leftover processes: {', '.join(p.name for p in rest)}")
        notes += daemons.stop(rest, term_timeout_s=2.0)
    return notes + daemons.wait_reaped(procs + rest)


def _teardown(lay: Layout, rec: Record | None) -> list[str]:
    """Stop our processes (by pid, start time and comm), remove our network state; keep logs."""
    owners = {s: netns.bridge_owner(f"cabr{s}") for s in range(netns.MAX_SLOTS)}
    slots = {s for s, owner in owners.items() if owner == str(lay.root)}
    # Our recorded slot without a bridge may still hold our namespaces. With another state dir's bridge
    # it was taken over after we died, and nothing there is ours any more.
    if rec is not None and owners.get(rec.slot) is None:
        slots.add(rec.slot)
    notes = _end_processes(lay, list(rec.procs) if rec else [], sorted(slots))
    for slot in sorted(slots):
        netns.destroy_slot(slot)
    shutil.rmtree(lay.run, ignore_errors=True)
    for note in notes:
        event(lay, f"teardown: {note}")
    return notes


def down(state_dir: Path | None = None) -> list[str]:
    """Cancel jobs, stop the processes this cluster started, delete its namespaces, veths and bridge.

    Logs stay under ``<state_dir>/logs``. Returns notes on anything that needed force.
    """
    _require_root()
    lay = _layout(state_dir)
    if not lay.root.is_dir():
        return []
    t0 = time.monotonic()
    with machine_lock():
        notes = _teardown(lay, load(lay))
    event(lay, f"down in {time.monotonic() - t0:.2f} s")
    return notes


def status(state_dir: Path | None = None) -> str:
    """A few lines: up or down, slot and subnet, daemons alive, and sinfo's view of the nodes."""
    lay = _layout(state_dir)
    rec = load(lay)
    if rec is None:
        return f"vcluster {lay.root}: down (no record)"
    net = Net(rec.slot, rec.n_nodes)
    alive = [p for p in rec.procs if daemons.running(p)]
    lines = [
        f"vcluster {lay.root}: slot {rec.slot}, bridge {net.bridge}, subnet {net.subnet}, "
        f"{rec.n_nodes} nodes x {rec.gpus_per_node} GPUs",
        f"SLURM_CONF={lay.slurm_conf}",
        f"daemons alive: {len(alive)}/{len(rec.procs)}"
        + "".join(
            f"\n  {'up  ' if p in alive else 'DEAD'} {p.name} pid {p.pid} ns {p.ns}" for p in rec.procs
        ),
        f"network intact: {netns.intact(net, lay.root)}",
    ]
    states = start.node_states(lay) if alive else None
    if states is None:
        lines.append("slurmctld: not answering")
    else:
        lines.append("nodes: " + ", ".join(f"{n}={s}" for n, s in sorted(states.items())))
    healthy = _healthy(lay, rec, rec.n_nodes, rec.gpus_per_node)
    lines.insert(0, "UP (healthy)" if healthy else "NOT HEALTHY")
    return "\n".join(lines)
