"""Block collectives: busbw bars against the baseline, and busbw-versus-size curves (inline SVG).

Scopes ``block`` (one leaf / scalable unit) and ``all`` (the whole node set) are drawn together per
collective; ``intra_node`` (NVLink inside one node) gets its own bars. At scale only the worst MAX_BARS
bars and MAX_CURVES curves are drawn, and a note says how many were left out and how good they were.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup

from clusteraccept.report import svg
from clusteraccept.report.model import BlockRow
from clusteraccept.site.schema import format_size

MAX_BARS = 12
MAX_CURVES = 8


@dataclass(frozen=True)
class Chart:
    title: str
    svg: Markup
    note: str = ""


def _ratio(row: BlockRow) -> float:
    return row.value / row.ref if row.ref else math.inf


def _largest(rows: Sequence[BlockRow]) -> dict[str, BlockRow]:
    """Per subject: its row at the largest size (bandwidth-bound)."""
    out: dict[str, BlockRow] = {}
    for r in rows:
        cur = out.get(r.subject)
        if cur is None or r.size_B > cur.size_B:
            out[r.subject] = r
    return out


def _pick(largest: dict[str, BlockRow], order: Sequence[str], limit: int) -> tuple[list[BlockRow], str]:
    rank = {s: i for i, s in enumerate(order)}
    rows = sorted(
        largest.values(), key=lambda r: (r.subject == "all", rank.get(r.subject, len(rank)), r.subject)
    )
    if len(rows) <= limit:
        return rows, ""
    worst = sorted(rows, key=_ratio)
    shown, rest = worst[:limit], worst[limit:]
    floor = min((_ratio(r) for r in rest), default=math.inf)
    note = (
        f"the {limit} worst of {len(rows):,}; the others reach at least "
        f"{svg.pct(floor if floor != math.inf else None)} of their baseline"
    )
    return shown, note


def _groups(rows: Sequence[BlockRow]) -> dict[tuple[str, str], list[BlockRow]]:
    groups: dict[tuple[str, str], list[BlockRow]] = {}
    for r in rows:
        kind = "intra-node" if r.scope == "intra_node" else "blocks"
        groups.setdefault((kind, r.collective), []).append(r)
    return groups


def block_bars(rows: Sequence[BlockRow], order: Sequence[str]) -> list[Chart]:
    """Per (blocks | intra-node, collective): one bar per subject at its largest size."""
    charts = []
    for (kind, collective), group in sorted(_groups(rows).items()):
        shown, note = _pick(_largest(group), order, MAX_BARS)
        items = [
            svg.Bar(
                r.subject,
                r.value,
                r.ref,
                r.lower,
                r.failed,
                f"{r.subject} {collective} {format_size(r.size_B)}: {r.value:.1f} GB/s"
                + (f" = {svg.pct(r.value / r.ref)} of {r.ref:g}" if r.ref else " (no baseline)")
                + (f", lower bound {r.lower:.1f}" if r.lower else "")
                + (" FAIL" if r.failed else ""),
            )
            for r in shown
        ]
        size = format_size(max(r.size_B for r in shown)) if shown else ""
        charts.append(Chart(f"{collective}, {kind}, at {size}", svg.bars(items, "GB/s"), note))
    return charts


def size_curves(rows: Sequence[BlockRow], order: Sequence[str]) -> list[Chart]:
    """busbw versus size per collective, one curve per block (worst first at scale) and the whole set."""
    charts = []
    for (kind, collective), group in sorted(_groups(rows).items()):
        if kind != "blocks":
            continue
        shown, note = _pick(_largest(group), order, MAX_CURVES)
        names = {r.subject for r in shown}
        by_subject: dict[str, list[BlockRow]] = {}
        for r in group:
            if r.subject in names:
                by_subject.setdefault(r.subject, []).append(r)
        series = [
            svg.Series(
                name,
                tuple((r.size_B, r.value) for r in sorted(rs, key=lambda r: r.size_B)),
                any(r.failed for r in rs),
            )
            for name, rs in ((s.subject, by_subject[s.subject]) for s in shown)
        ]
        refs = sorted({(r.size_B, r.ref) for r in group if r.ref and r.scope == "block"})
        caption = f"{collective}: busbw vs size" + (" (baseline: per block)" if refs else "")
        charts.append(
            Chart(collective, svg.curves(series, [(x, float(y)) for x, y in refs], "GB/s", caption), note)
        )
    return charts
