"""The site's ``slurm`` section: how jobs are submitted (executor, partition, account, limits), validated.

The limits a real Slurm enforces on one job (``max_steps_per_job``, ``max_concurrent_steps``,
``step_rate_per_s``) default to what the cluster says (``scontrol show config``, read at run time:
plan/limits.py decides which value wins); ``time_limit_min`` caps the ``--time`` the plan derives for each
job, ``queue_timeout_min`` bounds how long a job may wait in the queue before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import Section, expand_repo

EXECUTORS = ("slurm", "local", "debug")
# sbatch options the suite sets itself for each job (from its plan): a site may not set them around it.
SUITE_MANAGED = {"time": "slurm.time_limit_min caps it", "t": "slurm.time_limit_min caps it"}


@dataclass(frozen=True)
class Slurm:
    executor: str = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    exclusive: bool = True
    # a cap on every job's --time (the plan derives each from its rounds); None: the partition's MaxTime
    time_limit_min: int | None = None
    step_timeout_s: int = 600
    sbatch_options: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    slurm_conf: str | None = None
    # the folder of the Slurm clients this site's jobs are submitted with (first on PATH); None: PATH's
    bin_dir: str | None = None
    # srun --mpi= on every nccl-tests step (pmix, pmi2, ...); None: none given, the cluster's MpiDefault
    mpi: str | None = None
    max_steps_per_job: int | None = None  # None: the cluster's MaxStepCount, else 40,000
    max_concurrent_steps: int | None = None  # None: from the cluster's SrunPortRange, else 256
    step_rate_per_s: float | None = None  # None: the cluster's RPC rate limit where rl_enable, else unpaced
    queue_timeout_min: int = 720  # how long a job may wait to start before the run gives up on it
    # srun options added to every nccl-tests step, after the suite's own (an escape hatch for what the
    # suite cannot foresee: --gres-flags=..., --network=..., a site's SPANK plugin option)
    srun_options: tuple[str, ...] = ()
    # sbatch --wckey: None sends none (submitit's default "submitit" is refused where
    # AccountingStorageEnforce includes wckeys and no such key exists)
    wckey: str | None = None


def parse_slurm(top: Section) -> Slurm:
    """The ``slurm`` section (how jobs are submitted)."""
    s = top.section(
        "slurm",
        [
            "executor",
            "partition",
            "account",
            "qos",
            "reservation",
            "constraint",
            "exclusive",
            "time_limit_min",
            "step_timeout_s",
            "sbatch_options",
            "python",
            "slurm_conf",
            "bin_dir",
            "mpi",
            "max_steps_per_job",
            "max_concurrent_steps",
            "step_rate_per_s",
            "queue_timeout_min",
            "srun_options",
            "wckey",
        ],
    )
    options = s.str_map("sbatch_options")
    for key, why in SUITE_MANAGED.items():
        if key in options:
            raise SiteConfigError(
                s.file,
                s.key(f"sbatch_options.{key}"),
                f"no --{key}: the suite sets each job's --time from its plan ({why})",
                repr(options[key]),
            )
    return Slurm(
        executor=s.choice("executor", EXECUTORS, default="slurm"),
        partition=s.string("partition", default=None),
        account=s.string("account", default=None),
        qos=s.string("qos", default=None),
        reservation=s.string("reservation", default=None),
        constraint=s.string("constraint", default=None),
        exclusive=s.flag("exclusive", default=True),
        time_limit_min=s.integer("time_limit_min", "minutes >= 1", default=None, minimum=1),
        step_timeout_s=s.integer("step_timeout_s", "seconds >= 1", default=600, minimum=1),
        sbatch_options=options,
        python=expand_repo(s.string("python", "a path to the python of the shared virtualenv", default=None)),
        slurm_conf=expand_repo(s.string("slurm_conf", default=None)),
        bin_dir=expand_repo(s.string("bin_dir", "a folder holding sbatch, srun, sacct, ...", default=None)),
        # srun(1) --mpi=<type>: a plugin name `srun --mpi=list` prints (pmix, pmix_v5, pmi2, none, ...)
        mpi=s.string(
            "mpi", "an MPI plugin name of `srun --mpi=list` (pmix, pmi2, ...)", None, r"[a-z][a-z0-9_]*"
        ),
        max_steps_per_job=s.integer("max_steps_per_job", "an integer >= 2", default=None, minimum=2),
        max_concurrent_steps=s.integer("max_concurrent_steps", "an integer >= 1", default=None, minimum=1),
        step_rate_per_s=_positive(s, "step_rate_per_s"),
        queue_timeout_min=s.integer("queue_timeout_min", "minutes >= 1", default=720, minimum=1),
        srun_options=_srun_options(s),
        wckey=s.string("wckey", "a Slurm workload characterization key", None, r"[A-Za-z0-9_.:-]+"),
    )


# srun options the step template sets itself: a site value would contradict what the verdicts assume
STEP_MANAGED = ("-N", "--nodes", "-n", "--ntasks", "-w", "--nodelist", "--cpu-bind", "--mpi", "-t", "--time")


def _srun_options(s: Section) -> tuple[str, ...]:
    options = s.str_list("srun_options", "a list of srun options like '--gres-flags=disable-binding'", ())
    for i, opt in enumerate(options):
        name = opt.split("=", 1)[0]
        if not opt.startswith("-") or any(c.isspace() for c in opt):
            raise SiteConfigError(
                s.file,
                s.key(f"srun_options[{i}]"),
                "one srun option per item, like '--network=...'",
                repr(opt),
            )
        if name in STEP_MANAGED:
            raise SiteConfigError(
                s.file,
                s.key(f"srun_options[{i}]"),
                f"an option the suite does not set itself ({', '.join(STEP_MANAGED)} are its own)",
                repr(opt),
            )
    return options


def _positive(s: Section, name: str) -> float | None:
    value = s.number(name, "a number of steps per second > 0", default=None, minimum=0.0)
    if value is not None and value <= 0:
        raise s.error(name, "a number of steps per second > 0", value)
    return value  # type: ignore[no-any-return]
