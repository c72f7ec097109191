"""Reports derived from results.json (the canonical record of a run): junit.xml, report.html, the run
history (``<reports-dir>/<site>/history.sqlite``) and, with ``--compare``, compare.json.

Modules: model (one pass over the verdicts: counts, banner, chart rows), junit, html (+ the template
templates/report.html.j2), svg / heatmap / blocks (the pictures), excerpt (raw evidence lines), history
(nightly trend and regressions), compare (two runs).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clusteraccept.judge import record
from clusteraccept.rundir import read_json, write_json


@dataclass
class Written:
    """What :func:`write_reports` produced, for the terminal summary."""

    paths: dict[str, Path] = field(default_factory=dict)
    regressions: list[str] = field(default_factory=list)
    compare: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def summary_lines(self, limit: int = 20) -> list[str]:
        """For pytest's terminal summary: warnings, regressions (at most ``limit``), the --compare diff."""
        lines = [*self.warnings, *(f"REGRESSION {r}" for r in self.regressions[:limit])]
        if len(self.regressions) > limit:
            lines.append(f"... and {len(self.regressions) - limit} more regressions (report.html, Trend)")
        return lines + self.compare


def signoff_block(name: str | None, role: str | None, date: str | None = None) -> dict[str, str] | None:
    """The sign-off recorded in results.json; None leaves blank lines to sign by hand."""
    if not name and not role:
        return None
    return {"name": name or "", "role": role or "", "date": date or datetime.now(UTC).date().isoformat()}


def write_reports(
    run_dir: Path,
    *,
    results: dict[str, Any] | None = None,
    signoff: Mapping[str, str] | None = None,
    compare: str | None = None,
    history: bool = True,
) -> Written:
    """(Re)write every report of ``run_dir`` from its results.json (or ``results``, the same document)."""
    from clusteraccept.report import history as hist
    from clusteraccept.report.compare import compare as diff_runs
    from clusteraccept.report.compare import other_results, summary_lines
    from clusteraccept.report.html import write_html
    from clusteraccept.report.junit import write_junit
    from clusteraccept.report.model import banner, digest, item_owners

    out = Written()
    path = run_dir / "results.json"
    # The one pass over every verdict (the digest) reads them as briefs from the store; junit.xml and the
    # report's other parts need the items' verdicts only (each node's and block's, and the pairs' that did
    # not pass): a 256-node run's 360,000 verdicts read as dicts took 2.6 s of the reports' ~5.
    data: dict[str, Any] = dict(results) if results is not None else read_json(path)
    stored = record.stored(data)
    verdicts = record.briefs(run_dir, data)
    if stored:
        data["verdicts"] = list(record.rows(run_dir, "items", [o for os in item_owners(data) for o in os]))
    if signoff:
        data["signoff"] = dict(signoff)
        facts = read_json(path)
        facts["signoff"] = dict(signoff)
        write_json(path, facts)  # who signed is part of the record (its facts: the verdicts stay apart)
    d = digest(data, verdicts)  # the one pass over the verdicts every report shares
    trends: list[hist.Trend] = []
    if history and d.total and not data.get("dry_run"):
        store = run_dir.parent / hist.STORE
        stats = hist.key_stats(data, d)
        try:
            hist.record(store, data, banner(data, d.total).verdict, stats, d.total)
            trends = hist.trends(store, data, stats)
        except sqlite3.Error as exc:  # the history must never cost the run its report
            out.warnings.append(f"history store {store}: {exc}")
        out.paths["history"] = store
        out.regressions = [f"{t.key}: {t.why}" for t in trends if t.regression]
    diff = None
    if compare:
        try:
            _, other = other_results(run_dir, compare)
        except FileNotFoundError as exc:
            out.warnings.append(str(exc))
        else:
            diff = diff_runs(other, record.load(run_dir) if stored else data)
            write_json(run_dir / "compare.json", diff)
            out.paths["compare"] = run_dir / "compare.json"
            out.compare = summary_lines(diff)
    out.paths["junit"] = write_junit(run_dir, data, d)
    out.paths["html"] = write_html(run_dir, data, trends, diff, d)
    return out
