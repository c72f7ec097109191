"""One run, end to end and one way: plan -> submit -> archive raw/ -> parse+judge -> results.json.

The plugin calls :func:`execute` once per run (under the run lock, so pytest-xdist workers share it) and
:func:`rejudge` for ``--rejudge RUN_DIR``.
"""

from __future__ import annotations

import gc
import getpass
import hashlib
import multiprocessing as mp
import pickle
import typing
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from clusteraccept import checks
from clusteraccept.checks import kept
from clusteraccept.checks import nccl as nccl_check
from clusteraccept.checks.confirm import suspects_of
from clusteraccept.checks.fingerprint import (
    changed_mid_run,
    changed_verdicts,
    describe_change,
    differences,
    fingerprints,
)
from clusteraccept.errors import ArchiveError
from clusteraccept.evidence import Evidence
from clusteraccept.families import JUDGED
from clusteraccept.jobs.archive import (
    archive_job,
    keep_verdicts,
    kept_verdicts,
    load_all,
    parsed_bundle,
    write_parsed,
)
from clusteraccept.jobs.submit import JobLayer, JobOutcome
from clusteraccept.judge import record
from clusteraccept.judge.verdicts import Verdict
from clusteraccept.parsers.stored import VERSION as PARSER_VERSION
from clusteraccept.parsers.stored import Stored
from clusteraccept.plan import limits
from clusteraccept.plan.confirm import confirmation_job
from clusteraccept.plan.jobs import CampaignJob, Plan, Step, describe, kept_rounds, make_plan, step_names
from clusteraccept.plan.subjects import not_applicable
from clusteraccept.redact import redact_text
from clusteraccept.render import REPO_ROOT
from clusteraccept.rundir import read_json
from clusteraccept.site.model import Site

RESULTS = record.RESULTS


class Scope(Protocol):
    """What a run is restricted to, decided above the run (``--only-due``:
    :class:`clusteraccept.ops.scope.Scope`, from the attestations of earlier runs); the run applies it."""

    def restrict(self, plan: Plan) -> Plan:
        """The plan cut down to the scope."""
        ...

    def unavailable(self, outcome: JobOutcome | None) -> JobOutcome | None:
        """The preflight's unusable nodes that matter to this scope."""
        ...

    def record(self, plan: Plan | None = None) -> dict[str, Any]:
        """results.json ``scope``."""
        ...


@dataclass(frozen=True)
class Request:
    site: Site
    run_dir: Path
    families: tuple[str, ...]
    nccl: bool
    subjects: frozenset[str] | None = None  # campaign step subjects selected (-k); None = all
    nodes: frozenset[str] | None = None  # the nodes probed and judged (-k node07, --nodes); None = all
    domains: frozenset[str] | None = None  # the NVLink domains whose collective runs (-k rack1); None = all
    dry_run: bool = False
    executor: str | None = None
    scope: Scope | None = None  # --only-due: submit and judge only what is attestation-due


def _filter(
    plan: Plan,
    subjects: frozenset[str] | None,
    families: tuple[str, ...],
    nccl: bool,
    domains: frozenset[str] | None = None,
) -> Plan:
    """Keep the campaign steps the selected tests need: nccl steps when nccl tests are selected (only the
    selected subjects, ``-k``), the SHARP on/off runs when the sharp family is, an NVLink domain's
    collective when its item is."""

    def wanted(step: Step) -> bool:
        if step.family == "nccl":
            return nccl and (subjects is None or step.subject in subjects)
        if step.kind == "domain":
            return step.family in families and (domains is None or step.subject in domains)
        return step.family in families

    every = subjects is None and domains is None and nccl
    if every and {s.family for s in plan.steps()} <= {"nccl", *families}:
        return plan  # every step wanted: a million of them at 4,096 nodes, no need to ask each
    jobs: list[CampaignJob] = []
    for job in plan.campaign_jobs:
        rounds = kept_rounds(job.rounds, wanted)
        if rounds:
            jobs.append(replace(job, rounds=rounds))
    return replace(plan, campaign_jobs=tuple(jobs))


def git_revision() -> str:
    """The suite's git revision, ``-dirty`` when tracked files differ from it; "unknown" outside git."""
    from clusteraccept import hostio

    git = ["git", "-C", str(REPO_ROOT)]
    rev = hostio.run([*git, "rev-parse", "--short", "HEAD"], timeout_s=5, source="git")
    if not rev.ok or not rev.stdout.strip():
        return "unknown"
    dirty = hostio.run([*git, "status", "--porcelain", "--untracked-files=no"], timeout_s=5, source="git")
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def baselines_hash(site: Site) -> str:
    source = Path(site.baselines_file or site.file)
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16] if source.exists() else ""


def _header(req: Request, plan: Plan) -> dict[str, Any]:
    site = req.site
    return {
        "schema": 1,
        "site": site.name,
        "site_file": site.file,
        "run_id": req.run_dir.name,
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "ended": None,
        "operator": getpass.getuser(),
        "suite_revision": git_revision(),
        "simulated": site.simulated,
        "dry_run": req.dry_run,
        "executor": req.executor or site.slurm.executor,
        "baselines_file": site.baselines_file or site.file,
        "baselines_sha256": baselines_hash(site),
        "nodes": list(site.nodes),
        "blocks": {name: list(members) for name, members in site.blocks.items()},
        "nvlink_domains": {name: list(members) for name, members in site.nvlink_domains.items()},
        # -k / --nodes selected some campaign steps or nodes only: not a full acceptance
        "subset": req.subjects is not None or req.nodes is not None,
        # the families with no items on this site (plan/subjects.py): not run, and not missing either
        "not_applicable": {f: why for f in JUDGED if (why := not_applicable(site, f)) is not None},
        "plan": describe(plan),
    }


def _outcome_dict(o: JobOutcome) -> dict[str, Any]:
    return {
        "name": o.name,
        "job_id": o.job_id,
        "state": o.state,
        "missing": list(o.missing),
        "message": redact_text(o.message),
        "evidence_count": len(o.evidence),
    }


def judge_all(
    site: Site,
    archived: dict[str, list[tuple[Evidence, str]]],
    families: tuple[str, ...],
    nccl: bool,
    nodes: Sequence[str] | None = None,  # the nodes the node checks judge (default: the site's)
    run_dir: Path | None = None,  # where the steps' parses are stored (parsers/stored.py); None: not
    reparse: bool = False,  # every step parsed from raw/ again, whatever was stored
    changed: Mapping[str, Any] | None = None,  # changed_mid_run's, where the caller has it already
) -> list[Verdict]:
    judged = (*families, *(("nccl",) if nccl else ()))
    # a node rebooted or re-imaged between the run's jobs: every family's item of it is not accepted
    if changed is None:
        changed = changed_mid_run(archived.get("fingerprint", []), archived.get("nccl", []))
    verdicts = changed_verdicts(changed, judged, site.nodes if nodes is None else nodes)
    over = site.nodes if nodes is None else nodes
    others = [f for f in judged if f != "nccl"]
    work = partial(_judge_families, site, archived, others, over, run_dir, reparse)
    # A campaign big enough for the step judging's worker processes: the other families are judged in a
    # child of their own meanwhile (their ~4 s at 256 nodes were the parent's alone, its workers waiting).
    steps: list[Verdict] = []
    many = nccl and len(archived.get("nccl", ())) >= nccl_check.PARALLEL_MIN and nccl_check.cpus() > 1
    with _beside(work, fork=many and bool(others) and nccl_check.may_fork()) as by_family:
        if nccl:
            evidence = _evidence_of("nccl", archived)
            if run_dir is not None:
                parses = partial(parsed_bundle, run_dir, PARSER_VERSION)
                stored = Stored() if reparse else Stored(parses, kept=partial(kept_verdicts, run_dir))
                steps = checks.judge("nccl", site, evidence, over, stored=stored)
                _store_parsed(run_dir, stored)
            else:
                steps = checks.judge("nccl", site, evidence, over)
        judged_by = by_family()
    for family in judged:
        verdicts.extend(steps if family == "nccl" else judged_by[family])
    return verdicts


def _evidence_of(
    family: str, archived: Mapping[str, list[tuple[Evidence, str]]]
) -> list[tuple[Evidence, str]]:
    """What ``family``'s judge reads: its own evidence, and what other families gathered that it needs."""
    evidence = list(archived.get(family, []))
    if family == "gpudirect":  # the pair campaign's NCCL INFO logs show whether NET channels use GDRDMA
        evidence += [(ev, p) for ev, p in archived.get("nccl", []) if ev.meta.get("kind") == "pair"]
    if family == "nccl":  # a node whose NVSwitch fabric is not up runs no CUDA: its steps are not judged
        evidence += [(ev, p) for ev, p in archived.get("nvlink", []) if ev.source == "nvidia-smi-q"]
        # nor are those of a node short of an EFA device (checks/efa.incomplete); the devices' PCI
        # addresses say which ones aws-ofi-nccl used (launch.nic)
        evidence += [(ev, p) for ev, p in archived.get("efa", []) if ev.source != "proc-limits"]
        # and a Slingshot node short of a NIC or with a link down (checks/slingshot.incomplete), whose
        # cxi NICs' PCI addresses say which ones aws-ofi-nccl used
        evidence += [(ev, p) for ev, p in archived.get("slingshot", []) if ev.source != "job-env"]
        # and a TCPX(O) node with a GPU NIC gone or down (checks/tcpx.incomplete)
        evidence += [(ev, p) for ev, p in archived.get("tcpx", []) if ev.source in ("sysfs", "sysfs-link")]
    if family in ("roce", "nvlink"):  # the campaign's counter snapshots around traffic (checks/counters)
        evidence += [(ev, p) for ev, p in archived.get("nccl", []) if ev.source == "counters"]
    return evidence


def _judge_families(
    site: Site,
    archived: Mapping[str, list[tuple[Evidence, str]]],
    families: Sequence[str],
    nodes: Sequence[str],
    run_dir: Path | None = None,
    reparse: bool = False,
) -> dict[str, list[Verdict]]:
    return {f: _judge_family(f, site, _evidence_of(f, archived), nodes, run_dir, reparse) for f in families}


def _judge_family(
    family: str,
    site: Site,
    evidence: Sequence[tuple[Evidence, str]],
    nodes: Sequence[str],
    run_dir: Path | None,
    reparse: bool,
) -> list[Verdict]:
    """``family``'s verdicts, judged from its view of the site (checks/kept.py), kept or judged: those kept
    in ``run_dir`` where they were judged under the same key (and not ``reparse``), else judged here and
    kept for the next ``--rejudge``. Not being able to keep them is no failure of the run (as the parses)."""
    seen = kept.view(family, site)
    if run_dir is None:
        return checks.judge(family, seen, evidence, nodes)
    key = kept.key_of(family, seen, nodes, evidence)
    line = None if reparse else kept_verdicts(run_dir, family)
    verdicts = kept.loads(line, key) if line is not None else None
    if verdicts is not None:
        return verdicts
    verdicts = checks.judge(family, seen, evidence, nodes)
    line = kept.dumps(key, verdicts)
    if line is not None:
        with suppress(ArchiveError):  # a full disk: writing the record says so next, with its own error
            keep_verdicts(run_dir, family, line)
    return verdicts


T = TypeVar("T")


@contextmanager
def _beside(work: Callable[[], T], fork: bool) -> Iterator[Callable[[], T]]:
    """``work`` started in a forked child (``fork``; else done where its result is asked for), beside what
    this process does next in the ``with``; the call it gives waits for the result (or raises what the
    child raised). The child reads the parent's objects as they were at the fork (copy-on-write: frozen
    out of the collector's way, as the step judging's workers are). Leaving the ``with`` early (an
    exception) ends the child."""
    if not fork:
        yield work
        return
    frozen = gc.get_freeze_count() > 0
    gc.freeze()
    ctx = mp.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run_child, args=(work, send), name="clusteraccept-judge", daemon=True)
    child.start()
    send.close()  # the child holds the only writing end: its exit is this end's end of file

    def result() -> T:
        try:
            ok, got = pickle.loads(receive.recv_bytes())
        except EOFError:
            child.join()
            raise RuntimeError(
                f"the process judging beside the steps ended without a result (exit status {child.exitcode})"
            ) from None
        child.join()
        if not ok:
            raise got
        return typing.cast(T, got)

    try:
        yield result
    finally:
        receive.close()
        if child.is_alive():  # left early: its result is not wanted
            child.terminate()
            child.join()
        if not frozen:
            gc.unfreeze()


def _run_child(work: Callable[[], Any], send: Any) -> None:
    try:
        out: tuple[bool, Any] = (True, work())
    except Exception as exc:  # raised in the parent, as if judged there
        out = (False, exc)
    try:
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # an exception that does not pickle: its type and text
        data = pickle.dumps((False, RuntimeError(f"{type(out[1]).__name__}: {out[1]} ({exc})")))
    send.send_bytes(data)
    send.close()


def _store_parsed(run_dir: Path, stored: Stored) -> None:
    """Store what the judge parsed or judged anew, bundle by bundle (each bundle's file whole, as the judge
    gives it: the lines it kept beside the new ones), and the verdicts it kept whole (checks/kept.py), so
    that the next ``--rejudge`` reads them instead of parsing raw/ again. Not being able to is no failure
    of the run: its evidence is in raw/, and the record is written after this."""
    with suppress(ArchiveError):  # a full disk: writing the record says so next, with its own error
        for bundle, whole in stored.fresh.items():
            write_parsed(run_dir, PARSER_VERSION, bundle, whole)
        for name, line in stored.keep.items():
            keep_verdicts(run_dir, name, line)


def preflight(site: Site, executor: str) -> tuple[Site, JobOutcome | None]:
    """Leave out nodes Slurm will not run a job on (down, drained, failing...): their jobs would pend until
    the deadline. They are reported as not tested (ERROR verdicts, INCOMPLETE run), never silently dropped."""
    if executor != "slurm":
        return site, None
    from clusteraccept.jobs.slurm_clients import node_states, unusable, why_unusable

    try:
        states = node_states(site.slurm.slurm_conf)
    except Exception as exc:  # no sinfo here (e.g. a dry run on a laptop): submit as planned
        return site, JobOutcome("preflight", None, "UNKNOWN", message=f"sinfo failed: {exc}")
    bad = unusable(states, site.nodes)
    if not bad:
        return site, None
    keep = tuple(n for n in site.nodes if n not in bad)
    blocks = {b: tuple(n for n in m if n not in bad) for b, m in site.blocks.items()}
    why = why_unusable(bad)
    outcome = JobOutcome(
        "preflight", None, "NODES_UNAVAILABLE", missing=tuple(bad), message=f"not tested: {why}"
    )
    # an NVL72 rack with a drained tray is still a domain: its collective runs on the trays Slurm will run
    domains = {d: tuple(n for n in m if n not in bad) for d, m in site.nvlink_domains.items()}
    kept = {d: m for d, m in domains.items() if m}
    blocks = {b: m for b, m in blocks.items() if m}
    return replace(site, nodes=keep, blocks=blocks, nvlink_domains=kept), outcome


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector paused over work that makes millions of acyclic objects: the plan and its
    job files (a Step per pair and rail: 1.1 million at 4,096 nodes; ~25% of a dry run's ``flow.execute``
    was the collector walking them again at each full collection as the heap grew), a rejudge's evidence
    and verdicts, the reports' one pass (plugin.py). Reference counting still frees everything; the
    collector is back on (if it was) when the work is done: for a run, before its jobs are waited for."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def execute(req: Request) -> dict[str, Any]:
    with collector_paused():
        # the SHARP on/off runs and the NVLink domains' collectives are campaign steps of their families
        campaigns = (
            req.nccl
            or "sharp" in req.families
            or ("nvlink" in req.families and bool(req.site.nvlink_domains))
        )
        site, unavailable = (
            (req.site, None) if req.dry_run else preflight(req.site, req.executor or req.site.slurm.executor)
        )
        plan = make_plan(site, families=req.families, nccl=campaigns)
        plan = _filter(plan, req.subjects, req.families, req.nccl, req.domains)
        if req.nodes is not None:  # -k node07 / --nodes: probe only the selected nodes, not the cluster
            probes = (
                replace(pj, nodes=tuple(n for n in pj.nodes if n in req.nodes)) for pj in plan.probe_jobs
            )
            plan = replace(plan, probe_jobs=tuple(pj for pj in probes if pj.nodes))
        if req.scope is not None:
            plan = req.scope.restrict(plan)
            unavailable = req.scope.unavailable(unavailable)
        job_limits = limits_of(site, req.executor or site.slurm.executor)
        plan = limits.fit(plan, site, job_limits)  # last: it shards what the selection kept
        results = _header(req, plan)
        record.write_step_names(req.run_dir, "plan", step_names(plan))
        results["limits"] = job_limits.as_dict()
        if req.scope is not None:
            results["scope"] = req.scope.record(plan)
        if req.nodes is not None:
            results["selected_nodes"] = [n for n in site.nodes if n in req.nodes]
        if req.site.simulated and not req.dry_run:
            from clusteraccept.sim.prepare import prepare

            prepare(req.site)  # the simulated nodes' recorded outputs, fabric model and nccl-tests
        layer = JobLayer(
            req.site,
            req.run_dir,
            dry_run=req.dry_run,
            executor=req.executor,
            block_units=job_limits.block_units,
        )
        options = probe_options(req.site)
        for pj in plan.probe_jobs:
            layer.submit_probes(pj, options)
        for cj in plan.campaign_jobs:
            layer.submit_campaign(cj)
    outcomes = list(layer.wait())
    interrupted = layer.interrupted
    del layer  # it holds the outcomes too: their evidence is dropped job by job once archived
    if interrupted:  # the jobs were cancelled: what came back is judged, the rest is not tested
        results["interrupted"] = interrupted
    if unavailable is not None and unavailable.missing:
        outcomes = [unavailable, *outcomes]
    results["jobs"] = [_outcome_dict(o) for o in outcomes]
    archived: dict[str, list[tuple[Evidence, str]]] = defaultdict(list)
    outcomes.reverse()
    while outcomes:
        o = outcomes.pop()
        # archive everything BEFORE any parser sees it, redacted: judged as archived (no message can quote
        # a secret); the job's unredacted evidence goes with it
        for ev, ref in archive_job(req.run_dir, o.name, o.evidence):
            archived[ev.meta.get("check", "misc")].append((ev, ref))
    changed = changed_mid_run(archived.get("fingerprint", []), archived.get("nccl", []))
    results["fingerprint"] = fingerprint_of(archived, changed)
    nodes = judged_nodes(results, req.site.nodes)
    verdicts = (
        []
        if req.dry_run
        else judge_all(req.site, archived, req.families, req.nccl, nodes, req.run_dir, changed=changed)
    )
    if req.nccl and not req.dry_run and not interrupted:
        verdicts = _confirmed(req, site, job_limits, archived, verdicts, nodes, results)
    archived.clear()  # judged: the evidence (most of the run's memory) is not needed to write the record
    results["families"] = list(req.families) + (["nccl"] if req.nccl else [])
    results["ended"] = datetime.now(UTC).isoformat(timespec="seconds")
    return record.write(req.run_dir, results, verdicts)


def _confirmed(
    req: Request,
    site: Site,
    job_limits: limits.Limits,
    archived: dict[str, list[tuple[Evidence, str]]],
    verdicts: list[Verdict],
    nodes: Sequence[str],
    results: dict[str, Any],
) -> list[Verdict]:
    """The confirmation round: the first pass judged, one job re-tests its suspects with healthy partners
    and bisects its slow block collectives (plan/confirm.py), and the campaign families are judged again
    with that evidence beside the first (checks/confirm.py)."""
    if site.nccl.confirm.partners == 0:
        return verdicts
    suspects = suspects_of(req.site, verdicts)
    job = confirmation_job(req.site, suspects)
    if job is not None and req.subjects is not None:
        job = replace(job, rounds=kept_rounds(job.rounds, _selected(req.subjects)))
    if job is None or not job.rounds:
        return verdicts
    job = replace(job, nodes=tuple(n for n in job.nodes if n in site.nodes))
    plan = limits.fit(Plan((), (job,)), site, job_limits)
    # no counter snapshots around the retests: the first pass's judge the links under traffic, and the
    # retests are a round or two (each snapshot is a step on every node of the job)
    plan = replace(plan, campaign_jobs=tuple(replace(cj, snapshots=False) for cj in plan.campaign_jobs))
    layer = JobLayer(req.site, req.run_dir, executor=req.executor, block_units=job_limits.block_units)
    for cj in plan.campaign_jobs:
        layer.submit_campaign(cj)
    outcomes = list(layer.wait())
    if layer.interrupted:
        results["interrupted"] = layer.interrupted
    del layer
    results["jobs"].extend(_outcome_dict(o) for o in outcomes)
    results["confirmation"] = {
        "suspects": list(suspects.nodes),
        "paths": ["-".join(p) for p in suspects.paths],
        "stragglers": [f"{g.subject}:{g.collective}" for g in suspects.stragglers],
        "rounds": sum(len(cj.rounds) for cj in plan.campaign_jobs),
        "steps": sum(len(r.steps) for cj in plan.campaign_jobs for r in cj.rounds),
        "plan": describe(plan)["campaign_jobs"],
    }
    record.write_step_names(req.run_dir, "confirmation", step_names(plan))
    for o in outcomes:
        for ev, ref in archive_job(req.run_dir, o.name, o.evidence):
            archived[ev.meta.get("check", "misc")].append((ev, ref))
    # only the families that read campaign evidence change: nccl, and gpudirect (the pairs' NCCL logs)
    again = tuple(f for f in req.families if f == "gpudirect")
    unchanged = [v for v in verdicts if v.family not in ("nccl", *again)]
    return unchanged + judge_all(req.site, archived, again, True, nodes, req.run_dir)


def _selected(subjects: frozenset[str]) -> Any:
    """Which confirmation steps a ``-k`` selection keeps: retests on the rails it selected, bisections of
    the block collectives it selected."""
    rails = {s.rpartition(":rail")[2] for s in subjects if ":rail" in s}

    def wanted(step: Step) -> bool:
        return str(step.rail) in rails if step.kind == "pair" else step.subject in subjects

    return wanted


def load_archived(run_dir: Path) -> dict[str, list[tuple[Evidence, str]]]:
    """The run's archived evidence with its references, by the family that judges it (``--rejudge``,
    ``--resume``)."""
    archived: dict[str, list[tuple[Evidence, str]]] = defaultdict(list)
    for ev, ref in load_all(run_dir):
        archived[ev.meta.get("check", "misc")].append((ev, ref))
    return archived


def rejudge(site: Site, run_dir: Path, token: str | None = None, reparse: bool = False) -> dict[str, Any]:
    """Judge the archived evidence of ``run_dir`` against the current site. No job. Its steps' parses are
    read back where these parsers stored them (parsers/stored.py); the rest of raw/ is parsed again, and
    all of it with ``reparse``."""
    results: dict[str, Any] = read_json(run_dir / RESULTS)
    results.pop("verdicts", None)  # a run written before the record's split: its verdicts move to the store
    # The run's evidence and verdicts are millions of acyclic objects that each full collection walks again
    # as they grow (2.3 s of the 6.8 s that reading a 256-node run's raw/ took); judging makes few cycles.
    with collector_paused():
        archived = load_archived(run_dir)
        families = tuple(f for f in results.get("families", []) if f != "nccl")
        nccl = "nccl" in results.get("families", [])
        over = judged_nodes(results, site.nodes)
        changed = changed_mid_run(archived.get("fingerprint", []), archived.get("nccl", []))
        verdicts = judge_all(site, archived, families, nccl, over, run_dir, reparse, changed)
        results["fingerprint"] = fingerprint_of(archived, changed)
        archived.clear()  # judged: the evidence (most of the run's memory) is not needed to write the record
        results["rejudged"] = datetime.now(UTC).isoformat(timespec="seconds")
        if token:
            results["rejudge_token"] = token  # which session re-judged it (xdist: once for all its processes)
        results["baselines_file"] = site.baselines_file or site.file
        results["baselines_sha256"] = baselines_hash(site)
        return record.write(run_dir, results, verdicts)


def limits_of(site: Site, executor: str) -> limits.Limits:
    """The limits this run's jobs are planned within: the site's keys and what the cluster says."""
    if executor != "slurm":
        return limits.resolve(site.slurm, limits.ClusterLimits(source=f"executor {executor}: no Slurm"))
    from clusteraccept.jobs import slurm_clients

    return limits.resolve(site.slurm, slurm_clients.cluster_limits(site))


def fingerprint_of(
    archived: dict[str, list[tuple[Evidence, str]]], changed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Per-node versions (fingerprint probe, ibstat firmware, nccl-tests/NCCL headers) and the outliers.
    ``changed``: :func:`changed_mid_run`'s, where the caller has it already."""
    ibstat = [e for e in archived.get("topology", []) if e[0].source == "ibstat"]
    per_node = archived.get("fingerprint", []) + ibstat
    fps = fingerprints(per_node, archived.get("nccl", []))
    if changed is None:
        changed = changed_mid_run(archived.get("fingerprint", []), archived.get("nccl", []))
    return {
        "nodes": fps,
        "differences": differences(fps) + [describe_change(n, seen) for n, seen in changed.items()],
        "changed_mid_run": sorted(changed),
    }


def probe_options(site: Site) -> dict[str, object]:
    """What node-side probes need from the site (plain data: it is pickled to the nodes)."""
    from clusteraccept.jobs.submit import node_rails

    return {
        "node_rails": node_rails(site, site.nodes),
        "perftest_bin": site.tools.perftest_bin,
        "sharp_hello": list(site.sharp.hello) if site.sharp.enabled else [],
        "roce": site.roce is not None,
        # the nodes whose type is fabric: efa (probes/efa.py collects nothing elsewhere)
        "efa_nodes": {n: True for n in site.nodes if site.node_type(n).fabric == "efa"},
        # the nodes whose type is fabric: slingshot, and per such type the variables its jobs must get
        "slingshot_nodes": {n: site.node_type(n).name for n in site.nodes if site.node_type(n).slingshot},
        "slingshot_env": {
            nt.name: [k for k, _ in nt.slingshot.env] for nt in site.node_types if nt.slingshot
        },
        # the nodes whose type is fabric: tcpx or tcpxo, and per such type the variables its jobs must get
        "tcpx_nodes": {n: site.node_type(n).name for n in site.nodes if site.node_type(n).tcp},
        "tcpx_env": {nt.name: [k for k, _ in nt.tcp.env] for nt in site.node_types if nt.tcp},
        "tcpx_fabric": {nt.name: nt.fabric for nt in site.node_types if nt.tcp},
        # the nodes whose type declares NVLink (probes/nvlink.py collects nothing elsewhere)
        "nvlink_nodes": {
            # nvidia-fabricmanager runs on an HGX node; an NVL72 rack's fabric manager on its NVLink
            # switch trays (Fabric Manager user guide: "single-node HGX and DGX systems")
            n: {"nvswitch": nv.nvswitch and nv.domain_nodes == 1, "imex": site.domain_of(n) is not None}
            for n in site.nodes
            if (nv := site.node_type(n).nvlink) is not None
        },
        "timeout_s": 60,
    }


def only_due(results: Mapping[str, Any]) -> bool:
    return bool((results.get("scope") or {}).get("only_due"))


def judged_nodes(results: Mapping[str, Any], nodes: Sequence[str]) -> tuple[str, ...]:
    """The nodes a run's node checks judge: every node, or only those it probed: the due ones of a due-only
    run, the selected ones of a run restricted to some nodes (``-k node07``, ``--nodes``)."""
    if "selected_nodes" in results:
        selected = set(results["selected_nodes"])
        nodes = [n for n in nodes if n in selected]
    if not only_due(results):
        return tuple(nodes)
    probed = set(results["scope"].get("nodes", ()))
    return tuple(n for n in nodes if n in probed)
