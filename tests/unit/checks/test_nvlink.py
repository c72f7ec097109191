"""NVLink checks end to end in-process: simulated HGX H100 hosts (real captures) -> probe -> archive -> judge.

Each injected fault (an inactive link, CRC errors under traffic, the fabric manager down) fails exactly its
check and subject, naming the cause; everything else passes; missing or damaged evidence is ERROR, and a
site that declares no NVLink has no nvlink items.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks
from clusteraccept.checks.nvlink import fabric_down, health_problems
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers.nvidia_smi_q import fabric_section
from clusteraccept.plan.subjects import not_applicable
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

from .test_topology import CONFIGS, collect

Archived = tuple[Evidence, str]
FAULTS = [
    {"kind": "nvlink_inactive", "node": "node1", "gpu": 2, "link": 5},
    {"kind": "nvlink_errors", "node": "node2", "gpu": 4, "link": 7},
    {"kind": "fabric_manager_down", "node": "node4"},
]
Q = REPO_ROOT / "tests" / "data" / "nvidia-smi-q"


def site(faults: list[dict[str, Any]], **nvlink: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["sim"]["faults"] = faults
    data["node_types"]["h100"]["nvlink"].update(nvlink)
    return parse_site(CONFIGS / "demo.yaml", data)


def failing(verdicts: list[Verdict]) -> dict[tuple[str, str], Verdict]:
    return {(v.check, v.subject): v for v in verdicts if v.outcome is not Outcome.PASS}


def test_healthy_hgx_nodes_pass_every_check_of_every_gpu(tmp_path: Path) -> None:
    s = site([])
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    verdicts = checks.judge("nvlink", s, probe, s.nodes)
    assert len(verdicts) == 4 * (1 + 8 + 8)
    # no campaign ran here: the errors check has no traffic window and says so
    assert {v.outcome for v in verdicts if v.check != "nvlink.errors"} == {Outcome.PASS}
    assert {v.outcome for v in verdicts if v.check == "nvlink.errors"} == {Outcome.SKIP}
    v = next(v for v in verdicts if v.subject == "node3:gpu7" and v.check == "nvlink.links")
    assert v.message == "18 links at 26.562 GB/s [node3:gpu7]" and v.value == 18
    assert all(e.startswith("raw/probe-nodes/") for v in verdicts for e in v.evidence)


def test_each_probe_fault_fails_its_own_check_and_names_the_cause(tmp_path: Path) -> None:
    s = site(FAULTS)
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    bad = failing([v for v in checks.judge("nvlink", s, probe, s.nodes) if v.check != "nvlink.errors"])
    assert set(bad) == {("nvlink.links", "node1:gpu2"), ("nvlink.fabric", "node4")}
    links = bad["nvlink.links", "node1:gpu2"]
    assert links.outcome is Outcome.FAIL and links.value == 17
    assert links.message.startswith("NVLink link 5 <inactive>, 17 of 18 links active")
    fabric = bad["nvlink.fabric", "node4"]
    assert "all 8 GPUs: State In Progress, Status N/A" in fabric.message
    assert (
        "fabric manager is not running (systemctl is-active nvidia-fabricmanager: inactive)" in fabric.message
    )
    assert set(fabric_down(s, probe)) == {"node4"}  # what needs CUDA there is not judged (checks/nccl.py)


def test_a_slow_link_and_a_missing_gpu_fail_naming_them(tmp_path: Path) -> None:
    s = site([])
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]

    def change(ev: Evidence) -> Evidence:
        if ev.host != "node2" or ev.source != "nvidia-smi-nvlink":
            return ev
        text = ev.stdout.replace("\t Link 3: 26.562 GB/s", "\t Link 3: 13.281 GB/s", 1)
        return replace(ev, stdout=text.split("GPU 7:")[0])

    bad = failing(checks.judge("nvlink", s, [(change(e), p) for e, p in probe], ["node2"]))
    assert "link 3 at 13.281 GB/s" in bad["nvlink.links", "node2:gpu0"].message
    assert bad["nvlink.links", "node2:gpu7"].message.startswith("nvidia-smi nvlink --status lists no GPU 7")


def test_missing_failed_or_damaged_evidence_is_error_not_pass(tmp_path: Path) -> None:
    s = site([])
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    node1 = [(e, p) for e, p in probe if e.host == "node1"]
    gone = checks.judge("nvlink", s, [(e, p) for e, p in node1 if e.source == "systemctl"], ["node1"])
    assert {(v.check, v.outcome) for v in gone} == {
        ("nvlink.fabric", Outcome.ERROR),
        ("nvlink.links", Outcome.ERROR),
        ("nvlink.errors", Outcome.SKIP),
    }
    damaged = [
        (
            replace(e, stdout=e.stdout.replace("        State  ", "        Stat e ", 1))
            if e.source == "nvidia-smi-q"
            else e,
            p,
        )
        for e, p in node1
    ]
    v = next(v for v in checks.judge("nvlink", s, damaged, ["node1"]) if v.check == "nvlink.fabric")
    assert (
        v.outcome is Outcome.ERROR
        and "could not parse nvidia-smi-q output" in v.message
        and "line " in v.message
    )
    failed = [
        (
            replace(
                e,
                returncode=9,
                stdout="",
                stderr="Failed to initialize NVML: Driver/library version mismatch",
            )
            if e.source == "nvidia-smi-nvlink"
            else e,
            p,
        )
        for e, p in node1
    ]
    links = [v for v in checks.judge("nvlink", s, failed, ["node1"]) if v.check == "nvlink.links"]
    assert {v.outcome for v in links} == {Outcome.ERROR} and "version mismatch" in links[0].message


def test_no_nvswitch_skips_the_fabric_and_no_nvlink_means_no_items(tmp_path: Path) -> None:
    s = site([], nvswitch=False)
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    assert not any(e.source == "systemctl" for e, _ in probe)
    fabric = [v for v in checks.judge("nvlink", s, probe, s.nodes) if v.check == "nvlink.fabric"]
    assert {v.outcome for v in fabric} == {Outcome.SKIP} and "nvswitch: false" in fabric[0].message
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    del data["node_types"]["h100"]["nvlink"]
    bare = parse_site(CONFIGS / "demo.yaml", data)
    assert not_applicable(bare, "nvlink") == "demo declares no NVLink (node_types.<type>.nvlink)"
    assert collect(bare, ("nvlink",), tmp_path / "bare")["nvlink"] == []


@pytest.mark.parametrize(
    ("fixture", "found"),
    [
        ("dra-driver-626-gb200-unhealthy-grep-C3.txt", ["Health Unhealthy"]),
        ("gpu-operator-2511-in-progress-r580.txt", []),  # In Progress is the state's finding, not health's
        ("azhpc-images-506-insufficient-resources.txt", []),
    ],
)
def test_health_findings_of_real_fabric_sections(fixture: str, found: list[str]) -> None:
    assert health_problems(fabric_section((Q / fixture).read_text()).health) == found
