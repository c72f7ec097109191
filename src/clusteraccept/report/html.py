"""report.html: ONE self-contained file rendered with jinja2 (templates/report.html.j2) from results.json.

Inline CSS and SVG only: no script, no font, no image, no link to anything outside the file but the raw/
evidence files beside it (relative links, dead but harmless in an email attachment). Even URLs quoted by
evidence text are defanged (``https[:]//``), so the file references no http(s) URL at all. Sized for
4,096 nodes: every list is aggregated first and then shows the worst (see heatmap.py, blocks.py).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusteraccept.families import JUNIT_SUITES
from clusteraccept.judge import record
from clusteraccept.redact import redact_text
from clusteraccept.render import render
from clusteraccept.report import svg
from clusteraccept.report.blocks import block_bars, size_curves
from clusteraccept.report.excerpt import excerpts_for, tokens_of
from clusteraccept.report.heatmap import (
    bandwidth_rows,
    describe,
    node_rail_grid,
    pair_heatmaps,
    ratio,
    worst_pairs,
)
from clusteraccept.report.history import Trend
from clusteraccept.report.model import (
    Digest,
    PairRow,
    banner,
    convicts,
    culprit_parts,
    digest,
    known_blocks,
    known_nodes,
    suite_of,
)

MAX_DETAILED = 60  # failure groups shown with their evidence excerpts
MAX_LISTED = 1500  # further failure groups listed one line each
MAX_CULPRITS = 50
MAX_CONVICTING = 12
MAX_TRENDS = 60
MAX_JOBS = 50
_URL = re.compile(r"(?i)\b(https?)://")
# results.json header fields the template reads; older or partial documents may lack some.
_HEADER_DEFAULTS: dict[str, Any] = dict.fromkeys(
    (
        "site",
        "site_file",
        "run_id",
        "started",
        "ended",
        "operator",
        "suite_revision",
        "executor",
        "baselines_file",
        "baselines_sha256",
        "rejudged",
        "nodes",
        "blocks",
    ),
    None,
) | {"simulated": False, "dry_run": False}

_CULPRIT_TEXT = {
    "rail": "slow with every partner on this rail while its other rails are healthy: "
    "suspect this rail's HCA, its cable or its leaf switch port",
    "node": "slow with every partner on most rails: suspect the node itself (PCIe, NUMA, GPU, HCA firmware)",
    "uplink": "every cross-block pair through this leaf is slow while pairs inside it are healthy: "
    "suspect the leaf's uplinks",
    "path": "only this pair is slow on this rail, both ends are healthy with other partners: "
    "suspect the cable or switch ports between them",
}


def _culprit_title(kind: str, subject: str) -> str:
    if kind == "rail":
        node, _, rail = subject.rpartition(":rail")
        return f"{node} rail {rail}"
    if kind == "path":
        pair, _, rail = subject.rpartition(":rail")
        return f"path {pair} on rail {rail}"
    if kind == "uplink":
        return f"{subject} uplinks"
    return f"node {subject}"


def culprit_cards(
    d: Digest, rows: Sequence[PairRow], blocks: Mapping[str, Sequence[str]]
) -> list[dict[str, Any]]:
    """The culprits localization named, each with the slow pair results that convicted it."""
    failed = [r for r in rows if r.failed]
    cards: dict[tuple[str, str], dict[str, Any]] = {}
    for v in d.localization:
        for kind, subject, sentence in culprit_parts(v):
            if (kind, subject) in cards or len(cards) >= MAX_CULPRITS:
                continue
            convicting = sorted(
                (r for r in failed if convicts(kind, subject, r, blocks)), key=lambda r: ratio(r) or 0.0
            )
            cards[(kind, subject)] = {
                "kind": kind,
                "title": _culprit_title(kind, subject),
                "why": _CULPRIT_TEXT.get(kind, ""),
                "sentence": sentence,
                "test_id": f"{v['check']}[{v['subject']}]",
                "convicting": [
                    {
                        "pair": f"{r.a}-{r.b}",
                        "rail": r.rail,
                        "what": describe(r),
                        "ratio": svg.pct(ratio(r)),
                        "color": svg.color(ratio(r)),
                        "evidence": r.evidence,
                    }
                    for r in convicting[:MAX_CONVICTING]
                ],
                "n_convicting": len(convicting),
            }
    return list(cards.values())


def failure_groups(failures: Sequence[Mapping[str, Any]], nodes: frozenset[str]) -> list[dict[str, Any]]:
    """Failures grouped by evidence: the sizes of one nccl-tests step form one group."""
    groups: dict[tuple[str, ...], dict[str, Any]] = {}
    for v in failures:
        ev = tuple(v.get("evidence") or ())
        labels = v.get("labels") or {}
        key = (
            (v["check"], v["outcome"], *ev)
            if v["check"] == "nccl.busbw" and ev
            else (v["check"], v["subject"])
        )
        g = groups.get(key)
        if g is None:
            g = groups[key] = {
                "suite": suite_of(v, nodes),
                "check": v["check"],
                "outcome": v["outcome"],
                "subject": v["subject"].rsplit(":", 1)[0] if v["check"] == "nccl.busbw" else v["subject"],
                "ids": [],
                "messages": [],
                "evidence": list(ev),
                "sizes": [],
                "tokens": tokens_of(v),
            }
        g["ids"].append(f"{v['check']}[{v['subject']}]")
        g["messages"].append(redact_text(v.get("message") or ""))
        if labels.get("size_B"):
            g["sizes"].append(int(labels["size_B"]))
    rank = {s: i for i, s in enumerate(JUNIT_SUITES)}
    return sorted(groups.values(), key=lambda g: (rank.get(g["suite"], 99), g["outcome"] != "fail"))


def _compact(value: str) -> str:
    """``mlx5_0=28.41.1000 mlx5_1=28.41.1000 ...`` -> ``28.41.1000 (8 HCAs)`` when they all agree."""
    parts = value.split(" ")
    if len(parts) > 1 and all("=" in p for p in parts):
        values = {p.split("=", 1)[1] for p in parts}
        if len(values) == 1:
            return f"{values.pop()} ({len(parts)} HCAs)"
    return value


def fingerprint_view(results: Mapping[str, Any]) -> dict[str, Any]:
    """Per field: the majority value and how many nodes have it; per-node rows only for small sites."""
    fps: dict[str, dict[str, str]] = results.get("fingerprint", {}).get("nodes", {})
    fields = sorted({k for fp in fps.values() for k in fp})
    summary = []
    for f in fields:
        values = Counter(fp.get(f, "(absent)") for fp in fps.values())
        (top, count), others = values.most_common(1)[0], len(values) - 1
        summary.append({"field": f, "value": _compact(top), "count": count, "others": others})
    diffs = results.get("fingerprint", {}).get("differences", [])
    per_node = [(n, [fps[n].get(f, "") for f in fields]) for n in sorted(fps)] if len(fps) <= 16 else []
    return {
        "n": len(fps),
        "summary": summary,
        "differences": diffs[:50],
        "n_differences": len(diffs),
        "fields": fields,
        "per_node": per_node,
    }


def jobs_view(results: Mapping[str, Any]) -> dict[str, Any]:
    jobs = results.get("jobs", [])
    states = Counter((j.get("name"), j.get("state")) for j in jobs)
    problems = [
        j
        for j in jobs
        if j.get("missing") or str(j.get("state", "")).split(" ")[0] not in ("COMPLETED", "FINISHED", "DONE")
    ]
    return {
        "states": sorted(states.items(), key=lambda kv: str(kv[0])),
        "problems": problems[:MAX_JOBS],
        "n_problems": len(problems),
        "n": len(jobs),
    }


def trends_view(trends: Sequence[Trend]) -> dict[str, Any]:
    rows = [{"t": t, "spark": svg.sparkline(t.history, t.regression)} for t in trends[:MAX_TRENDS]]
    return {
        "rows": rows,
        "n": len(trends),
        "regressions": [t for t in trends if t.regression],
        "runs": max((len(t.history) for t in trends), default=0),
    }


def context(
    results: Mapping[str, Any],
    run_dir: Path,
    trends: Sequence[Trend] = (),
    diff: Mapping[str, Any] | None = None,
    d: Digest | None = None,
) -> dict[str, Any]:
    d = d or digest(results)
    b = banner(results, d.total, d.counts)
    nodes, blocks = known_nodes(results), known_blocks(results)
    rows = bandwidth_rows(d.pairs)
    culprits = culprit_cards(d, rows, blocks)
    reasons = list(b.reasons)
    if culprits:
        names = ", ".join(c["title"] for c in culprits[:6]) + (" ..." if len(culprits) > 6 else "")
        reasons.insert(1, f"localization blames {names}")
    trends = [t for t in trends if t.n_prev] or []  # a first run has no trend to show
    grid, grid_note = node_rail_grid(rows, nodes) if rows else (None, "")
    groups = failure_groups(d.failures, frozenset(nodes))
    detailed = [{**g, "excerpts": excerpts_for(run_dir, g)} for g in groups[:MAX_DETAILED]]
    signoff = results.get("signoff") or {}
    return {
        "r": {**_HEADER_DEFAULTS, **results},
        "banner": b.verdict,
        "reasons": reasons,
        "counts": d.total,
        "suites": d.counts,
        "culprits": culprits,
        "legend": svg.legend(),
        "heatmaps": pair_heatmaps(rows, nodes) if rows else [],
        "grid": grid,
        "grid_note": grid_note,
        "n_pairs": len({(r.a, r.b) for r in rows}),
        "worst_pairs": [
            {"what": describe(r), "color": svg.color(ratio(r)), "evidence": r.evidence}
            for r in worst_pairs(rows)
        ],
        "bars": block_bars(d.blocks, list(blocks)),
        "curves": size_curves(d.blocks, list(blocks)),
        "failures": detailed,
        "listed": groups[MAX_DETAILED : MAX_DETAILED + MAX_LISTED],
        "n_groups": len(groups),
        "n_failures": len(d.failures),
        "waived": d.waived[:200],
        "n_waived": len(d.waived),
        "fingerprint": fingerprint_view(results),
        "jobs": jobs_view(results),
        "trends": trends_view(trends),
        "diff": diff,
        "signoff": {k: signoff.get(k) or "" for k in ("name", "role", "date")},
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def render_html(ctx: Mapping[str, Any]) -> str:
    html = render("report.html.j2", **ctx)
    return _URL.sub(lambda m: f"{m.group(1)}[:]//", html)


def write_html(
    run_dir: Path,
    results: Mapping[str, Any] | None = None,
    trends: Sequence[Trend] = (),
    diff: Mapping[str, Any] | None = None,
    d: Digest | None = None,
) -> Path:
    data = results if results is not None else record.load(run_dir)
    out = run_dir / "report.html"
    tmp = out.with_suffix(".html.tmp")
    tmp.write_text(render_html(context(data, run_dir, trends, diff, d)), encoding="utf-8")
    tmp.replace(out)
    return out
