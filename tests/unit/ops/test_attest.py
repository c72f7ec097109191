"""Attestations per node and link, and what is due for re-verification."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from clusteraccept.ops.attest import attestations, due, judged

NODES = ("node1", "node2", "node3")
LINKS = ("node1-node2:rail0", "node2-node3:rail0")


def v(check: str, subject: str, outcome: str) -> dict[str, Any]:
    return {"check": check, "family": check.split(".")[0], "subject": subject, "outcome": outcome}


def run(
    run_id: str, started: str, verdicts: list[dict[str, Any]], fps: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "started": started,
        "verdicts": verdicts,
        "fingerprint": {"nodes": fps},
        **extra,
    }


FP = {"gpu_driver": "550.54.15", "hca_fw": "mlx5_0=28.39.1002"}
R1 = run(
    "r1",
    "2026-11-20T02:00:00+00:00",
    [
        v("nccl.localization", "node1", "pass"),
        v("nccl.localization", "node2", "pass"),
        v("topology.pcie_link", "node3:gpu1", "fail"),
        v("nccl.busbw", "node1-node2:rail0:sendrecv:1GiB", "pass"),
        v("nccl.launch", "node1-node2:rail0:sendrecv", "pass"),
        v("nccl.busbw", "node2-node3:rail0:sendrecv:1GiB", "fail"),
    ],
    {"node1": FP, "node2": FP, "node3": FP},
)


def test_judged_per_node_and_link() -> None:
    nodes, links = judged(R1, NODES)
    assert nodes == {"node1": True, "node2": True, "node3": False}
    assert links == {"node1-node2:rail0": True, "node2-node3:rail0": False}


def test_due_expired_failed_changed_drained_and_new() -> None:
    later = run(
        "r2",
        "2026-11-28T02:00:00+00:00",
        [v("nccl.localization", "node2", "pass")],
        {"node1": {**FP, "gpu_driver": "560.28.03"}, "node2": FP},
        _drained=["node2"],
    )
    state = attestations([R1, later], (*NODES, "node4"), ttl_days=7)
    att = state[0]
    assert att["node1"].run_id == "r1" and att["node1"].valid_until == "2026-11-27T02:00:00+00:00"
    assert att["node2"].run_id == "r2"
    got = {d.subject: d.why for d in due((*NODES, "node4"), LINKS, state, datetime(2026, 11, 29, tzinfo=UTC))}
    assert got["node1"].startswith("attestation expired 2026-11-27T02:00:00+00:00 (run r1)")
    assert got["node3"] == "failed in the latest run that judged it"
    assert got["node4"] == "never verified"  # a node added to the site: its checks and pairs are due
    assert got["node2-node3:rail0"] == "failed in the latest run that judged it"
    assert "node2" not in got  # verified again by r2
    fresh = due(NODES, LINKS, state, datetime(2026, 11, 21, tzinfo=UTC))
    assert {d.subject: d.why for d in fresh}.get("node1", "").startswith(
        "fingerprint changed since run r1: gpu_driver"
    )
