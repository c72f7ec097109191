"""junit.xml from results.json (junit-xml): one testsuite per check family, one testcase per verdict."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from junit_xml import TestCase, TestSuite, to_xml_report_string

from clusteraccept.rundir import read_json

FAMILY_SUITES = {"nccl": "nccl"}


def build(results: dict[str, Any]) -> str:
    suites: dict[str, list[TestCase]] = {}
    for v in results.get("verdicts", []):
        family = v["family"]
        tc = TestCase(
            f"{v['check']}[{v['subject']}]", classname=f"clusteraccept.{family}", status=v["outcome"]
        )
        if v["outcome"] == "fail":
            tc.add_failure_info(message=v["message"])
        elif v["outcome"] == "error":
            tc.add_error_info(message=v["message"])
        elif v["outcome"] in ("skip", "waived"):
            tc.add_skipped_info(message=v["message"])
        suites.setdefault(family, []).append(tc)
    props = {
        "site": results.get("site"),
        "run_id": results.get("run_id"),
        "simulated": str(results.get("simulated")),
        "baselines_sha256": results.get("baselines_sha256"),
    }
    return str(
        to_xml_report_string(
            [
                TestSuite(f"clusteraccept.{fam}", cases, properties=props)
                for fam, cases in sorted(suites.items())
            ],
            prettyprint=True,
            encoding="utf-8",
        )
    )


def write_junit(run_dir: Path) -> Path:
    out = run_dir / "junit.xml"
    out.write_text(build(read_json(run_dir / "results.json")))
    return out
