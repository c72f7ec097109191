"""A drop-in simulated nccl-tests: ``python -m clusteraccept.sim.nccl_tests all_reduce_perf -b 1G -e 8G``.

Prints, byte for byte, what nccl-tests v2.19.6 prints (src/util.cu ``writeDeviceReport()``,
``writeResultHeader()``, ``writeBenchmarkLine*()``, ``getFloatStr()``, ``writeResultFooter()``,
``writeErrors()``; src/common.cu ``run()``/``TimeTest()``; see tests/data/nccl-tests/*-v2.19.6.txt), with
numbers from the fabric model of :mod:`clusteraccept.sim.fabric`. Flags are nccl-tests' own (README.md
"Arguments"; ``getopt_long`` string in src/common.cu): -t -g -b -e -i -f -n -m -w -N -p -c -o -d -r -z -y
-T -G -C -a -R -x -D -V -J -S -M -u -I -K -h; those that only tune a real run are accepted and ignored.

Environment:
- ``CLUSTERACCEPT_FABRIC``: path of the fabric JSON (below). Required.
- hosts: ``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``, else ``CLUSTERACCEPT_SIM_HOSTS`` (hostlists),
  else this host's name. Tasks: ``SLURM_STEP_NUM_TASKS``, else ``SLURM_NTASKS``, else one per host, spread
  as ``SLURM_STEP_TASKS_PER_NODE`` says (``2(x3),1``) or in blocks. ``SLURM_PROCID``/``SLURM_NODEID``:
  only task 0 prints, like the MPI ranks of the real binary (with the ``non_mpi`` fault every task prints
  its own 1-process run). nranks = tasks x -t x -g.
- ``NCCL_IB_HCA``: which rails (HCAs) are used, NCCL's syntax (NVIDIA/nccl docs/userguide/source/env.rst
  "NCCL_IB_HCA"; src/transport/net_ib/init.cc, src/misc/utils.cc ``parseStringList()``/``matchIf()``):
  comma-separated ``<hca>[:<port>...]`` prefixes, ``^`` = exclude list, ``=`` = exact names.
- ``NCCL_TESTS_MIN_BW``: as in nccl-tests, the average busbw below 0.9 x this value fails the run.
- ``SLURM_JOB_ID``/``SLURM_STEP_ID`` (srun sets both in every step): ``<job>.<step>`` names the attempt,
  which keys the fabric's ``spread`` and ``transient`` (a retest in another step draws anew).

Fabric JSON (:func:`clusteraccept.sim.fabric.fabric_from_dict`)::

    {"seed": 7, "latency_us": 20, "noise": 0.01, "efficiency": {"alltoall": 0.85},
     "defaults": {"gpus": 8, "rails": ["mlx5_0", ..., "mlx5_7"], "rail_GBps": 50, "nvlink_GBps": 450,
                  "gpu_name": "NVIDIA H100 80GB HBM3", "bus_ids": ["0000:18:00", ...]},
     "leaves": [{"name": "leaf1", "nodes": "node[01-16]", "uplink_GBps": 6400}, ...],
     "nodes": {"node[01-02]": {"rail_GBps": 25}},                     (overrides, hostlist keys)
     "faults": {"slow_rail": [{"node": "node03", "rail": 5, "factor": 0.5}],
                "bad_cable": [{"a": "node03", "b": "node07", "rail": 2, "factor": 0.3}],
                "slow_uplink": {"leaf": "leaf2", "factor": 0.25},
                "slow_node": {"node": "node09", "factor": 0.7},
                "non_mpi": false, "wrong": [{"node": "node05"}],
                "straggler": [{"node": "node11", "factor": 0.6}]},
     "spread": 0.03, "transient": {"probability": 0.02, "factor": 0.6}}

``straggler``: a node slow only in runs with >= 2 ranks on each of >= 2 nodes (block collectives, not the
1-rank-per-node pair steps); factor in (0, 1] scales the run's bottleneck. Run to run
(:mod:`clusteraccept.sim.fabric_noise`): ``spread`` (>= 0, default 0) is the relative standard deviation
of a per-run Gaussian factor on busbw, ``max(0.05, 1 + spread * z)``; with ``transient.probability`` (in
[0, 1], default 0) a run is multiplied by ``transient.factor`` (in (0, 1], default 0.6). Both are drawn
once per run (all sizes together) from seed, step arguments and attempt; the +-1% ``noise`` ignores the
attempt, so without them a retest repeats its numbers exactly.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import stat
import sys
from pathlib import Path

import hostlist

from clusteraccept.sim import nccl_tcp
from clusteraccept.sim.fabric import Fabric, load_fabric, mnnvl

# The command line and NCCL_IB_HCA are read in nccl_tests_options.py, the output rendered in
# nccl_tests_output.py; the names tests use through this module are re-exported ("as" form).
from clusteraccept.sim.nccl_tests_options import parse_args as parse_args
from clusteraccept.sim.nccl_tests_options import parsesize as parsesize
from clusteraccept.sim.nccl_tests_options import rails_from_hca as rails_from_hca
from clusteraccept.sim.nccl_tests_output import _pid as _pid
from clusteraccept.sim.nccl_tests_output import float_str as float_str
from clusteraccept.sim.nccl_tests_output import render_run as render_run

BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "sendrecv_perf")


# cudaGetErrorString(cudaErrorSystemNotReady = 802): what CUDA says on an NVSwitch system whose fabric the
# fabric manager has not set up (NVIDIA Fabric Manager user guide; NCCL WARN "Cuda failure 802 'system not
# yet initialized'" in public H100 reports)
CUDA_NOT_READY = "system not yet initialized"
CUDA_LINE = 0


def _tasks_per_node(env: dict[str, str], hosts: list[str], tasks: int) -> list[int]:
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if spec:
        out: list[int] = []
        for part in spec.split(","):
            m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
            if m:
                out += [int(m.group(1))] * int(m.group(2) or 1)
        if len(out) == len(hosts) and sum(out) == tasks:
            return out
    per, extra = divmod(tasks, len(hosts))
    return [per + (i < extra) for i in range(len(hosts))]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in BINARIES:
        sys.stderr.write(f"usage: python -m clusteraccept.sim.nccl_tests {{{','.join(BINARIES)}}} [flags]\n")
        return 2
    env = dict(os.environ)
    opts = parse_args(args[1:])
    if isinstance(opts, str):
        sys.stdout.write(opts)
        return 0 if opts.startswith(("USAGE", "invalid option")) else 255
    if "CLUSTERACCEPT_FABRIC" not in env:
        sys.stderr.write("clusteraccept.sim.nccl_tests: CLUSTERACCEPT_FABRIC (fabric JSON path) is not set\n")
        return 2
    fab = load_fabric(env["CLUSTERACCEPT_FABRIC"])
    expr = next(
        (
            env[k]
            for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "CLUSTERACCEPT_SIM_HOSTS")
            if env.get(k)
        ),
        None,
    )
    hosts = list(dict.fromkeys(hostlist.expand_hostlist(expr))) if expr else [socket.gethostname()]
    tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or len(hosts))
    procid, nodeid = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NODEID", "0"))
    world = None if fab.faults.non_mpi else mpi_world(env)
    pids: tuple[int, ...] = ()
    if world is not None:  # an MPI program: who is who comes from MPI, not from Slurm's variables
        rank, names, pids = world
        if rank != 0:
            return 0
        hosts = list(dict.fromkeys(names))
        per_node = [names.count(h) for h in hosts]
    elif fab.faults.non_mpi:  # every task is a world of its own, on its own node
        hosts, per_node = [hosts[min(nodeid, len(hosts) - 1)]], [1]
    elif procid != 0:
        return 0  # the other MPI ranks print nothing
    else:
        per_node = _tasks_per_node(env, hosts, max(tasks, 1))
    if not rails_from_hca(env.get("NCCL_IB_HCA"), fab.node(hosts[0]).rails) and len(hosts) > 1:
        sys.stderr.write(
            f"clusteraccept.sim.nccl_tests: NCCL_IB_HCA={env['NCCL_IB_HCA']} matches no HCA "
            f"of {hosts[0]} {fab.node(hosts[0]).rails}\n"
        )
        return 3
    failed = init_failure(fab, hosts, per_node, env)
    if failed is not None:
        sys.stdout.write(failed[0])
        return failed[1]
    json_path = _json_path(opts.output_file) if opts.output_file else None
    text, rc, doc = render_run(args[0], opts, fab, hosts, per_node, env, json_path, tuple(args[1:]), pids)
    if json_path and doc is not None:
        Path(json_path).write_text(json.dumps(doc, separators=(",", ":")))
    from clusteraccept.sim.nccl_info import with_info

    sys.stdout.write(with_info(text, fab, hosts, env, args[0].removesuffix("_perf"), per_node))
    sys.stdout.flush()
    if env.get("CLUSTERACCEPT_HOST_PROFILE"):
        from clusteraccept.sim.fabric import gpu_rails
        from clusteraccept.sim.traffic import NVLINK, bump

        root = Path(env["CLUSTERACCEPT_HOST_PROFILE"])
        if len(hosts) > 1:  # traffic crossed the NICs
            rails = fab.node(hosts[0]).rails
            used = (
                rails_from_hca(env["NCCL_IB_HCA"], rails)
                if env.get("NCCL_IB_HCA")
                else gpu_rails(fab, hosts[0], env, per_node[0] * opts.ngpus)
            ) or range(len(rails))
            bump(root, hosts, [rails[i] for i in used])
        # several GPUs of one node in the step (ranks x -g): its traffic crossed the node's NVLinks
        bump(root, [h for h, n in zip(hosts, per_node, strict=False) if n * opts.ngpus > 1], [NVLINK])
    return rc


def init_failure(
    fab: Fabric, hosts: list[str], per_node: list[int], env: dict[str, str]
) -> tuple[str, int] | None:
    """What a run prints and exits with when it cannot start on these hosts, None when it can: CUDA not
    ready (a fabric not up), or multi-node NVLink forced on where it cannot work. The subprocess and the
    in-process simulation (sim/prepare.simulate_step) both ask here."""
    dead = [h for h in hosts if h in fab.faults.cuda_not_ready]
    if dead:  # nccl-tests' CUDACHECK (src/common.h): "<host>: Test CUDA failure <file>:<line> '<error>'"
        # testCudaError; the line number is a model value, not the real source line
        return f"{dead[0]}: Test CUDA failure common.cu:{CUDA_LINE} '{CUDA_NOT_READY}'\n", 2
    if (aborted := nccl_tcp.rxdm_abort(fab, hosts)) is not None:
        return aborted
    asked = env.get("NCCL_NET", "")
    lost = [h for h in dict.fromkeys(hosts) if h in fab.faults.ofi_plugin_missing]
    if asked and lost and fab.net == "ofi":
        # NCCL src/net.cc: NCCL_NET names a network (compared with strcasecmp) that no loaded net offers
        # (the nets are set up at every communicator's init, a node's own too):
        # WARN "Error: network %s not found." and ncclInvalidUsage, whose string nccl-tests' NCCLCHECK
        # prints (src/init.cc ncclGetErrorString); the plugin line is NCCL 2.23's (docs/fabrics-research.md)
        text = (
            f"{lost[0]}:4000:4000 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal "
            "network plugin.\n"
            f"{lost[0]}:4000:4000 [0] net.cc:626 NCCL WARN Error: network {asked} not found.\n"
            f"{lost[0]}: Test NCCL failure common.cu:{CUDA_LINE} "
            "'invalid usage (run with NCCL_DEBUG=WARN for details)'\n"
        )
        return text, 3  # testNcclError; the line numbers are model values
    broken = [h for h in hosts if h in fab.faults.mnnvl_broken]
    if broken and env.get("NCCL_MNNVL_ENABLE") == "1" and mnnvl(fab, hosts, env):
        # NCCL src/mnnvl.cc (2.23+): with NCCL_MNNVL_ENABLE=1 a fabric handle that cannot be exported or
        # imported fails init with this WARN (ncclSystemError); nccl-tests' NCCLCHECK then prints its line
        text = (
            f"{broken[0]}:4000:4000 [0] NCCL WARN MNNVL (cliqueSize {sum(per_node)}) is available but not "
            "working on this system. Check the IMEX configuration (nvidia-imex-ctl -N). Set "
            "NCCL_MNNVL_ENABLE=0 to ignore this issue.\n"
            f"{broken[0]}: Test NCCL failure common.cu:{CUDA_LINE} 'unhandled system error (run with "
            "NCCL_DEBUG=INFO for details)'\n"
        )
        return text, 3  # testNcclError; the line number above is a model value
    return None


def mpi_world(env: dict[str, str]) -> tuple[int, list[str], tuple[int, ...]] | None:
    """This process's rank, and every rank's host name and pid in rank order, from MPI (mpi4py), where
    this python has it: the simulated binary is then an MPI program, as nccl-tests built with MPI=1 is.
    Launched by ``srun --mpi=pmix`` the ranks are one world; launched without a PMI (MpiDefault=none and no
    --mpi) each process initialises as a singleton of size 1 and prints a run of its own, as the real
    binary does. ``CLUSTERACCEPT_SIM_MPI=0`` turns it off."""
    if env.get("CLUSTERACCEPT_SIM_MPI") == "0":
        return None
    try:
        from mpi4py import MPI
    except (ImportError, OSError):
        return None
    comm = MPI.COMM_WORLD
    everyone = comm.allgather((MPI.Get_processor_name(), os.getpid()))
    return comm.Get_rank(), [str(h) for h, _ in everyone], tuple(int(p) for _, p in everyone)


def _json_path(path: str) -> str | None:
    """jsonOutputInit(): the path, else path.0, path.1, ... (never overwrites); None if not writable."""
    try_path, n = path, 0
    while Path(try_path).exists():
        try_path, n = f"{path}.{n}", n + 1
    return try_path if os.access(Path(try_path).parent or ".", os.W_OK) else None


def install_bin_dir(path: Path, python: str) -> None:
    """Write executable wrappers named like the real binaries, running ``<python> -m ...sim.nccl_tests``."""
    path.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        f = path / name
        text = f'#!/bin/sh\nexec {shlex.quote(python)} -m clusteraccept.sim.nccl_tests {name} "$@"\n'
        if f.exists() and f.read_text() == text:
            continue  # another run of the site may be executing it: never rewrite it in place
        tmp = f.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(tmp.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        tmp.replace(f)


if __name__ == "__main__":
    sys.exit(main())
