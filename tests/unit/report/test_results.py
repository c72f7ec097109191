"""results.json of the demo run is the complete canonical record, and its verdicts round-trip."""

from __future__ import annotations

from clusteraccept.judge.verdicts import Verdict

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
    assert any("node3-node4:rail5" in step for rnd in rounds for step in rnd["steps"])
    assert r["signoff"]["name"] == SIGNER[0] and r["signoff"]["role"] == SIGNER[1] and r["signoff"]["date"]
    # every verdict's evidence was archived where it says
    for v in r["verdicts"]:
        for path in v["evidence"]:
            assert (demo_run.run / path).is_file(), path


def test_fingerprint_per_node(demo_run: DemoRun) -> None:
    fp = demo_run.results["fingerprint"]
    assert sorted(fp["nodes"]) == ["node1", "node2", "node3", "node4"]
    for node, fields in fp["nodes"].items():
        assert fields["gpu_driver"] == "570.133.20", node  # /proc/driver/nvidia/version
        assert fields["nccl_tests"] == "2.19.6" and fields["nccl"] == "2.28.9", node  # nccl-tests header
        assert fields["hca_fw"].startswith("mlx5_0=28.41.1000 "), node  # ibstat "Firmware version"
        assert fields["kernel"] == "5.15.0-131-generic", node
    assert fp["differences"] == []
