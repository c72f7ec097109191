"""Topology checks end to end in-process: simulated hosts (real captures) -> probe -> archive -> judge.

The demo site's injected faults (nic_wrong_numa on node2 gpu3, pcie_x8 on node1 gpu6) must fail exactly
their check and subject with an engineer's message; everything else passes. The real 2x H200 VM's
evidence (no HCA, numa_node -1) gives PASS/FAIL for the GPU checks and SKIPs with reasons for the NIC ones.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks, flow
from clusteraccept.evidence import Evidence
from clusteraccept.jobs import node_entry
from clusteraccept.jobs.archive import archive_job, read
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.plan.subjects import subjects
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim import profile_topology
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

CONFIGS = REPO_ROOT / "site-configs"
VM_EVIDENCE = REPO_ROOT / "tests" / "data" / "evidence" / "h200x2-vm-topology-gpudirect-fingerprint.json"
Archived = tuple[Evidence, str]
PER = {
    "topology.gpu_inventory": "node",
    "topology.gpu_nic_affinity": "gpu",
    "topology.pcie_link": "gpu",
    "topology.nic_port": "rail",
    "topology.nic_pcie_link": "rail",
}
MY_FAULTS = ("nic_wrong_numa", "pcie_x8", "peermem_missing", "acs_on")


def demo(faults: list[dict[str, Any]] | None = None, **changes: Any) -> Site:
    """The demo site; ``faults`` replaces this family's faults (the fabric fault stays)."""
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    if faults is not None:
        data["sim"]["faults"] = [f for f in data["sim"]["faults"] if f["kind"] not in MY_FAULTS] + faults
    data.update(changes)
    return parse_site(CONFIGS / "demo.yaml", data)


def collect(site: Site, families: tuple[str, ...], tmp: Path) -> dict[str, list[Archived]]:
    """Build the host profiles, run the families' probes on each node, archive like flow.execute."""
    build_profiles(site, tmp / "hosts")
    out: dict[str, list[Archived]] = {f: [] for f in families}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLUSTERACCEPT_HOST_PROFILE", str(tmp / "hosts"))
        for node in site.nodes:
            mp.setenv("CLUSTERACCEPT_HOSTNAME", node)
            collected = node_entry.collect_node(families, flow.probe_options(site))
            evs = [e for e in collected if e.meta["check"] in out]
            for ev, ref in archive_job(tmp, "probe-nodes", evs):
                out[ev.meta["check"]].append((ev, ref))
    return out


def edited(
    archived: list[Archived],
    node: str,
    match: Callable[[Evidence], bool],
    change: Callable[[Evidence], Evidence | None],
) -> list[Archived]:
    """The evidence with ``change`` applied to ``node``'s matching items (None drops the item)."""
    out: list[Archived] = []
    for ev, path in archived:
        new = change(ev) if ev.host == node and match(ev) else ev
        if new is not None:
            out.append((new, path))
    return out


def file_is(path_end: str) -> Callable[[Evidence], bool]:
    return lambda ev: ev.path.endswith(path_end)


def stdout(text: str, rc: int | None = 0) -> Callable[[Evidence], Evidence]:
    return lambda ev: replace(ev, stdout=text, returncode=rc)


def vm_evidence(family: str) -> list[Archived]:
    evs = [Evidence.from_dict(d) for d in json.loads(VM_EVIDENCE.read_text())]
    return [(e, f"raw/{family}/vm1/{i}.json") for i, e in enumerate(evs) if e.meta["check"] == family]


def vm_site(numa_expected: bool = False) -> Site:
    node_type = {
        "gpus": 2,
        "gpu_model": "NVIDIA H200",
        "numa_expected": numa_expected,
        "rails": {"gpu0": {"hca": "mlx5_0", "rate_Gbps": 400}, "gpu1": {"hca": "mlx5_1"}},
    }
    return parse_site(Path("vm.yaml"), {"name": "vm", "nodes": "vm1", "node_types": {"h200": node_type}})


def judged(site: Site, archived: list[Archived], family: str = "topology") -> list[Verdict]:
    return checks.judge(family, site, archived, site.nodes)


def one(verdicts: list[Verdict], check: str, subject: str) -> Verdict:
    [v] = [v for v in verdicts if v.check == check and v.subject == subject]
    return v


def failing(verdicts: list[Verdict]) -> set[tuple[str, str]]:
    return {(v.check, v.subject) for v in verdicts if v.outcome in (Outcome.FAIL, Outcome.ERROR)}


def assert_complete(site: Site, verdicts: list[Verdict], per: dict[str, str]) -> None:
    want = {(c, s) for c, kind in per.items() for s in subjects(site, kind)}
    got = [(v.check, v.subject) for v in verdicts]
    assert sorted(got) == sorted(want)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Site, Path, list[Archived]]:
    site, tmp = demo(), tmp_path_factory.mktemp("topology")
    return site, tmp, collect(site, ("topology",), tmp)["topology"]


def test_demo_faults_fail_exactly_their_check(demo_run: tuple[Site, Path, list[Archived]]) -> None:
    site, tmp, archived = demo_run
    verdicts = judged(site, archived)
    assert_complete(site, verdicts, PER)
    assert failing(verdicts) == {
        ("topology.gpu_nic_affinity", "node2:gpu3"),
        ("topology.pcie_link", "node1:gpu6"),
    }
    numa = one(verdicts, "topology.gpu_nic_affinity", "node2:gpu3")
    assert numa.message == (
        "node2 gpu3: rail NIC mlx5_3 is on NUMA node 1, GPU3 on NUMA node 0 "
        "(nvidia-smi topo: SYS, expected PIX or PXB)"
    )
    x8 = one(verdicts, "topology.pcie_link", "node1:gpu6")
    assert x8.message.startswith(
        "node1 gpu6 (0000:bf:00.0): PCIe link runs x8 at 32 GT/s, device maximum x16"
    )
    assert "port above allows x16" in x8.message and x8.value == "x8 at 32 GT/s"
    healthy = one(verdicts, "topology.gpu_nic_affinity", "node3:gpu3")
    assert healthy.outcome is Outcome.PASS
    assert healthy.message == (
        "node3 gpu3: rail NIC mlx5_3 is PIX to GPU3 (its closest NIC), both on NUMA node 0"
    )
    assert one(verdicts, "topology.nic_port", "node3:rail5").message == (
        "node3 rail5 mlx5_5: ACTIVE/LINK_UP at 400 Gb/s InfiniBand"
    )
    inventory = one(verdicts, "topology.gpu_inventory", "node1")
    assert inventory.message == "node1: 8 x NVIDIA H100 80GB HBM3 (nvidia-smi), as node type h100 expects"
    for v in verdicts:  # every verdict carries the archived evidence it was judged on
        assert v.evidence and all(read(tmp, p) for p in v.evidence), v.test_id


def test_nic_pcie_x8_fault_and_port_down(demo_run: tuple[Site, Path, list[Archived]]) -> None:
    site, _, archived = demo_run
    part = profile_topology.contribute("node4", site, [{"kind": "pcie_x8", "node": "node4", "rail": 2}])
    [width] = [v for k, v in part.files.items() if k.endswith("0000:53:00.0/current_link_width")]
    assert width == "8\n"  # the sim's {rail} form of the fault trains the NIC at x8
    archived = edited(archived, "node4", file_is("mlx5_2/device/current_link_width"), stdout("8\n"))
    text = profile_topology.ibstat_text([f"mlx5_{k}" for k in range(8)])
    blocks = text.split("CA '")
    blocks[8] = blocks[8].replace("State: Active", "State: Down").replace("LinkUp", "Polling")
    archived = edited(archived, "node1", lambda ev: ev.source == "ibstat", stdout("CA '".join(blocks)))
    verdicts = judged(site, archived)
    assert failing(verdicts) - failing(judged(site, demo_run[2])) == {
        ("topology.nic_pcie_link", "node4:rail2"),
        ("topology.nic_port", "node1:rail7"),
    }
    assert one(verdicts, "topology.nic_pcie_link", "node4:rail2").message.startswith(
        "node4 rail2 mlx5_2 (0000:53:00.0): PCIe link runs x8 at 32 GT/s, device maximum x16 at 32 GT/s"
    )
    assert one(verdicts, "topology.nic_port", "node1:rail7").message == (
        "node1 rail7 mlx5_7: port 1 is DOWN/POLLING, expected ACTIVE/LINK_UP"
    )


def test_numa_minus_one_judged_by_site_expectation(demo_run: tuple[Site, Path, list[Archived]]) -> None:
    site, _, archived = demo_run
    archived = edited(archived, "node3", file_is("/numa_node"), stdout("-1\n"))
    verdicts = judged(site, archived)
    v = one(verdicts, "topology.gpu_nic_affinity", "node3:gpu0")
    assert v.outcome is Outcome.FAIL
    assert (
        "sysfs reports no NUMA node (numa_node=-1) for GPU0 0000:19:00.0 and mlx5_0 0000:18:00.0" in v.message
    )
    assert "expects NUMA information (numa_expected)" in v.message
    assert {s for c, s in failing(verdicts) if s.startswith("node3")} == {f"node3:gpu{k}" for k in range(8)}
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["node_types"]["h100"]["numa_expected"] = False
    relaxed = parse_site(CONFIGS / "demo.yaml", data)
    v = one(judged(relaxed, archived), "topology.gpu_nic_affinity", "node3:gpu0")
    assert v.outcome is Outcome.PASS and "no NUMA information (numa_node=-1), not expected" in v.message


def test_real_h200_vm_gpu_checks_judged_nic_checks_skipped() -> None:
    site = vm_site()
    verdicts = judged(site, vm_evidence("topology"))
    assert_complete(site, verdicts, PER)
    outcome = {(v.check, v.subject): v.outcome for v in verdicts}
    assert outcome[("topology.gpu_inventory", "vm1")] is Outcome.PASS
    assert outcome[("topology.pcie_link", "vm1:gpu1")] is Outcome.PASS
    skipped = [v for v in verdicts if v.outcome is Outcome.SKIP]
    assert {v.check for v in skipped} == {
        "topology.gpu_nic_affinity",
        "topology.nic_port",
        "topology.nic_pcie_link",
    }
    assert all("no RDMA device on this host (/sys/class/infiniband is empty" in v.message for v in skipped)
    assert all(v.evidence for v in verdicts)  # a SKIP too says what it saw (the empty HCA listing)
    assert one(verdicts, "topology.pcie_link", "vm1:gpu0").message == (
        "vm1 gpu0 (0000:00:06.0): PCIe x16 at 32 GT/s, its maximum"
    )
    wrong = parse_site(
        Path("vm.yaml"),
        {
            "name": "vm",
            "nodes": "vm1",
            "node_types": {"h": {"gpus": 4, "gpu_model": "NVIDIA H100 80GB HBM3", "link_layer": "none"}},
        },
    )
    inv = one(judged(wrong, vm_evidence("topology")), "topology.gpu_inventory", "vm1")
    assert inv.outcome is Outcome.FAIL and inv.message == (
        "vm1: nvidia-smi lists 2 GPUs, node type h has 4; "
        "GPU model NVIDIA H200, expected NVIDIA H100 80GB HBM3"
    )


def test_missing_and_unparsable_evidence_are_errors(demo_run: tuple[Site, Path, list[Archived]]) -> None:
    site, _, archived = demo_run
    archived = edited(
        archived,
        "node2",
        lambda ev: ev.source == "nvidia-smi-topo",
        stdout("GPU0\tGPU1\nGPU0\t X \tPIXNODE\n"),
    )
    verdicts = judged(site, [(e, p) for e, p in archived if e.host != "node4"])
    assert_complete(site, verdicts, PER)
    errors = {(v.check, v.subject) for v in verdicts if v.outcome is Outcome.ERROR}
    node4 = {(v.check, v.subject) for v in verdicts if v.subject.split(":")[0] == "node4"}
    assert node4 <= errors
    assert errors - node4 == {("topology.gpu_nic_affinity", f"node2:gpu{k}") for k in range(8)}
    assert one(verdicts, "topology.gpu_inventory", "node4").message == (
        "node4: no topology evidence came back from this node"
    )
    bad = one(verdicts, "topology.gpu_nic_affinity", "node2:gpu5")
    assert bad.message.startswith(
        "node2 gpu5: could not parse nvidia-smi topo -m output (raw/probe-nodes/node2.jsonl.gz#topology/"
    )
    assert "line 2: expected" in bad.message
