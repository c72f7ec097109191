"""A real multi-node Slurm 22.05 cluster on one machine, in network namespaces (root only).

One namespace for the controller (munged, MariaDB on 127.0.0.1, slurmdbd, slurmctld; hostname ``ctl``), one
per node (``slurmd -N nodeI``; hostname ``nodeI``), joined by a bridge in the root namespace, which is the
submit host. Fake GPUs through gres (symlinks to /dev/null), a two-leaf topology tree, accounting in
MariaDB (submitit needs sacct). All state, configs and logs live under one state dir; nothing is written
under /etc. See docs/vcluster.md for the measured facts this follows.

API: :func:`up`, :func:`down`, :func:`status`, :class:`ClusterInfo`, :func:`default_state_dir`.
CLI: ``python -m clusteraccept.vcluster up|down|status [--nodes N] [--gpus G] [--dir DIR]``.
"""

from clusteraccept.vcluster.cluster import ClusterInfo, down, status, up
from clusteraccept.vcluster.install import InstallError
from clusteraccept.vcluster.record import default_state_dir

__all__ = ["ClusterInfo", "InstallError", "default_state_dir", "down", "status", "up"]
