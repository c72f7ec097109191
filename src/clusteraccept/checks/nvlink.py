"""NVLink/NVSwitch inside the node, judged against what the site says the node type's NVLink is
(``node_types.<t>.nvlink``: links per GPU, their speed, whether an NVSwitch fabric joins them).

- ``nvlink.links[node:gpuK]``: ``nvidia-smi nvlink --status`` lists the GPU's links, each at the declared
  speed; an ``<inactive>`` or slower link is a FAIL naming it (a GPU with a link down still passes an
  all_reduce until a collective crosses that link: the busbw alone does not show it).
- ``nvlink.fabric[node]``: with an NVSwitch fabric, every GPU's ``nvidia-smi -q`` Fabric is State
  ``Completed`` and Status ``Success``, and its Health summary, where the driver prints one, is not
  unhealthy (:func:`health_problems`). On HGX systems the fabric manager (the ``nvidia-fabricmanager``
  service, NVIDIA Fabric Manager user guide) sets the NVSwitch fabric up; until it has, the state reads
  "In Progress" (Status N/A) and CUDA cannot use the GPUs ("CUDA initialization will fail with the
  cudaErrorSystemNotReady error ... when FM fails to initialize the system", same guide; on H100 and
  later CUDA waits for the GPUs' fabric registration). The service's state (``systemctl is-active``)
  names the cause where it is not running. A fabric that is not up is
  named as the cause: the node's other checks that need CUDA say "not judged: nvlink.fabric ..."
  (checks/nccl.py through :func:`fabric_down`).
- ``nvlink.errors[node:gpuK]``: the GPU's NVLink error counters (``nvidia-smi nvlink -e``, every counter
  whose name ends in "Errors": Replay, Recovery, CRC on Hopper drivers) did not rise across the campaign's
  traffic (the counter snapshots around each round, probes/counters.py ``--nvlink``): the intra-node and
  block collectives are the traffic that crosses NVLink. A rise under load is a finding even where the
  bandwidth passed: replays cost bandwidth only once they are many.
Pure: parses the archived evidence handed in.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace

from clusteraccept.checks.counters import Interval, intervals
from clusteraccept.checks.hostfacts import failure
from clusteraccept.checks.nvlink_domain import judge_domains
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict, error, expect, skip
from clusteraccept.parsers import nvidia_smi_nvlink, nvidia_smi_q
from clusteraccept.plan.subjects import gpu_subject
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import NvLink

FAMILY = "nvlink"
CHECKS = ("nvlink.links", "nvlink.fabric", "nvlink.errors", "nvlink.clique", "nvlink.imex", "nvlink.mnnvl")
Archived = tuple[Evidence, str]
SPEED_TOLERANCE = 0.001  # nvidia-smi prints 3 decimals (26.562): a slower link differs by far more
FABRIC_OK = ("Completed", "Success")
NOT_REGISTERED = "not_registered"  # label: a GPU's fabric State is not Completed (CUDA does not start there)
NO_VALUE = ("N/A", "Not Supported")  # nvidia-smi(1): "Any unsupported data is indicated by a N/A"
HEALTH_TRUE_BAD = ("Route Recovery in progress", "Route Unhealthy", "Access Timeout Recovery")


def _one(evs: list[Archived], source: str) -> Archived | None:
    return next(((ev, p) for ev, p in evs if ev.source == source), None)


def _failed(ev: Evidence, path: str, what: str) -> str | None:
    return None if ev.returncode == 0 else f"{failure(what, ev)} ({path})"


def health_problems(health: tuple[tuple[str, str], ...]) -> list[str]:
    """The Health sub-section's findings (nvidia-smi(1), "GPU Fabric information"): Summary Unhealthy or
    Limited Capacity, Bandwidth Degraded, a route recovery failed or in progress, an access timeout
    recovery in progress, an incorrect configuration. "N/A" and "Not Supported" are no finding."""
    h = dict(health)
    out = []
    if h.get("Summary") in ("Unhealthy", "Limited Capacity"):
        out.append(f"Health {h['Summary']}")
    if h.get("Bandwidth") == "Degraded":
        out.append("Bandwidth Degraded")
    out += [f"{k} True" for k in HEALTH_TRUE_BAD if h.get(k) == "True"]
    if h.get("Incorrect Configuration") not in (None, *NO_VALUE, "None"):
        out.append(f"Incorrect Configuration {h['Incorrect Configuration']}")
    return out


def fabric_problems(query: nvidia_smi_q.Query, gpus: int) -> list[str]:
    """What is wrong with the NVSwitch fabric of one node's GPUs (empty: it is up on all of them)."""
    out = []
    if len(query.gpus) != gpus:
        out.append(f"nvidia-smi -q lists {len(query.gpus)} GPUs, the node type has {gpus}")
    for k, g in enumerate(query.gpus):
        f = g.fabric
        if f is None:
            out.append(f"GPU {k} ({g.bus_id}): no Fabric section (driver too old to report it)")
            continue
        bad = []
        if (f.state, f.status) != FABRIC_OK:
            bad.append(f"State {f.state}, Status {f.status}")
        bad += health_problems(f.health)
        if bad:
            out.append(f"GPU {k} ({g.bus_id}): {', '.join(bad)}")
    return out


def _grouped(problems: list[str], gpus: int) -> str:
    """One line for the node: GPUs with the same finding together ("all 8 GPUs: State In Progress ...")."""
    by: dict[str, list[str]] = defaultdict(list)
    other = []
    for p in problems:
        head, sep, what = p.partition("): ")
        if sep and head.startswith("GPU "):
            by[what].append(head.split(" ", 2)[1])
        else:
            other.append(p)
    parts = [
        f"{'all ' + str(gpus) + ' GPUs' if len(ks) == gpus else 'GPU ' + ','.join(ks)}: {w}"
        for w, ks in by.items()
    ]
    return "; ".join(other + parts)


def _cause(problems: list[str], service: Evidence | None, rack: bool) -> str:
    if not any("In Progress" in p or "Not Started" in p for p in problems):
        return "the NVSwitch fabric is not healthy for these GPUs"
    if rack:  # the Fabric Manager user guide covers single-node HGX/DGX; a rack's runs on its switch trays
        return (
            "the rack's NVLink fabric has not registered these GPUs (its fabric manager runs on the NVLink "
            "switch trays, not on this tray): CUDA cannot use them across the domain until it does"
        )
    state = service.stdout.strip() if service is not None and service.stdout.strip() else ""
    if service is not None and service.returncode != 0 and state:
        return (
            f"the fabric manager is not running (systemctl is-active nvidia-fabricmanager: {state}), so the "
            "NVSwitch fabric was never set up: CUDA cannot use these GPUs until it is"
        )
    running = " although nvidia-fabricmanager is active" if state == "active" else ""
    return (
        f"the NVSwitch fabric was not set up for these GPUs{running}: see journalctl -u "
        "nvidia-fabricmanager; CUDA cannot use them until it is"
    )


def judge_fabric(node: str, nv: NvLink, gpus: int, evs: list[Archived]) -> Verdict:
    check = "nvlink.fabric"
    if not nv.nvswitch:
        return skip(check, FAMILY, node, "no NVSwitch fabric on this node type (nvlink.nvswitch: false)")
    got = _one(evs, "nvidia-smi-q")
    if got is None:
        return error(check, FAMILY, node, "no nvidia-smi -q evidence came back")
    ev, path = got
    why = _failed(ev, path, "nvidia-smi -q")
    if why:
        return error(check, FAMILY, node, why, (path,))
    try:
        query = nvidia_smi_q.parse(ev.stdout)
    except ParseError as exc:
        return error(check, FAMILY, node, f"could not parse nvidia-smi-q output ({path}): {exc}", (path,))
    problems = fabric_problems(query, gpus)
    if problems:
        msg = f"NVSwitch fabric not up: {_grouped(problems, gpus)}"
        service = next(
            ((e, p) for e, p in evs if e.source == "systemctl" and e.argv[-1:] == ("nvidia-fabricmanager",)),
            None,
        )
        cause = _cause(problems, service[0] if service else None, nv.domain_nodes > 1)
        paths = (path, service[1]) if service else (path,)
        registered = all(g.fabric is not None and g.fabric.state == "Completed" for g in query.gpus)
        labels = {} if registered else {"fabric": NOT_REGISTERED}
        return expect(check, FAMILY, node, False, f"{msg}: {cause} [{node}]", evidence=paths, labels=labels)
    return expect(
        check,
        FAMILY,
        node,
        True,
        f"fabric State Completed, Status Success on all {gpus} GPUs [{node}]",
        evidence=(path,),
    )


def fabric_down(site: Site, evidence: Sequence[Archived]) -> dict[str, str]:
    """Node -> why its NVSwitch fabric is not up, for the nodes whose type has one and whose ``nvidia-smi -q``
    says so: what needs CUDA there is not judged (the fabric is the finding)."""
    out = {}
    for ev, path in evidence:
        if ev.source != "nvidia-smi-q" or ev.returncode != 0:
            continue
        nt = site.node_type(ev.host) if ev.host in site.nodes else None
        if nt is None or nt.nvlink is None or not nt.nvlink.nvswitch:
            continue
        try:
            problems = fabric_problems(nvidia_smi_q.parse(ev.stdout), nt.gpus)
        except ParseError:
            continue
        if problems:
            out[ev.host] = f"nvlink.fabric on {ev.host} ({problems[0]}; {path})"
    return out


def _links(node: str, gpu: int, nv: NvLink, report: nvidia_smi_nvlink.NvlinkReport, path: str) -> Verdict:
    subject = gpu_subject(node, gpu)
    g = report.gpu(gpu)
    where = f"[{subject}]"
    if g is None:
        return expect(
            "nvlink.links",
            FAMILY,
            subject,
            False,
            f"nvidia-smi nvlink --status lists no GPU {gpu} "
            f"(expected {nv.links_per_gpu} links at {nv.link_GBps} GB/s) {where}",
            value=0,
            evidence=(path,),
        )
    if g.all_inactive or not g.links:
        why = g.note or "no links listed"
        return expect(
            "nvlink.links",
            FAMILY,
            subject,
            False,
            f"0 of {nv.links_per_gpu} NVLinks active ({why}) {where}",
            value=0,
            evidence=(path,),
        )
    inactive = [lk.index for lk in g.links if lk.inactive]
    slow = [
        f"link {lk.index} at {lk.speed_GBps} GB/s"
        for lk in g.links
        if lk.speed_GBps is not None and lk.speed_GBps < nv.link_GBps * (1 - SPEED_TOLERANCE)
    ]
    active = sum(1 for lk in g.links if lk.speed_GBps is not None)
    bad = [f"link {i} <inactive>" for i in inactive] + slow
    if active < nv.links_per_gpu:
        bad.append(f"{active} of {nv.links_per_gpu} links active")
    if bad:
        msg = f"NVLink {', '.join(bad)} (expected {nv.links_per_gpu} links at {nv.link_GBps} GB/s) {where}"
        return expect("nvlink.links", FAMILY, subject, False, msg, value=active, evidence=(path,))
    return expect(
        "nvlink.links",
        FAMILY,
        subject,
        True,
        f"{active} links at {nv.link_GBps} GB/s {where}",
        value=active,
        evidence=(path,),
    )


def judge_links(node: str, nv: NvLink, gpus: int, evs: list[Archived]) -> list[Verdict]:
    subjects = [gpu_subject(node, g) for g in range(gpus)]
    got = _one(evs, "nvidia-smi-nvlink")
    if got is None:
        return [
            error("nvlink.links", FAMILY, s, "no nvidia-smi nvlink --status evidence came back")
            for s in subjects
        ]
    ev, path = got
    why = _failed(ev, path, "nvidia-smi nvlink --status")
    try:
        report = None if why else nvidia_smi_nvlink.parse(ev.stdout)
    except ParseError as exc:
        why = f"could not parse nvidia-smi-nvlink output ({path}): {exc}"
    if why or report is None:
        return [error("nvlink.links", FAMILY, s, why or "no output", (path,)) for s in subjects]
    return [_links(node, g, nv, report, path) for g in range(gpus)]


def _rises(ivs: list[Interval], gpu: int) -> tuple[dict[str, int], list[str], list[str]]:
    """(per "link L <counter>" the errors that rose, the rounds they rose in, counters that went back)."""
    rose: dict[str, int] = defaultdict(int)
    rounds: list[str] = []
    back: list[str] = []
    for iv in ivs:
        for (g, link), counters in sorted((iv.nvlink or {}).items()):
            if g != gpu:
                continue
            for name, d in counters.items():
                if not name.lower().endswith("errors"):
                    continue
                if d < 0:
                    back.append(f"link {link} {name}")
                elif d > 0:
                    rose[f"link {link} {name}"] += d
                    rounds += [iv.after_round] if iv.after_round not in rounds else []
    return rose, rounds, back


def judge_errors(node: str, gpus: int, snaps: list[Archived]) -> list[Verdict]:
    check = "nvlink.errors"
    subjects = [gpu_subject(node, g) for g in range(gpus)]
    ivs, problems = intervals(snaps, nics=False)  # the NICs' counters are nccl.link_errors'
    ivs = [i for i in ivs if i.window == "traffic"]
    failed = [i.nvlink_failed for i in ivs if i.nvlink_failed]
    readable = [i for i in ivs if i.nvlink is not None]
    if not readable:
        if failed or problems:
            return [error(check, FAMILY, s, "; ".join((failed + problems)[:2])) for s in subjects]
        why = "no NVLink counter snapshots around traffic in this run (the nccl campaign takes them: -m nccl)"
        return [skip(check, FAMILY, s, why) for s in subjects]
    paths = tuple(dict.fromkeys(p for i in readable for p in i.paths))
    out = []
    for gpu, subject in enumerate(subjects):
        if not any(g == gpu for i in readable for g, _ in (i.nvlink or {})):
            out.append(
                error(check, FAMILY, subject, f"GPU {gpu} not in the NVLink counter snapshots", paths[:2])
            )
            continue
        rose, rounds, back = _rises(readable, gpu)
        total = sum(rose.values())
        note = f"; went backwards (reset?): {', '.join(back[:3])}" if back else ""
        if total:
            what = ", ".join(f"{k} +{v}" for k, v in sorted(rose.items(), key=lambda kv: -kv[1])[:4])
            msg = (
                f"NVLink errors rose under traffic: {what} (rounds: {', '.join(rounds[:3])}){note}: "
                f"a marginal link; reseat or replace before it fails [{subject}]"
            )
            out.append(expect(check, FAMILY, subject, False, msg, value=float(total), evidence=paths))
        else:
            msg = f"no NVLink error counter rose over {len(readable)} traffic intervals{note} [{subject}]"
            out.append(expect(check, FAMILY, subject, True, msg, value=0.0, evidence=paths))
    return out


def judge(site: Site, evidence: Sequence[Archived], nodes: Sequence[str]) -> list[Verdict]:
    by_host: dict[str, list[Archived]] = defaultdict(list)
    for ev, path in evidence:
        by_host[ev.host].append((ev, path))
    out: list[Verdict] = []
    for node in nodes:
        nt = site.node_type(node)
        if nt.nvlink is None:
            why = f"node type {nt.name} declares no NVLink (node_types.{nt.name}.nvlink)"
            out.append(skip("nvlink.fabric", FAMILY, node, why))
            for g in range(nt.gpus):
                out += [skip(c, FAMILY, gpu_subject(node, g), why) for c in ("nvlink.links", "nvlink.errors")]
            continue
        evs = by_host.get(node, [])
        probe = [(ev, p) for ev, p in evs if ev.source != "counters"]
        fabric = judge_fabric(node, nt.nvlink, nt.gpus, probe)
        out.append(fabric)
        out += judge_links(node, nt.nvlink, nt.gpus, probe)
        errors = judge_errors(node, nt.gpus, [(ev, p) for ev, p in evs if ev.source == "counters"])
        if fabric.labels.get("fabric") == NOT_REGISTERED:
            # no registration, no CUDA: nothing crossed these NVLinks, so no rise says nothing
            why = f"not judged: nvlink.fabric on {node} (the fabric is not up: no traffic crossed it)"
            errors = [replace(v, outcome=Outcome.SKIP, message=why) for v in errors]
        out += errors
    if site.nvlink_domains:  # NVLink domains across nodes (NVL72 racks): checks/nvlink_domain.py
        out += judge_domains(site, evidence, fabric_down(site, evidence), nodes)
    return out
