"""The report's pure parts: banner rules, suite split, culprits, and the 4,096-node aggregation (small)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from lxml import etree

from clusteraccept.judge.items import split_pair
from clusteraccept.report import heatmap, junit, write_reports
from clusteraccept.report.model import PairRow, banner, convicts, culprit_parts, digest, suite_of

from .conftest import REPO

ALL = ["topology", "nvlink", "gpudirect", "roce", "efa", "slingshot", "tcpx", "sharp", "nccl"]


def v(
    outcome: str, check: str = "topology.pcie_link", subject: str = "n1:gpu0", **labels: str
) -> dict[str, Any]:
    return {"check": check, "family": check.split(".")[0], "subject": subject, "outcome": outcome,
            "message": "m", "labels": labels}  # fmt: skip


def test_banner_rules() -> None:
    ok = {"families": ALL, "jobs": [{"name": "probe", "state": "COMPLETED", "missing": []}]}
    assert banner({**ok, "verdicts": [v("pass"), v("skip")]}).verdict == "ACCEPT"
    waived = banner({**ok, "verdicts": [v("pass"), v("waived")]})
    assert waived.verdict == "ACCEPT" and "1 failure(s) waived" in waived.reasons[0]
    assert banner({**ok, "verdicts": [v("pass"), v("fail")]}).verdict == "REJECT"
    assert banner({**ok, "verdicts": [v("pass"), v("error")]}).verdict == "INCOMPLETE"
    assert banner({**ok, "verdicts": []}).verdict == "INCOMPLETE"
    assert banner({**ok, "verdicts": [v("pass")], "dry_run": True}).verdict == "INCOMPLETE"
    partial = banner({**ok, "families": ["nccl"], "verdicts": [v("pass")]})
    assert partial.verdict == "INCOMPLETE"
    assert "not run: topology, nvlink, gpudirect, roce, efa, slingshot, tcpx, sharp" in partial.reasons[0]
    assert banner({**ok, "subset": True, "verdicts": [v("pass")]}).verdict == "INCOMPLETE"
    lost = {**ok, "jobs": [{"name": "campaign-leaf1", "state": "TIMEOUT", "missing": ["n1-n2:rail0"]}]}
    assert banner({**lost, "verdicts": [v("pass")]}).verdict == "INCOMPLETE"
    both = banner({**lost, "verdicts": [v("fail")]})
    assert both.verdict == "REJECT" and any("campaign-leaf1" in r for r in both.reasons)


def test_nccl_suites_follow_the_suite_files() -> None:
    nodes = frozenset({"n1", "n2", "node-a", "node-a-b"})
    assert suite_of(v("pass", "nccl.busbw", "n1-n2:rail0:sendrecv:1GiB", scope="pair_in_block"), nodes) == (
        "nccl-nodes"
    )
    assert suite_of(v("pass", "nccl.busbw", "leaf1:all_reduce:1GiB", scope="block"), nodes) == "nccl-blocks"
    assert suite_of(v("pass", "nccl.launch", "n1-n2:rail3:sendrecv"), nodes) == "nccl-nodes"  # no scope label
    assert suite_of(v("pass", "nccl.launch", "n1:all_reduce"), nodes) == "nccl-nodes"  # intra-node
    assert suite_of(v("pass", "nccl.localization", "n1"), nodes) == "nccl-nodes"
    assert suite_of(v("pass", "nccl.localization", "leaf1"), nodes) == "nccl-blocks"
    assert suite_of(v("pass", "roce.pfc", "n1:rail0"), nodes) == "roce"
    assert split_pair("node-a-node-a-b", nodes) == ("node-a", "node-a-b")  # host names with dashes
    assert split_pair("n1-n2", nodes) == ("n1", "n2")


def test_culprits_and_what_convicts_them() -> None:
    loc = v("fail", "nccl.localization", "n3", culprits="rail:n3:rail5|path:n1-n3:rail2")
    loc["message"] = ("culprit: n3 rail 5 is slow with every partner [convicted by n2-n3:rail5]; only n1-n3 "
                      "on rail 2 is slow; both ends are healthy [convicted by n1-n3:rail2]")  # fmt: skip
    parts = culprit_parts(loc)
    assert [(k, s) for k, s, _ in parts] == [("rail", "n3:rail5"), ("path", "n1-n3:rail2")]
    assert parts[1][2].startswith("only n1-n3 on rail 2 is slow; both ends") and parts[1][2].endswith("]")
    row = PairRow("n2", "n3", 5, "sendrecv", 1 << 30, 25.0, 46.0, True, False, "raw/x.json")
    cross = row._replace(a="n1", cross=True)
    blocks = {"leaf1": ["n1", "n2"], "leaf2": ["n3", "n4"]}
    assert convicts("rail", "n3:rail5", row, blocks) and not convicts("rail", "n3:rail4", row, blocks)
    assert convicts("node", "n2", row, blocks) and not convicts("node", "n1", row, blocks)
    assert convicts("path", "n2-n3:rail5", row, blocks) and not convicts("path", "n1-n3:rail5", row, blocks)
    assert convicts("uplink", "leaf2", cross, blocks) and not convicts("uplink", "leaf2", row, blocks)


def load_benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("report_scale", REPO / "benchmarks" / "report_scale.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["report_scale"] = module
    spec.loader.exec_module(module)
    return module


def test_large_runs_are_aggregated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The benchmark's synthetic run at 512 nodes x 8 rails: binned heatmaps, the worst nodes only, the
    three injected culprits first, junit.xml through the streaming writer, still valid."""
    run = tmp_path / "scale" / "20261129T020000Z-beef"
    results = load_benchmark().build(run, nodes=512, block=16, rails=8)
    monkeypatch.setattr(junit, "JUNIT_XML_MAX", 1000)
    written = write_reports(run, results=results)
    html = written.paths["html"].read_text()
    rows = heatmap.bandwidth_rows(digest(results).pairs)
    assert len({n for r in rows for n in (r.a, r.b)}) == 512
    grids = re.findall(r'<svg class="grid".*?</svg>', html)
    assert len(grids) == 8 + 1  # a heatmap per rail, then the node x rail grid
    for svg in grids[:8]:
        assert svg.count("<rect") <= heatmap.MAX_BINS**2 + 1 and "worst of" in svg
    assert f"the {heatmap.MAX_GRID_NODES} worst of 512 nodes (those in a failed result first)" in html
    titles = re.findall(r'<div class="title">([^<]*)</div>', html)
    assert titles == ["gpu0123 rail 5", "path gpu0260-gpu0261 on rail 2", "su017 uplinks"]
    assert not re.search(r"(?i)https?://", html) and len(html) < 3_000_000
    schema = etree.XMLSchema(etree.parse(str(REPO / "tests" / "data" / "junit" / "jenkins-junit.xsd")))
    assert schema.validate(etree.parse(str(written.paths["junit"])))
