"""The Slingshot demo through the command users run: ``pytest suites/ --site=demo-slingshot`` (8 simulated
nodes, the local executor) ends exactly on its five injected faults, each on its own check naming the cause;
what a fault leaves unjudgeable says so (a node short of a NIC: "not judged: slingshot.devices").
"""

from __future__ import annotations

import re
from pathlib import Path

from harness import PytestRunner

from clusteraccept.judge import record

from .test_topology import CONFIGS


def test_the_slingshot_demo_ends_exactly_on_its_faults(run_pytest: PytestRunner, tmp_path: Path) -> None:
    text = (CONFIGS / "demo-slingshot.yaml").read_text()
    text = text.replace("{repo}/.vcluster/sim/demo-slingshot", str(tmp_path / "sim"))
    site = tmp_path / "demo-slingshot.yaml"
    site.write_text(text)
    proc = run_pytest(f"--site={site}", f"--reports-dir={tmp_path}", "suites/", "-rf")
    failed = sorted(re.findall(r"^FAILED (\S+)", proc.stdout, re.M))
    assert failed == [
        "suites/test_nccl_nodes.py::test_nccl_node[nid002]",
        "suites/test_nccl_nodes.py::test_nccl_node[nid003]",
        "suites/test_slingshot.py::test_slingshot[nid001]",
        "suites/test_slingshot.py::test_slingshot[nid006]",
        "suites/test_topology.py::test_topology[nid005]",
    ], proc.stdout[-3000:]
    (run,) = [
        p for p in (tmp_path / "demo-slingshot").iterdir() if (p / "jobs").is_dir() and not p.is_symlink()
    ]
    verdicts = record.load(run)["verdicts"]
    got = {(v["check"], v["subject"]): v for v in verdicts}
    bad = {k for k, v in got.items() if v["outcome"] in ("fail", "error") and k[0] != "nccl.launch"}
    assert bad == {
        ("slingshot.devices", "nid001"),
        ("slingshot.env", "nid006"),
        ("topology.gpu_nic_affinity", "nid005:gpu1"),
        ("nccl.transport", "nid002"),
        ("nccl.transport", "nid003"),
    }, sorted(bad)
    # nid003's steps failed at init for a reason nccl.transport names: not evidence of a slow node
    assert got["nccl.localization", "nid003"]["outcome"] == "skip"
    # the steps themselves: those with nid003 (its own intra-node one too) failed at init, the rest ran
    launch = {k[1]: v for k, v in got.items() if k[0] == "nccl.launch" and v["outcome"] == "fail"}
    assert launch and all("nid003" in step for step in launch), sorted(launch)
    assert "nid003:all_reduce" in launch
    assert {v["message"] for v in launch.values()} == {
        "exit code 3; failed: nid003: Test NCCL failure common.cu:0 'invalid usage (run with NCCL_DEBUG=WARN "
        "for details)'"
    }
    assert "found no cxi provider" in got["nccl.transport", "nid002"]["message"]
    assert got["nccl.transport", "nid003"]["message"].startswith(
        "NCCL_NET asks for network 'AWS Libfabric', which NCCL did not find (the step failed at init)"
    )
    assert "unset: FI_CXI_RX_MATCH_MODE" in got["slingshot.env", "nid006"]["message"]
    # what nid001's steps and node verdicts would have failed on (rail 2 shares another NIC) is not judged
    unjudged = [
        v
        for v in verdicts
        if v["family"] == "nccl" and v["subject"].startswith("nid001") and v["outcome"] != "pass"
    ]
    assert unjudged and all(
        v["message"].startswith("not judged: slingshot.devices on nid001") for v in unjudged
    )
    # the healthy nodes' rails went through their own cxi NIC, over aws-ofi-nccl with GPUDirect RDMA
    assert got["launch.nic", "nid004"]["outcome"] == "pass"
    assert got["gpudirect.nccl_gdrdma", "nid004"]["message"].endswith("NET channels use /GDRDMA")
    assert got["nccl.link_errors", "nid004:rail0"]["outcome"] == "skip"  # no cxi counters read yet
    pairs = [v for v in verdicts if v["check"] == "nccl.busbw" and ":rail" in v["subject"]]
    assert pairs and all(v["value"] <= 25 for v in pairs if v["outcome"] == "pass")
