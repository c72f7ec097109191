"""A model of a GPU cluster's fabric for the simulated nccl-tests (DESIGN.md, "Simulation").

Pure and cheap: a :class:`Fabric` is loaded once (``load_fabric``), and :func:`busbw_GBps` is a few dict
lookups per call, with no I/O, so benchmarks can call it for every pair of a 4096-node cluster.

The model: each node has ``gpus`` GPUs, ``rails`` (rail k is the HCA ``rails[k]``, e.g. mlx5_k) of
``rail_GBps`` line rate each and ``nvlink_GBps`` of intra-node bus bandwidth; each leaf (a Slurm block)
has ``uplink_GBps`` towards the spine. A run's bottleneck is the slowest rank (a ring goes as fast as its
slowest link): per node, a rank's share of the rails it uses; per leaf, the uplink shared by the rings
that cross leaves; within one node, NVLink. Faults scale these. Bus bandwidth then follows
``t(S) = latency + factor * S / (efficiency * bottleneck)`` (latency-bound small sizes rising to an
asymptote of ``efficiency`` (0.92) x the bottleneck), times a small deterministic noise (+-1%).

Run to run, that noise repeats itself; ``spread`` and ``transient`` (:mod:`.fabric_noise`) vary a result
between attempts of one step. A ``straggler`` node slows only runs with >= 2 ranks on each of >= 2 nodes.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hostlist

from clusteraccept.errors import SiteConfigError
from clusteraccept.sim.fabric_noise import fraction, run_factor, run_noise


# busbw/algbw per collective with n ranks (nccl-tests src/<coll>.cu *GetBw()).
def _ring2(n: int) -> float:
    return 2 * (n - 1) / n


def _ring(n: int) -> float:
    return (n - 1) / n


def _one(n: int) -> float:
    return 1.0


BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "all_reduce": _ring2,
    "all_gather": _ring,
    "reduce_scatter": _ring,
    "alltoall": _ring,
    "sendrecv": _one,
    "broadcast": _one,
    "reduce": _one,
}


@dataclass(frozen=True)
class Node:
    name: str
    leaf: str | None
    gpus: int
    rails: tuple[str, ...]  # rail k <-> HCA name rails[k]
    rail_GBps: float
    nvlink_GBps: float
    gpu_name: str
    bus_ids: tuple[str, ...]  # per GPU, as nccl-tests prints them ("0000:18:00")


@dataclass(frozen=True)
class Leaf:
    name: str
    nodes: tuple[str, ...]
    uplink_GBps: float


@dataclass(frozen=True)
class Faults:
    slow_rail: tuple[tuple[str, int, float], ...] = ()  # (node, rail, factor)
    bad_cable: tuple[tuple[str, str, int | None, float], ...] = ()  # (a, b, rail or None=all, factor)
    slow_uplink: tuple[tuple[str, float], ...] = ()  # (leaf, factor)
    slow_node: tuple[tuple[str, float], ...] = ()  # (node, factor)
    non_mpi: bool = False  # every task runs alone: nranks 1, busbw 0
    wrong: tuple[str, ...] = ()  # nodes whose ranks corrupt data (#wrong > 0)
    no_gdr: tuple[str, ...] = ()  # nodes whose NET channels run without GPUDirect RDMA (no /GDRDMA)
    no_sharp: tuple[str, ...] = ()  # nodes the SHARP aggregation manager refuses ("No resource")
    gpu_order: tuple[str, ...] = ()  # nodes whose CUDA devices enumerate in reverse bus-id order
    stray_nic: tuple[tuple[str, int | None, str], ...] = ()  # (node, rail or None=all, HCA NCCL uses)
    shm_fallback: tuple[str, ...] = ()  # nodes whose GPUs talk over SHM (no P2P) inside the node
    nccl_version: tuple[tuple[str, str], ...] = ()  # (node, the NCCL version its ranks load instead)
    straggler: tuple[tuple[str, float], ...] = ()  # (node, factor): only with >= 2 ranks on >= 2 nodes
    # nodes where CUDA cannot start (the NVSwitch fabric was never set up: fabric manager down)
    cuda_not_ready: tuple[str, ...] = ()
    # nodes of an NVLink domain whose multi-node NVLink cannot work (IMEX down, a tray in another clique)
    mnnvl_broken: tuple[str, ...] = ()
    # EFA or Slingshot nodes whose NCCL ends on sockets: aws-ofi-nccl found no provider / no net plugin
    ofi_no_provider: tuple[str, ...] = ()
    ofi_plugin_missing: tuple[str, ...] = ()
    # TCPXO nodes whose receive-datapath manager (RxDM) is not running: FasTrak aborts every step there
    # (on TCPX the first receive connection would exit the process: not modelled)
    rxdm_down: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fabric:
    nodes: Mapping[str, Node]
    leaves: Mapping[str, Leaf]
    faults: Faults = Faults()
    seed: int = 0
    latency_us: float = 20.0  # added to every size (inter-node); half of it within one node
    efficiency: Mapping[str, float] = field(default_factory=dict)  # per collective, default 0.92
    noise: float = 0.01
    default: Node = Node(
        "", None, 8, tuple(f"mlx5_{k}" for k in range(8)), 50.0, 450.0, "NVIDIA H100 80GB HBM3", ()
    )
    spread: float = 0.0  # relative std of a per-run Gaussian factor on busbw (0: none)
    transient_probability: float = 0.0  # per run: the chance of a dip the next attempt does not see
    transient_factor: float = 0.6
    domains: Mapping[str, str] = field(default_factory=dict)  # node -> its multi-node NVLink domain
    # what NCCL's NET channels use between nodes: "ib" (NET/IB), "ofi" (aws-ofi-nccl: EFA, Slingshot),
    # "tcpx" or "tcpxo" (Google's GPUDirectTCPX_v7 / FasTrak plugins)
    net: str = "ib"
    provider: str = "efa"  # the libfabric provider aws-ofi-nccl selects on an "ofi" net: efa, cxi (Slingshot)
    _rail_f: dict[tuple[str, int | None], float] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _pair_f: dict[frozenset[str], list[tuple[int | None, float]]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _straggler_f: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        rail_f = self._rail_f
        for node, rail, f in self.faults.slow_rail:
            rail_f[node, rail] = rail_f.get((node, rail), 1.0) * f
        for node, f in self.faults.slow_node:
            rail_f[node, None] = rail_f.get((node, None), 1.0) * f
        for a, b, cable_rail, f in self.faults.bad_cable:
            node, other = (a, b) if a in self.nodes else (b, a)
            if other in self.leaves:  # a node's own cable to its leaf: that rail (-1: all) of that node
                key = (node, -1 if cable_rail is None else cable_rail)
                rail_f[key] = rail_f.get(key, 1.0) * f
            else:
                self._pair_f.setdefault(frozenset((a, b)), []).append((cable_rail, f))
        for node, f in self.faults.straggler:
            self._straggler_f[node] = self._straggler_f.get(node, 1.0) * f

    def node(self, name: str) -> Node:
        """The node of that name; a host the fabric does not know gets the defaults, on no leaf."""
        n = self.nodes.get(name) or self.nodes.get(name.split(".", 1)[0])
        return (
            n
            if n is not None
            else Node(
                name,
                None,
                self.default.gpus,
                self.default.rails,
                self.default.rail_GBps,
                self.default.nvlink_GBps,
                self.default.gpu_name,
                self.default.bus_ids,
            )
        )

    def rail_of(self, node: str, hca: str) -> int | None:
        rails = self.node(node).rails
        return rails.index(hca) if hca in rails else None

    def rail_GBps(self, node: str, rail: int) -> float:
        """Effective line rate of one rail of one node (faults applied, pair cables excluded)."""
        n, f = self.node(node), self._rail_f
        return n.rail_GBps * f.get((node, rail), 1.0) * f.get((node, -1), 1.0) * f.get((node, None), 1.0)


def _per_rank(fab: Fabric, host: str, rails: tuple[int, ...], ranks: int, pair: dict[int, float]) -> float:
    """The slowest rank's inter-node bandwidth on one node: rails shared round-robin among its ranks."""
    eff = [fab.rail_GBps(host, k) * pair.get(k, 1.0) * pair.get(-1, 1.0) for k in rails]
    if ranks >= len(eff):
        load = [len(range(j, ranks, len(eff))) for j in range(len(eff))]
        return min(e / c for e, c in zip(eff, load, strict=True))
    return min(sum(eff[j] for j in range(i, len(eff), ranks)) for i in range(ranks))


def mnnvl(fab: Fabric, hosts: Iterable[str], env: Mapping[str, str]) -> bool:
    """Whether NCCL would run these hosts' ranks over multi-node NVLink: several hosts of one domain and
    NCCL_MNNVL_ENABLE not 0 (NCCL env docs: 2, the default, uses it where available)."""
    names = set(hosts)
    domains = {fab.domains.get(h) for h in names}
    return (
        len(names) > 1 and len(domains) == 1 and None not in domains and env.get("NCCL_MNNVL_ENABLE") != "0"
    )


def bottleneck_GBps(
    fab: Fabric,
    hosts: Iterable[str],
    rails_used: Iterable[int] | None,
    ranks_per_node: int | None = None,
    *,
    nvlink: bool = False,
) -> float:
    """The bandwidth of the slowest link a rank of this run depends on (no efficiency, no noise);
    ``nvlink``: the hosts share one NVLink domain and use it (multi-node NVLink), not the rails."""
    names = sorted(set(hosts))
    if not names:
        raise ValueError("no hosts")
    if nvlink:
        return min(fab.node(h).nvlink_GBps * fab._rail_f.get((h, None), 1.0) for h in names)
    if len(names) == 1:
        n = fab.node(names[0])
        return n.nvlink_GBps * fab._rail_f.get((names[0], None), 1.0)
    pair: dict[str, dict[int, float]] = {}
    if fab._pair_f:
        present = set(names)
        for key, items in fab._pair_f.items():
            if key <= present:
                for h in key:
                    d = pair.setdefault(h, {})
                    for rail, f in items:
                        d[-1 if rail is None else rail] = d.get(-1 if rail is None else rail, 1.0) * f
    best = math.inf
    leaves: set[str] = set()
    n_rails = 1
    for h in names:
        node = fab.node(h)
        rails = tuple(range(len(node.rails))) if rails_used is None else tuple(rails_used)
        if any(k < 0 or k >= len(node.rails) for k in rails) or not rails:
            raise ValueError(f"{h} has rails 0..{len(node.rails) - 1}, asked for {rails}")
        ranks = ranks_per_node or node.gpus
        best = min(
            best,
            _per_rank(fab, h, rails, ranks, pair.get(h, {})),
            node.nvlink_GBps * fab._rail_f.get((h, None), 1.0),
        )
        n_rails = max(n_rails, len(rails), ranks)
        if node.leaf is not None:
            leaves.add(node.leaf)
    if len(leaves) > 1:  # each ring crossing leaves takes a share of every involved leaf's uplink
        for leaf in leaves:
            f = math.prod(x for name, x in fab.faults.slow_uplink if name == leaf)
            best = min(best, fab.leaves[leaf].uplink_GBps * f / n_rails)
    return best * _straggle(fab, names, ranks_per_node) if fab._straggler_f else best


def _straggle(fab: Fabric, names: list[str], ranks_per_node: int | None) -> float:
    """The slowest straggler's factor among the nodes holding several ranks of this (multi-node) run: a
    straggler's ranks contend with one another, and a ring goes as fast as its slowest rank; with one
    rank per node (the pair steps) it keeps up."""
    many = (fab._straggler_f.get(h, 1.0) for h in names if (ranks_per_node or fab.node(h).gpus) >= 2)
    return min(many, default=1.0)


def _noise(fab: Fabric, key: str) -> float:
    u = zlib.crc32(f"{fab.seed}|{key}".encode()) / 0xFFFFFFFF  # deterministic, uniform in [0, 1]
    return 1.0 + fab.noise * (2.0 * u - 1.0)


def busbw_GBps(
    fab: Fabric,
    collective: str,
    hosts: Iterable[str],
    rails_used: Iterable[int] | None,
    size_B: int,
    *,
    ranks_per_node: int | None = None,
    in_place: bool = False,
    attempt: str = "",
    nvlink: bool = False,
) -> float:
    """Bus bandwidth nccl-tests would report for ``collective`` of ``size_B`` bytes over ``hosts``.

    ``rails_used``: rail indices (None: all rails of each node); ``ranks_per_node``: default the node's
    GPU count. ``attempt`` names this run among retests of the same step (it only keys ``spread`` and
    transients). Deterministic for a given fabric seed and attempt; NaN-free; 0.0 for a single rank or
    size 0.
    """
    names = tuple(sorted(set(hosts)))
    rails = None if rails_used is None else tuple(rails_used)
    rpn = ranks_per_node or fab.node(names[0]).gpus if names else 1
    nranks = len(names) * rpn
    if size_B <= 0 or nranks < 2 or fab.faults.non_mpi:
        return 0.0
    factor = BUS_FACTOR.get(collective, BUS_FACTOR["all_reduce"])(nranks)
    peak = fab.efficiency.get(collective, 0.92) * bottleneck_GBps(fab, names, rails, rpn, nvlink=nvlink)
    latency_s = fab.latency_us * (1.0 if len(names) > 1 else 0.5) * 1e-6
    seconds = latency_s + factor * size_B / (peak * 1e9)
    run = f"{collective}|{','.join(names)}|{rails}|{rpn}" + ("|mnnvl" if nvlink else "")
    bw = factor * size_B / seconds / 1e9 * _noise(fab, f"{run}|{size_B}|{int(in_place)}")
    if fab.spread or fab.transient_probability:  # (skipped when off: the numbers of before, to the bit)
        bw *= run_factor(
            f"{fab.seed}|{run}|{attempt}", fab.spread, fab.transient_probability, fab.transient_factor
        )
    return bw


# ---------------------------------------------------------------------------------------------- loading
def _num(d: Mapping[str, Any], key: str, where: str, src: str, default: float | None = None) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise SiteConfigError(src, f"{where}.{key}", "a non-negative number", repr(v))
    return float(v)


def _list(v: Any) -> list[Any]:
    return [] if v is None or v is False else v if isinstance(v, list) else [v]


def fabric_from_dict(d: Mapping[str, Any], source: str = "<fabric>") -> Fabric:
    """Build a Fabric from its JSON document (format: see the module docstring of sim/nccl_tests.py)."""
    if not isinstance(d, Mapping):
        raise SiteConfigError(source, "", "a JSON object", type(d).__name__)
    dd = d.get("defaults", {})
    rails = tuple(dd.get("rails", [f"mlx5_{k}" for k in range(8)]))
    default = Node(
        "",
        None,
        int(_num(dd, "gpus", "defaults", source, 8)),
        rails,
        _num(dd, "rail_GBps", "defaults", source, 50.0),
        _num(dd, "nvlink_GBps", "defaults", source, 450.0),
        str(dd.get("gpu_name", "NVIDIA H100 80GB HBM3")),
        tuple(dd.get("bus_ids", ())),
    )
    leaf_of: dict[str, str] = {}
    leaves: dict[str, Leaf] = {}
    for i, lf in enumerate(_list(d.get("leaves"))):
        where = f"leaves[{i}]"
        try:
            members = tuple(hostlist.expand_hostlist(str(lf["nodes"])))
            name = str(lf["name"])
        except (KeyError, TypeError, hostlist.BadHostlist) as exc:
            raise SiteConfigError(source, where, "{name, nodes (hostlist), uplink_GBps}", str(exc)) from None
        leaves[name] = Leaf(name, members, _num(lf, "uplink_GBps", where, source, 1e9))
        leaf_of.update(dict.fromkeys(members, name))
    over: dict[str, Mapping[str, Any]] = {}
    for expr, o in dict(d.get("nodes", {})).items():
        over.update(dict.fromkeys(hostlist.expand_hostlist(expr), o))
    nodes: dict[str, Node] = {}
    for name in sorted(set(leaf_of) | set(over)):
        o = over.get(name, {})
        nodes[name] = Node(
            name,
            leaf_of.get(name),
            int(_num(o, "gpus", name, source, default.gpus)),
            tuple(o.get("rails", default.rails)),
            _num(o, "rail_GBps", name, source, default.rail_GBps),
            _num(o, "nvlink_GBps", name, source, default.nvlink_GBps),
            str(o.get("gpu_name", default.gpu_name)),
            tuple(o.get("bus_ids", default.bus_ids)),
        )
    fd = d.get("faults", {}) or {}
    known = set(nodes) | set(leaves)

    def check(name: Any, key: str, pool: set[str] | dict[str, Any]) -> str:
        if name not in pool:
            raise SiteConfigError(
                source, f"faults.{key}", f"a name in the fabric ({len(pool)} known)", repr(name)
            )
        return str(name)

    try:
        faults = Faults(
            tuple(
                (check(f["node"], "slow_rail", nodes), int(f["rail"]), float(f["factor"]))
                for f in _list(fd.get("slow_rail"))
            ),
            tuple(
                (
                    check(f["a"], "bad_cable", known),
                    check(f["b"], "bad_cable", known),
                    None if f.get("rail") is None else int(f["rail"]),
                    float(f["factor"]),
                )
                for f in _list(fd.get("bad_cable"))
            ),
            tuple(
                (check(f["leaf"], "slow_uplink", leaves), float(f["factor"]))
                for f in _list(fd.get("slow_uplink"))
            ),
            tuple(
                (check(f["node"], "slow_node", nodes), float(f["factor"])) for f in _list(fd.get("slow_node"))
            ),
            bool(fd.get("non_mpi", False)),
            tuple(
                check(f["node"] if isinstance(f, Mapping) else f, "wrong", nodes)
                for f in _list(fd.get("wrong"))
            ),
            tuple(
                check(f["node"] if isinstance(f, Mapping) else f, "no_gdr", nodes)
                for f in _list(fd.get("no_gdr"))
            ),
            tuple(
                check(f["node"] if isinstance(f, Mapping) else f, "no_sharp", nodes)
                for f in _list(fd.get("no_sharp"))
            ),
            tuple(check(f["node"], "gpu_order", nodes) for f in _list(fd.get("gpu_order"))),
            tuple(
                (
                    check(f["node"], "stray_nic", nodes),
                    None if f.get("rail") is None else int(f["rail"]),
                    str(f.get("hca") or "mlx5_8"),
                )
                for f in _list(fd.get("stray_nic"))
            ),
            tuple(check(f["node"], "shm_fallback", nodes) for f in _list(fd.get("shm_fallback"))),
            tuple(
                (check(f["node"], "nccl_version", nodes), str(f.get("setting") or "2.27.3+cuda12.4"))
                for f in _list(fd.get("nccl_version"))
            ),
            tuple(
                (
                    check(f["node"], "straggler", nodes),
                    fraction(f["factor"], f"faults.straggler[{i}].factor", source, zero_ok=False),
                )
                for i, f in enumerate(_list(fd.get("straggler")))
            ),
            tuple(check(f["node"], "cuda_not_ready", nodes) for f in _list(fd.get("cuda_not_ready"))),
            tuple(check(f["node"], "mnnvl_broken", nodes) for f in _list(fd.get("mnnvl_broken"))),
            tuple(check(f["node"], "ofi_no_provider", nodes) for f in _list(fd.get("ofi_no_provider"))),
            tuple(check(f["node"], "ofi_plugin_missing", nodes) for f in _list(fd.get("ofi_plugin_missing"))),
            tuple(check(f["node"], "rxdm_down", nodes) for f in _list(fd.get("rxdm_down"))),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise SiteConfigError(source, "faults", "faults as documented in sim/fabric.py", str(exc)) from None
    eff = {str(k): float(v) for k, v in dict(d.get("efficiency", {})).items()}
    spread, transient_p, transient_f = run_noise(d, source)
    return Fabric(
        nodes,
        leaves,
        faults,
        int(d.get("seed", 0)),
        _num(d, "latency_us", "", source, 20.0),
        eff,
        _num(d, "noise", "", source, 0.01),
        default,
        spread,
        transient_p,
        transient_f,
        {
            str(n): str(name)
            for name, members in dict(d.get("nvlink_domains", {})).items()
            for n in hostlist.expand_hostlist(str(members))
        },
        str(d.get("net", "ib")),
        str(d.get("provider", "efa")),
    )


def load_fabric(path: str | Path) -> Fabric:
    """Read a fabric JSON file (once; keep the Fabric)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SiteConfigError(str(p), "", "a readable fabric JSON file", str(exc)) from None
    return fabric_from_dict(doc, str(p))


def gpu_rails(fab: Fabric, host: str, env: dict[str, str], ngpus: int) -> tuple[int, ...] | None:
    """The rails NCCL takes by itself (no NCCL_IB_HCA): each GPU its nearest NIC, rail k of GPU k (NCCL's
    topology search; aws-ofi-nccl's NIC groups on EFA); None (every rail) where the ranks drive all GPUs."""
    node = fab.node(host)
    if ngpus >= node.gpus:
        return None
    rails = tuple(
        sorted({g for d in range(ngpus) if (g := physical_gpu(fab, host, env, d)) < len(node.rails)})
    )
    return rails or None


def sockets(fab: Fabric, host: str) -> bool:
    """Whether this node's NCCL falls back to TCP sockets (an EFA, Slingshot or TCPX(O) node whose net
    plugin is missing or failed its init)."""
    f = fab.faults  # (rxdm_down is no fallback: FasTrak aborts instead, sim/nccl_tcp.rxdm_abort)
    return host in f.ofi_no_provider or host in f.ofi_plugin_missing


def physical_gpu(fab: Fabric, host: str, env: dict[str, str], dev: int) -> int:
    """The GPU (bus-id order) behind CUDA device ``dev`` of a rank: CUDA_VISIBLE_DEVICES picks among the
    node's GPUs, in bus-id order (CUDA_DEVICE_ORDER=PCI_BUS_ID, or FASTEST_FIRST among identical GPUs);
    on a ``gpu_order`` node CUDA enumerates them the other way round."""
    gpus = fab.node(host).gpus
    visible = [int(x) for x in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if x.strip().isdecimal()]
    k = visible[dev] if dev < len(visible) else dev
    return gpus - 1 - k if host in fab.faults.gpu_order and 0 <= k < gpus else k
