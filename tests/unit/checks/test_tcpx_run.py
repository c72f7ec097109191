"""The GPUDirect-TCPXO demo through the command users run: ``pytest suites/ --site=demo-tcpxo`` (8 simulated
A3 Mega nodes, the local executor) ends exactly on its five injected faults, each on its own check naming
the cause; what a fault leaves unjudgeable says so (a node with a GPU NIC down: "not judged: tcpx.devices").
"""

from __future__ import annotations

import re
from pathlib import Path

from harness import PytestRunner

from clusteraccept.judge import record

from .test_topology import CONFIGS


def test_the_tcpxo_demo_ends_exactly_on_its_faults(run_pytest: PytestRunner, tmp_path: Path) -> None:
    text = (CONFIGS / "demo-tcpxo.yaml").read_text()
    text = text.replace("{repo}/.vcluster/sim/demo-tcpxo", str(tmp_path / "sim"))
    site = tmp_path / "demo-tcpxo.yaml"
    site.write_text(text)
    proc = run_pytest(f"--site={site}", f"--reports-dir={tmp_path}", "suites/", "-rf")
    failed = sorted(re.findall(r"^FAILED (\S+)", proc.stdout, re.M))
    assert failed == [
        "suites/test_nccl_nodes.py::test_nccl_node[a3m002]",
        "suites/test_nccl_nodes.py::test_nccl_node[a3m003]",
        "suites/test_tcpx.py::test_tcpx[a3m001]",
        "suites/test_tcpx.py::test_tcpx[a3m002]",
        "suites/test_tcpx.py::test_tcpx[a3m006]",
        "suites/test_topology.py::test_topology[a3m005]",
    ], proc.stdout[-3000:]
    (run,) = [p for p in (tmp_path / "demo-tcpxo").iterdir() if (p / "jobs").is_dir() and not p.is_symlink()]
    verdicts = record.load(run)["verdicts"]
    got = {(v["check"], v["subject"]): v for v in verdicts}
    bad = {k for k, v in got.items() if v["outcome"] in ("fail", "error") and k[0] != "nccl.launch"}
    assert bad == {
        ("tcpx.devices", "a3m001"),
        ("tcpx.rxdm", "a3m002"),
        ("tcpx.env", "a3m006"),
        ("topology.gpu_nic_affinity", "a3m005:gpu6"),
        ("nccl.transport", "a3m002"),
        ("nccl.transport", "a3m003"),
    }, sorted(bad)
    # a3m002's RxDM is not running: the probe finds no socket, and FasTrak aborted every step it was in: a
    # finding of transport, not a slow node
    assert got["tcpx.rxdm", "a3m002"]["message"].startswith(
        "a3m002: nothing listens on @rxdm_uds_nic_mapping"
    )
    assert got["tcpx.rxdm", "a3m003"]["outcome"] == "pass"
    assert got["nccl.localization", "a3m002"]["outcome"] == "skip"
    transport = got["nccl.transport", "a3m002"]["message"]
    assert transport.startswith("the net plugin stopped the step: 'Timeout: RxDM not ready on a3m002")
    assert transport.count("Timeout: RxDM") == 1  # said once, with the steps that showed it
    launch = {k[1]: v for k, v in got.items() if k[0] == "nccl.launch" and v["outcome"] == "fail"}
    assert launch and all("a3m002" in step for step in launch), sorted(launch)
    assert {v["message"].split(";")[0] for v in launch.values()} == {"exit code 134"}
    assert (
        "Google's libnccl-net.so is not on the job's library path"
        in got["nccl.transport", "a3m003"]["message"]
    )
    assert "unset: NCCL_FASTRAK_NUM_FLOWS" in got["tcpx.env", "a3m006"]["message"]
    # what a3m001's steps and node verdicts would have failed on (GPU3's NIC down) is not judged
    unjudged = [
        v
        for v in verdicts
        if v["family"] == "nccl" and v["subject"].startswith("a3m001") and v["outcome"] != "pass"
    ]
    assert unjudged and all(v["message"].startswith("not judged: tcpx.devices on a3m001") for v in unjudged)
    # the healthy nodes' rails went through their own GPU NIC, over FasTrak, from GPU memory
    assert got["launch.nic", "a3m004"]["outcome"] == "pass"
    assert got["nccl.transport", "a3m004"]["message"].endswith("over NET/FasTrak")
    assert got["gpudirect.nccl_gdrdma", "a3m004"]["message"].endswith("NET channels use /GDRDMA")
    pairs = [v for v in verdicts if v["check"] == "nccl.busbw" and ":rail" in v["subject"]]
    assert pairs and all(v["value"] <= 25 for v in pairs if v["outcome"] == "pass")
