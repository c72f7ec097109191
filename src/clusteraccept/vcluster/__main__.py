"""Command line of the virtual Slurm cluster (needs root).

    python -m clusteraccept.vcluster up     [--slurm 24.11|22.05] [--topology tree|block]
                                            [--mpi-default PMI] [--nodes N] [--gpus G] [--dir DIR]
    python -m clusteraccept.vcluster down   [--dir DIR]
    python -m clusteraccept.vcluster status [--dir DIR]
    python -m clusteraccept.vcluster stop-daemon|start-daemon --daemon slurmctld|slurmdbd [--dir DIR]

``up`` reuses a healthy cluster from the same state dir, or rebuilds from clean, and prints the
``export SLURM_CONF=...`` and ``export PATH=...`` lines clients need and how long it took. ``--slurm 24.11``
(the default) runs Debian 13's Slurm from a root built once under .vcluster/roots; ``--slurm 22.05`` runs
this host's Debian 12 packages. ``down`` cancels jobs, stops every
process the cluster started and removes its namespaces, veths and bridge; logs stay in DIR/logs.
``stop-daemon`` stops slurmctld or slurmdbd and leaves it stopped while jobs run on (the fault matrix:
a controller restart, accounting down); ``start-daemon`` starts it again, slurmctld recovering its state.
DIR defaults to $CLUSTERACCEPT_VCLUSTER_DIR, else <repo>/.vcluster. Exit status: 0 ok, 1 failure
(``status``: 1 if not healthy).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from clusteraccept.vcluster import cluster
from clusteraccept.vcluster.config import TOPOLOGIES
from clusteraccept.vcluster.flavour import DEFAULT, FLAVOURS
from clusteraccept.vcluster.install import InstallError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clusteraccept.vcluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("up", "down", "status", "stop-daemon", "start-daemon"))
    parser.add_argument(
        "--daemon", default="slurmctld", help="stop-daemon/start-daemon: slurmctld or slurmdbd"
    )
    parser.add_argument("--nodes", type=int, default=4, help="number of nodes (up; default 4)")
    parser.add_argument("--gpus", type=int, default=8, help="fake GPUs per node (up; default 8)")
    parser.add_argument("--dir", type=Path, default=None, help="state dir (default: see above)")
    parser.add_argument(
        "--slurm", choices=FLAVOURS, default=DEFAULT, help=f"which Slurm runs (up; default {DEFAULT})"
    )
    parser.add_argument(
        "--topology", choices=TOPOLOGIES, default="tree", help="topology plugin (up; block needs 24.11)"
    )
    parser.add_argument(
        "--mpi-default", default=None, help="slurm.conf MpiDefault (up; default pmix on 24.11, none on 22.05)"
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            info = cluster.up(
                args.dir,
                n_nodes=args.nodes,
                gpus_per_node=args.gpus,
                slurm=args.slurm,
                topology=args.topology,
                mpi_default=args.mpi_default,
            )
            how = "reused healthy cluster" if info.reused else "cluster up"
            print(
                f"{how}: Slurm {info.slurm}, {', '.join(info.nodes)} (partition {info.partition}, "
                f"controller {info.controller_ip}, topology/{info.topology}, MpiDefault={info.mpi_default}) "
                f"in {info.up_s:.2f} s"
            )
            print(f"shared dir: {info.shared_dir}\nlogs: {info.log_dir}\nnodes' python: {info.python}")
            print(f"export SLURM_CONF={info.slurm_conf}")
            print(f'export PATH="{info.bin_dir}:$PATH"')
            return 0
        if args.command == "down":
            t0 = time.monotonic()
            notes = cluster.down(args.dir)
            for note in notes:
                print(f"note: {note}")
            print(f"cluster down in {time.monotonic() - t0:.2f} s")
            return 0
        if args.command in ("stop-daemon", "start-daemon"):
            act = cluster.stop_daemon if args.command == "stop-daemon" else cluster.start_daemon
            print(act(args.dir, args.daemon))
            return 0
        text = cluster.status(args.dir)
        print(text)
        return 0 if text.startswith("UP") else 1
    except (
        InstallError,
        PermissionError,
        ValueError,
        RuntimeError,
        TimeoutError,
        OSError,
        subprocess.SubprocessError,
    ) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    from clusteraccept.errors import run_main

    sys.exit(run_main(main))
