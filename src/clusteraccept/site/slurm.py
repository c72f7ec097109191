"""The site's ``slurm`` section: how jobs are submitted (executor, partition, account, limits), validated."""

from __future__ import annotations

from dataclasses import dataclass, field

from clusteraccept.site.schema import Section, expand_repo

EXECUTORS = ("slurm", "local", "debug")


@dataclass(frozen=True)
class Slurm:
    executor: str = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    constraint: str | None = None
    exclusive: bool = True
    time_limit_min: int = 30
    step_timeout_s: int = 600
    sbatch_options: dict[str, str] = field(default_factory=dict)
    python: str | None = None
    slurm_conf: str | None = None


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
        ],
    )
    return Slurm(
        executor=s.choice("executor", EXECUTORS, default="slurm"),
        partition=s.string("partition", default=None),
        account=s.string("account", default=None),
        qos=s.string("qos", default=None),
        reservation=s.string("reservation", default=None),
        constraint=s.string("constraint", default=None),
        exclusive=s.flag("exclusive", default=True),
        time_limit_min=s.integer("time_limit_min", "minutes >= 1", default=30, minimum=1),
        step_timeout_s=s.integer("step_timeout_s", "seconds >= 1", default=600, minimum=1),
        sbatch_options=s.str_map("sbatch_options"),
        python=expand_repo(s.string("python", "a path to the python of the shared virtualenv", default=None)),
        slurm_conf=expand_repo(s.string("slurm_conf", default=None)),
    )
