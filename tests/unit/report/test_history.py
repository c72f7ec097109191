"""The nightly history store, regressions against the rolling median, and --compare (synthetic runs)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.judge import record
from clusteraccept.report import history, write_reports
from clusteraccept.report.compare import compare, summary_lines
from clusteraccept.rundir import write_json

KEY = "nccl.busbw.sendrecv.pair_in_block.rail0.1GiB"
LAT = "nccl.latency.sendrecv.pair_in_block.rail0.8B"


def verdict(
    subject: str,
    value: float,
    key: str = KEY,
    *,
    lower: float | None = 42.32,
    upper: float | None = None,
    ref: float = 46.0,
) -> dict[str, Any]:
    failed = (lower is not None and value < lower) or (upper is not None and value > upper)
    labels = {"key": key, "scope": "pair_in_block", "rail": "0", "collective": "sendrecv", "size_B": "1024"}
    return {
        "check": "nccl.busbw", "family": "nccl", "subject": subject, "outcome": "fail" if failed else "pass",
        "message": f"busbw_GBps={value}", "value": value, "ref": ref, "lower": lower, "upper": upper,
        "unit": "GB/s", "evidence": [], "labels": labels,
    }  # fmt: skip


def results(run_id: str, night: int, busbw: float, latency: float = 10.0, **extra: Any) -> dict[str, Any]:
    vs = [verdict(f"n{i}-n{i + 1}:rail0:sendrecv:1GiB", busbw + i * 0.01) for i in range(5)]
    vs.append(verdict("n1-n2:rail0:sendrecv:8B", latency, LAT, lower=None, upper=12.0, ref=10.0))
    fingerprint = {"nodes": {"n1": {"nccl": "2.28.9"}}, "differences": []}
    return {
        "site": "nightly", "run_id": run_id, "started": f"2026-11-{night:02d}T02:00:00+00:00",
        "ended": f"2026-11-{night:02d}T03:00:00+00:00", "suite_revision": "abc", "baselines_sha256": "b1",
        "simulated": True, "nodes": ["n0", "n1", "n2", "n3", "n4", "n5"], "families": ["nccl"],
        "jobs": [], "verdicts": vs, "fingerprint": fingerprint, **extra,
    }  # fmt: skip


def nightly(tmp_path: Path, values: list[tuple[float, float]]) -> list[Path]:
    runs = []
    for night, (busbw, lat) in enumerate(values, start=1):
        run = tmp_path / "nightly" / f"202611{night:02d}T020000Z-000{night}"
        run.mkdir(parents=True)
        write_json(run / "results.json", results(run.name, night, busbw, lat))
        write_reports(run)
        runs.append(run)
    return runs


def test_a_drop_within_the_baseline_is_flagged_against_the_rolling_median(tmp_path: Path) -> None:
    runs = nightly(tmp_path, [(46.0, 10.0), (46.2, 10.1), (45.9, 9.9), (46.1, 10.0), (43.5, 11.5)])
    last = record.load(runs[-1])
    assert all(v["outcome"] == "pass" for v in last["verdicts"])  # the baseline still passes
    store = tmp_path / "nightly" / history.STORE
    stats = history.key_stats(last)
    trends = {t.key: t for t in history.trends(store, last, stats)}
    busbw, lat = trends[KEY], trends[LAT]
    assert busbw.regression and busbw.passes and busbw.n_prev == 4
    assert busbw.rolling == pytest.approx(46.07) and busbw.last == pytest.approx(46.12)
    assert busbw.change == pytest.approx(43.52 / 46.07 - 1)
    assert "while the baseline still passes" in busbw.why
    assert lat.regression and lat.change is not None and lat.change > 0.05  # latency: lower is better
    assert len(busbw.history) == 5 and busbw.history[-1] == busbw.now
    html = (runs[-1] / "report.html").read_text()
    assert "REGRESSION" in html and KEY in html


def test_no_flag_without_enough_history_or_within_noise(tmp_path: Path) -> None:
    runs = nightly(tmp_path, [(46.0, 10.0), (43.0, 10.0)])
    last = record.load(runs[-1])
    trends = history.trends(tmp_path / "nightly" / history.STORE, last, history.key_stats(last))
    assert not any(t.regression for t in trends)  # one previous run is not a trend (MIN_HISTORY)
    runs = nightly(tmp_path / "b", [(46.0, 10.0), (46.2, 10.0), (45.9, 10.0), (44.5, 10.3)])
    last = record.load(runs[-1])
    trends = history.trends(tmp_path / "b" / "nightly" / history.STORE, last, history.key_stats(last))
    assert not any(t.regression for t in trends)  # -3 %: noise, not a regression


def test_a_rejudged_run_replaces_its_row(tmp_path: Path) -> None:
    (run,) = nightly(tmp_path, [(46.0, 10.0)])
    data = record.load(run)
    data["verdicts"] = [verdict("n0-n1:rail0:sendrecv:1GiB", 40.0)]
    data["rejudged"] = "2026-11-02T00:00:00+00:00"
    write_json(run / "results.json", data)
    write_reports(run)
    with sqlite3.connect(tmp_path / "nightly" / history.STORE) as con:
        assert con.execute("SELECT count(*), max(banner), max(rejudged) FROM runs").fetchone() == (
            1, "REJECT", "2026-11-02T00:00:00+00:00")  # fmt: skip
        assert con.execute("SELECT key, n, median, n_fail FROM key_stats").fetchall() == [(KEY, 1, 40.0, 1)]


def test_partial_runs_add_no_medians(tmp_path: Path) -> None:
    """A -k subset or a due-only night measured a few pairs: its medians never enter the rolling ones."""
    runs = nightly(tmp_path, [(46.0, 10.0), (46.2, 10.1), (45.9, 9.9)])
    store = tmp_path / "nightly" / history.STORE
    for night, extra in ((4, {"subset": True}), (5, {"scope": {"only_due": True, "all_due": False}})):
        run = tmp_path / "nightly" / f"202611{night:02d}T020000Z-000{night}"
        run.mkdir(parents=True)
        write_json(run / "results.json", results(run.name, night, 30.0, 10.0, **extra))
        write_reports(run)
    full = tmp_path / "nightly" / "20261106T020000Z-0006"
    full.mkdir()
    write_json(
        full / "results.json", results(full.name, 6, 46.0, 10.0, scope={"only_due": True, "all_due": True})
    )
    write_reports(full)
    with sqlite3.connect(store) as con:
        assert con.execute("SELECT count(*) FROM runs").fetchone() == (6,)  # every run is listed
        with_medians = con.execute("SELECT DISTINCT run_id FROM key_stats ORDER BY run_id").fetchall()
    assert [r for (r,) in with_medians] == [p.name for p in runs] + [full.name]
    last = record.load(full)
    (busbw,) = [t for t in history.trends(store, last, history.key_stats(last)) if t.key == KEY]
    assert busbw.n_prev == 3 and not busbw.regression  # the 30 GB/s partial nights did not count


def test_compare_two_runs(tmp_path: Path) -> None:
    before = results("r1", 1, 46.0)
    now = results("r2", 2, 46.0, baselines_sha256="b2")
    now["verdicts"][0] = verdict(now["verdicts"][0]["subject"], 30.0)  # a new failure
    before["verdicts"][1] = verdict(before["verdicts"][1]["subject"], 30.0)  # fixed since
    now["fingerprint"]["nodes"]["n1"]["nccl"] = "2.29.1"
    diff = compare(before, now)
    assert diff["new_failures"] == ["nccl.busbw[n0-n1:rail0:sendrecv:1GiB]"]
    assert diff["fixed"] == ["nccl.busbw[n1-n2:rail0:sendrecv:1GiB]"] and diff["n_still_failing"] == 0
    assert diff["fingerprint"] == ["n1: nccl 2.28.9 -> 2.29.1"]
    lines = summary_lines(diff)
    assert (
        lines[0]
        == "compared with run r1 (2026-11-01T02:00:00+00:00): 1 new failure(s), 1 fixed, 0 still failing"
    )
    assert "  baselines changed: b1 -> b2" in lines
    # through write_reports: compare.json beside the run, a section in its report
    for r in (before, now):
        (tmp_path / "s" / r["run_id"]).mkdir(parents=True)
        write_json(tmp_path / "s" / r["run_id"] / "results.json", r)
    written = write_reports(tmp_path / "s" / "r2", compare="r1")
    assert written.compare == lines
    assert json.loads((tmp_path / "s" / "r2" / "compare.json").read_text())["n_new_failures"] == 1
    assert "Compared with run r1" in (tmp_path / "s" / "r2" / "report.html").read_text()
    missing = write_reports(tmp_path / "s" / "r2", compare="nope")
    assert missing.warnings and "--compare nope" in missing.warnings[0]
