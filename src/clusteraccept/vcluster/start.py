"""Start the daemons of a cluster in order: munged + MariaDB, slurmdbd, slurmctld, the slurmds."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from clusteraccept.vcluster import daemons
from clusteraccept.vcluster.config import SERVICE_HOST, Layout
from clusteraccept.vcluster.daemons import Proc
from clusteraccept.vcluster.flavour import Flavour
from clusteraccept.vcluster.netns import Net

SLURMCTLD_PORT, SLURMDBD_PORT = 6817, 6819
_MYSQL_READY = ".clusteraccept-installed"


def daemon_env(lay: Layout) -> dict[str, str]:
    env = daemons.run_env({"SLURM_CONF": str(lay.slurm_conf)})
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/sbin:/sbin"
    return env


def client_path(lay: Layout) -> str:
    """PATH with the cluster's own clients first (the 24.11 wrappers; for 22.05 the folder is empty)."""
    return f"{lay.bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def _install_mysql(lay: Layout) -> None:
    """Create the MariaDB data dir once (seconds); a half-made one (no marker) is made again."""
    if (lay.mysql_data / _MYSQL_READY).exists():
        return
    shutil.rmtree(lay.mysql_data, ignore_errors=True)
    lay.mysql_data.mkdir(parents=True)
    log = lay.logs / "mariadb-install-db.log"
    with log.open("a") as out:
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={lay.mysql_data}",
                "--user=root",
                "--auth-root-authentication-method=socket",
                "--skip-test-db",
                "--skip-name-resolve",
                "--innodb-log-file-size=16M",  # 96M by default: slower to create, and disk for nothing
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            check=True,
            timeout=300,
        )
    (lay.mysql_data / _MYSQL_READY).write_text("")


def start_all(
    lay: Layout,
    net: Net,
    on_start: Callable[[Proc], None],
    flavour: Flavour,
    timeout_s: float = 60.0,
) -> list[Proc]:
    """Start every daemon and wait until each answers; ``on_start`` sees each Proc as soon as it exists.

    munged and MariaDB are the host's in both flavours; the Slurm daemons are the flavour's."""
    procs: list[Proc] = []

    def started(p: Proc) -> None:
        procs.append(p)
        on_start(p)

    spawn = _spawner(lay, flavour, started)

    ctl = net.ctl_ns
    munged = spawn(
        "munged",
        "munged",
        ctl,
        "ctl",
        [
            "munged",
            "--foreground",
            f"--socket={lay.munge_socket}",
            f"--key-file={lay.munge_key}",
            f"--pid-file={lay.run}/munged.pid",
            f"--log-file={lay.logs}/munged.log",
            f"--seed-file={lay.run}/munged.seed",
            "--num-threads=4",
        ],
    )
    _install_mysql(lay)
    mariadb = spawn(
        "mariadbd",
        "mariadbd",
        ctl,
        "ctl",
        [
            "mariadbd",
            "--no-defaults",
            f"--datadir={lay.mysql_data}",
            f"--socket={lay.mysql_socket}",
            f"--pid-file={lay.run}/mariadbd.pid",
            "--bind-address=127.0.0.1",
            "--port=3306",
            "--user=root",
            "--skip-name-resolve",
            f"--init-file={lay.mysql_init}",
            f"--log-error={lay.logs}/mariadb.log",
            "--innodb-buffer-pool-size=64M",
            "--innodb-lock-wait-timeout=900",
            "--innodb-log-file-size=16M",
        ],
    )
    daemons.wait_until("munged socket", lay.munge_socket.exists, timeout_s, [munged], lay.logs / "munged.log")
    daemons.wait_until(
        "MariaDB socket",
        lambda: daemons.unix_open(lay.mysql_socket),
        timeout_s,
        [mariadb],
        lay.logs / "mariadb.log",
    )
    start_control(lay, net, spawn, "slurmdbd", timeout_s)
    # -c: start with no jobs and fresh node states (the old job processes are gone); the last job id
    # is still read from StateSaveLocation, so ids continue across rebuilds.
    ctld = start_control(lay, net, spawn, "slurmctld", timeout_s, clean=True)
    slurmds = [
        spawn(
            f"slurmd-node{i}",
            "slurmd",
            net.node_ns(i),
            f"node{i}",
            ["slurmd", "-D", "-N", f"node{i}", "-f", str(lay.slurm_conf)],
        )
        for i in range(1, net.n_nodes + 1)
    ]
    if net.service:
        slurmds.append(
            spawn(
                f"slurmd-{SERVICE_HOST}",
                "slurmd",
                net.svc_ns,
                SERVICE_HOST,
                ["slurmd", "-D", "-N", SERVICE_HOST, "-f", str(lay.slurm_conf)],
            )
        )
    names = [f"node{i}" for i in range(1, net.n_nodes + 1)] + ([SERVICE_HOST] if net.service else [])
    daemons.wait_until(
        "all nodes idle",
        lambda: nodes_idle(lay, names),
        timeout_s,
        [ctld, *slurmds],
        lay.logs / "slurmctld.log",
    )
    return [p.with_mnt_ns() for p in procs]


Spawn = Callable[[str, str, str, str, list[str]], Proc]
CONTROL_DAEMONS = {"slurmdbd": SLURMDBD_PORT, "slurmctld": SLURMCTLD_PORT}  # name -> the port it answers on


def _spawner(lay: Layout, flavour: Flavour, started: Callable[[Proc], object]) -> Spawn:
    env = daemon_env(lay)

    def spawn(name: str, comm: str, ns: str, host: str, argv: list[str]) -> Proc:
        slurm = name.startswith("slurm")
        prefix = flavour.prefix(lay, host if comm == "slurmd" else None) if slurm else []
        p = daemons.spawn(name, comm, ns, host, lay.hosts, argv, lay.logs / f"{name}.out", env, prefix)
        started(p)
        return p

    return spawn


def start_control(
    lay: Layout, net: Net, spawn: Spawn, name: str, timeout_s: float = 60.0, clean: bool = False
) -> Proc:
    """Start slurmdbd or slurmctld and wait until its port answers. Without ``clean`` slurmctld recovers
    its jobs and node states from StateSaveLocation, as `systemctl restart slurmctld` does on a real
    controller (slurmctld(8): -c "Clear all previous slurmctld state from its last checkpoint")."""
    argv = ["slurmdbd", "-D"] if name == "slurmdbd" else ["slurmctld", "-D", "-f", str(lay.slurm_conf)]
    if clean and name == "slurmctld":
        argv.insert(2, "-c")
    p = spawn(name, name, net.ctl_ns, "ctl", argv)
    daemons.wait_until(
        f"{name} port",
        lambda: daemons.tcp_open(net.ctl_ip, CONTROL_DAEMONS[name]),
        timeout_s,
        [p],
        lay.logs / f"{name}.log",
    )
    return p


def restart_control(lay: Layout, net: Net, flavour: Flavour, name: str, timeout_s: float = 60.0) -> Proc:
    """``name`` (slurmdbd or slurmctld) started again after :func:`cluster.stop_daemon` stopped it."""
    return start_control(lay, net, _spawner(lay, flavour, lambda p: None), name, timeout_s).with_mnt_ns()


def client_env(lay: Layout) -> dict[str, str]:
    return daemons.run_env({"SLURM_CONF": str(lay.slurm_conf), "PATH": client_path(lay)})


def node_states(lay: Layout) -> dict[str, str] | None:
    """node -> compact state (`idle`, `alloc`, `down*`, ...) from sinfo, or None if slurmctld won't answer."""
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-N", "-o", "%N %t"],  # every partition's nodes (the service host too)
            capture_output=True,
            text=True,
            env=client_env(lay),
            cwd=lay.root,  # the 24.11 clients run in the root, which sees the state dir, not every folder
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    states: dict[str, str] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:
            states[parts[0]] = parts[1]
    return states


def nodes_idle(lay: Layout, names: list[str]) -> bool:
    states = node_states(lay)
    return states is not None and all(states.get(n) == "idle" for n in names)


# Responding and schedulable: idle, or running jobs. No flag suffix (`*` = not responding, ...).
_USABLE = frozenset({"idle", "mix", "alloc", "comp"})


def nodes_usable(lay: Layout, names: list[str]) -> bool:
    states = node_states(lay)
    return states is not None and all(states.get(n) in _USABLE for n in names)
