"""The site's ``slurm`` section: how jobs are submitted (executor, partition, account, limits), validated.

The limits a real Slurm enforces on one job (``max_steps_per_job``, ``max_concurrent_steps``,
``step_rate_per_s``) default to what the cluster says (``scontrol show config``, read at run time:
plan/limits.py decides which value wins); ``time_limit_min`` caps the ``--time`` the plan derives for each
job, ``queue_timeout_min`` bounds how long a job may wait in the queue before it starts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import NOT_AN_OPTION, Section, expand_repo

EXECUTORS = ("slurm", "local", "debug")
# sbatch options the suite sets itself for each job (jobs/submit.slurm_parameters) or reads from its own key:
# a site value would contradict the plan (its nodes, its --time, where its logs go) or appear twice in the
# script. Each names what to use instead.
_PLAN = "the plan sets it for each job"
SUITE_MANAGED = {
    "time": "the plan sets each job's --time; cap it with slurm.time_limit_min",
    "nodes": _PLAN,
    "ntasks": _PLAN,
    "ntasks-per-node": _PLAN,
    "nodelist": "the plan names each job's nodes (list the site's under nodes:, select with --nodes)",
    "exclude": "the plan names each job's nodes (list the site's under nodes:, select with --nodes)",
    "output": "the suite writes each job's logs into the run directory",
    "error": "the suite writes each job's logs into the run directory",
    "open-mode": "the suite writes each job's logs into the run directory",
    "signal": "the suite sets --signal=B:USR2@... (jobs/submit.py)",
    "job-name": "the suite names each job clusteraccept-<job>",
    "gpus-per-node": "the plan asks for every GPU of the node types (node_types.<type>.gpus)",
    "partition": "use slurm.partition",
    "account": "use slurm.account",
    "qos": "use slurm.qos",
    "reservation": "use slurm.reservation",
    "constraint": "use slurm.constraint",
    "wckey": "use slurm.wckey",
    "exclusive": "use slurm.exclusive",
    "export": "jobs get the submitting environment: variables go under env:, credentials in env_file",
    "array": "the suite submits one job per plan job",
    "wrap": "the suite writes each job's script",
    "hold": "a held job would wait out slurm.queue_timeout_min",
}
# sbatch(1) long options: lower-case words joined by '-' (submitit writes `--<key>`, '_' as '-').
_LONG_OPTION = r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*"
# A Slurm partition, account, QOS or reservation name: letters, digits, '_', '.', '-', '+', not starting with
# '-' (it would read as an option); partitions and reservations may be comma-separated lists (sbatch(1):
# "multiple partitions may be specified by their names in a comma separated list").
SLURM_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.+-]*"
SLURM_NAMES = rf"{SLURM_NAME}(?:,{SLURM_NAME})*"


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
    options = _sbatch_options(s)
    return Slurm(
        executor=s.choice("executor", EXECUTORS, default="slurm"),
        partition=s.string(
            "partition", "a Slurm partition name (or a comma-separated list)", None, SLURM_NAMES
        ),
        account=s.string("account", "a Slurm account name", None, SLURM_NAME),
        qos=s.string("qos", "a Slurm QOS name", None, SLURM_NAME),
        reservation=s.string("reservation", "a Slurm reservation name (or a list)", None, SLURM_NAMES),
        # a feature expression (sbatch(1) --constraint: a&b, a|b, [a*2&b*2], ...): data, quoted as a value
        constraint=s.string("constraint", "a feature expression not starting with '-'", None, NOT_AN_OPTION),
        exclusive=s.flag("exclusive", default=True),
        time_limit_min=s.integer("time_limit_min", "minutes >= 1", default=None, minimum=1),
        step_timeout_s=s.integer("step_timeout_s", "seconds >= 1", default=600, minimum=1),
        sbatch_options=options,
        # paths that become words of a command line: one starting with '-' would read as an option there
        python=expand_repo(
            s.string("python", "a path to the python of the shared virtualenv", None, NOT_AN_OPTION)
        ),
        slurm_conf=expand_repo(s.string("slurm_conf", "a path to slurm.conf", None, NOT_AN_OPTION)),
        bin_dir=expand_repo(
            s.string("bin_dir", "a folder holding sbatch, srun, sacct, ...", None, NOT_AN_OPTION)
        ),
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


def _sbatch_options(s: Section) -> dict[str, str]:
    """``sbatch_options``: extra sbatch long options (``comment: ...``, ``gres: ...``), each once, none
    that the suite sets itself."""
    options = s.str_map("sbatch_options")
    seen: dict[str, str] = {}
    for key in options:
        where = s.key(f"sbatch_options.{key}")
        if not re.fullmatch(_LONG_OPTION, key):
            raise SiteConfigError(
                s.file,
                where,
                "an sbatch long option name without dashes, like 'comment' or 'gres'",
                repr(key),
            )
        name = key.replace("_", "-")
        if name in SUITE_MANAGED:
            raise SiteConfigError(
                s.file,
                where,
                "an option the suite does not set itself",
                f"--{name}={options[key]!r}",
                SUITE_MANAGED[name],
            )
        if name in seen:
            raise SiteConfigError(s.file, where, "each option once", f"--{name} also as {seen[name]!r}")
        seen[name] = key
    return options


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
