"""``python -m clusteraccept init``: a site file written from the cluster itself (issue 23).

The suite's own probe job (the topology family: ``nvidia-smi topo -m``, the GPUs' and RDMA devices' sysfs,
``ibstat``) runs on the nodes of a partition or a hostlist (all of them, or ``--sample N`` per hostname
pattern), through the job layer as a run's probes do; its evidence is archived under
``<reports>/<name>/init-<id>/`` before anything reads it. ops/shape.py reads each node's shape and the
deviations from its type's majority, ops/sitefile.py writes the site file, which the project's own loader
must accept before it is written. An existing file is never overwritten without ``--force``: the diff is
shown instead. Blocks: ``blocks: slurm`` where ``scontrol show topology`` groups the nodes.
"""

from __future__ import annotations

import difflib
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import hostlist
import yaml

from clusteraccept.checks.hostfacts import NodeEvidence, by_node, gpu_addresses
from clusteraccept.errors import ArchiveError, InitError, SiteConfigError, SubmitError
from clusteraccept.evidence import Evidence
from clusteraccept.jobs.archive import archive_job
from clusteraccept.ops.shape import NodeShape, shape
from clusteraccept.ops.sitefile import NodeTypeDraft, deviation_table, drafts, gpudirect_lines, render
from clusteraccept.rundir import new_run_id
from clusteraccept.site.env_file import exported
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import REST_BLOCK

FAMILY = "topology"
_BLOCKS_EXAMPLE = 'e.g. blocks: {leaf1: "node[001-032]"}'


@dataclass(frozen=True)
class InitRequest:
    out: Path
    partition: str | None = None
    nodes: str | None = None  # a hostlist: exact node names
    sample: int | None = None  # N nodes per hostname pattern
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    executor: str = "slurm"  # slurm | local (one host: this machine, or the simulated hosts of --env)
    dry_run: bool = False
    force: bool = False
    reports_dir: Path = Path("reports")
    slurm_conf: str | None = None
    bin_dir: str | None = None  # the cluster's Slurm clients, where not this host's PATH
    python: str | None = None  # the nodes' interpreter (a shared virtualenv)
    env: tuple[tuple[str, str], ...] = ()  # the probe job's environment (KEY=VALUE)

    @property
    def name(self) -> str:
        return self.out.stem


def _slurm_section(req: InitRequest) -> dict[str, Any]:
    keys = ("partition", "account", "qos", "reservation", "slurm_conf", "bin_dir", "python")
    return {"executor": req.executor, **{k: v for k in keys if (v := getattr(req, k))}}


def sampled(nodes: Sequence[str], n: int | None, features: dict[str, str] | None = None) -> tuple[str, ...]:
    """The first ``n`` nodes of each hostname pattern (the name with its digits masked) and Slurm feature
    set, node order kept."""
    if not n:
        return tuple(nodes)
    seen: dict[tuple[str, str], int] = {}
    out = []
    for node in nodes:
        key = (re.sub(r"[0-9]+", "#", node), (features or {}).get(node, ""))
        if seen.get(key, 0) < n:
            seen[key] = seen.get(key, 0) + 1
            out.append(node)
    return tuple(out)


def select_nodes(req: InitRequest) -> tuple[str, ...]:
    """The nodes to probe: ``--nodes``, else the partition's (sinfo), else (local executor) this host."""
    if req.nodes:
        try:
            return sampled(hostlist.expand_hostlist(req.nodes), req.sample)
        except hostlist.BadHostlist as exc:
            raise InitError(
                f"init: --nodes: expected a hostlist like 'node[001-128]', got {req.nodes!r} ({exc})"
            ) from None
    if req.partition:
        from clusteraccept.jobs.slurm_clients import partition_nodes

        try:
            found = partition_nodes(req.partition, req.slurm_conf)
        except SubmitError as exc:
            raise InitError(f"init: --partition {req.partition}: {exc}") from None
        if not found:
            raise InitError(
                f"init: --partition {req.partition}: expected a partition with nodes, sinfo lists none"
            )
        return sampled(tuple(found), req.sample, found)
    if req.executor == "local":
        return (socket.gethostname().split(".")[0],)
    raise InitError("init: expected --partition P or --nodes HOSTLIST, got neither")


def bootstrap_site(req: InitRequest, nodes: Sequence[str]) -> Site:
    """The least site the probe job needs: its nodes, Slurm access and environment; no node type yet (one
    placeholder: the topology probes read every GPU and RDMA device whatever the site says). Its one GPU is
    the job's --gpus-per-node=1; slurm.exclusive (the default) gives the job every GRES of its nodes
    (sbatch(1) --exclusive: "allocated all CPUs and GRES"), so where cgroups hide unallocated GPUs the
    probes still see them all."""
    data: dict[str, Any] = {
        "name": req.name,
        "slurm": _slurm_section(req),
        "nodes": hostlist.collect_hostlist(list(nodes)),
        "node_types": {"unknown": {"gpus": 1, "numa_expected": False}},
    }
    if req.env:
        data["env"] = dict(req.env)
    return parse_site(req.out, data)


def collect(
    req: InitRequest,
    site: Site,
    run_dir: Path,
    families: tuple[str, ...] = (FAMILY,),
    nodes: Sequence[str] | None = None,
) -> tuple[list[tuple[Evidence, str]], list[str]]:
    """Run the probe job of ``families`` (on ``nodes``, default every node of ``site``); its evidence as
    archived (before any parser reads it) and what went wrong."""
    from clusteraccept import flow
    from clusteraccept.jobs.slurm_clients import export_client_env
    from clusteraccept.jobs.submit import JobLayer
    from clusteraccept.plan.jobs import make_plan

    export_client_env(site)
    plan = make_plan(site, families=families, nccl=False)
    layer = JobLayer(site, run_dir, dry_run=req.dry_run, executor=req.executor)
    # local: the submit host is the node, its probes read this process's environment (only while they run)
    with exported(dict(req.env) if req.executor == "local" else {}):
        for pj in plan.probe_jobs:
            pj = replace(pj, nodes=tuple(n for n in pj.nodes if nodes is None or n in nodes))
            if pj.nodes:
                layer.submit_probes(pj, flow.probe_options(site))
        outcomes = layer.wait()
    archived: list[tuple[Evidence, str]] = []
    said: list[str] = []
    for o in outcomes:
        archived += archive_job(run_dir, o.name, o.evidence)
        if o.missing or o.state not in ("COMPLETED", "DRY_RUN", "FINISHED", "DONE"):
            said.append(o.message)
    return [(ev, ref) for ev, ref in archived if ev.meta.get("check") in families], said


# Turns the roce probes on for the second job; its values are no expectation: the probes read every rail's
# settings whatever the section says (probes/roce.py), and this section is not written.
_PROBE_ROCE = {"lossless_priority": 3, "trust": "dscp", "roce_dscp": 26, "mtu": 4200}


def roce_lines(req: InitRequest, text: str, types: Sequence[NodeTypeDraft], run_dir: Path) -> list[str]:
    """The ``roce:`` section from a second probe job, the roce family's, on the nodes of the node types whose
    rails are Ethernet (RoCE); [] where there is none."""
    from clusteraccept.checks.roce_evidence import rails_of
    from clusteraccept.ops.roceconf import observe, section_lines

    nodes = [s.node for t in types if t.link_layer == "Ethernet" for s in t.shapes]  # as render writes it
    if not nodes:
        return []
    data = yaml.safe_load(text)
    data.update({"roce": _PROBE_ROCE, **({"env": dict(req.env)} if req.env else {})})
    probe_site = parse_site(req.out, data)
    try:
        evidence, said = collect(req, probe_site, run_dir, ("roce",), nodes)
    except SubmitError as exc:  # the topology is known: the file is still worth writing
        return [f"# roce: not derived: the roce probe job failed ({_one_line(exc)}); write it by hand"]
    by_host: dict[str, list[tuple[Evidence, str]]] = {}
    for ev, ref in evidence:
        by_host.setdefault(ev.host, []).append((ev, ref))
    rails = [
        observe(r)
        for node in nodes
        for r in rails_of(node, probe_site.node_type(node).rails, by_host.get(node, []))
    ]
    return [f"# {_one_line(line)}" for line in said] + section_lines(rails)


def _one_line(text: object) -> str:
    """A message in one line (Slurm's client errors span several): for a comment, or a refusal."""
    return " ".join(str(text).split())


def iommu_of(per: dict[str, NodeEvidence], shapes: Sequence[NodeShape]) -> dict[str, set[str]]:
    """Each typed node's GPUs' IOMMU modes (checks/gpudirect.iommu_modes): the GPU addresses from the
    topology evidence's nvidia-smi, the groups from the gpudirect probe's sysfs reads."""
    from clusteraccept.checks.gpudirect import iommu_modes

    out: dict[str, set[str]] = {}
    for s in shapes:
        addrs, _ = gpu_addresses(per[s.node])
        if addrs:
            out[s.node] = set(iommu_modes(per[s.node], addrs).values())
    return out


def node_evidence(evidence: Sequence[tuple[Evidence, str]]) -> dict[str, NodeEvidence]:
    """Each node's topology evidence with the gpudirect probe's files (its commands left out: they would
    answer ``command()`` before the topology probe's own nvidia-smi), one reading for shapes and IOMMU;
    only the nodes the topology evidence came back from."""
    topo_hosts = {ev.host for ev, _ in evidence if ev.meta.get("check") == FAMILY}
    kept = [
        (ev, ref)
        for ev, ref in evidence
        if ev.host in topo_hosts and (ev.meta.get("check") == FAMILY or (ev.path and not ev.argv))
    ]
    return by_node(kept)


def shapes_of(per: dict[str, NodeEvidence], nodes: Sequence[str]) -> tuple[list[NodeShape], list[str]]:
    """Each answering node's shape, in node order, and a line for each node that cannot be typed."""
    shapes, said = [], []
    for node in nodes:
        if node not in per:
            said.append(f"init: {node}: no evidence came back from the probe job")
            continue
        s = shape(node, per[node])
        said += list(s.problems)
        if s.fields.get("gpus") == "0":
            said.append(f"init: {node}: expected GPUs, nvidia-smi listed none: left out of the node types")
        else:
            shapes.append(s)
    return shapes, said


def run(req: InitRequest, say: Callable[[str], None] = print) -> int:
    """The whole command: 0 written (or shown, --dry-run), 1 when a diff was shown instead of overwriting;
    a refusal (InitError) in one line, also where a file could not be written."""
    try:
        return _run(req, say)
    except (OSError, ArchiveError) as exc:
        raise InitError(f"init: {_one_line(exc)}") from None


def _run(req: InitRequest, say: Callable[[str], None]) -> int:
    nodes = select_nodes(req)
    site = bootstrap_site(req, nodes)
    run_dir = req.reports_dir / req.name / f"init-{new_run_id()}"
    for sub in ("raw", "jobs"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    listed = hostlist.collect_hostlist(list(nodes))
    say(f"init: probing {len(nodes)} node(s) ({listed}) for {req.out}: {run_dir}")
    evidence, problems = collect(req, site, run_dir, (FAMILY, "gpudirect"))
    if req.dry_run:
        say(f"init: dry run: the probe job's script is in {run_dir / 'jobs'}; nothing submitted")
        return 0
    for line in problems:
        say(f"init: {line}")
    per = node_evidence(evidence)
    shapes, said = shapes_of(per, nodes)
    for line in said:
        say(line)
    if not shapes:
        raise InitError(
            f"init: expected at least one node with GPUs to answer, got none of {len(nodes)} ({run_dir})"
        )
    types = drafts(shapes)
    # the evidence's folder by its pattern: a second init that finds the same cluster writes the same file
    source = f"{req.reports_dir / req.name}/init-*"
    text = render(req.name, _slurm_section(req), types, source, dict(req.env))
    text += "".join(f"{line}\n" for line in gpudirect_lines(iommu_of(per, shapes)))
    text += "".join(f"{line}\n" for line in roce_lines(req, text, types, run_dir)) + _blocks(site)
    try:  # the file must be one the suite accepts: a refusal is init's own bug, said as the loader says it
        parse_site(req.out, yaml.safe_load(text))
    except (SiteConfigError, yaml.YAMLError) as exc:
        refused = run_dir / f"{req.name}.refused.yaml"
        refused.write_text(text)  # to fix by hand, without probing the cluster again
        raise InitError(
            f"init: the site file it would write is refused by the loader ({refused}): {_one_line(exc)}"
        ) from None
    table = deviation_table(types)
    (run_dir / f"{req.name}.yaml").write_text(text)
    (run_dir / f"{req.name}.deviations.txt").write_text(table)
    for t in types:
        say(f"init: node type {t.name}: {len(t.shapes)} node(s), {t.inventory}, {len(t.rails)} rails")
        for q in t.questions:
            say(f"init: decide ({t.name}): {q}")
    say(table.rstrip("\n"))
    if req.out.exists() and not req.force:
        old = req.out.read_text()
        if old == text:
            say(f"init: {req.out} is unchanged")
            return 0
        diff = difflib.unified_diff(old.splitlines(True), text.splitlines(True), str(req.out), "init")
        say("".join(diff).rstrip("\n"))
        say(f"init: {req.out} exists: the diff above, the new file in {run_dir}; --force overwrites it")
        return 1
    req.out.parent.mkdir(parents=True, exist_ok=True)
    req.out.write_text(text)
    req.out.with_name(f"{req.name}.deviations.txt").write_text(table)
    say(f"init: wrote {req.out} and {req.out.with_name(f'{req.name}.deviations.txt')}")
    return 0


def _blocks(site: Site) -> str:
    """``blocks: slurm`` where Slurm's topology groups the nodes (a comment naming them), else a comment."""
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    if site.slurm.executor == "slurm":
        try:
            blocks = slurm_blocks(site)
        except SubmitError as exc:
            return f"# blocks: none ({_one_line(exc)}); add them by hand, {_BLOCKS_EXAMPLE}\n"
        if set(blocks) - {REST_BLOCK}:
            named = "; ".join(f"{b}: {hostlist.collect_hostlist(list(n))}" for b, n in blocks.items())
            return f"blocks: slurm  # scontrol show topology: {named}\n"
    return f"# blocks: none from Slurm (no topology plugin); add them by hand, {_BLOCKS_EXAMPLE}\n"
