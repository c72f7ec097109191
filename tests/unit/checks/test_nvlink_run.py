"""The HGX NVLink faults through the command users run: ``pytest suites/ --site=<demo with only NVLink faults>
--executor=local`` ends exactly on them, and the node whose fabric manager is down is named once: its nccl
steps (CUDA cannot start there) say "not judged: nvlink.fabric on node4 ..." and blame no one."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from harness import PytestRunner

from clusteraccept.judge import record

from .test_nvlink import FAULTS

REPO = Path(__file__).resolve().parents[3]


def test_the_demo_with_nvlink_faults_ends_exactly_on_them(run_pytest: PytestRunner, tmp_path: Path) -> None:
    data = yaml.safe_load((REPO / "site-configs" / "demo.yaml").read_text())
    data["sim"]["faults"] = FAULTS
    text = yaml.safe_dump(data).replace("{repo}/.vcluster/sim/demo", str(tmp_path / "sim"))
    site = tmp_path / "demo.yaml"
    site.write_text(text)
    proc = run_pytest(f"--site={site}", "--executor=local", f"--reports-dir={tmp_path}", "suites/", "-rf")
    failed = sorted(re.findall(r"^FAILED (\S+)", proc.stdout, re.M))
    assert failed == [f"suites/test_nvlink.py::test_nvlink[{n}]" for n in ("node1", "node2", "node4")], (
        proc.stdout[-3000:]
    )
    (run,) = [p for p in (tmp_path / "demo").iterdir() if not p.is_symlink() and (p / "jobs").is_dir()]
    verdicts = record.load(run)["verdicts"]
    bad = {(v["check"], v["subject"]) for v in verdicts if v["outcome"] in ("fail", "error")}
    assert bad == {
        ("nvlink.links", "node1:gpu2"),
        ("nvlink.errors", "node2:gpu4"),
        ("nvlink.fabric", "node4"),
    }
    unjudged = [v for v in verdicts if v["message"].startswith("not judged: nvlink.fabric on node4")]
    unjudged = [v for v in unjudged if v["family"] == "nccl"]
    assert unjudged and all(v["outcome"] == "skip" for v in unjudged)
    assert {v["subject"] for v in unjudged} >= {"node4:all_reduce", "node3-node4:rail0:sendrecv"}
    errors = next(v for v in verdicts if (v["check"], v["subject"]) == ("nvlink.errors", "node2:gpu4"))
    assert "link 7 CRC Errors +" in errors["message"] and "intra-node" in errors["message"]
    node4 = [v for v in verdicts if v["check"] == "nvlink.errors" and v["subject"].startswith("node4:")]
    assert len(node4) == 8 and {v["outcome"] for v in node4} == {"skip"}  # no traffic crossed them
    assert node4[0]["message"].startswith("not judged: nvlink.fabric on node4")
