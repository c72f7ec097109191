"""up / down / status of the virtual cluster (see the package docstring for the shape)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from clusteraccept.vcluster import config, daemons, flavour, netns, root, start
from clusteraccept.vcluster.config import TOPOLOGIES, Layout
from clusteraccept.vcluster.daemons import Proc
from clusteraccept.vcluster.flavour import FLAVOURS, Flavour
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
    env: dict[str, str] = field(hash=False)  # SLURM_CONF, and PATH with the flavour's clients first
    up_s: float = 0.0  # wall time the `up` call took
    reused: bool = False  # True if `up` found this cluster healthy and reused it
    slurm: str = "22.05"  # the flavour: "22.05" (host packages) or "24.11" (Debian 13 root)
    topology: str = "tree"
    mpi_default: str = "none"
    bin_dir: Path | None = None  # the flavour's Slurm clients (a site's slurm.bin_dir)
    service_partition: str | None = None  # a partition beside the GPU nodes for scrontab's jobs
    python: Path | None = None  # the nodes' interpreter (a site's slurm.python)


def _info(lay: Layout, net: Net, rec: Record, up_s: float, reused: bool) -> ClusterInfo:
    return ClusterInfo(
        state_dir=lay.root,
        slurm_conf=lay.slurm_conf,
        nodes=config.node_names(net.n_nodes),
        partition=config.PARTITION,
        controller_ip=net.ctl_ip,
        submit_ip=net.submit_ip,
        shared_dir=lay.shared,
        log_dir=lay.logs,
        gpus_per_node=rec.gpus_per_node,
        env={"SLURM_CONF": str(lay.slurm_conf), "PATH": start.client_path(lay)},
        up_s=up_s,
        reused=reused,
        slurm=rec.slurm,
        topology=rec.topology,
        mpi_default=rec.mpi_default,
        bin_dir=lay.bin,
        python=lay.node_python,
        service_partition=config.SERVICE_PARTITION if net.service else None,
    )


def _layout(state_dir: Path | None) -> Layout:
    return Layout((state_dir or default_state_dir()).resolve())


def _require_root() -> None:
    if os.geteuid() != 0:
        raise PermissionError("the virtual cluster needs root (network namespaces, bridge, bind mounts)")


def up(
    state_dir: Path | None = None,
    n_nodes: int = 4,
    gpus_per_node: int = 8,
    slurm: str = flavour.DEFAULT,
    topology: str = "tree",
    mpi_default: str | None = None,
) -> ClusterInfo:
    """Bring the cluster up (or reuse a healthy one from the same state dir) and return how to reach it.

    ``slurm``: "24.11" runs Debian 13's Slurm from a root built once under .vcluster/roots (about 45 s the
    first time); "22.05" runs this host's Debian 12 packages. ``topology``: "tree" (two leaves under a
    spine) or "block" (the same halves as topology/block blocks; 24.11 only). ``mpi_default``: slurm.conf's
    MpiDefault, by default pmix on 24.11 and none on 22.05 (config.mpi_default_of).
    """
    t0 = time.monotonic()
    if not 1 <= n_nodes <= 200 or not 0 <= gpus_per_node <= 64:
        raise ValueError(f"need 1..200 nodes and 0..64 GPUs per node, got {n_nodes} and {gpus_per_node}")
    if slurm not in FLAVOURS:
        raise ValueError(f"--slurm: expected one of {', '.join(FLAVOURS)}, got {slurm!r}")
    if topology not in TOPOLOGIES or (topology == "block" and slurm == "22.05"):
        raise ValueError(f"--topology: expected tree, or block with Slurm 24.11; got {topology!r} on {slurm}")
    mpi_default = mpi_default or config.mpi_default_of(slurm)
    _require_root()
    lay = _layout(state_dir)
    lay.logs.mkdir(parents=True, exist_ok=True)
    ensure_installed(lay.logs / "apt.log")
    with machine_lock():
        fl = Flavour(slurm, root.ensure(log=lay.logs / "root-build.log") if slurm != "22.05" else None)
        rec = load(lay)
        want = (n_nodes, gpus_per_node, slurm, topology, mpi_default)
        if rec is not None and _healthy(lay, rec, want):
            net = _net(rec.slot, n_nodes, slurm, topology)
            up_s = time.monotonic() - t0
            event(lay, f"up: reused healthy cluster in slot {rec.slot} ({up_s:.2f} s)")
            return _info(lay, net, rec, up_s, reused=True)
        if rec is not None or lay.record.parent.exists():
            event(lay, "up: previous state is stale or partial; rebuilding from clean")
        _teardown(lay, rec)
        net = _net(_choose_slot(lay), n_nodes, slurm, topology)
        _clean_slot(net.slot, lay)
        try:
            rec = _build(lay, net, gpus_per_node, fl, topology, mpi_default)
        except BaseException as exc:
            event(lay, f"up failed: {exc!r}; tearing down (logs kept in {lay.logs})")
            _teardown(lay, load(lay))
            raise
    up_s = time.monotonic() - t0
    event(lay, f"up: {n_nodes} nodes, Slurm {slurm}, in slot {net.slot} ({net.subnet}) in {up_s:.2f} s")
    return _info(lay, net, rec, up_s, reused=False)


def _switch_flavour(lay: Layout, slurm: str) -> None:
    """Another Slurm's controller state and accounting database are not read: 24.11 upgrades the schema
    in place, after which 22.05's slurmdbd no longer starts. Job ids then start again at 1, which is safe
    because every run uses a fresh submitit folder (docs/vcluster.md)."""
    try:
        was = lay.flavour_mark.read_text().strip()
    except OSError:
        was = "22.05" if lay.ctld_state.exists() else slurm  # state dirs made before 24.11 existed
    if was != slurm:
        event(lay, f"up: Slurm {was} -> {slurm}: controller state and accounting database wiped")
        shutil.rmtree(lay.ctld_state, ignore_errors=True)
        shutil.rmtree(lay.mysql_data, ignore_errors=True)
    lay.root.mkdir(parents=True, exist_ok=True)
    lay.flavour_mark.write_text(slurm + "\n")


def _build(lay: Layout, net: Net, gpus_per_node: int, fl: Flavour, topology: str, mpi_default: str) -> Record:
    shutil.rmtree(lay.run, ignore_errors=True)  # pid files, sockets, spool of the previous life
    _switch_flavour(lay, fl.slurm)
    config.write_all(lay, net, gpus_per_node, fl.slurm, topology, mpi_default)
    flavour.write_files(lay, fl)
    # The record exists from the first process on, so a failure half-way can still be cleaned up.
    started: list[Proc] = []

    def record(procs: tuple[Proc, ...]) -> Record:
        built = str(fl.root.manifest.get("built", "")) if fl.root else ""
        rec = Record(net.slot, net.n_nodes, gpus_per_node, procs, fl.slurm, topology, mpi_default, built)
        rec.save(lay)
        return rec

    def on_start(p: Proc) -> None:
        started.append(p)
        record(tuple(started))

    record(())
    netns.create(net, lay.root)
    procs = start.start_all(lay, net, on_start, fl)
    return record(tuple(procs))


def _healthy(lay: Layout, rec: Record, want: tuple[int, int, str, str, str]) -> bool:
    if _shape(rec) != want:
        return False
    net = _net(rec.slot, rec.n_nodes, rec.slurm, rec.topology)
    if not rec.procs or not all(daemons.running(p) for p in rec.procs):
        return False
    if not netns.intact(net, lay.root):
        return False
    # A config written by another version of this code means a rebuild, not a silent reuse.
    try:
        written = config.slurm_conf(lay, net, rec.gpus_per_node, rec.slurm, rec.topology, rec.mpi_default)
        if lay.slurm_conf.read_text() != written:
            return False
    except OSError:
        return False
    if rec.slurm != "22.05":
        found = root.load(root.default_roots_dir().resolve() / f"slurm-{rec.slurm}")
        if found is None or found.manifest.get("built") != rec.root_built:
            return False  # its root was rebuilt or removed under it
        try:  # what enters the root (its binds: $CLUSTERACCEPT_VCLUSTER_SHARED) is this code's
            if flavour.enter_root(lay).read_text() != flavour.enter_root_script(lay, found):
                return False
        except OSError:
            return False
    # Busy nodes count as healthy: a second `up` must not kill the jobs of a working cluster.
    hosts = list(config.node_names(rec.n_nodes)) + ([config.SERVICE_HOST] if net.service else [])
    return start.nodes_usable(lay, hosts)


def _net(slot: int, n_nodes: int, slurm: str, topology: str) -> Net:
    """The slot's network; 24.11 with a tree topology has the service host too (scrontab's jobs run there;
    22.05 has no scrontab client, and under topology/block a node in no block runs no job)."""
    return Net(slot, n_nodes, service=slurm != "22.05" and topology == "tree")


def _shape(rec: Record) -> tuple[int, int, str, str, str]:
    return (rec.n_nodes, rec.gpus_per_node, rec.slurm, rec.topology, rec.mpi_default)


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
            ["squeue", "-h", "-o", "%i"],
            capture_output=True,
            text=True,
            env=env,
            timeout=10,
            check=False,
            cwd=lay.root,  # the 24.11 clients run in the root, which sees the state dir, not every folder
        )
        return out.stdout.split() if out.returncode == 0 else []

    jobs = queue()
    if not jobs:
        return
    event(lay, f"down: cancelling jobs {' '.join(jobs)}")
    subprocess.run(["scancel", *jobs], capture_output=True, env=env, timeout=10, check=False, cwd=lay.root)
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


def stop_daemon(state_dir: Path | None, name: str) -> str:
    """Stop one control daemon (slurmctld or slurmdbd) of a running cluster and leave it stopped: the
    fault matrix's "controller restarted" and "accounting down" (docs/faults.md). Jobs and slurmds run on;
    the cluster is not healthy (``up`` would rebuild it) until :func:`start_daemon` starts it again."""
    _require_root()
    lay = _layout(state_dir)
    with machine_lock():
        _, proc = _control(lay, name)
        if proc is None:
            raise RuntimeError(f"{lay.root}: {name} is not running (already stopped?)")
        notes = daemons.stop([proc]) + daemons.wait_reaped([proc])
        # its record stays: the cluster is not healthy (`status` shows it DEAD, `up` rebuilds) until
        # start_daemon replaces it
    event(lay, f"stop-daemon {name}" + "".join(f"; {n}" for n in notes))
    return f"{name} stopped" + "".join(f"; {n}" for n in notes)


def start_daemon(state_dir: Path | None, name: str) -> str:
    """Start again a control daemon that :func:`stop_daemon` stopped. slurmctld recovers its state (no -c):
    the jobs that ran on through the outage are its jobs again."""
    _require_root()
    lay = _layout(state_dir)
    t0 = time.monotonic()
    with machine_lock():
        rec, proc = _control(lay, name)
        if proc is not None:
            raise RuntimeError(f"{lay.root}: {name} is already running (pid {proc.pid})")
        found = (
            root.load(root.default_roots_dir().resolve() / f"slurm-{rec.slurm}")
            if rec.slurm != "22.05"
            else None
        )
        if rec.slurm != "22.05" and found is None:
            raise RuntimeError(f"{lay.root}: the Slurm {rec.slurm} root is gone; `up` rebuilds the cluster")
        net = _net(rec.slot, rec.n_nodes, rec.slurm, rec.topology)
        started = start.restart_control(lay, net, Flavour(rec.slurm, found), name)
        order = ["munged", "mariadbd", *start.CONTROL_DAEMONS]  # as start_all starts them, slurmds last
        procs = sorted(
            (*(p for p in rec.procs if p.name != name), started),  # a crashed one's record is replaced
            key=lambda p: order.index(p.name) if p.name in order else len(order),
        )
        replace(rec, procs=tuple(procs)).save(lay)
    event(lay, f"start-daemon {name} in {time.monotonic() - t0:.2f} s")
    return f"{name} started (pid {started.pid}) in {time.monotonic() - t0:.2f} s"


def _control(lay: Layout, name: str) -> tuple[Record, Proc | None]:
    if name not in start.CONTROL_DAEMONS:
        raise ValueError(f"--daemon: expected one of {', '.join(start.CONTROL_DAEMONS)}, got {name!r}")
    rec = load(lay)
    if rec is None:
        raise RuntimeError(f"{lay.root}: no cluster is up here")
    return rec, next((p for p in rec.procs if p.name == name and daemons.running(p)), None)


def _slurm_line(rec: Record) -> str:
    if rec.slurm == "22.05":
        out = subprocess.run(["slurmd", "-V"], capture_output=True, text=True, check=False, timeout=10)
        return f"Slurm: {out.stdout.strip() or 'slurmd -V failed'} (this host's Debian packages)"
    found = root.load(root.default_roots_dir().resolve() / f"slurm-{rec.slurm}")
    if found is None:
        return f"Slurm {rec.slurm}: its root is missing or stale (`up` rebuilds it)"
    return f"Slurm {found.manifest.get('versions', {}).get('slurmd', rec.slurm)}: {root.describe(found)}"


def status(state_dir: Path | None = None) -> str:
    """A few lines: up or down, slot and subnet, daemons alive, and sinfo's view of the nodes."""
    lay = _layout(state_dir)
    rec = load(lay)
    if rec is None:
        return f"vcluster {lay.root}: down (no record)"
    net = _net(rec.slot, rec.n_nodes, rec.slurm, rec.topology)
    alive = [p for p in rec.procs if daemons.running(p)]
    lines = [
        f"vcluster {lay.root}: slot {rec.slot}, bridge {net.bridge}, subnet {net.subnet}, "
        f"{rec.n_nodes} nodes x {rec.gpus_per_node} GPUs, topology/{rec.topology}, "
        f"MpiDefault={rec.mpi_default}",
        _slurm_line(rec),
        f"SLURM_CONF={lay.slurm_conf}",
        f"PATH={lay.bin}:$PATH  (the cluster's Slurm clients)",
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
    healthy = _healthy(lay, rec, _shape(rec))
    lines.insert(0, "UP (healthy)" if healthy else "NOT HEALTHY")
    return "\n".join(lines)
