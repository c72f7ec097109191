"""Pair busbw pictures: node x node heatmaps per rail and the node x rail grid (relative to the baseline).

Usable at 4,096 nodes: a heatmap side never exceeds MAX_BINS cells (nodes are binned in site order, so a
bin is a run of neighbouring nodes, usually one leaf; a binned cell shows the WORST pair inside it and
says so), and the node x rail grid shows every node only up to MAX_GRID_NODES, else the worst ones. The
lists of worst results below the pictures name the exact pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from clusteraccept.report import svg
from clusteraccept.report.model import PairRow
from clusteraccept.site.schema import format_size

MAX_BINS = 48
MAX_GRID_NODES = 64
WORST_LISTED = 20


def ratio(row: PairRow) -> float | None:
    return row.value / row.ref if row.ref else None


def _sort_key(row: PairRow) -> float:
    r = ratio(row)
    return r if r is not None else math.inf


def bandwidth_rows(pairs: Sequence[PairRow]) -> list[PairRow]:
    """One row per (pair, rail): its largest (bandwidth-bound) size, the worst collective at that size."""
    best: dict[tuple[str, str, int], PairRow] = {}
    for row in pairs:
        key = (row.a, row.b, row.rail)
        cur = best.get(key)
        if (
            cur is None
            or row.size_B > cur.size_B
            or (row.size_B == cur.size_B and _sort_key(row) < _sort_key(cur))
        ):
            best[key] = row
    return list(best.values())


def describe(row: PairRow) -> str:
    r = ratio(row)
    rel = f" = {svg.pct(r)} of {row.ref:g}" if r is not None else " (no baseline)"
    verdict = " FAIL" if row.failed else ""
    return (
        f"{row.a}-{row.b} rail {row.rail} {row.collective} {format_size(row.size_B)}: "
        f"{row.value:.1f} GB/s{rel}{verdict}"
    )


@dataclass(frozen=True)
class Bins:
    labels: list[str]
    of: dict[str, int]  # node -> bin index
    size: int  # nodes per bin


def make_bins(nodes: Sequence[str], max_bins: int = MAX_BINS) -> Bins:
    per = max(1, math.ceil(len(nodes) / max_bins))
    of = {n: i // per for i, n in enumerate(nodes)}
    if per == 1:
        return Bins(list(nodes), of, 1)
    labels = [f"{nodes[i]}…" for i in range(0, len(nodes), per)]
    return Bins(labels, of, per)


def pair_heatmaps(rows: Sequence[PairRow], nodes: Sequence[str]) -> list[Markup]:
    """One node x node heatmap per rail (symmetric; binned beyond MAX_BINS nodes)."""
    known = set(nodes)
    extra = sorted({n for r in rows for n in (r.a, r.b)} - known)
    bins = make_bins([*nodes, *extra])
    worst: dict[tuple[int, int, int], tuple[PairRow, int]] = {}  # (rail, bin_a, bin_b) -> worst, count
    for row in rows:
        i, j = bins.of[row.a], bins.of[row.b]
        key = (row.rail, min(i, j), max(i, j))
        cur = worst.get(key)
        if cur is None:
            worst[key] = (row, 1)
        else:
            worst[key] = (row if _sort_key(row) < _sort_key(cur[0]) else cur[0], cur[1] + 1)
    cell_px = max(4, min(38, 300 // max(1, len(bins.labels))))
    out = []
    for rail in sorted({r.rail for r in rows}):
        cells = []
        for (k, i, j), (row, n) in worst.items():
            if k != rail:
                continue
            title = describe(row) + (f" (worst of {n} pairs in this cell)" if bins.size > 1 else "")
            text = svg.pct(ratio(row)) if bins.size == 1 else ""
            cells.append(svg.Cell(i, j, ratio(row), title, row.failed, text))
            if i != j:
                cells.append(svg.Cell(j, i, ratio(row), title, row.failed, text))
        out.append(svg.grid(cells, bins.labels, bins.labels, cell_px=cell_px, caption=f"rail {rail}"))
    return out


@dataclass(frozen=True)
class NodeRail:
    best: float | None  # the node's best partner on this rail, relative to baseline
    best_row: PairRow
    worst: PairRow
    n: int
    failed: bool


def node_rail_stats(rows: Sequence[PairRow]) -> dict[tuple[str, int], NodeRail]:
    """Per (node, rail): its best and worst partner result, in one pass over the pair rows."""
    acc: dict[tuple[str, int], list[Any]] = {}  # [best_ratio, best_row, worst_key, worst_row, n, failed]
    for row in rows:
        r = ratio(row)
        rb = -math.inf if r is None else r
        rw = math.inf if r is None else r
        for key in ((row.a, row.rail), (row.b, row.rail)):
            a = acc.get(key)
            if a is None:
                acc[key] = [rb, row, rw, row, 1, row.failed]
                continue
            if rb > a[0]:
                a[0], a[1] = rb, row
            if rw < a[2]:
                a[2], a[3] = rw, row
            a[4] += 1
            a[5] = a[5] or row.failed
    return {k: NodeRail(None if a[0] == -math.inf else a[0], a[1], a[3], a[4], a[5]) for k, a in acc.items()}


def _partner(row: PairRow, node: str) -> str:
    return row.b if row.a == node else row.a


def node_rail_grid(rows: Sequence[PairRow], nodes: Sequence[str]) -> tuple[Markup, str]:
    """Nodes x rails, coloured by the node's BEST partner on that rail: a rail slow even with its best
    partner is slow with every partner, which is what localization blames on the node's rail (a slow
    cable shows in the heatmaps instead, and as an outline here). The note says what was left out."""
    stats = node_rail_stats(rows)
    rails = sorted({r for _, r in stats})
    seen = [n for n in nodes if any((n, r) in stats for r in rails)]
    seen += sorted({n for n, _ in stats} - set(seen))
    note = ""

    def score(n: str) -> float:
        vals = [s.best for r in rails if (s := stats.get((n, r))) and s.best is not None]
        return min(vals) if vals else math.inf

    def involved_in_failure(n: str) -> bool:
        return any(s.failed for r in rails if (s := stats.get((n, r))))

    if len(seen) > MAX_GRID_NODES:
        ranked = sorted(seen, key=lambda n: (not involved_in_failure(n), score(n)))
        shown, rest = ranked[:MAX_GRID_NODES], ranked[MAX_GRID_NODES:]
        floor = min((score(n) for n in rest), default=math.inf)
        note = (
            f"the {MAX_GRID_NODES} worst of {len(seen):,} nodes (those in a failed result first); on every "
            "rail of every other "
            f"node the best partner reaches at least {svg.pct(floor if floor != math.inf else None)} "
            "of baseline"
        )
    else:
        shown = seen
    cells = []
    for i, n in enumerate(shown):
        for j, rail in enumerate(rails):
            s = stats.get((n, rail))
            if s is None:
                continue
            title = (
                f"{n} rail {rail}: best partner {_partner(s.best_row, n)} at {svg.pct(s.best)} of baseline, "
                f"worst {_partner(s.worst, n)} at {svg.pct(ratio(s.worst))} ({s.n} partner(s))"
            )
            cells.append(svg.Cell(i, j, s.best, title, s.failed, svg.pct(s.best)))
    cell_px = 38 if len(shown) <= 16 else max(8, min(18, 900 // max(1, len(shown))))
    return svg.grid(cells, shown, [f"rail{r}" for r in rails], cell_px=cell_px), note


def worst_pairs(rows: Sequence[PairRow], failed: int = WORST_LISTED, healthy: int = 5) -> list[PairRow]:
    """The failed pair results (at most ``failed``), then the ``healthy`` lowest passing ones, worst first
    relative to their baseline (by absolute value where there is none)."""
    ordered = sorted(rows, key=_sort_key) if any(r.ref for r in rows) else sorted(rows, key=lambda r: r.value)
    bad = [r for r in ordered if r.failed][:failed]
    good = [r for r in ordered if not r.failed][:healthy]
    return bad + good
