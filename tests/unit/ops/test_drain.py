"""Drain/undrain planning (pure) and the preview/apply flow with a recording process seam."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.evidence import Evidence
from clusteraccept.jobs.slurm_clients import NodeState, parse_sinfo
from clusteraccept.ops import drain
from clusteraccept.ops.drain import Conviction, convictions, plan_drain, plan_undrain
from clusteraccept.site.operations import DEFAULT_DRAIN_CHECKS

DATA = Path(__file__).resolve().parents[2] / "data" / "sinfo"
NODES = ("node1", "node2", "node3", "node4")
BLOCKS = {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}
RUN = "20261130T020000Z-abcd"


def verdict(check: str, subject: str, outcome: str, **labels: str) -> dict[str, Any]:
    return {
        "check": check,
        "family": check.split(".")[0],
        "subject": subject,
        "outcome": outcome,
        "message": "m",
        "labels": labels,
    }


def test_parse_real_sinfo_output() -> None:
    states = parse_sinfo((DATA / "drain-states.txt").read_text())
    assert states["node1"] == NodeState("node1", "idle", "")
    assert (
        states["node2"].drained and not states["node2"].ours and states["node2"].reason == "admin: PSU swap"
    )
    assert states["node3"].drained and states["node3"].ours
    assert states["node3"].reason.endswith("20261129T204234Z-ebbb")


def test_convictions_from_localization_and_node_checks() -> None:
    results = {
        "verdicts": [
            verdict("nccl.localization", "node3", "fail", culprits="rail:node3:rail5"),
            verdict("nccl.localization", "node1", "fail", culprits="path:node1-node2:rail0"),  # a cable
            verdict("nccl.localization", "leaf2", "fail", culprits="uplink:leaf2"),
            verdict("topology.pcie_link", "node2:gpu6", "fail"),
            verdict("sharp.hello", "leaf1", "fail"),  # not a node, not a drain check
            verdict("gpudirect.peermem", "node4", "error"),  # an ERROR convicts nobody
            verdict("topology.pcie_link", "node1:gpu1", "pass"),
        ]
    }
    got = convictions(results, NODES, DEFAULT_DRAIN_CHECKS)
    assert got == {
        "node3": [Conviction("node3", "nccl.localization", "rail5")],
        "node2": [Conviction("node2", "topology.pcie_link", "gpu6")],
    }


def test_a_rack_verdict_convicts_the_trays_it_names_and_never_the_whole_rack() -> None:
    """nvlink.clique / nvlink.imex are verdicts on an NVLink domain; the odd tray (another clique) or the
    one whose IMEX is down is in their culprits label, and only it is drained. A verdict on the rack that
    names nobody (a clique split down the middle, the MNNVL all_reduce) convicts no tray."""
    results = {
        "verdicts": [
            verdict("nvlink.clique", "leaf1", "fail", culprits="node:node2"),
            verdict("nvlink.imex", "leaf2", "fail", culprits="node:node4"),
            verdict("nvlink.clique", "leaf2", "fail"),
            verdict("nvlink.mnnvl", "leaf1", "fail"),
            verdict("nvlink.links", "node3:gpu2", "fail"),
        ]
    }
    assert convictions(results, NODES, DEFAULT_DRAIN_CHECKS) == {
        "node2": [Conviction("node2", "nvlink.clique", "leaf1")],
        "node4": [Conviction("node4", "nvlink.imex", "leaf2")],
        "node3": [Conviction("node3", "nvlink.links", "gpu2")],
    }


def test_only_confirmed_blame_drains() -> None:
    """A straggler named by bisection convicts its node; a culprit the confirmation round could not re-test
    convicts nobody, and a transient is a PASS (checks/confirm.py)."""
    results = {
        "verdicts": [
            verdict(
                "nccl.localization", "node1", "fail", culprits="straggler:node1", confirmation="confirmed"
            ),
            verdict(
                "nccl.localization",
                "node2",
                "fail",
                culprits="rail:node2:rail1|rail:node2:rail3",
                confirmation="unconfirmed|confirmed",
            ),
            verdict(
                "nccl.localization", "node3", "fail", culprits="rail:node3:rail5", confirmation="unconfirmed"
            ),
            verdict("nccl.localization", "node4", "pass", transient="node4-node1:rail0"),
        ]
    }
    assert convictions(results, NODES, DEFAULT_DRAIN_CHECKS) == {
        "node1": [Conviction("node1", "nccl.localization", "node")],
        "node2": [Conviction("node2", "nccl.localization", "rail3")],
    }


def test_someone_elses_drain_is_left_alone_and_ours_not_redone() -> None:
    states = parse_sinfo((DATA / "drain-states.txt").read_text())
    convicted = {n: [Conviction(n, "nccl.localization", "rail5")] for n in ("node2", "node3", "node4")}
    plan = plan_drain(convicted, states, BLOCKS, RUN, max_fraction=0.5)
    assert [a.node for a in plan.actions] == ["node4"]
    assert plan.actions[0].argv == (
        "scontrol",
        "update",
        "NodeName=node4",
        "State=DRAIN",
        f"Reason=clusteraccept: nccl.localization rail5 {RUN}",
    )
    why = dict(plan.skipped)
    assert "someone else" in why["node2"] and "'admin: PSU swap'" in why["node2"]
    assert "already drained by clusteraccept" in why["node3"]


def test_a_block_over_the_fraction_is_held_back_whole() -> None:
    idle = {n: NodeState(n, "idle", "") for n in NODES}
    both = {n: [Conviction(n, "topology.nic_port", "rail0")] for n in ("node3", "node4")}
    plan = plan_drain(both, idle, BLOCKS, RUN, max_fraction=0.5)
    assert plan.actions == ()
    assert all("held back: 2 of 2 nodes of leaf2" in why for _, why in plan.skipped)
    one = plan_drain({"node1": both["node3"]}, idle, BLOCKS, RUN, max_fraction=0.25)
    assert one.actions == () and "over the limit of 0" in one.skipped[0][1]


def test_undrain_only_ours_and_only_from_a_newer_run() -> None:
    states = parse_sinfo((DATA / "drain-states.txt").read_text())
    newer = plan_undrain({"node2", "node3"}, {}, states, RUN)
    assert [(a.node, a.argv[-1]) for a in newer.actions] == [("node3", "State=UNDRAIN")]  # never node2
    older = plan_undrain({"node3"}, {}, states, "20261128T020000Z-0000")
    assert older.actions == () and "not newer than the drain" in older.skipped[0][1]
    failing = plan_undrain(set(), {}, states, RUN)
    assert failing.actions == () and "not found clean" in failing.skipped[0][1]


def test_passed_nodes_need_a_pass_and_no_failure() -> None:
    results = {
        "verdicts": [
            verdict("nccl.localization", "node1", "pass"),
            verdict("topology.pcie_link", "node1:gpu0", "pass"),
            verdict("nccl.localization", "node2", "pass"),
            verdict("roce.pfc", "node2:rail0", "fail"),
            verdict("nccl.localization", "node3", "skip"),
        ]
    }
    assert drain.passed_nodes(results, NODES, DEFAULT_DRAIN_CHECKS) == {"node1"}


@pytest.mark.parametrize("apply_now", [False, True])
def test_preview_writes_commands_and_apply_runs_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, apply_now: bool
) -> None:
    calls: list[tuple[tuple[str, ...], dict[str, str] | None]] = []
    sinfo = (DATA / "drain-states.txt").read_text().replace("node4|idle|none", "node4|idle|none")

    def fake_run(argv: Any, timeout_s: float, source: str | None = None, env: Any = None) -> Evidence:
        calls.append((tuple(argv), env))
        return Evidence("submit", source or "", argv=tuple(argv), stdout=sinfo if argv[0] == "sinfo" else "")

    monkeypatch.setattr("clusteraccept.hostio.run", fake_run)
    results = {
        "run_id": RUN,
        "verdicts": [verdict("nccl.localization", "node4", "fail", culprits="node:node4")],
    }
    lines = drain.run_ops(
        results,
        NODES,
        BLOCKS,
        tmp_path,
        slurm_conf="/etc/x/slurm.conf",
        max_fraction=0.5,
        patterns=DEFAULT_DRAIN_CHECKS,
        apply_now=apply_now,
    )
    assert all(env == {"SLURM_CONF": "/etc/x/slurm.conf"} for _, env in calls)
    scontrol = [argv for argv, _ in calls if argv[0] == "scontrol"]
    assert scontrol == (
        [
            (
                "scontrol",
                "update",
                "NodeName=node4",
                "State=DRAIN",
                f"Reason=clusteraccept: nccl.localization node {RUN}",
            )
        ]
        if apply_now
        else []
    )
    script = (tmp_path / "drain.sh").read_text()
    assert (
        f"scontrol update NodeName=node4 State=DRAIN 'Reason=clusteraccept: nccl.localization node {RUN}'"
        in script
    )
    record = json.loads((tmp_path / "drain.json").read_text())
    assert record["applied"] is apply_now and [a["node"] for a in record["actions"]] == ["node4"]
    assert lines[0].startswith("drain applied" if apply_now else "drain preview")
