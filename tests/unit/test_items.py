"""The items a run is accepted in (judge/items.py): one per family and node or block, never per pair."""

from __future__ import annotations

from typing import Any

from clusteraccept.judge.items import (
    failure_lines,
    group,
    outcome_of,
    part_of,
    parts,
    selected,
    split_pair,
)

NODES = ("gpu-a", "gpu-a-b", "n3")
BLOCKS = ("leaf1", "all")


def v(check: str, subject: str, outcome: str = "pass", **labels: str) -> dict[str, Any]:
    return {"check": check, "family": check.split(".")[0], "subject": subject, "outcome": outcome,
            "message": f"{check} {subject} {outcome}", "labels": labels}  # fmt: skip


def test_verdicts_belong_to_the_node_or_block_before_the_first_colon() -> None:
    vs = [
        v("topology.nic_port", "gpu-a:rail3"),
        v("topology.gpu_inventory", "gpu-a"),
        v("nccl.busbw", "gpu-a:all_reduce:1GiB"),  # intra-node
        v("nccl.localization", "leaf1"),
        v("nccl.busbw", "leaf1:all_reduce:8GiB", "fail"),
        v("nccl.busbw", "gpu-a-gpu-a-b:rail3:sendrecv:1GiB", "fail"),  # a pair: evidence only
        v("nccl.busbw", "gpu-a-gpu-a-b:rail2:sendrecv:1GiB"),  # a passing pair: not even evidence
        v("nccl.launch", "gpu-a-b-n3:rail1:sendrecv", "error", untested="killed_with_job"),
    ]
    items = group(vs, NODES, BLOCKS)
    assert [x["subject"] for x in items.of("topology", "node", "gpu-a")] == ["gpu-a:rail3", "gpu-a"]
    assert [x["subject"] for x in items.of("nccl", "node", "gpu-a")] == ["gpu-a:all_reduce:1GiB"]
    assert len(items.of("nccl", "block", "leaf1")) == 2
    # the killed step is both its nodes' (untested), the slow pair is nobody's item but both nodes' evidence
    assert [x["check"] for x in items.of("nccl", "node", "n3")] == ["nccl.launch"]
    assert [x["check"] for x in items.of("nccl", "node", "gpu-a-b")] == ["nccl.launch"]
    assert items.evidence_n == {"gpu-a": 1, "gpu-a-b": 2, "n3": 1}
    assert split_pair("gpu-a-gpu-a-b", frozenset(NODES)) == ("gpu-a", "gpu-a-b")


def test_an_item_fails_if_any_verdict_fails_and_quotes_evidence_only_when_blamed() -> None:
    assert outcome_of([v("a.b", "n3"), v("a.c", "n3", "error")]) == "error"
    assert outcome_of([v("a.b", "n3", "error"), v("a.c", "n3", "fail")]) == "fail"
    assert outcome_of([v("a.b", "n3", "skip"), v("a.c", "n3")]) == "pass"
    assert outcome_of([v("a.b", "n3", "skip"), v("a.c", "n3", "waived")]) == "waived"
    assert outcome_of([]) == "skip"
    slow = [v("nccl.busbw", "gpu-a-n3:rail1:sendrecv:1GiB", "fail")]
    errors = failure_lines([v("nccl.link_errors", "n3:rail1", "fail")], "n3", slow, 1)
    assert errors == ["nccl.link_errors: nccl.link_errors n3:rail1 fail"]  # not blamed: no evidence quoted
    blamed = failure_lines([v("nccl.localization", "n3", "fail")], "n3", slow, 1)
    assert blamed[1:] == ["evidence: 1 pair results involving n3 did not pass, e.g.:",
                          "  nccl.busbw gpu-a-n3:rail1:sendrecv:1GiB fail"]  # fmt: skip


def test_k_parts_select_the_verdicts_their_old_tests_had() -> None:
    assert part_of("n3:rail3:sendrecv:1GiB") == "n3:rail3" and part_of("n3:gpu2") == "n3:gpu2"
    assert part_of("n3:all_reduce:1GiB") == "n3" and part_of("leaf1:all_reduce") == "leaf1"
    assert parts("n3", "node", ("rail",), 8, [0, 1]) == ["n3", "n3:rail0", "n3:rail1"]
    assert parts("leaf1", "block", ("gpu", "rail"), 8, [0]) == ["leaf1"]
    vs = [v("topology.nic_port", "n3:rail1"), v("topology.gpu_inventory", "n3"), v("nccl.localization", "n3")]
    assert selected(vs, None) == vs
    killed = v("nccl.launch", "gpu-a-n3:rail1:sendrecv", "error", untested="killed_with_job")
    assert selected([killed], frozenset({"n3:rail1"}), "n3") == [killed]  # its rail is picked
    assert selected([killed], frozenset({"n3:rail2"}), "n3") == []  # -k rail2: not this item's concern
    # -k rail1: the rail's verdict, and the localization (it reads every rail), not the node-wide inventory
    assert [x["check"] for x in selected(vs, frozenset({"n3:rail1"}))] == [
        "topology.nic_port",
        "nccl.localization",
    ]
    assert [x["check"] for x in selected(vs, frozenset({"n3"}))] == [
        "topology.gpu_inventory",
        "nccl.localization",
    ]
