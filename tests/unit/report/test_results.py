"""The demo run's record is complete and canonical: results.json (the run's facts) and verdicts.sqlite
(one row per verdict, judge/record.py); its verdicts round-trip; a run written before the split (every
verdict inside results.json) reads the same."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from clusteraccept.jobs.archive import read
from clusteraccept.judge import record
from clusteraccept.judge.verdicts import Verdict
from clusteraccept.report.model import banner

from .conftest import SIGNER, DemoRun


def test_verdicts_round_trip(demo_run: DemoRun) -> None:
    verdicts = demo_run.results["verdicts"]
    assert len(verdicts) > 250
    for d in verdicts:
        v = Verdict.from_dict(d)
        assert v.to_dict() == d
        assert Verdict.from_dict(v.to_dict()) == v


def test_the_record_is_complete(demo_run: DemoRun) -> None:
    r = demo_run.results
    for key in ("site", "run_id", "started", "ended", "operator", "suite_revision", "baselines_file",
                "baselines_sha256", "plan", "jobs", "verdicts", "families", "nodes", "blocks"):  # fmt: skip
        assert r.get(key) not in (None, "", [], {}), key
    assert r["run_id"] == demo_run.run.name and r["site"] == "demo" and r["simulated"] is True
    assert r["started"] <= r["ended"] and len(r["baselines_sha256"]) == 16
    assert r["blocks"] == {"leaf1": ["node1", "node2"], "leaf2": ["node3", "node4"]} and r["subset"] is False
    rounds = [rnd for job in r["plan"]["campaign_jobs"] for rnd in job["rounds"]]
    names = [rnd for job in record.step_names(demo_run.run, r).values() for rnd in job]
    assert [len(rnd) for rnd in names] == [rnd["n_steps"] for rnd in rounds] and "steps" not in rounds[0]
    assert any("node3-node4:rail5" in step for rnd in names for step in rnd)
    assert r["signoff"]["name"] == SIGNER[0] and r["signoff"]["role"] == SIGNER[1] and r["signoff"]["date"]
    # no roce or sharp items on the demo: not run, and not missing from the run either
    assert sorted(r["not_applicable"]) == ["efa", "roce", "sharp", "slingshot", "tcpx"]
    assert not [why for why in banner(r).reasons if "not run" in why], banner(r).reasons
    # every verdict's evidence was archived where it says
    for v in r["verdicts"]:
        for ref in v["evidence"]:
            assert read(demo_run.run, ref)["host"], ref


def test_fingerprint_per_node(demo_run: DemoRun) -> None:
    fp = demo_run.results["fingerprint"]
    assert sorted(fp["nodes"]) == ["node1", "node2", "node3", "node4"]
    for node, fields in fp["nodes"].items():
        assert fields["gpu_driver"] == "570.133.20", node  # /proc/driver/nvidia/version
        assert fields["nccl_tests"] == "2.19.6" and fields["nccl"] == "2.28.9", node  # nccl-tests header
        assert fields["hca_fw"].startswith("mlx5_0=28.41.1000 "), node  # ibstat "Firmware version"
        assert fields["kernel"] == "5.15.0-131-generic", node
    assert fp["differences"] == []


def test_results_json_holds_the_facts_and_the_store_the_verdicts(demo_run: DemoRun, tmp_path: Path) -> None:
    facts = json.loads((demo_run.run / "results.json").read_text())
    assert "verdicts" not in facts and facts["record"]["verdicts"] == "verdicts.sqlite"
    every = demo_run.results["verdicts"]
    assert sum(facts["record"]["counts"].values()) == len(every)
    bad = list(record.rows(demo_run.run, "bad"))
    assert bad == [v for v in every if v["outcome"] in ("fail", "error")]
    owners = [*facts["nodes"], *facts["blocks"], "all"]
    items = list(record.rows(demo_run.run, "items", owners))
    # every verdict a node or block owns, and of the pairs' only those that did not pass
    assert items == [v for v in every if v["subject"].split(":")[0] in owners or v["outcome"] != "pass"]
    assert len(items) < len(every)
    # a run of before the split: verdicts inside results.json, no store
    old = tmp_path / "old"
    shutil.copytree(demo_run.run, old)
    (old / "verdicts.sqlite").unlink()
    (old / "results.json").write_text(json.dumps({**facts, "verdicts": every}))
    assert record.load(old)["verdicts"] == every


def test_a_store_of_another_schema_is_refused_by_name(demo_run: DemoRun, tmp_path: Path) -> None:
    import sqlite3

    import pytest

    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run)
    con = sqlite3.connect(run / "verdicts.sqlite")
    con.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match=r"verdicts.sqlite: expected a verdict store of schema 2, got 1"):
        record.load(run)


def test_labels_are_stored_as_given_whatever_their_order_or_type(tmp_path: Path) -> None:
    """Label sets are dumped once per content (record._labels_json): the same labels in another order
    are one set, and a value that is not a string (1, 1.0, True: one key to a Python set) keeps its own."""
    labels = [{"a": "x", "b": "y"}, {"b": "y", "a": "x"}, {"n": 1}, {"n": True}, {"n": 1.0}, {"n": "1"}]
    verdicts = [
        {"check": "c", "family": "f", "subject": f"s{i}", "outcome": "pass", "message": "", "labels": lab}
        for i, lab in enumerate(labels)
    ]
    record.write(tmp_path, {}, verdicts)
    back = [v["labels"] for v in record.rows(tmp_path)]
    assert back == labels
    assert [type(b["n"]) for b in back[2:]] == [int, bool, float, str]


def test_the_reports_read_the_store_as_briefs_and_say_the_same(demo_run: DemoRun, tmp_path: Path) -> None:
    """The reports' one pass reads every verdict as a brief (record.briefs) and junit.xml only the items'
    verdicts (record.rows "items"): each brief is its verdict's dict, the digest of the briefs is that of the
    dicts, and junit.xml is the one built from every verdict."""
    from clusteraccept.report import write_reports
    from clusteraccept.report.junit import build
    from clusteraccept.report.model import digest

    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run)
    facts = json.loads((run / "results.json").read_text())
    every = record.load(run)["verdicts"]
    briefs = list(record.briefs(run, facts))
    assert [record.as_dict(b) for b in briefs] == every
    assert any(b[3] == "fail" for b in briefs) and any(b[11] for b in briefs)  # failures, labels: both read
    whole = digest({**facts, "verdicts": every})
    assert digest(facts, briefs) == whole and whole.failures and whole.pairs and whole.key_values
    write_reports(run, history=False)
    assert (run / "junit.xml").read_text() == build(record.load(run))
