"""The command lines of campaign steps: which binary measures, the srun step argv, nodelists, counters.

The step argv is ``templates/srun_step.j2`` rendered once per shape with sentinels where the per-step
values go (plan/jobs.py fills them in per step); the port counter snapshot step is ``counters_step.j2``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from functools import lru_cache

import hostlist

from clusteraccept.render import render_argv
from clusteraccept.site.campaign import Nccl
from clusteraccept.site.model import Site


def tool_of(site: Site) -> str:
    """What measures the collectives: nccl-tests, or the PyTorch NCCL fallback where the site has no
    nccl-tests binaries and asks for it (``nccl.fallback: torch``)."""
    fallback = site.tools.nccl_tests_bin is None and site.nccl.fallback == "torch"
    return "torch-nccl" if fallback else "nccl-tests"


def binary_of(site: Site, collective: str) -> tuple[str, ...]:
    """The command before the nccl-tests flags (the fallback takes the same flags: probes/torch_nccl.py)."""
    if tool_of(site) == "torch-nccl":
        python = site.slurm.python or sys.executable
        return (python, "-m", "clusteraccept.probes.torch_nccl", "--collective", collective)
    bin_dir = (site.tools.nccl_tests_bin or "nccl-tests-bin-not-configured").rstrip("/")
    return (f"{bin_dir}/{collective}_perf",)


def nodelist(nodes: tuple[str, ...]) -> str:
    """``a,b`` for a pair; a compressed hostlist (``node[001-128]``) for more (short at any scale)."""
    return ",".join(nodes) if len(nodes) <= 2 else str(hostlist.collect_hostlist(list(nodes)))


def launcher_of(site: Site) -> tuple[str, ...]:
    """What every rank runs first: the launch record (probes/launch.py) binds the rank to its GPU's CPUs,
    records what it got and execs the benchmark, under the nodes' python."""
    python = site.slurm.python or sys.executable  # as counters_argv: the nodes' interpreter
    return (python, "-m", "clusteraccept.probes.launch", "--")


def step_shape(
    site: Site, collective: str, n_env: int, n_nodes: int, tasks_per_node: int
) -> tuple[tuple[str, ...], int, tuple[int, ...]]:
    """:func:`argv_shape` of one of ``site``'s steps."""
    return argv_shape(
        binary_of(site, collective),
        n_env,
        n_nodes,
        tasks_per_node,
        site.nccl,
        max(1, -(-site.slurm.step_timeout_s // 60)),
        site.slurm.mpi,
        launcher_of(site),
        site.slurm.srun_options,
    )


@lru_cache(maxsize=256)
def argv_shape(
    binary: tuple[str, ...],
    n_env: int,
    n_nodes: int,
    tasks_per_node: int,
    nccl: Nccl,
    step_time_min: int,
    mpi: str | None = None,
    launcher: tuple[str, ...] = (),
    srun_options: tuple[str, ...] = (),
) -> tuple[tuple[str, ...], int, tuple[int, ...]]:
    """The step's argv rendered once per shape, with sentinels where per-step values go, and their positions.

    Rendering the jinja template for each of 500,000 steps of a 4,096-node campaign costs minutes; the
    sentinels are replaced in the split argv (raw strings, so no quoting is involved).
    """
    env = {f"@@K{i}@@": f"@@V{i}@@" for i in range(n_env)}
    argv = render_argv(
        "srun_step.j2",
        nodes=("x",) * n_nodes,
        nodelist="@@NODELIST@@",
        env=env,
        ntasks=n_nodes * tasks_per_node,
        ntasks_per_node=tasks_per_node,
        step_time_min=step_time_min,
        mpi=mpi,
        srun_options=srun_options,
        launcher=launcher,
        binary=binary,
        min_bytes=nccl.min_bytes,
        max_bytes=nccl.max_bytes,
        step_factor=nccl.step_factor,
        iters=nccl.iters,
        warmup_iters=nccl.warmup_iters,
    )
    env_pos = tuple(argv.index(f"@@K{i}@@=@@V{i}@@") for i in range(n_env))
    return argv, argv.index("@@NODELIST@@"), env_pos


def env_words(argv: Sequence[str]) -> tuple[dict[str, str], int]:
    """The ``K=V`` words after ``env`` of a rendered step (srun_step.j2: the template's own, then the
    step's) and the index of the first word after them; ``({}, -1)`` for a command without ``env``."""
    if "env" not in argv:
        return {}, -1
    i, env = list(argv).index("env") + 1, {}
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith(("/", "-")):
        k, _, v = argv[i].partition("=")
        env[k] = v
        i += 1
    return env, i


def counters_argv(site: Site, nodes: tuple[str, ...]) -> tuple[str, ...]:
    """The srun step that snapshots the port counters of ``nodes`` (none when the site has no rails and no
    NVLink: nothing to count)."""
    nvlink = any(site.node_type(n).nvlink for n in nodes)
    if not nvlink and not any(site.node_type(n).rails for n in nodes):
        return ()
    python = site.slurm.python or sys.executable  # as jobs.submit.python_of: the nodes' interpreter
    return render_argv(
        "counters_step.j2", nodes=nodes, nodelist=nodelist(nodes), python=python, nvlink=nvlink
    )
