"""SHARP checks end to end in-process: simulated sharp_hello (real captures) -> probe -> archive -> judge per
block; the SHARP-campaign checks skip without campaign evidence and judge it when it exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks, flow
from clusteraccept.checks import sharp
from clusteraccept.evidence import Evidence
from clusteraccept.jobs import node_entry
from clusteraccept.jobs.archive import archive_job
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim import hosts as sim_hosts
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

CONFIGS = REPO_ROOT / "site-configs"
DATA = REPO_ROOT / "tests" / "data"
Archived = tuple[Evidence, str]


def site_with(**changes: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo-roce.yaml").read_text())
    data.update(changes)
    return parse_site(CONFIGS / "demo-roce.yaml", data)


def collect(site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Archived]:
    monkeypatch.setattr(sim_hosts, "PARTS", ("sharp",))  # only this family's part of the host profiles
    build_profiles(site, tmp_path / "hosts")
    monkeypatch.setenv("CLUSTERACCEPT_HOST_PROFILE", str(tmp_path / "hosts"))
    out: list[Archived] = []
    for node in site.nodes:
        monkeypatch.setenv("CLUSTERACCEPT_HOSTNAME", node)
        collected = node_entry.collect_node(("sharp",), flow.probe_options(site))
        out += archive_job(tmp_path, "probe-nodes", [e for e in collected if e.meta["check"] == "sharp"])
    return out


def one(verdicts: list[Verdict], check: str, subject: str) -> Verdict:
    [v] = [v for v in verdicts if v.check == check and v.subject == subject]
    return v


def test_demo_roce_sharp_fault_fails_its_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = site_with()
    verdicts = checks.judge("sharp", site, collect(site, tmp_path, monkeypatch), site.nodes)
    assert sorted((v.check, v.subject) for v in verdicts) == sorted(
        (c, b) for b in ("leaf1", "leaf2", "all") for c in sharp.CHECKS
    )
    assert {(v.check, v.subject) for v in verdicts if v.outcome is Outcome.FAIL} == {
        ("sharp.hello", "leaf2"),
        ("sharp.hello", "all"),
    }
    assert one(verdicts, "sharp.hello", "leaf2").message == (
        "sharp_hello failed on node4 (No resource) [block leaf2, 2 nodes]"
    )
    assert one(verdicts, "sharp.hello", "all").message == (
        "sharp_hello failed on node4 (No resource) [block all, 4 nodes]"
    )
    ok = one(verdicts, "sharp.hello", "leaf1")
    assert ok.outcome is Outcome.PASS and len(ok.evidence) == 2
    assert all(
        v.outcome is Outcome.SKIP and v.message == sharp.NO_CAMPAIGN
        for v in verdicts
        if v.check in ("sharp.collnet", "sharp.uplift")
    )


def test_site_without_sharp_skips_with_its_reason(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = site_with(sharp={"enabled": False, "reason": "Ethernet fabric without in-network reduction"})
    archived = collect(site, tmp_path, monkeypatch)
    assert archived == []
    verdicts = checks.judge("sharp", site, archived, site.nodes)
    assert len(verdicts) == 9 and {v.outcome for v in verdicts} == {Outcome.SKIP}
    assert {v.message for v in verdicts} == {
        "site declares no SHARP: Ethernet fabric without in-network reduction"
    }


def test_missing_tool_and_missing_node_are_errors() -> None:
    site = site_with()
    absent = Evidence(
        "node1",
        "sharp",
        argv=("sharp_hello",),
        returncode=127,
        stderr="sharp_hello: command not found",
        meta={"role": "hello"},
    )
    passed = Evidence(
        "node2",
        "sharp",
        argv=("sharp_hello",),
        stdout=(DATA / "sharp" / "sharp_hello-a100-cx6-passed.txt").read_text(),
        meta={"role": "hello"},
    )
    verdicts = sharp.judge(
        site, [(absent, "raw/sharp/node1/a.json"), (passed, "raw/sharp/node2/b.json")], site.nodes
    )
    leaf1 = one(verdicts, "sharp.hello", "leaf1")
    assert leaf1.outcome is Outcome.ERROR and leaf1.message == (
        "sharp_hello could not run on node1 (sharp_hello not found (sharp_hello: command not found)) "
        "[block leaf1, 2 nodes]"
    )
    leaf2 = one(verdicts, "sharp.hello", "leaf2")
    assert leaf2.outcome is Outcome.ERROR and "node3 (no sharp_hello evidence came back)" in leaf2.message


def test_hello_outcomes() -> None:
    failed = (DATA / "sharp" / "synthetic-sharp_hello-failed-no-resource.txt").read_text()
    assert sharp.hello_outcome(Evidence("n", "sharp", stdout=failed, returncode=1), "p") == (
        "fail",
        "No resource",
    )
    assert sharp.hello_outcome(
        Evidence("n", "sharp", returncode=None, stderr="timed out after 60 s"), "p"
    ) == ("fail", "did not finish (timed out after 60 s)")
    assert sharp.hello_outcome(Evidence("n", "sharp", stdout="garbage\n", returncode=3), "p") == (
        "fail",
        "exit 3: garbage",
    )
    kind, reason = sharp.hello_outcome(Evidence("n", "sharp", stdout="garbage\n"), "raw/x.json")
    assert kind == "error" and reason.startswith("could not parse sharp output (raw/x.json): line 0")


def _campaign(mode: str, text: str) -> Archived:
    meta = {"check": "sharp", "subject": "leaf1", "sharp": mode, "collective": "all_reduce"}
    return Evidence(
        "leaf1", "nccl-tests", argv=("all_reduce_perf",), stdout=text, meta=meta
    ), f"raw/{mode}.json"


def test_campaign_evidence_is_judged_when_present() -> None:
    """When a SHARP campaign exists (not planned yet), collnet and uplift judge its evidence."""
    site = site_with(baselines={"sharp.uplift.*": {"ref": 1.2, "lower": 0.0}})
    perf = (DATA / "nccl-tests" / "allreduce-1node-2xh200-v2.19.6.txt").read_text()
    hang = (DATA / "sharp" / "nccl-2.23.4-collnet-sharp-hang-a100-issue311-excerpt.txt").read_text()
    fallback = (
        DATA / "sharp" / "nccl-2.23.4-collnet-fallback-no-resource-a100-issue311-excerpt.txt"
    ).read_text()
    # the same nccl-tests output with and without SHARP stands in for a run that gained nothing: ratio 1.0
    verdicts = sharp.judge(site, [_campaign("on", hang + perf), _campaign("off", perf)], site.nodes)
    collnet = one(verdicts, "sharp.collnet", "leaf1")
    assert collnet.outcome is Outcome.PASS and "CollNet connections via COLLNET/SHARP" in collnet.message
    uplift = one(verdicts, "sharp.uplift", "leaf1")
    assert uplift.outcome is Outcome.FAIL and uplift.value == pytest.approx(1.0)
    assert uplift.message.startswith("busbw_uplift=1 is below 1.2") and "block leaf1, all_reduce 8GiB" in (
        uplift.message
    )
    assert one(verdicts, "sharp.uplift", "leaf2").message == sharp.NO_CAMPAIGN
    verdicts = sharp.judge(site, [_campaign("on", fallback)], site.nodes)
    collnet = one(verdicts, "sharp.collnet", "leaf1")
    assert collnet.outcome is Outcome.FAIL and collnet.message.startswith(
        "all_reduce across leaf1: NCCL fell back to point-to-point (Cannot initialize CollNet)"
    )
    assert one(verdicts, "sharp.uplift", "leaf1").message == sharp.NO_CAMPAIGN
