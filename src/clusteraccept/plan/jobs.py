"""The plan (DESIGN.md §2): pure. Site -> the jobs a run submits.

* one per-node probe job over all nodes (every node-side check family at once);
* per block, one campaign allocation whose driver runs rounds of steps: intra-node collectives (every node
  at once), then pair rounds (perfect matchings by the circle method; each pair with every rail at once),
  then block-wide collectives;
* one cross-block campaign over the sampled cross-block pairs and the whole-node-set collectives.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from clusteraccept.families import NODE_FAMILIES
from clusteraccept.plan.commands import nodelist, step_shape, tool_of
from clusteraccept.plan.matchings import circle_rounds, cross_block_pairs, greedy_matchings
from clusteraccept.site.memo import ByIdentity
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import Rail


@dataclass(frozen=True)
class Step:
    """One srun job step; ``subject`` is what a verdict (and ``-k``) names.

    The command line is kept as its shared rendered shape plus this step's values (nodes, environment)
    and built on demand: a 4,096-node campaign has half a million steps.
    """

    kind: str  # node | pair | block | domain (a multi-node NVLink domain's collective)
    scope: str  # intra_node | pair_in_block | pair_cross_block | block | all | sharp | nvlink_domain
    collective: str
    nodes: tuple[str, ...]
    rail: int | None
    subject: str
    env: tuple[tuple[str, str], ...] = ()
    shape: tuple[str, ...] = field(default=(), compare=False, repr=False)
    node_pos: int = field(default=-1, compare=False, repr=False)
    env_pos: tuple[int, ...] = field(default=(), compare=False, repr=False)
    tool: str = "nccl-tests"  # or "torch-nccl" (the fallback collector): the evidence source and parser
    family: str = "nccl"  # the check family that judges it ("sharp" for the SHARP on/off runs)
    variant: str = ""  # "on" / "off" for the SHARP runs
    attempt: str = ""  # a confirmation step (plan/confirm.py): "retest", "bisect<bit><a|b>"

    @property
    def argv(self) -> tuple[str, ...]:
        return tuple(self.fill(list(self.shape)))

    def fill(self, words: list[str], quote: Callable[[str], str] | None = None) -> list[str]:
        """``words`` (the shape, or its words already quoted) with this step's values in place, each passed
        through ``quote`` (a job file's step lines quote the shape once per process, the values per step)."""
        if self.node_pos >= 0:
            hosts = nodelist(self.nodes)
            words[self.node_pos] = quote(hosts) if quote else hosts
        for pos, (k, v) in zip(self.env_pos, self.env, strict=True):
            words[pos] = quote(f"{k}={v}") if quote else f"{k}={v}"
        return words

    @property
    def name(self) -> str:
        return f"{self.collective}:{self.subject}"

    def meta(self) -> dict[str, str]:
        """What the judges need to know about the step, carried in its Evidence.meta."""
        return {
            "check": self.family,
            **({"sharp": self.variant} if self.variant else {}),
            **({"attempt": self.attempt} if self.attempt else {}),
            "kind": self.kind,
            "scope": self.scope,
            "collective": self.collective,
            "subject": self.subject,
            "nodes": ",".join(self.nodes),
            "rail": "" if self.rail is None else str(self.rail),
        }


@dataclass(frozen=True)
class Round:
    index: int
    label: str
    steps: tuple[Step, ...]


@dataclass(frozen=True)
class CampaignJob:
    """One campaign allocation. The fields after ``rounds`` are set by plan/limits.fit (0/"" until then:
    unbounded waves, unpaced, the site's time cap, no job to wait for)."""

    name: str
    block: str
    nodes: tuple[str, ...]
    rounds: tuple[Round, ...]
    max_concurrent: int = 0  # steps at once: a larger round runs as waves (plan/limits.waves)
    step_interval_s: float = 0.0  # at least this long between two step starts (slurm.step_rate_per_s)
    time_min: int = 0  # its --time: the worst case of its rounds
    after: str = ""  # the job (a shard before it) it is submitted after, once that one has ended
    snapshots: bool = False  # it snapshots port counters around its rounds (each snapshot is a step)


@dataclass(frozen=True)
class ProbeJob:
    name: str
    nodes: tuple[str, ...]
    families: tuple[str, ...]
    time_min: int = 0  # its --time (plan/limits.fit); 0: the site's cap or limits.PROBE_TIME_MIN


@dataclass(frozen=True)
class Plan:
    probe_jobs: tuple[ProbeJob, ...]
    campaign_jobs: tuple[CampaignJob, ...]

    def steps(self) -> tuple[Step, ...]:
        return tuple(s for j in self.campaign_jobs for r in j.rounds for s in r.steps)


def kept_rounds(rounds: Sequence[Round], wanted: Callable[[Step], bool]) -> tuple[Round, ...]:
    """``rounds`` with only the ``wanted`` steps: empty rounds dropped, the rest numbered again."""
    kept = (replace(r, steps=tuple(s for s in r.steps if wanted(s))) for r in rounds)
    return tuple(replace(r, index=i) for i, r in enumerate(r for r in kept if r.steps))


def nodes_used(nodes: Sequence[str], rounds: Sequence[Round]) -> tuple[str, ...]:
    """The nodes of ``nodes`` (in their order) that a step of ``rounds`` runs on: an allocation's."""
    used = {n for r in rounds for s in r.steps for n in s.nodes}
    return tuple(n for n in nodes if n in used)


def _step(
    site: Site,
    *,
    kind: str,
    scope: str,
    collective: str,
    nodes: tuple[str, ...],
    rail: int | None,
    subject: str,
    tasks_per_node: int,
    env: dict[str, str],
    family: str = "nccl",
    variant: str = "",
) -> Step:
    shape, node_pos, env_pos = step_shape(site, collective, len(env), len(nodes), tasks_per_node)
    env_t = tuple(env.items())
    tool = tool_of(site)
    return Step(
        kind, scope, collective, nodes, rail, subject, env_t, shape, node_pos, env_pos, tool, family, variant
    )


def _sharp_rounds(site: Site, nodes: tuple[str, ...], subject: str, first: int) -> list[Round]:
    """An all_reduce across the nodes with the site's SHARP settings and the same without
    (NCCL_COLLNET_ENABLE per NCCL's env docs), both logging NCCL INFO: the sharp family reads the CollNet
    channels and the uplift."""
    if not site.sharp.enabled or len(nodes) < 2 or tool_of(site) != "nccl-tests":
        return []
    gpus = min(site.node_type(n).gpus for n in nodes)
    # the "off" run keeps the site's SHARP settings (plugin, transport): only CollNet differs
    rails = rail_hcas(site, nodes)
    # a block inside one NVL72 rack: both runs over the network, or the uplift would measure NVLink
    on = {**rails, **off_mnnvl(site, nodes), **site.sharp.env, "NCCL_COLLNET_ENABLE": "1"}
    off = {**rails, **off_mnnvl(site, nodes), **site.sharp.env, "NCCL_COLLNET_ENABLE": "0"}
    return [
        Round(
            first + i,
            f"sharp {variant}",
            (
                _step(
                    site,
                    kind="block",
                    scope="sharp",
                    collective="all_reduce",
                    nodes=nodes,
                    rail=None,
                    subject=subject,
                    tasks_per_node=gpus,
                    env=env,
                    family="sharp",
                    variant=variant,
                ),
            ),
        )
        for i, (variant, env) in enumerate((("on", on), ("off", off)))
    ]


def pair_steps(site: Site, a: str, b: str, scope: str, collective: str) -> list[Step]:
    """Every rail of one pair at once (one step per rail); collectives get rounds of their own, since two
    collectives on the same GPU and HCA at once would measure each other."""
    off_nvlink = tuple(off_mnnvl(site, (a, b)).items())
    shape, node_pos, env_pos, rails, tool = _pair_shape(site, a, collective, off_nvlink)
    return [
        Step("pair", scope, collective, (a, b), i, f"{a}-{b}:rail{i}", env, shape, node_pos, env_pos, tool)
        for i, env in rails
    ]


# What every pair step of one node type, collective and MNNVL setting shares: ~4 million steps at 16,384
# nodes, each of whose shape and rail environment used to be worked out again.
PairShape = tuple[
    tuple[str, ...], int, tuple[int, ...], tuple[tuple[int, tuple[tuple[str, str], ...]], ...], str
]
_PAIR_SHAPES: ByIdentity[tuple[int, str, tuple[tuple[str, str], ...]], PairShape] = ByIdentity()


def _pair_shape(site: Site, a: str, collective: str, off_nvlink: tuple[tuple[str, str], ...]) -> PairShape:
    """The shared shape of a pair step from node ``a``'s type (held by ``site``), and per rail its index
    and environment. GPU k of each node, pinned to rail k's HCA. NCCL_IB_HCA: "=mlx5_3:1" selects exactly
    that device and port (NCCL env docs, NCCL_IB_HCA: '=' prefix = exact match, ':port'). NCCL_IB_HCA is
    NET/IB's own: an EFA rail is GPU k alone, and aws-ofi-nccl gives it the EFA devices nearest it (the
    NCCL log's channel lines say which: checks/launch.py)."""
    node_type = site.node_type(a)
    memo = _PAIR_SHAPES.of(site)
    key = (id(node_type), collective, off_nvlink)
    found = memo.get(key)
    if found is None:
        pinned = 2 if node_type.fabric in IB_VERBS else 1  # CUDA_VISIBLE_DEVICES (+ NCCL_IB_HCA)
        shape, node_pos, env_pos = step_shape(site, collective, pinned + len(off_nvlink), 2, 1)
        rails = tuple(
            (rail.index, (("CUDA_VISIBLE_DEVICES", str(rail.gpu)), *rail_pin(site, a, rail), *off_nvlink))
            for rail in node_type.rails
        )
        found = memo[key] = (shape, node_pos, env_pos, rails, tool_of(site))
    return found


# NCCL env docs, NCCL_MNNVL_ENABLE (NCCL_MNNVL in the 2.20 docs): "Enable NCCL to use multi-node
# NVLink, when available": 0 disables it, 1 forces it (NCCL fails where it cannot), 2 (the default)
# enables it where it is available. Between two nodes of one NVLink domain, a collective left to NCCL
# crosses the rack's NVLink, not the network rails the nccl family measures.
MNNVL = "NCCL_MNNVL_ENABLE"


def off_mnnvl(site: Site, nodes: tuple[str, ...]) -> dict[str, str]:
    """``NCCL_MNNVL_ENABLE=0`` where two of ``nodes`` share an NVLink domain (the step must measure the
    network between them), else nothing."""
    domains = [site.domain_of(n) for n in nodes]
    shared = len({d for d in domains if d}) < sum(1 for d in domains if d)
    return {MNNVL: "0"} if shared else {}


def block_steps(site: Site, nodes: tuple[str, ...], scope: str, label: str) -> list[Step]:
    gpus = min(site.node_type(n).gpus for n in nodes)
    return [
        _step(
            site,
            kind="block",
            scope=scope,
            collective=c,
            nodes=nodes,
            rail=None,
            subject=label,
            tasks_per_node=gpus,
            env={**rail_hcas(site, nodes), **off_mnnvl(site, nodes)},
        )
        for c in site.nccl.block_collectives
    ]


def domain_rounds(site: Site, nodes: tuple[str, ...], first: int) -> list[Round]:
    """Per multi-node NVLink domain inside ``nodes`` (an NVL72 rack), one all_reduce over every GPU of it
    with multi-node NVLink required (NCCL_MNNVL_ENABLE=1): the nvlink family judges that NCCL used it
    and its busbw (checks/nvlink_domain.py). Domains one after the other: each uses all their GPUs."""
    inside = set(nodes)
    out: list[Round] = []
    for name, members in site.nvlink_domains.items():
        if len(members) < 2 or not inside.issuperset(members):
            continue
        step = _step(
            site,
            kind="domain",
            scope="nvlink_domain",
            collective="all_reduce",
            nodes=members,
            rail=None,
            subject=name,
            tasks_per_node=min(site.node_type(n).gpus for n in members),
            env={MNNVL: "1"},
            family="nvlink",
        )
        out.append(Round(first + len(out), f"nvlink domain {name} all_reduce", (step,)))
    return out


def plan_campaign(site: Site, block: str, nodes: tuple[str, ...]) -> CampaignJob:
    rounds: list[Round] = []
    # every node at once, one collective at a time (each uses all of a node's GPUs)
    collectives = site.nccl.intra_collectives
    for c in collectives:
        intra = [s for node in nodes for s in _step_list_intra(site, node, c)]
        if intra:
            label = "intra-node" if len(collectives) == 1 else f"intra-node {c}"
            rounds.append(Round(len(rounds), label, tuple(intra)))
    for collective in site.nccl.pair_collectives:
        for i, pairs in enumerate(circle_rounds(nodes)):
            steps = [s for a, b in pairs for s in pair_steps(site, a, b, "pair_in_block", collective)]
            if steps:
                rounds.append(Round(len(rounds), f"{collective} pairs {i + 1}", tuple(steps)))
    if len(nodes) >= 2:
        # one collective at a time: a block collective uses every GPU and rail of its nodes
        for step in block_steps(site, nodes, "block", block):
            rounds.append(Round(len(rounds), f"block {step.collective}", (step,)))
    rounds += _sharp_rounds(site, nodes, block, len(rounds))
    rounds += domain_rounds(site, nodes, len(rounds))
    return CampaignJob(f"campaign-{block}", block, nodes, tuple(rounds))


def _step_list_intra(site: Site, node: str, collective: str) -> list[Step]:
    gpus = site.node_type(node).gpus
    if gpus < 2:
        return []
    return [
        _step(
            site,
            kind="node",
            scope="intra_node",
            collective=collective,
            nodes=(node,),
            rail=None,
            subject=node,
            tasks_per_node=gpus,
            env=rail_hcas(site, (node,)),
        )
    ]


def rail_hcas(site: Site, nodes: tuple[str, ...]) -> dict[str, str]:
    """NCCL_IB_HCA naming exactly the rail HCAs of the nodes (NCCL env docs, NCCL_IB_HCA: a leading '='
    matches the names exactly, ':port' the port): a step over every GPU may use every rail, never a
    storage or management port. None where the node type has no rails."""
    nt = site.node_type(nodes[0])
    if not nt.rails or nt.fabric not in IB_VERBS:
        return {}
    return {"NCCL_IB_HCA": "=" + ",".join(f"{r.hca}:{r.port}" for r in nt.rails)}


IB_VERBS = ("infiniband", "roce")  # the fabrics NCCL's own NET/IB drives, which NCCL_IB_HCA selects


def rail_pin(site: Site, node: str, rail: Rail) -> tuple[tuple[str, str], ...]:
    """What pins a rail step to its rail's NIC: NCCL_IB_HCA on InfiniBand and RoCE, nothing elsewhere."""
    if site.node_type(node).fabric not in IB_VERBS:
        return ()
    return (("NCCL_IB_HCA", f"={rail.hca}:{rail.port}"),)


def plan_cross(site: Site, blocks: dict[str, tuple[str, ...]]) -> CampaignJob | None:
    if len(blocks) < 2:
        return None
    pairs = cross_block_pairs(blocks, site.nccl.cross_block_partners, site.nccl.seed)
    rounds = [
        Round(
            0,
            f"{c} cross-block pairs {i + 1}",
            tuple(s for a, b in matching for s in pair_steps(site, a, b, "pair_cross_block", c)),
        )
        for c in site.nccl.pair_collectives
        for i, matching in enumerate(greedy_matchings(pairs))
    ]
    rounds = [replace(r, index=i) for i, r in enumerate(rounds)]
    all_nodes = tuple(n for m in blocks.values() for n in m)
    for step in block_steps(site, all_nodes, "all", "all"):
        rounds.append(Round(len(rounds), f"all nodes {step.collective}", (step,)))
    rounds += _sharp_rounds(site, all_nodes, "all", len(rounds))
    return CampaignJob("campaign-cross", "cross", all_nodes, tuple(rounds))


def make_plan(
    site: Site,
    blocks: dict[str, tuple[str, ...]] | None = None,
    families: Sequence[str] = NODE_FAMILIES,
    nccl: bool = True,
) -> Plan:
    """The jobs of a run. ``blocks`` overrides the site's (e.g. read from ``scontrol show topology``)."""
    with _no_gc():
        return _make_plan(site, blocks, families, nccl)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Half a million acyclic Step objects: the cyclic GC rescanning them while they are made doubles the
    planning time at 4,096 nodes and finds nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _make_plan(
    site: Site, blocks: dict[str, tuple[str, ...]] | None, families: Sequence[str], nccl: bool
) -> Plan:
    blocks = blocks if blocks is not None else site.blocks
    probes = (ProbeJob("probe-nodes", site.nodes, tuple(families)),) if families else ()
    campaigns: list[CampaignJob] = []
    if nccl:
        campaigns = [plan_campaign(site, name, members) for name, members in blocks.items()]
        cross = plan_cross(site, blocks)
        if cross is not None:
            campaigns.append(cross)
    return Plan(probes, tuple(campaigns))


def describe(plan: Plan) -> dict[str, object]:
    """The plan as results.json records it: each round's label and how many steps it has. Their names are
    :func:`step_names`, kept beside results.json (judge/record.write_step_names): 4.3 million at 16,384
    nodes were 97% of a 140 MB results.json that every reader of the run parsed whole."""
    return {
        "probe_jobs": [
            {"name": j.name, "nodes": list(j.nodes), "families": list(j.families)} for j in plan.probe_jobs
        ],
        "campaign_jobs": [
            {
                "name": j.name,
                "block": j.block,
                "nodes": list(j.nodes),
                "time_min": j.time_min,
                "after": j.after,
                "snapshots": j.snapshots,
                "max_concurrent": j.max_concurrent,
                "step_interval_s": j.step_interval_s,
                "rounds": [{"label": r.label, "n_steps": len(r.steps)} for r in j.rounds],
            }
            for j in plan.campaign_jobs
        ],
    }


def step_names(plan: Plan) -> Iterator[tuple[str, list[list[str]]]]:
    """Each campaign job's name and its rounds' step names, job by job (the names of every step of a
    16,384-node plan are never held at once)."""
    for j in plan.campaign_jobs:
        yield j.name, [[s.name for s in r.steps] for r in j.rounds]
