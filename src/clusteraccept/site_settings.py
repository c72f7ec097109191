"""The site's settings sections (slurm, roce, sharp, gpudirect, tools, nccl), validated.

Part of the site description (site.py); every error is ONE line naming the file, the key path, what was
expected and what was found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusteraccept.errors import SiteConfigError
from clusteraccept.schema import Section, parse_size_B

EXECUTORS = ("slurm", "local", "debug")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")


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


@dataclass(frozen=True)
class Roce:
    lossless_priority: int
    trust: str
    roce_dscp: int
    ecn: bool
    cnp_dscp: int | None
    cnp_priority: int | None
    mtu: int


@dataclass(frozen=True)
class Sharp:
    enabled: bool
    reason: str = ""
    hello: tuple[str, ...] = ("sharp_hello",)
    env: dict[str, str] = field(default_factory=dict)


# What /sys/kernel/iommu_groups/<grp_id>/type reads (Documentation/ABI/testing/sysfs-kernel-iommu_groups:
# DMA = translated, DMA-FQ = translated with batched invalidation, identity = not translated, i.e. the
# kernel's iommu=pt passthrough), plus "none": the GPU is in no IOMMU group (IOMMU off).
IOMMU_MODES = ("none", "identity", "DMA", "DMA-FQ")


@dataclass(frozen=True)
class Gpudirect:
    """``gpudirect.iommu``: the IOMMU modes accepted on the GPUs (empty: not checked). NVIDIA's advice for
    PCIe peer-to-peer on bare metal is IOMMU off or passthrough (``iommu=pt``): [none, identity]."""

    iommu: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tools:
    nccl_tests_bin: str | None = None
    perftest_bin: str | None = None
    nccl_tests_build: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Nccl:
    pair_collectives: tuple[str, ...] = ("sendrecv", "all_reduce")
    block_collectives: tuple[str, ...] = ("all_reduce", "alltoall")
    min_bytes: int = 1 << 30
    max_bytes: int = 8 << 30
    step_factor: int = 2
    iters: int = 20
    warmup_iters: int = 5
    cross_block_partners: int = 1
    seed: int = 0
    rail_ceiling_GBps: float | None = None
    node_ceiling_GBps: float | None = None
    intra_collectives: tuple[str, ...] = ("all_reduce",)
    fallback: str | None = None  # "torch": PyTorch NCCL collector where no nccl-tests binaries are set


def expand_repo(value: str | None) -> Any:
    """``{repo}`` in a path-like value stands for the checkout's root (used by the demo and example sites)."""
    from clusteraccept.render import REPO_ROOT

    return None if value is None else value.replace("{repo}", str(REPO_ROOT))


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


def parse_roce(top: Section) -> Roce | None:
    """The ``roce`` section; None for an InfiniBand-only site (no section)."""
    if not top.has("roce"):
        return None
    r = top.section(
        "roce", ["lossless_priority", "trust", "roce_dscp", "ecn", "cnp_dscp", "cnp_priority", "mtu"]
    )
    return Roce(
        lossless_priority=r.integer("lossless_priority", "a priority 0-7", minimum=0, maximum=7),
        trust=r.choice("trust", ["dscp", "pcp"]),
        roce_dscp=r.integer("roce_dscp", "a DSCP value 0-63", minimum=0, maximum=63),
        ecn=r.flag("ecn", default=True),
        cnp_dscp=r.integer("cnp_dscp", "a DSCP value 0-63", default=None, minimum=0, maximum=63),
        cnp_priority=r.integer("cnp_priority", "a priority 0-7", default=None, minimum=0, maximum=7),
        mtu=r.integer("mtu", "an MTU like 4200 or 9000", minimum=576, maximum=9216),
    )


def parse_sharp(top: Section) -> Sharp:
    """The ``sharp`` section (SHARP off unless ``enabled``)."""
    sh = top.section("sharp", ["enabled", "reason", "hello", "env"])
    return Sharp(
        enabled=sh.flag("enabled", default=False),
        reason=sh.string("reason", default="the site declares no SHARP"),
        hello=sh.str_list("hello", "a command as a list of strings", default=("sharp_hello",)),
        env=sh.str_map("env"),
    )


def parse_gpudirect(top: Section) -> Gpudirect:
    """The ``gpudirect`` section (what IOMMU mode the GPUs may be in)."""
    g = top.section("gpudirect", ["iommu"])
    modes = g.str_list("iommu", "a list of IOMMU modes", default=())
    for i, mode in enumerate(modes):
        if mode not in IOMMU_MODES:
            raise g.error(f"iommu[{i}]", f"one of {', '.join(IOMMU_MODES)}", mode)
    return Gpudirect(iommu=tuple(modes))


def parse_tools(top: Section) -> Tools:
    """The ``tools`` section (where nccl-tests and perftest are, how nccl-tests is built)."""
    t = top.section("tools", ["nccl_tests_bin", "perftest_bin", "nccl_tests_build"])
    return Tools(
        nccl_tests_bin=expand_repo(t.string("nccl_tests_bin", "a directory path", default=None)),
        perftest_bin=expand_repo(t.string("perftest_bin", "a directory path", default=None)),
        nccl_tests_build={k: str(expand_repo(v)) for k, v in t.str_map("nccl_tests_build").items()},
    )


def parse_nccl(top: Section) -> Nccl:
    """The ``nccl`` section (what the campaigns run, with which sizes and iterations)."""
    file = top.file
    n = top.section(
        "nccl",
        [
            "pair_collectives",
            "block_collectives",
            "min_bytes",
            "max_bytes",
            "step_factor",
            "iters",
            "warmup_iters",
            "cross_block_partners",
            "seed",
            "rail_ceiling_GBps",
            "node_ceiling_GBps",
            "intra_collectives",
            "fallback",
        ],
    )
    for key in ("pair_collectives", "block_collectives", "intra_collectives"):
        for c in n.str_list(key, default=()):
            if c not in COLLECTIVES:
                raise SiteConfigError(
                    file, f"nccl.{key}", f"collectives among {', '.join(COLLECTIVES)}", repr(c)
                )
    size = "a size like 1G, 64M or 8 (bytes)"
    nccl = Nccl(
        pair_collectives=n.str_list("pair_collectives", default=Nccl.pair_collectives),
        block_collectives=n.str_list("block_collectives", default=Nccl.block_collectives),
        min_bytes=n.convert("min_bytes", parse_size_B, size, default=Nccl.min_bytes),
        max_bytes=n.convert("max_bytes", parse_size_B, size, default=Nccl.max_bytes),
        step_factor=n.integer("step_factor", "an integer >= 2", default=2, minimum=2),
        iters=n.integer("iters", "an integer >= 1", default=20, minimum=1),
        warmup_iters=n.integer("warmup_iters", "an integer >= 0", default=5, minimum=0),
        cross_block_partners=n.integer("cross_block_partners", "an integer >= 0", default=1, minimum=0),
        seed=n.integer("seed", default=0),
        rail_ceiling_GBps=n.number("rail_ceiling_GBps", "a bandwidth in GB/s", default=None, minimum=0.001),
        node_ceiling_GBps=n.number("node_ceiling_GBps", "a bandwidth in GB/s", default=None, minimum=0.001),
        intra_collectives=n.str_list("intra_collectives", default=Nccl.intra_collectives),
        fallback=n.choice("fallback", ["torch"], default=None),
    )
    if nccl.min_bytes > nccl.max_bytes:
        raise SiteConfigError(
            file, "nccl.min_bytes", f"at most max_bytes ({nccl.max_bytes})", str(nccl.min_bytes)
        )
    return nccl
