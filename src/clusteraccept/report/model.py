"""What the reports show, derived from one results.json document in ONE pass over its verdicts (pure).

At 4,096 nodes a run has ~10^6 verdicts: everything here is a plain loop with dict look-ups, no per-verdict
objects beyond the rows the charts need, so the report stays a few seconds long at that size.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from clusteraccept.families import JUDGED, JUNIT_SUITES
from clusteraccept.judge import record
from clusteraccept.judge.items import split_pair

T = TypeVar("T")
OUTCOMES = ("pass", "fail", "error", "skip", "waived")
PAIR_SCOPES = frozenset({"pair_in_block", "pair_cross_block"})
BLOCK_SCOPES = frozenset({"block", "all", "intra_node"})
OK_STATES = frozenset({"COMPLETED", "FINISHED", "DONE"})
# A --only-due run that found nothing due (results.json "scope"): it submitted nothing, on purpose.
NOTHING_DUE = "nothing due: every node and link holds a valid attestation"


class PairRow(NamedTuple):
    """One pair x rail busbw verdict (nccl.busbw on ``a-b:railK:collective:size``)."""

    a: str
    b: str
    rail: int
    collective: str
    size_B: int
    value: float
    ref: float | None
    failed: bool
    cross: bool
    evidence: str


class BlockRow(NamedTuple):
    """One block / whole-set / intra-node collective busbw verdict."""

    subject: str  # leaf2 | all | node3
    scope: str
    collective: str
    size_B: int
    value: float
    ref: float | None
    lower: float | None
    failed: bool


@dataclass
class Digest:
    counts: dict[str, Counter[str]] = field(default_factory=dict)  # suite -> outcome -> n
    total: Counter[str] = field(default_factory=Counter)
    failures: list[dict[str, Any]] = field(default_factory=list)  # fail + error verdicts, in order
    waived: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[PairRow] = field(default_factory=list)
    blocks: list[BlockRow] = field(default_factory=list)
    localization: list[dict[str, Any]] = field(default_factory=list)  # failed nccl.localization verdicts
    # numeric values per baseline key (labels.key, else the check id) of pass/fail/waived verdicts, with the
    # first verdict's (unit, ref, lower, upper) and the number of failures: history.key_stats' input
    key_values: dict[str, list[float]] = field(default_factory=dict)
    key_meta: dict[str, tuple[str, Any, Any, Any]] = field(default_factory=dict)
    key_fails: Counter[str] = field(default_factory=Counter)


def known_nodes(results: Mapping[str, Any]) -> list[str]:
    """The site's nodes in site order (results.json ``nodes``; older files: the probe plan, fingerprint)."""
    if results.get("nodes"):
        return list(results["nodes"])
    for job in results.get("plan", {}).get("probe_jobs", []):
        if job.get("nodes"):
            return list(job["nodes"])
    return sorted(results.get("fingerprint", {}).get("nodes", {}))


def item_owners(results: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The nodes and the blocks (with "all" and the NVLink domains) that own the run's items and junit.xml's
    testcases (judge/items.group)."""
    nodes = list(results.get("nodes") or known_nodes(results))
    return nodes, [*(results.get("blocks") or {}), "all", *(results.get("nvlink_domains") or {})]


def known_blocks(results: Mapping[str, Any]) -> dict[str, list[str]]:
    if results.get("blocks"):
        return {k: list(v) for k, v in results["blocks"].items()}
    jobs = results.get("plan", {}).get("campaign_jobs", [])
    return {j["block"]: list(j["nodes"]) for j in jobs if j.get("block") not in (None, "cross")}


def suite_of(v: Mapping[str, Any], nodes: frozenset[str]) -> str:
    """The summary suite: the family, nccl split into nccl-nodes and nccl-blocks (as suites/ are: a pair's
    verdicts are the evidence of its nodes' items, judge/items.py)."""
    return _suite_of(v["family"], v["subject"], v.get("labels") or {}, nodes)


# The suite of an nccl verdict by its scope label (the common case: one dict look-up).
_SCOPE_SUITE = {
    "pair_in_block": "nccl-nodes",
    "pair_cross_block": "nccl-nodes",
    "pairs": "nccl-nodes",
    "block": "nccl-blocks",
    "all": "nccl-blocks",
    "intra_node": "nccl-nodes",
}
_NUMBERS = (int, float)


def digest(results: Mapping[str, Any], verdicts: Iterable[record.Brief] | None = None) -> Digest:
    """Counts per suite, the failures, per-key values and the chart rows, in one pass (hot at 10^6).
    ``verdicts``: the run's verdicts as briefs (record.briefs, read from its store); default: the dicts
    inside ``results``."""
    nodes = frozenset(known_nodes(results))
    d = Digest()
    counts: dict[tuple[str, str], int] = {}
    pair_cache: dict[str, tuple[str, str]] = {}
    key_values, key_meta, key_fails = d.key_values, d.key_meta, d.key_fails
    add_pair, add_block = d.pairs.append, d.blocks.append
    scope_suite = _SCOPE_SUITE
    if verdicts is None:
        verdicts = record.briefs_of(results.get("verdicts", []))
    for b in verdicts:
        check, family, subject, outcome, _, value, ref, lower, upper, unit, evidence, labels = b
        if family == "nccl":
            scope = labels.get("scope", "")
            suite = scope_suite.get(scope) or _suite_of(family, subject, labels, nodes)
        else:
            scope, suite = "", family
        ck = (suite, outcome)
        counts[ck] = counts.get(ck, 0) + 1
        if outcome != "pass":
            if outcome == "fail" or outcome == "error":
                v = record.as_dict(b)
                d.failures.append(v)
                if outcome == "fail" and check == "nccl.localization":
                    d.localization.append(v)
            elif outcome == "waived":
                d.waived.append(record.as_dict(b))
        if value is None or value.__class__ not in _NUMBERS:
            continue
        if outcome != "skip" and outcome != "error":  # judged against a baseline: the key's trend
            key = labels.get("key") or check
            bucket = key_values.get(key)
            if bucket is None:
                bucket = key_values[key] = []
                key_meta[key] = (unit or "", ref, lower, upper)
            bucket.append(float(value))
            if outcome == "fail":
                key_fails[key] += 1
        if check != "nccl.busbw":
            continue
        if scope == "pair_in_block" or scope == "pair_cross_block":
            pair, rail, collective = subject.split(":", 3)[:3]
            ab = pair_cache.get(pair)
            if ab is None:
                ab = pair_cache[pair] = split_pair(pair, nodes)
            add_pair(
                PairRow(
                    ab[0],
                    ab[1],
                    int(labels.get("rail") or rail.removeprefix("rail")),
                    collective,
                    int(labels.get("size_B") or 0),
                    float(value),
                    ref,
                    outcome == "fail",
                    scope == "pair_cross_block",
                    evidence.split("\n", 1)[0],
                )
            )
        elif scope in BLOCK_SCOPES and not labels.get("attempt"):  # a bisection's half is not the block
            add_block(
                BlockRow(
                    subject.split(":", 1)[0],
                    scope,
                    labels.get("collective", ""),
                    int(labels.get("size_B") or 0),
                    float(value),
                    ref,
                    lower,
                    outcome == "fail",
                )
            )
    by_suite: dict[str, Counter[str]] = {}
    for (suite, outcome), n in counts.items():
        by_suite.setdefault(suite, Counter())[outcome] = n
        d.total[outcome] += n
    d.counts = in_suite_order(by_suite)
    return d


def in_suite_order(by_suite: Mapping[str, T]) -> dict[str, T]:
    """``by_suite`` with the families' JUnit suites first, in their order, then any other suite by name."""
    order = (*JUNIT_SUITES, *sorted(set(by_suite) - set(JUNIT_SUITES)))
    return {s: by_suite[s] for s in order if s in by_suite}


def _suite_of(family: str, subject: str, labels: Mapping[str, str], nodes: frozenset[str]) -> str:
    if family != "nccl":
        return family
    scope = labels.get("scope")
    if scope:
        return "nccl-blocks" if scope in ("block", "all") else "nccl-nodes"
    if ":rail" in subject:  # pair steps are named a-b:railK (plan/subjects.py, plan/jobs.py)
        return "nccl-nodes"
    return "nccl-nodes" if subject.split(":", 1)[0] in nodes else "nccl-blocks"


@dataclass(frozen=True)
class Banner:
    verdict: str  # ACCEPT | REJECT | INCOMPLETE
    reasons: tuple[str, ...]


def unfinished_jobs(results: Mapping[str, Any], *, ran: bool = False) -> list[Mapping[str, Any]]:
    """The run's jobs that did not finish cleanly or returned nothing (``ran``: of the jobs submitted, not
    the preflight's record of the nodes Slurm would not run a job on, whose own items say so)."""
    return [
        j
        for j in results.get("jobs", [])
        if (j.get("missing") or str(j.get("state", "")).split(" ")[0] not in OK_STATES)
        and not (ran and j.get("name") == "preflight")
    ]


def unfinished_line(jobs: Sequence[Mapping[str, Any]]) -> str:
    """``2 job(s) did not finish cleanly or returned nothing (campaign-leaf2, probe-nodes)``."""
    names = ", ".join(sorted({str(j.get("name")) for j in jobs})[:5])
    return f"{len(jobs)} job(s) did not finish cleanly or returned nothing ({names})"


def banner(
    results: Mapping[str, Any],
    total: Counter[str] | None = None,
    counts: Mapping[str, Counter[str]] | None = None,
) -> Banner:
    """REJECT on any failure; INCOMPLETE when anything could not be judged or the run was partial."""
    if total is None:
        total = Counter(v["outcome"] for v in results.get("verdicts", []))
    failed_in = ", ".join(f"{s} {c['fail']}" for s, c in (counts or {}).items() if c["fail"])
    reasons: list[str] = []
    if results.get("dry_run"):
        return Banner("INCOMPLETE", ("dry run: job scripts were written, nothing was submitted or judged",))
    scope = results.get("scope") or {}
    if scope.get("only_due") and not scope.get("due"):
        return Banner("INCOMPLETE", (NOTHING_DUE,))  # not an acceptance, and nothing failed
    if total["fail"]:
        reasons.append(f"{total['fail']} failed verdict(s)" + (f": {failed_in}" if failed_in else ""))
    bad_jobs = unfinished_jobs(results)
    incomplete: list[str] = []
    if bad_jobs:
        incomplete.append(unfinished_line(bad_jobs))
    if total["error"]:
        incomplete.append(f"{total['error']} check(s) could not be judged (ERROR)")
    if not sum(total.values()):
        incomplete.append("no verdicts")
    # a family that does not apply to the site (no roce: section, SHARP off) is not missing from a run
    na = results.get("not_applicable") or {}
    missing = [f for f in JUDGED if f not in results.get("families", JUDGED) and f not in na]
    if missing:
        incomplete.append(f"check families not run: {', '.join(missing)}")
    if results.get("subset"):
        incomplete.append("only part of the nccl campaign was selected (-k)")
    if scope.get("only_due") and (not scope.get("all_due") or scope.get("not_planned")):
        incomplete.append(scope_reason(scope))
    reasons += incomplete
    if total["fail"]:
        return Banner("REJECT", tuple(reasons))
    if incomplete:
        return Banner("INCOMPLETE", tuple(reasons))
    waived = f"; {total['waived']} failure(s) waived with a reason" if total["waived"] else ""
    return Banner("ACCEPT", (f"every check passed or was skipped with a reason{waived}",))


def partial(results: Mapping[str, Any]) -> bool:
    """A run that tested part of the site on purpose (-k subset, --only-due short of everything)."""
    scope = results.get("scope") or {}
    return bool(results.get("subset")) or bool(scope.get("only_due") and not scope.get("all_due"))


def scope_reason(scope: Mapping[str, Any]) -> str:
    """The banner's line for a --only-due run (results.json ``scope``)."""
    nodes, links = len(scope.get("nodes", ())), int(scope.get("n_links", 0))
    lost = scope.get("not_planned") or []
    parts = [] if scope.get("all_due") else [
        f"restricted to {nodes} due node(s) and {links} due link(s) (--only-due): not a full acceptance; "
        "the other nodes and links keep their attestations"
    ]  # fmt: skip
    return "; ".join(parts + ([not_planned_reason(lost)] if lost else []))


def not_planned_reason(lost: Sequence[str], shown: int = 4) -> str:
    """Due subjects the run's plan had nothing for (ops/scope.py Scope.unplanned)."""
    more = f" and {len(lost) - shown} more" if len(lost) > shown else ""
    return f"{len(lost)} due subject(s) not in this run's plan, still due: {', '.join(lost[:shown])}{more}"


def culprit_parts(v: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(kind, subject, localization's own sentence) for each culprit named by one localization verdict."""
    raw = str(v.get("labels", {}).get("culprits", ""))
    named = [tuple(c.split(":", 1)) for c in raw.split("|") if ":" in c]
    text = str(v.get("message", "")).removeprefix("culprit: ")
    parts = [p if p.endswith("]") else p + "]" for p in text.split("]; ")] if text else []
    if len(parts) != len(named):
        parts = [text] * len(named)
    return [(k, s, p) for (k, s), p in zip(named, parts, strict=True)]


def convicts(kind: str, subject: str, row: PairRow, blocks: Mapping[str, Iterable[str]]) -> bool:
    """Whether the slow pair row ``row`` is evidence against culprit (kind, subject) (localize.py's rules)."""
    if kind == "node":
        return subject in (row.a, row.b)
    if kind == "rail":
        node, _, rail = subject.rpartition(":rail")
        return node in (row.a, row.b) and str(row.rail) == rail
    if kind == "path":
        pair, _, rail = subject.rpartition(":rail")
        return str(row.rail) == rail and pair in (f"{row.a}-{row.b}", f"{row.b}-{row.a}")
    if kind == "uplink":
        members = set(blocks.get(subject, ()))
        return row.cross and ((row.a in members) != (row.b in members))
    return False
