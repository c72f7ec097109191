"""Run history for nightly regressions: ``<reports-dir>/<site>/history.sqlite``, one row per run and one
per (run, key).

Why SQLite through the standard library rather than Parquet through pandas:
- an append is one transaction: a nightly cron job, a manual run and a ``--rejudge`` finishing at the same
  time cannot corrupt the store or lose a run (a Parquet file is immutable: appending means rewriting it, or
  a directory of part files and a compaction step, with our own locking);
- Parquet needs pyarrow (or fastparquet), which is not a dependency; sqlite3 is always there, and the
  ``sqlite3`` CLI reads the store at 3 a.m. without this package;
- the report asks small indexed questions ("this key over the last N runs"), not column scans.
What is stored per key is a summary of the run's values under it (count, median, min, max, reference and
bounds, failures), not every verdict: 500k rows a night would make the store the largest file of the run
and the trend is that of the median. A key is a baseline key (``labels.key``: ``nccl.busbw.<collective>.
<scope>.rail<k>.<size>``, ``gpudirect.write_bw.<node>.<rail>``) or, for numeric verdicts without one, the
check id.

Regression: this run's median is more than THRESHOLD worse than the median of the previous runs' medians
(the last NIGHTS runs, at least MIN_HISTORY of them), in the key's good direction (higher is better when the
baseline has only a lower bound, lower is better with only an upper bound, either way otherwise). It is
flagged even where the baseline still passes: that is the point of it.
"""

from __future__ import annotations

import sqlite3
import statistics
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.report.model import Digest, digest, partial

STORE = "history.sqlite"
NIGHTS = 14
MIN_HISTORY = 3
THRESHOLD = 0.05

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id TEXT PRIMARY KEY, site TEXT NOT NULL, started TEXT NOT NULL, ended TEXT, banner TEXT,
  suite_revision TEXT, baselines_sha256 TEXT, simulated INTEGER, rejudged TEXT,
  n_pass INTEGER, n_fail INTEGER, n_error INTEGER, n_skip INTEGER, n_waived INTEGER);
CREATE TABLE IF NOT EXISTS key_stats (
  run_id TEXT NOT NULL, key TEXT NOT NULL, unit TEXT, n INTEGER, median REAL, min REAL, max REAL,
  ref REAL, lower REAL, upper REAL, n_fail INTEGER, PRIMARY KEY (run_id, key));
CREATE INDEX IF NOT EXISTS runs_site_started ON runs (site, started);
"""


@dataclass(frozen=True)
class KeyStat:
    unit: str
    n: int
    median: float
    min: float
    max: float
    ref: float | None
    lower: float | None
    upper: float | None
    n_fail: int

    @property
    def better(self) -> str:
        """higher | lower | either: which way is good for this key."""
        if self.lower is not None and self.upper is None:
            return "higher"
        if self.upper is not None and self.lower is None:
            return "lower"
        return "either"


def key_stats(results: Mapping[str, Any], d: Digest | None = None) -> dict[str, KeyStat]:
    """Per key: the summary of this run's numeric values under it (pure; ``d``: the run's digest)."""
    d = d or digest(results)
    return {
        k: KeyStat(
            d.key_meta[k][0],
            len(vs),
            statistics.median(vs),
            min(vs),
            max(vs),
            *d.key_meta[k][1:],
            d.key_fails.get(k, 0),
        )
        for k, vs in d.key_values.items()
    }


def connect(store: Path) -> sqlite3.Connection:
    con = sqlite3.connect(store, timeout=60)  # waits for a concurrent writer instead of failing
    con.executescript(_SCHEMA)
    return con


def record(
    store: Path,
    results: Mapping[str, Any],
    banner: str,
    stats: Mapping[str, KeyStat],
    counts: Mapping[str, int],
) -> None:
    """Add (or, for a re-judged run, replace) this run in the store; ``counts``: verdicts per outcome.

    A partial run (``-k``, ``--only-due``: report.model.partial) keeps its run row but adds no key medians:
    the median of the few pairs it tested is not comparable with a full night's, and would pull the
    rolling medians of the runs after it."""
    if partial(results):
        stats = {}
    counts = {o: counts.get(o, 0) for o in ("pass", "fail", "error", "skip", "waived")}
    run_id = str(results["run_id"])
    with closing(connect(store)) as con, con:
        con.execute("DELETE FROM key_stats WHERE run_id = ?", (run_id,))
        con.execute(
            "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run_id, results.get("site"), results.get("started") or "", results.get("ended"), banner,
                results.get("suite_revision"), results.get("baselines_sha256"),
                int(bool(results.get("simulated"))), results.get("rejudged"),
                counts["pass"], counts["fail"], counts["error"], counts["skip"], counts["waived"],
            ),
        )  # fmt: skip
        con.executemany(
            "INSERT INTO key_stats VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [
                (run_id, k, s.unit, s.n, s.median, s.min, s.max, s.ref, s.lower, s.upper, s.n_fail)
                for k, s in stats.items()
            ],
        )


@dataclass(frozen=True)
class Trend:
    key: str
    unit: str
    now: float
    last: float | None  # the previous run's median ("last night")
    rolling: float | None  # median of the previous runs' medians
    history: tuple[float | None, ...]  # oldest .. this run (medians), for the sparkline
    n_prev: int
    change: float | None  # now / rolling - 1
    regression: bool
    passes: bool  # no verdict under this key failed in this run

    @property
    def why(self) -> str:
        if not self.regression or self.change is None:
            return ""
        still = " while the baseline still passes" if self.passes else ""
        return f"median {self.change:+.1%} against the rolling median of {self.n_prev} runs{still}"


def previous_runs(con: sqlite3.Connection, site: str, run_id: str, started: str, n: int) -> list[str]:
    rows = con.execute(
        "SELECT run_id FROM runs WHERE site = ? AND run_id != ? AND started <= ? "
        "ORDER BY started DESC, run_id DESC LIMIT ?",
        (site, run_id, started, n),
    ).fetchall()
    return [r[0] for r in reversed(rows)]


def _regressed(stat: KeyStat, change: float) -> bool:
    if stat.better == "higher":
        return change < -THRESHOLD
    if stat.better == "lower":
        return change > THRESHOLD
    return abs(change) > THRESHOLD


def trends(
    store: Path, results: Mapping[str, Any], stats: Mapping[str, KeyStat], nights: int = NIGHTS
) -> list[Trend]:
    """Per key of this run: last night, the rolling median of the last ``nights`` runs, the flag."""
    if not store.exists():
        return []
    with closing(connect(store)) as con:
        prev = previous_runs(
            con,
            str(results.get("site")),
            str(results.get("run_id")),
            str(results.get("started") or ""),
            nights,
        )
        past: dict[str, dict[str, float]] = {}
        if prev:
            marks = ",".join("?" * len(prev))
            for run, key, median in con.execute(
                f"SELECT run_id, key, median FROM key_stats WHERE run_id IN ({marks})", prev
            ):
                past.setdefault(key, {})[run] = median
    out = []
    for key, stat in stats.items():
        seen = past.get(key, {})
        hist = [seen.get(r) for r in prev]
        vals = [h for h in hist if h is not None]
        rolling = statistics.median(vals) if vals else None
        change = stat.median / rolling - 1 if rolling else None
        flagged = change is not None and len(vals) >= MIN_HISTORY and _regressed(stat, change)
        out.append(
            Trend(
                key,
                stat.unit,
                stat.median,
                hist[-1] if hist else None,
                rolling,
                (*hist, stat.median),
                len(vals),
                change,
                flagged,
                stat.n_fail == 0,
            )
        )
    out.sort(key=lambda t: (not t.regression, t.change if t.change is not None else 0.0, t.key))
    return out
