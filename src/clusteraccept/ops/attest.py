"""Attestations: per node and per link (pair x rail), the last run that verified it and until when that
holds (``attest.ttl_days``), from the runs under the reports dir (pure apart from reading results.json).

A node is verified by a run that judged it (a PASS of a node check or of ``nccl.localization``) with no
FAIL or ERROR on it or its GPUs/rails; a link ``a-b:railK`` by a run whose ``nccl.launch``/``nccl.busbw``
verdicts on it all pass. What is due for re-verification (:func:`due`):
- never verified (a node newly added to the site: its checks and pairs are due at once),
- expired (verified more than ttl_days ago), failed in the latest run that judged it,
- changed: its fingerprint (results.json ``fingerprint.nodes``: kernel, driver, firmware) in the newest run
  that saw it differs from the one it had when verified,
- back from drain: clusteraccept drained it (a run's drain.json, applied) after it was last verified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

LINK_CHECKS = ("nccl.launch", "nccl.busbw")
NODE_NCCL_CHECKS = ("nccl.localization", "nccl.link_errors")  # nccl verdicts about a node (or its port)


@dataclass(frozen=True)
class Attestation:
    subject: str  # node3 | node1-node3:rail5
    run_id: str  # the last run that verified it
    verified: str  # that run's start (ISO 8601, UTC)
    valid_until: str
    fingerprint: Mapping[str, str]  # nodes only: the node's fingerprint then


@dataclass(frozen=True)
class Due:
    subject: str
    why: str


def _link_of(subject: str) -> str | None:
    """``node1-node3:rail5:sendrecv:1GiB`` -> ``node1-node3:rail5``; other subjects -> None."""
    parts = subject.split(":")
    return (
        ":".join(parts[:2]) if len(parts) >= 2 and "-" in parts[0] and parts[1].startswith("rail") else None
    )


def judged(results: Mapping[str, Any], nodes: Sequence[str]) -> tuple[dict[str, bool], dict[str, bool]]:
    """Per node and per link judged in this run: True when verified (pass, nothing failed or in error)."""
    known = set(nodes)
    seen_n: dict[str, set[str]] = {}
    seen_l: dict[str, set[str]] = {}
    for v in results.get("verdicts", []):
        subject, outcome = str(v["subject"]), str(v["outcome"])
        if outcome in ("skip",):
            continue
        link = _link_of(subject) if v["check"] in LINK_CHECKS else None
        if link is not None:
            seen_l.setdefault(link, set()).add(outcome)
            continue
        node = subject.split(":", 1)[0]
        # node checks, localization and the node's port counters (nccl.link_errors on "<node>:rail<k>")
        if node in known and (v["family"] != "nccl" or v["check"] in NODE_NCCL_CHECKS):
            seen_n.setdefault(node, set()).add(outcome)

    def ok(outcomes: set[str]) -> bool:
        return bool(outcomes & {"pass", "waived"}) and not outcomes & {"fail", "error"}

    node_ok = {n: ok(o) for n, o in seen_n.items()}
    scope = results.get("scope") or {}
    if scope.get("only_due"):
        # A due-only run probed only its due nodes; the others appear only through their pairs with a due
        # node. That verifies nothing about them, but a failure found there still makes them due.
        probed = set(scope.get("nodes", ()))
        node_ok = {n: good for n, good in node_ok.items() if n in probed or not good}
    return node_ok, {k: ok(o) for k, o in seen_l.items()}


def _until(started: str, ttl_days: float) -> str:
    return (datetime.fromisoformat(started) + timedelta(days=ttl_days)).isoformat(timespec="seconds")


# (attestations, latest outcome per subject, newest fingerprint per node, last drain per node)
State = tuple[dict[str, Attestation], dict[str, bool], dict[str, Mapping[str, str]], dict[str, str]]


def attestations(runs: Iterable[Mapping[str, Any]], nodes: Sequence[str], ttl_days: float) -> State:
    """(attestations, latest outcome per subject, newest fingerprint per node, last drain per node)."""
    att: dict[str, Attestation] = {}
    latest: dict[str, bool] = {}
    newest_fp: dict[str, Mapping[str, str]] = {}
    drained: dict[str, str] = {}
    for r in sorted(runs, key=lambda r: str(r.get("started") or "")):
        started = str(r.get("started") or "")
        if not started or r.get("dry_run"):
            continue
        fps = (r.get("fingerprint") or {}).get("nodes") or {}
        newest_fp.update(fps)
        node_ok, link_ok = judged(r, nodes)
        for subject, ok in (*node_ok.items(), *link_ok.items()):
            latest[subject] = ok
            if ok:
                fp = fps.get(subject, {}) if subject in node_ok else {}
                att[subject] = Attestation(subject, str(r["run_id"]), started, _until(started, ttl_days), fp)
        for node in r.get("_drained", []):
            drained[node] = started
    return att, latest, newest_fp, drained


def due(nodes: Sequence[str], links: Sequence[str], state: State, now: datetime) -> list[Due]:
    """What needs verifying again, and why (pure)."""
    att, latest, newest_fp, drained = state
    out: list[Due] = []
    for subject in (*nodes, *links):
        a = att.get(subject)
        if latest.get(subject) is False:
            out.append(Due(subject, "failed in the latest run that judged it"))
        elif a is None:
            out.append(Due(subject, "never verified"))
        elif datetime.fromisoformat(a.valid_until) < now:
            out.append(Due(subject, f"attestation expired {a.valid_until} (run {a.run_id})"))
        elif subject in drained and drained[subject] > a.verified:
            out.append(Due(subject, f"drained by clusteraccept after it was verified ({drained[subject]})"))
        elif subject in newest_fp and a.fingerprint and dict(newest_fp[subject]) != dict(a.fingerprint):
            changed = sorted(k for k in set(newest_fp[subject]) | set(a.fingerprint)
                             if newest_fp[subject].get(k) != a.fingerprint.get(k))  # fmt: skip
            out.append(Due(subject, f"fingerprint changed since run {a.run_id}: {', '.join(changed)}"))
    return out


def load_runs(run_root: Path) -> list[dict[str, Any]]:
    """results.json of every run under ``reports/<site>/`` (with the nodes each run's drain.json drained)."""
    from clusteraccept.judge import record
    from clusteraccept.rundir import read_json

    runs = []
    for p in sorted(run_root.glob("*/results.json")):
        if p.parent.name == "latest":
            continue
        r: dict[str, Any] = record.load(p.parent)
        drain = p.parent / "drain.json"
        if drain.exists():
            d = read_json(drain)
            if d.get("applied"):
                r["_drained"] = [a["node"] for a in d.get("actions", []) if a["verb"] == "drain"]
        runs.append(r)
    return runs


@dataclass(frozen=True)
class SiteDue:
    """The attestations of a site's nodes and links and what is due now (``attest --due``, ``--only-due``)."""

    state: State
    links: tuple[str, ...]  # every link of the plan: a-b:railK
    due: tuple[Due, ...]


def site_due(site: Any, root: Path, now: datetime, exclude_run: str | None = None) -> SiteDue:
    """From the runs under ``root`` (``<reports-dir>/<site>``), leaving out ``exclude_run`` (the run that is
    asking: it must not attest itself)."""
    from clusteraccept.plan.subjects import subjects

    runs = [r for r in load_runs(root) if r.get("run_id") != exclude_run] if root.is_dir() else []
    state = attestations(runs, site.nodes, site.ops.attest.ttl_days)
    links = tuple(subjects(site, "pair_rail"))
    return SiteDue(state, links, tuple(due(site.nodes, links, state, now)))


def report_lines(site: Any, reports: Path | None, only_due: bool, now: datetime | None = None) -> list[str]:
    """``python -m clusteraccept attest``: one line per node and link (or per due one)."""
    from datetime import UTC

    from clusteraccept.site.model import reports_dir

    found = site_due(site, (reports or reports_dir(site)) / site.name, now or datetime.now(UTC))
    if only_due:
        return [f"{d.subject}: due: {d.why}" for d in found.due]
    why = {d.subject: d.why for d in found.due}
    lines = []
    for subject in (*site.nodes, *found.links):
        a = found.state[0].get(subject)
        held = f"verified by {a.run_id}, valid until {a.valid_until}" if a else "no attestation"
        lines.append(f"{subject}: {held}" + (f"; due: {why[subject]}" if subject in why else ""))
    return lines
