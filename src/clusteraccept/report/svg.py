"""Inline SVG for report.html: colour scale, cell grids, bars, curves, sparklines.

Plain strings, no scripts and no external reference of any kind (inline SVG in HTML needs no xmlns, so not
even the SVG namespace URL appears); hover details are SVG ``<title>`` elements, which browsers show as
tooltips without JavaScript. Every text goes through :func:`markupsafe.escape`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

# Hue stops of the busbw/baseline colour scale: red at or below 60 %, amber near a typical -8 % bound,
# green at or above the reference.
_STOPS = ((0.6, 0.0), (0.92, 42.0), (1.0, 130.0))
EMPTY = "#e4e4e4"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")


def color(ratio: float | None) -> str:
    """Measured/reference -> fill colour (grey when there is no reference)."""
    if ratio is None or math.isnan(ratio):
        return EMPTY
    lo_r, lo_h = _STOPS[0]
    if ratio <= lo_r:
        return f"hsl({lo_h:.0f},70%,45%)"
    for (r0, h0), (r1, h1) in itertools.pairwise(_STOPS):
        if ratio <= r1:
            return f"hsl({h0 + (h1 - h0) * (ratio - r0) / (r1 - r0):.0f},70%,45%)"
    return f"hsl({_STOPS[-1][1]:.0f},55%,42%)"


def pct(ratio: float | None) -> str:
    return "n/a" if ratio is None else f"{ratio * 100:.0f}%"


def _t(text: str) -> str:
    return str(escape(text))


@dataclass(frozen=True)
class Cell:
    row: int
    col: int
    ratio: float | None
    title: str
    failed: bool = False
    text: str = ""


def grid(
    cells: Sequence[Cell],
    rows: Sequence[str],
    cols: Sequence[str],
    *,
    cell_px: int,
    caption: str = "",
) -> Markup:
    """A rows x cols grid of coloured cells (only the cells given are drawn; the rest stay empty)."""
    char_px = 6.8  # 11 px system-ui, a generous average (digits are wider than "i" or "l")
    label_px = int(max((len(r) for r in rows), default=4) * char_px) + 12
    col_len = max((len(c) for c in cols), default=4) * char_px
    rotate = col_len > cell_px - 2
    top = (16 if caption else 2) + (int(col_len) + 6 if rotate else 14)
    w = label_px + cell_px * len(cols) + 4
    h = top + cell_px * len(rows) + 4
    every_r = max(1, math.ceil(12 / cell_px))
    every_c = max(1, math.ceil(12 / cell_px))
    out = [f'<svg class="grid" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">']
    if caption:
        out.append(f'<text x="0" y="12" class="cap">{_t(caption)}</text>')
    out.append(
        f'<rect x="{label_px}" y="{top}" width="{cell_px * len(cols)}" height="{cell_px * len(rows)}"'
        ' fill="#f4f4f4"/>'
    )
    for i, name in enumerate(rows):
        if i % every_r == 0:
            y = top + i * cell_px + cell_px / 2 + 4
            out.append(
                f'<text x="{label_px - 4}" y="{y:.1f}" text-anchor="end" class="lbl">{_t(name)}</text>'
            )
    for j, name in enumerate(cols):
        if j % every_c == 0:
            x = label_px + j * cell_px + cell_px / 2
            if rotate:
                out.append(
                    f'<text transform="translate({x + 4:.1f},{top - 4}) rotate(-90)" class="lbl">'
                    f"{_t(name)}</text>"
                )
            else:
                out.append(
                    f'<text x="{x:.1f}" y="{top - 4}" text-anchor="middle" class="lbl">{_t(name)}</text>'
                )
    inset = 1 if cell_px >= 6 else 0
    for c in cells:
        x, y = label_px + c.col * cell_px, top + c.row * cell_px
        stroke = ' stroke="#000" stroke-width="2"' if c.failed and cell_px >= 8 else ""
        out.append(
            f'<rect x="{x}" y="{y}" width="{cell_px - inset}" height="{cell_px - inset}" '
            f'fill="{color(c.ratio)}"{stroke}><title>{_t(c.title)}</title></rect>'
        )
        if c.text and cell_px >= 30:
            out.append(
                f'<text x="{x + cell_px / 2:.1f}" y="{y + cell_px / 2 + 4:.1f}" text-anchor="middle"'
                f' class="val">{_t(c.text)}</text>'
            )
    out.append("</svg>")
    return Markup("".join(out))


def legend() -> Markup:
    """The colour scale, as measured / baseline reference."""
    stops = [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.92, 0.95, 0.98, 1.0, 1.05]
    out = ['<svg class="legend" width="420" height="34" viewBox="0 0 420 34" role="img">']
    for i, r in enumerate(stops):
        out.append(f'<rect x="{10 + i * 34}" y="2" width="34" height="14" fill="{color(r)}"/>')
        out.append(f'<text x="{27 + i * 34}" y="29" text-anchor="middle" class="lbl">{pct(r)}</text>')
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    ref: float | None
    lower: float | None
    failed: bool
    title: str


def bars(items: Sequence[Bar], unit: str, width: int = 520) -> Markup:
    """Horizontal bars: measured value, with the reference (solid tick) and lower bound (dashed tick)."""
    if not items:
        return Markup("")
    top = max(max(i.value, i.ref or 0.0) for i in items) * 1.08 or 1.0
    label_w, row_h, plot_w = 150, 20, width - 150 - 70
    h = row_h * len(items) + 22
    out = [f'<svg class="bars" width="{width}" height="{h}" viewBox="0 0 {width} {h}" role="img">']
    for k, it in enumerate(items):
        y = 4 + k * row_h
        bw = plot_w * it.value / top
        fill = color(it.value / it.ref if it.ref else None)
        out.append(
            f'<text x="{label_w - 6}" y="{y + 13}" text-anchor="end" class="lbl">{_t(it.label)}</text>'
        )
        stroke = ' stroke="#000"' if it.failed else ""
        out.append(
            f'<rect x="{label_w}" y="{y + 2}" width="{bw:.1f}" height="{row_h - 6}" fill="{fill}"'
            f"{stroke}><title>{_t(it.title)}</title></rect>"
        )
        out.append(f'<text x="{label_w + bw + 4:.1f}" y="{y + 13}" class="lbl">{it.value:.1f}</text>')
        if it.ref:
            x = label_w + plot_w * it.ref / top
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + row_h - 2}" class="ref"/>')
        if it.lower:
            x = label_w + plot_w * it.lower / top
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y}" y2="{y + row_h - 2}" class="bound"/>')
    y = h - 6
    out.append(f'<text x="{label_w}" y="{y}" class="lbl">0</text>')
    out.append(
        f'<text x="{label_w + plot_w}" y="{y}" text-anchor="end" class="lbl">{top:.0f} {_t(unit)}</text>'
    )
    out.append("</svg>")
    return Markup("".join(out))


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[tuple[int, float], ...]  # (size_B, value)
    failed: bool = False


def nice_ticks(top: float, n: int = 4) -> list[float]:
    """Round tick values from 0 up to ``top`` (steps of 1, 2, 2.5 or 5 x 10^k)."""
    raw = top / n
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [step * i for i in range(1, int(top / step) + 1)]


def _size_label(size_B: int) -> str:
    for unit, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size_B >= mult:
            return f"{size_B / mult:g}{unit}"
    return f"{size_B}"


def curves(
    series: Sequence[Series], refs: Sequence[tuple[int, float]], unit: str, caption: str = ""
) -> Markup:
    """busbw versus message size (log2 x), one line per series, the baseline references dashed."""
    xs = sorted({x for s in series for x, _ in s.points} | {x for x, _ in refs})
    if not xs:
        return Markup("")
    ymax = max([y for s in series for _, y in s.points] + [y for _, y in refs]) * 1.1 or 1.0
    w, h, left, right, top, bottom = 460, 250, 48, 130, 20, 30
    pw, ph = w - left - right, h - top - bottom
    lx0, lx1 = math.log2(xs[0]), math.log2(xs[-1])
    span = (lx1 - lx0) or 1.0

    def px(x: int) -> float:
        return left + pw * ((math.log2(x) - lx0) / span if lx1 > lx0 else 0.5)

    def py(y: float) -> float:
        return top + ph * (1 - y / ymax)

    out = [f'<svg class="curves" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img">']
    if caption:
        out.append(f'<text x="{left}" y="13" class="cap">{_t(caption)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#ccc"/>')
    for y in nice_ticks(ymax):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="gridline"/>')
        out.append(f'<text x="{left - 4}" y="{py(y) + 4:.1f}" text-anchor="end" class="lbl">{y:.0f}</text>')
    for x in xs:
        out.append(
            f'<text x="{px(x):.1f}" y="{h - bottom + 14}" text-anchor="middle" class="lbl">'
            f"{_size_label(x)}</text>"
        )
    out.append(f'<text x="{left}" y="{h - 2}" class="lbl">message size (B); busbw in {_t(unit)}</text>')
    if refs:
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(refs))
        out.append(f'<polyline points="{pts}" class="refline"><title>baseline reference</title></polyline>')
    for k, s in enumerate(series):
        col = PALETTE[k % len(PALETTE)]
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in sorted(s.points))
        width = 2.5 if s.failed else 1.5
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="{col}" stroke-width="{width}">'
            f"<title>{_t(s.name)}</title></polyline>"
        )
        for x, y in s.points:
            out.append(
                f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{col}">'
                f"<title>{_t(f'{s.name} {_size_label(x)}: {y:.1f} {unit}')}</title></circle>"
            )
        ly = top + 12 + k * 15
        mark = " ✗" if s.failed else ""
        out.append(
            f'<line x1="{left + pw + 8}" x2="{left + pw + 22}" y1="{ly - 4}" y2="{ly - 4}" '
            f'stroke="{col}" stroke-width="2.5"/>'
        )
        out.append(f'<text x="{left + pw + 26}" y="{ly}" class="lbl">{_t(s.name + mark)}</text>')
    if refs:
        ly = top + 12 + len(series) * 15
        out.append(
            f'<line x1="{left + pw + 8}" x2="{left + pw + 22}" y1="{ly - 4}" y2="{ly - 4}" class="refline"/>'
        )
        out.append(f'<text x="{left + pw + 26}" y="{ly}" class="lbl">baseline</text>')
    out.append("</svg>")
    return Markup("".join(out))


def sparkline(
    values: Sequence[float | None], flag: bool = False, width: int = 120, height: int = 22
) -> Markup:
    """A run-over-run trend; the last point (this run) is marked, red when ``flag``ged as a regression."""
    pts = [(i, v) for i, v in enumerate(values) if v is not None]
    if not pts:
        return Markup("")
    lo, hi = min(v for _, v in pts), max(v for _, v in pts)
    span = (hi - lo) or abs(hi) or 1.0
    n = max(1, len(values) - 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return 3 + (width - 6) * i / n, height - 3 - (height - 6) * (v - lo) / span

    line = " ".join("{:.1f},{:.1f}".format(*xy(i, v)) for i, v in pts)
    lx, ly = xy(*pts[-1])
    dot = "#c62828" if flag else "#333"
    return Markup(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img">'
        f'<polyline points="{line}" fill="none" stroke="#555" stroke-width="1.2"/>'
        f'<circle cx="{lx:.1f}" cy="{ly:.1f}" r="2.8" fill="{dot}"/></svg>'
    )
