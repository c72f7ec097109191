"""Reports derived from results.json: junit.xml and report.html (the report issue fills these in)."""

from __future__ import annotations

from pathlib import Path


def write_reports(run_dir: Path) -> None:
    from clusteraccept.report.html import write_html
    from clusteraccept.report.junit import write_junit

    write_junit(run_dir)
    write_html(run_dir)
