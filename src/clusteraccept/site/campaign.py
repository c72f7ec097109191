"""What the campaigns run and with which tools: the site's ``tools`` and ``nccl`` sections, validated."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import NOT_AN_OPTION, Section, expand_repo, parse_size_B

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
class Peers:
    """How a result with no baseline is judged against the same results of the same run (checks/peers.py).

    ``below``: slow when more than this fraction below the median of its peers. The default clears the
    run-to-run spread measured on real hardware: standalone nccl-tests at >= 64 MiB on 2x H200 spread by
    at most 6.7% (max - min over 3 runs, docs/examples/h200x2/fidelity.md). ``mad_z``: and more than this
    many robust standard deviations (1.4826 x MAD) below it, so a noisier fabric widens the band by
    itself. ``min_peers``: fewer results than this in a group and only the line rate judges them."""

    below: float = 0.10
    mad_z: float = 4.0
    min_peers: int = 4


# Minimum busbw as a fraction of the line rate, per collective ("intra_node": of NVLink): a floor against
# gross faults, not a target (the peers judge the rest). nccl-tests doc/PERFORMANCE.md: busbw is what "we
# can compare with the hardware peak bandwidth, independently of the number of ranks". The network floor
# (0.70) is a choice, not a measurement (no fabric here): below it a link is broken, not noisy, and it
# stays > 6 sigma below a healthy result at twice the noise benchmarks/blame.py assumes; alltoall mixes
# every rank pair through the spine and runs lower. Intra-node, a healthy 2x H200 measured 0.61-0.77 of
# its NVLink line rate at 8 GiB (docs/examples/h200x2/fidelity.md).
LINE_RATE_FLOOR: dict[str, float] = {"default": 0.70, "alltoall": 0.50, "intra_node": 0.50}


@dataclass(frozen=True)
class Confirm:
    """The confirmation round (plan/confirm.py): every suspect re-tested with ``partners`` nodes that
    proved healthy, in at most ``max_rounds`` rounds; 0 partners turns it off (blame on first evidence).
    One partner by default, as Google's cluster-health-scanner re-pairs a suspect with one known-good
    node: a suspect was already slow with every partner it had (or, a cable, slow once with one), and one
    more slow result with a node proved healthy convicts it; a cable's own pair runs in the same round."""

    partners: int = 1
    max_rounds: int = 6


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
    peers: Peers = Peers()
    line_rate_floor: tuple[tuple[str, float], ...] = tuple(LINE_RATE_FLOOR.items())
    confirm: Confirm = Confirm()

    def floor(self, collective: str, scope: str) -> float:
        """The line-rate floor of a collective in a scope (``intra_node`` has its own, which NVLink across a
        rack, ``nvlink_domain``, shares: both are judged against NVLink's line rate)."""
        floors = dict(self.line_rate_floor)
        if scope in ("intra_node", "nvlink_domain"):
            return floors.get("intra_node", LINE_RATE_FLOOR["intra_node"])
        return floors.get(collective, floors.get("default", LINE_RATE_FLOOR["default"]))


def parse_tools(top: Section) -> Tools:
    """The ``tools`` section (where nccl-tests and perftest are, how nccl-tests is built)."""
    t = top.section("tools", ["nccl_tests_bin", "perftest_bin", "nccl_tests_build"])
    return Tools(
        nccl_tests_bin=expand_repo(t.string("nccl_tests_bin", "a directory path", None, NOT_AN_OPTION)),
        perftest_bin=expand_repo(t.string("perftest_bin", "a directory path", None, NOT_AN_OPTION)),
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
            "peers",
            "line_rate_floor",
            "confirm",
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
        peers=_peers(n.section("peers", ["below", "mad_z", "min_peers"])),
        line_rate_floor=_floors(n),
        confirm=_confirm(n.section("confirm", ["partners", "max_rounds"])),
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


def _peers(p: Section) -> Peers:
    return Peers(
        below=p.number("below", "a fraction like 0.10", default=Peers.below, minimum=0.0),
        mad_z=p.number(
            "mad_z", "a number of robust standard deviations like 4", default=Peers.mad_z, minimum=0.0
        ),
        min_peers=p.integer("min_peers", "an integer >= 2", default=Peers.min_peers, minimum=2),
    )


def _floors(n: Section) -> tuple[tuple[str, float], ...]:
    given = n.section("line_rate_floor", ["default", "intra_node", *COLLECTIVES])
    floors = dict(LINE_RATE_FLOOR)
    for key in given.data or {}:
        value = given.number(str(key), "a fraction of the line rate between 0 and 1", minimum=0.0)
        if value > 1.0:
            raise given.error(str(key), "a fraction of the line rate between 0 and 1", value)
        floors[str(key)] = value
    return tuple(floors.items())


def _confirm(c: Section) -> Confirm:
    return Confirm(
        partners=c.integer(
            "partners", "an integer 0-4 (0: no confirmation round)", default=1, minimum=0, maximum=4
        ),
        max_rounds=c.integer("max_rounds", "an integer >= 1", default=6, minimum=1),
    )
