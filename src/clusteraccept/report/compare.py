"""``--compare RUN_ID``: what changed between two runs of a site (verdict outcomes, key medians, the
fingerprint, the baselines and the suite revision), from their results.json. Written to compare.json,
shown in report.html and printed in pytest's terminal summary.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusteraccept.judge import record
from clusteraccept.report.history import KeyStat, key_stats

LISTED = 200  # test ids listed per category (the counts are always complete)
KEYS_LISTED = 40


def other_results(run_dir: Path, ref: str) -> tuple[Path, dict[str, Any]]:
    """The results.json of run ``ref``: a run id beside ``run_dir`` (same site), or a run directory."""
    for cand in (run_dir.parent / ref, Path(ref)):
        if (cand / "results.json").exists():
            data: dict[str, Any] = record.load(cand)
            return cand, data
    raise FileNotFoundError(f"--compare {ref}: no results.json in {run_dir.parent / ref} or {ref}")


def _outcomes(results: Mapping[str, Any]) -> dict[str, str]:
    """test id -> the worst outcome among its verdicts."""
    rank = {"error": 0, "fail": 1, "waived": 2, "pass": 3, "skip": 4}
    out: dict[str, str] = {}
    for v in results.get("verdicts", []):
        tid = f"{v['check']}[{v['subject']}]"
        cur = out.get(tid)
        if cur is None or rank.get(v["outcome"], 5) < rank.get(cur, 5):
            out[tid] = v["outcome"]
    return out


def _key_changes(a: Mapping[str, KeyStat], b: Mapping[str, KeyStat]) -> list[dict[str, Any]]:
    rows = []
    for key in sorted(set(a) & set(b)):
        before, now = a[key].median, b[key].median
        change = now / before - 1 if before else None
        rows.append({"key": key, "unit": b[key].unit, "before": before, "now": now, "change": change})
    rows.sort(key=lambda r: (r["change"] is None, r["change"] or 0.0))
    return rows


def _fingerprint_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    fa, fb = a.get("fingerprint", {}).get("nodes", {}), b.get("fingerprint", {}).get("nodes", {})
    out = []
    for node in sorted(set(fa) | set(fb)):
        xa, xb = fa.get(node, {}), fb.get(node, {})
        for k in sorted(set(xa) | set(xb)):
            if xa.get(k) != xb.get(k):
                out.append(f"{node}: {k} {xa.get(k, '(absent)')} -> {xb.get(k, '(absent)')}")
    return out


def compare(other: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """The diff from ``other`` (before) to ``current`` (now)."""
    oa, ob = _outcomes(other), _outcomes(current)
    bad = ("fail", "error")
    new_fail = sorted(t for t, o in ob.items() if o in bad and oa.get(t) not in bad)
    fixed = sorted(t for t, o in ob.items() if o == "pass" and oa.get(t) in bad)
    still = sum(1 for t, o in ob.items() if o in bad and oa.get(t) in bad)
    changes = _key_changes(key_stats(other), key_stats(current))
    return {
        "before": {k: other.get(k) for k in ("run_id", "started", "suite_revision", "baselines_sha256")},
        "now": {k: current.get(k) for k in ("run_id", "started", "suite_revision", "baselines_sha256")},
        "new_failures": new_fail[:LISTED],
        "n_new_failures": len(new_fail),
        "fixed": fixed[:LISTED],
        "n_fixed": len(fixed),
        "n_still_failing": still,
        "n_new_tests": len(set(ob) - set(oa)),
        "n_gone_tests": len(set(oa) - set(ob)),
        "keys": changes[:KEYS_LISTED],
        "fingerprint": _fingerprint_changes(other, current)[:LISTED],
    }


def summary_lines(diff: Mapping[str, Any], limit: int = 10) -> list[str]:
    """The diff in a few terminal lines."""
    b, n = diff["before"], diff["now"]
    lines = [
        f"compared with run {b['run_id']} ({b['started']}): {diff['n_new_failures']} new failure(s), "
        f"{diff['n_fixed']} fixed, {diff['n_still_failing']} still failing"
    ]
    lines += [f"  new failure: {t}" for t in diff["new_failures"][:limit]]
    lines += [f"  fixed: {t}" for t in diff["fixed"][:limit]]
    worst = [k for k in diff["keys"] if k["change"] is not None and abs(k["change"]) >= 0.02][:limit]
    lines += [
        f"  {k['key']}: median {k['before']:.4g} -> {k['now']:.4g} {k['unit']} ({k['change']:+.1%})"
        for k in worst
    ]
    lines += [f"  fingerprint: {c}" for c in diff["fingerprint"][:limit]]
    if b["baselines_sha256"] != n["baselines_sha256"]:
        lines.append(f"  baselines changed: {b['baselines_sha256']} -> {n['baselines_sha256']}")
    if b["suite_revision"] != n["suite_revision"]:
        lines.append(f"  suite revision: {b['suite_revision']} -> {n['suite_revision']}")
    return lines
