"""What the campaigns run and with which tools: the site's ``tools`` and ``nccl`` sections, validated."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import Section, expand_repo, parse_size_B

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")


@dataclass(frozen=True)
class Tools:
    nccl_tests_bin: str | None = None
    perftest_bin: str | None = None
    nccl_tests_build: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NcclExpect:
    """What NCCL's own INFO lines must show a step used (judged as ``nccl.transport``)."""

    intra_node: str = "p2p"  # "p2p": GPU to GPU in a node over P2P (NVLink/PCIe), never SHM; "any"
    nvls: bool | None = None  # NVLS engaged (True) or not (False) on multi-GPU steps; None: either
    collnet: bool | None = None  # CollNet (SHARP) engaged on the block steps; None: either


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
    expect: NcclExpect = NcclExpect()
    # NCCL_ variables a site or node may set (environment, /etc/nccl.conf), each with its reason: a waiver
    # (a tuple of pairs: a Nccl is hashed, plan/commands.argv_shape caches on it)
    accept_env: tuple[tuple[str, str], ...] = ()


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
            "expect",
            "accept_env",
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
        expect=_expect(n.section("expect", ["intra_node", "nvls", "collnet"])),
        accept_env=_accept_env(n),
    )
    if nccl.min_bytes > nccl.max_bytes:
        raise SiteConfigError(
            file, "nccl.min_bytes", f"at most max_bytes ({nccl.max_bytes})", str(nccl.min_bytes)
        )
    return nccl


def _expect(e: Section) -> NcclExpect:
    tri = "true, false or null (either)"
    return NcclExpect(
        intra_node=e.choice("intra_node", ["p2p", "any"], default="p2p"),
        nvls=e.flag("nvls", tri, default=None),
        collnet=e.flag("collnet", tri, default=None),
    )


def _accept_env(n: Section) -> tuple[tuple[str, str], ...]:
    accepted = n.str_map("accept_env", "a mapping of NCCL_ variable names to the reason they are set")
    for name, reason in accepted.items():
        if not re.fullmatch(r"NCCL_[A-Z0-9_]+", name):
            raise SiteConfigError(n.file, n.key(f"accept_env.{name}"), "an NCCL_ variable name", repr(name))
        if not reason.strip():
            raise SiteConfigError(n.file, n.key(f"accept_env.{name}"), "the reason it is set", repr(reason))
    return tuple(accepted.items())
