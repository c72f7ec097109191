"""The site: one cluster's description, loaded from ``site-configs/<name>.yaml`` and fully validated.

Every error is ONE line naming the file, the key path, what was expected and what was found.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import hostlist
import yaml

from clusteraccept.baselines import Reference
from clusteraccept.errors import SiteConfigError
from clusteraccept.ops.config import KEYS as OPS_KEYS
from clusteraccept.ops.config import Ops, parse_ops
from clusteraccept.schema import Section, describe, parse_size_B

EXECUTORS = ("slurm", "local", "debug")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "broadcast", "reduce")
_HCA = r"[A-Za-z0-9_]+"


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
class Rail:
    index: int
    gpu: int
    hca: str
    port: int = 1
    netdev: str | None = None
    rate_Gbps: float | None = None


@dataclass(frozen=True)
class NodeType:
    name: str
    nodes: tuple[str, ...]
    gpus: int
    gpu_model: str | None
    link_layer: str  # InfiniBand | Ethernet | none
    numa_expected: bool
    rails: tuple[Rail, ...]


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


@dataclass(frozen=True)
class Site:
    name: str
    file: str
    description: str
    simulated: bool
    slurm: Slurm
    setup: tuple[str, ...]
    env: dict[str, str]
    nodes: tuple[str, ...]
    blocks: dict[str, tuple[str, ...]]
    blocks_from_slurm: bool
    node_types: tuple[NodeType, ...]
    roce: Roce | None
    sharp: Sharp
    tools: Tools
    nccl: Nccl
    baselines: dict[str, Reference]
    baselines_file: str | None
    sim_faults: tuple[dict[str, Any], ...] = ()
    ops: Ops = field(default_factory=Ops)  # nightly / drain / attest sections (clusteraccept.ops.config)

    @cached_property
    def _type_of(self) -> dict[str, NodeType]:
        return {n: nt for nt in self.node_types for n in nt.nodes}

    @cached_property
    def _block_index(self) -> dict[str, str]:
        return {n: name for name, members in self.blocks.items() for n in members}

    def node_type(self, node: str) -> NodeType:
        return self._type_of[node]  # KeyError for a node the site does not have

    def block_of(self, node: str) -> str | None:
        return self._block_index.get(node)


def expand_hostlist(sec: Section, key: str) -> tuple[str, ...]:
    """``node[01-04,07]`` -> names, through python-hostlist (the same syntax as Slurm's)."""
    value = sec.raw(key)
    items = value if isinstance(value, list) else [value]
    # "{hostname}": this machine (single-host sites run with the local executor, e.g. local-gpu.yaml)
    items = [
        i.replace("{hostname}", socket.gethostname().split(".")[0]) if isinstance(i, str) else i
        for i in items
    ]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise sec.error(key, "a hostlist string like 'node[001-128]'", item)
        try:
            out.extend(hostlist.expand_hostlist(item))
        except hostlist.BadHostlist as exc:
            raise SiteConfigError(
                sec.file, sec.key(key), "a hostlist like 'node[001-128]'", describe(item), str(exc)
            ) from None
    if not out:
        raise sec.error(key, "at least one node", value)
    if len(set(out)) != len(out):
        dup = next(n for n in out if out.count(n) > 1)
        raise SiteConfigError(sec.file, sec.key(key), "each node once", f"{dup!r} twice")
    return tuple(out)


def _rails(sec: Section) -> tuple[Rail, ...]:
    rails = []
    for name, r in sec.sections("rails", ["hca", "port", "netdev", "rate_Gbps"]).items():
        m = re.fullmatch(r"gpu(\d+)", name)
        if not m:
            raise SiteConfigError(
                sec.file, sec.key(f"rails.{name}"), "a key like 'gpu3' (the GPU index)", repr(name)
            )
        gpu = int(m[1])
        rails.append(
            Rail(
                index=gpu,
                gpu=gpu,
                hca=r.string("hca", "a string like 'mlx5_3'", pattern=_HCA),
                port=r.integer("port", "a port number >= 1", default=1, minimum=1),
                netdev=r.string("netdev", "a network interface name like 'ibp26s0'", default=None),
                rate_Gbps=r.number("rate_Gbps", "a link rate in Gb/s like 400", default=None, minimum=1),
            )
        )
    return tuple(sorted(rails, key=lambda r: r.index))


def _node_types(top: Section, all_nodes: tuple[str, ...]) -> tuple[NodeType, ...]:
    allowed = ["nodes", "gpus", "gpu_model", "link_layer", "numa_expected", "rails"]
    types = top.sections("node_types", allowed)
    if not types:
        raise SiteConfigError(top.file, "node_types", "at least one node type (gpus, rails...)", "nothing")
    out: list[NodeType] = []
    owner: dict[str, str] = {}
    for name, sec in types.items():
        nodes = expand_hostlist(sec, "nodes") if sec.has("nodes") or len(types) > 1 else all_nodes
        for n in nodes:
            if n not in all_nodes:
                raise SiteConfigError(sec.file, sec.key("nodes"), "nodes listed in 'nodes'", repr(n))
            if n in owner:
                raise SiteConfigError(
                    sec.file, sec.key("nodes"), "each node in one node type", f"{n!r} also in {owner[n]!r}"
                )
            owner[n] = name
        gpus = sec.integer("gpus", "a GPU count >= 1", minimum=1)
        rails = _rails(sec)
        for r in rails:
            if r.gpu >= gpus:
                raise SiteConfigError(
                    sec.file, sec.key(f"rails.gpu{r.gpu}"), f"a GPU index below gpus={gpus}", str(r.gpu)
                )
        out.append(
            NodeType(
                name=name,
                nodes=nodes,
                gpus=gpus,
                gpu_model=sec.string("gpu_model", default=None),
                link_layer=sec.choice(
                    "link_layer",
                    ["InfiniBand", "Ethernet", "none"],
                    default="InfiniBand" if rails else "none",
                ),
                numa_expected=sec.flag("numa_expected", default=True),
                rails=rails,
            )
        )
    missing = [n for n in all_nodes if n not in owner]
    if missing:
        raise SiteConfigError(top.file, "node_types", "every node in a node type", f"{missing[0]!r} in none")
    return tuple(out)


def _blocks(top: Section, all_nodes: tuple[str, ...]) -> tuple[dict[str, tuple[str, ...]], bool]:
    value = top.raw("blocks", None)
    if value is None:
        return {"all": all_nodes}, False
    if value == "slurm":
        return {}, True  # read from `scontrol show topology` when the campaign is planned
    blocks_sec = Section(
        top.file, "blocks", value, [str(k) for k in value] if isinstance(value, dict) else []
    )
    blocks: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for name in blocks_sec.data:
        members = expand_hostlist(blocks_sec, name)
        for n in members:
            if n not in all_nodes:
                raise SiteConfigError(top.file, f"blocks.{name}", "nodes listed in 'nodes'", repr(n))
            if n in seen:
                raise SiteConfigError(
                    top.file, f"blocks.{name}", "each node in one block", f"{n!r} also in {seen[n]!r}"
                )
            seen[n] = name
        blocks[name] = members
    return blocks, False


def _reference(sec: Section) -> Reference:
    return Reference(
        ref=sec.number("ref"),
        lower=sec.number("lower", "a signed fraction like -0.08, or null", default=None),
        upper=sec.number("upper", "a signed fraction like 0.10, or null", default=None),
        unit=sec.string("unit", default=""),
        xfail=sec.string("xfail", "a reason string", default=None),
    )


def load_baselines(file: str, data: Any, path: str = "baselines") -> dict[str, Reference]:
    """A baselines mapping ``pattern -> reference`` (inline in the site, or a separate reviewable file)."""
    top = Section(file, path, data, [str(k) for k in data] if isinstance(data, dict) else [])
    return {
        str(k): _reference(top.section(str(k), ["ref", "lower", "upper", "unit", "xfail"])) for k in top.data
    }


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as exc:
        raise SiteConfigError(str(path), "", "a readable YAML file", exc.strerror or str(exc)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(syntax)"
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SiteConfigError(str(path), where, "valid YAML", problem) from None
    if data is None:
        raise SiteConfigError(str(path), "", "a site description (a YAML mapping)", "an empty file")
    return data


TOP_KEYS = [
    "name",
    "description",
    "simulated",
    "slurm",
    "setup",
    "env",
    "nodes",
    "blocks",
    "node_types",
    "roce",
    "sharp",
    "tools",
    "nccl",
    "baselines",
    "sim",
    *OPS_KEYS,
]
FAULT_KINDS = (
    "slow_rail",
    "slow_node",
    "bad_cable",
    "slow_uplink",
    "non_mpi",
    "wrong",
    "nic_wrong_numa",
    "pcie_x8",
    "peermem_missing",
    "acs_on",
    "trust_pcp",
    "pfc_wrong_prio",
    "ecn_rp_off",
    "mtu_1500",
    "sharp_no_resource",
    "link_errors",
)
_ENV_NAME = r"[A-Za-z_][A-Za-z0-9_]*"


def _expand(value: str | None) -> Any:
    """``{repo}`` in a path-like value stands for the checkout's root (used by the demo and example sites)."""
    from clusteraccept.render import REPO_ROOT

    return None if value is None else value.replace("{repo}", str(REPO_ROOT))


def _faults(top: Section, nodes: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    sim = top.section("sim", ["faults"])
    raw = sim.raw("faults", [])
    if not isinstance(raw, list):
        raise sim.error("faults", "a list of faults", raw)
    out = []
    for i, f in enumerate(raw):
        fs = Section(
            top.file,
            f"sim.faults[{i}]",
            f,
            ["kind", "node", "nodes", "rail", "gpu", "leaf", "factor", "port", "count"],
        )
        fs.choice("kind", FAULT_KINDS)
        if fs.has("node") and fs.data["node"] not in nodes:
            raise fs.error("node", "a node of the site", fs.data["node"])
        out.append(dict(fs.data))
    return tuple(out)


def parse_site(path: Path, data: Any) -> Site:
    file = str(path)
    top = Section(file, "", data, TOP_KEYS)
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
    slurm = Slurm(
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
        python=_expand(s.string("python", "a path to the python of the shared virtualenv", default=None)),
        slurm_conf=_expand(s.string("slurm_conf", default=None)),
    )
    nodes = expand_hostlist(top, "nodes")
    blocks, from_slurm = _blocks(top, nodes)
    roce = None
    if top.has("roce"):
        r = top.section(
            "roce", ["lossless_priority", "trust", "roce_dscp", "ecn", "cnp_dscp", "cnp_priority", "mtu"]
        )
        roce = Roce(
            lossless_priority=r.integer("lossless_priority", "a priority 0-7", minimum=0, maximum=7),
            trust=r.choice("trust", ["dscp", "pcp"]),
            roce_dscp=r.integer("roce_dscp", "a DSCP value 0-63", minimum=0, maximum=63),
            ecn=r.flag("ecn", default=True),
            cnp_dscp=r.integer("cnp_dscp", "a DSCP value 0-63", default=None, minimum=0, maximum=63),
            cnp_priority=r.integer("cnp_priority", "a priority 0-7", default=None, minimum=0, maximum=7),
            mtu=r.integer("mtu", "an MTU like 4200 or 9000", minimum=576, maximum=9216),
        )
    sh = top.section("sharp", ["enabled", "reason", "hello", "env"])
    sharp = Sharp(
        enabled=sh.flag("enabled", default=False),
        reason=sh.string("reason", default="the site declares no SHARP"),
        hello=sh.str_list("hello", "a command as a list of strings", default=("sharp_hello",)),
        env=sh.str_map("env"),
    )
    t = top.section("tools", ["nccl_tests_bin", "perftest_bin", "nccl_tests_build"])
    tools = Tools(
        nccl_tests_bin=_expand(t.string("nccl_tests_bin", "a directory path", default=None)),
        perftest_bin=_expand(t.string("perftest_bin", "a directory path", default=None)),
        nccl_tests_build={k: str(_expand(v)) for k, v in t.str_map("nccl_tests_build").items()},
    )
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
    raw_baselines = top.raw("baselines", {})
    baselines_file = None
    if isinstance(raw_baselines, str):
        bpath = (path.parent / raw_baselines).resolve()
        baselines_file = str(bpath)
        raw_baselines = _read_yaml(bpath)
        baselines = load_baselines(str(bpath), raw_baselines, "")
    else:
        baselines = load_baselines(file, raw_baselines)
    return Site(
        name=top.string("name", "a site name", default=path.stem),
        file=file,
        description=top.string("description", default=""),
        simulated=top.flag("simulated", default=False),
        slurm=slurm,
        setup=top.str_list("setup", "a list of shell lines", default=()),
        env=_env(top),
        nodes=nodes,
        blocks=blocks,
        blocks_from_slurm=from_slurm,
        node_types=_node_types(top, nodes),
        roce=roce,
        sharp=sharp,
        tools=tools,
        nccl=nccl,
        baselines=baselines,
        baselines_file=baselines_file,
        sim_faults=_faults(top, nodes),
        ops=parse_ops(top, _expand),
    )


def _env(top: Section) -> dict[str, str]:
    env = top.str_map("env")
    for k in env:
        if not re.fullmatch(_ENV_NAME, k):
            raise SiteConfigError(top.file, f"env.{k}", "an environment variable name", repr(k))
    return {k: str(_expand(v)) for k, v in env.items()}


def resolve_site_path(name_or_path: str, configs_dir: Path) -> Path:
    """``clusterA`` -> ``site-configs/clusterA.yaml``; a path works too; unknown names list the sites."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or os.sep in name_or_path:
        if candidate.exists():
            return candidate
        raise SiteConfigError(name_or_path, "", "an existing site file", "no such file")
    path = configs_dir / f"{name_or_path}.yaml"
    if path.exists():
        return path
    available = sorted(p.stem for p in configs_dir.glob("*.yaml"))
    raise SiteConfigError(
        f"--site {name_or_path}", "", f"a site among: {', '.join(available) or '(none)'}", f"no {path}"
    )


def load_site(name_or_path: str, configs_dir: Path) -> Site:
    path = resolve_site_path(name_or_path, configs_dir)
    return parse_site(path, _read_yaml(path))
