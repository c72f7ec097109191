"""report.html: one self-contained file rendered with jinja2 from results.json."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from clusteraccept.render import render
from clusteraccept.rundir import read_json


def banner(results: dict[str, Any]) -> str:
    outcomes = [v["outcome"] for v in results.get("verdicts", [])]
    incomplete = (
        any(
            j.get("missing") or j.get("state") not in ("COMPLETED", "FINISHED", "DONE")
            for j in results.get("jobs", [])
        )
        or results.get("dry_run")
        or not outcomes
    )
    if "fail" in outcomes:
        return "REJECT"
    if incomplete or "error" in outcomes:
        return "INCOMPLETE"
    return "ACCEPT"


def context(results: dict[str, Any]) -> dict[str, Any]:
    families: dict[str, Counter[str]] = {}
    for v in results.get("verdicts", []):
        families.setdefault(v["family"], Counter())[v["outcome"]] += 1
    failures = [v for v in results.get("verdicts", []) if v["outcome"] in ("fail", "error")]
    return {
        "r": results,
        "banner": banner(results),
        "families": families,
        "failures": failures[:500],
        "n_failures": len(failures),
    }


def write_html(run_dir: Path) -> Path:
    out = run_dir / "report.html"
    out.write_text(render("report.html.j2", **context(read_json(run_dir / "results.json"))))
    return out
