"""The nccl judge on the PyTorch NCCL fallback's evidence (real captures from the 2x H200 host): the same
baseline keys as nccl-tests, verdicts that say "(PyTorch NCCL fallback)", and a failed collector judged as
a failed launch; plus the baseline proposal's latency-bound tolerance."""

from __future__ import annotations

from pathlib import Path

import yaml

from clusteraccept.checks import nccl
from clusteraccept.evidence import Evidence
from clusteraccept.judge.propose import propose
from clusteraccept.judge.verdicts import Outcome
from clusteraccept.site.baselines import Reference
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

DATA = Path(__file__).parents[2] / "data" / "torch-nccl"
GiB = 1 << 30


def site(baselines: dict[str, object]) -> Site:
    return parse_site(
        Path("fb.yaml"),
        {
            "name": "fb",
            "nodes": "vm",
            "slurm": {"executor": "local"},
            "node_types": {"h200x2": {"gpus": 2, "numa_expected": False}},
            "nccl": {"intra_collectives": ["all_reduce", "sendrecv"], "fallback": "torch", "min_bytes": 8},
            "baselines": baselines,
        },
    )


def evidence(c: str, stdout: str, rc: int = 0) -> tuple[Evidence, str]:
    meta = {
        "kind": "node",
        "scope": "intra_node",
        "collective": c,
        "subject": "vm",
        "nodes": "vm",
        "rail": "",
    }
    return Evidence(
        "vm", "torch-nccl", argv=("python3",), returncode=rc, stdout=stdout, meta=meta
    ), f"raw/{c}"


def test_fallback_evidence_is_judged_under_the_nccl_tests_keys() -> None:
    ref = {"ref": 340.0, "lower": -0.08, "unit": "GB/s"}
    s = site({"nccl.busbw.all_reduce.intra_node.8GiB": ref, "nccl.busbw.sendrecv.intra_node.8GiB": ref})
    ev = [
        evidence(c, (DATA / f"{c.replace('_', '')}-1node-2xh200-torch2.11-nccl2.28.9.jsonl").read_text())
        for c in ("all_reduce", "sendrecv")
    ]
    verdicts = nccl.judge(s, ev, s.nodes)
    by = {(v.check, v.subject): v for v in verdicts}
    launch = by[("nccl.launch", "vm:all_reduce")]
    assert launch.outcome is Outcome.PASS and launch.message.endswith("(PyTorch NCCL fallback)")
    big = by[("nccl.busbw", "vm:sendrecv:8GiB")]
    assert (big.outcome, big.value, big.labels["source"]) == (Outcome.PASS, 364.774, "torch-nccl")
    assert big.message.endswith("[intra-node vm, 8GiB (PyTorch NCCL fallback)]")
    assert by[("nccl.busbw", "vm:all_reduce:8GiB")].value == 344.853  # in place: torch's all_reduce
    assert by[("nccl.busbw", "vm:all_reduce:1GiB")].outcome is Outcome.SKIP  # no baseline for that key


def test_failed_collector_fails_the_launch_and_judges_no_number() -> None:
    s = site({})
    out = '{"error": "-g 2: needs 2 or more GPUs, 0 visible"}\n'
    verdicts = nccl.judge(s, [evidence("all_reduce", out, rc=1)], s.nodes)
    (launch,) = [v for v in verdicts if v.check == "nccl.launch"]
    assert launch.outcome is Outcome.FAIL and "needs 2 or more GPUs" in launch.message
    assert "(PyTorch NCCL fallback)" in launch.message
    assert not [v for v in verdicts if v.check == "nccl.busbw"]
    garbled = nccl.judge(s, [evidence("all_reduce", "{oops\n")], s.nodes)
    assert (
        garbled[0].outcome is Outcome.ERROR
        and "could not parse torch-nccl output (raw/all_reduce)" in garbled[0].message
    )


def test_proposal_tolerates_latency_bound_sizes_and_leaves_out_unjudgeable_ones() -> None:
    def v(key: str, size: int, value: float) -> dict[str, object]:
        return {
            "labels": {"key": key, "size_B": str(size)},
            "value": value,
            "outcome": "skip",
            "unit": "GB/s",
        }

    results = {"verdicts": [v("k.8B", 8, 0.01), v("k.8KiB", 8192, 0.6), v("k.1GiB", GiB, 330.0)]}
    assert propose(results) == {
        k: {"ref": r, "lower": -0.08, "upper": None, "unit": "GB/s"}
        for k, r in (("k.1GiB", 330.0), ("k.8B", 0.01), ("k.8KiB", 0.6))
    }
    tuned = propose(results, small_lower=-0.75, min_ref=0.1)
    assert tuned == {
        "k.1GiB": {"ref": 330.0, "lower": -0.08, "upper": None, "unit": "GB/s"},
        "k.8KiB": {"ref": 0.6, "lower": -0.75, "upper": None, "unit": "GB/s"},
    }
    # the proposal committed for the 2x H200 host loads as baselines
    text = (Path(__file__).parents[3] / "site-configs" / "local-gpu.baselines.yaml").read_text()
    loaded = yaml.safe_load(text)
    assert Reference(**loaded["nccl.busbw.all_reduce.intra_node.8GiB"]).lower == -0.08


def test_a_step_killed_with_its_job_is_not_tested_not_failed() -> None:
    from clusteraccept.jobs.spool import mark_killed as _mark_killed

    s = site({})
    out = '{"error": "srun: error: node2: task 1: Killed"}\n'
    failed, done = evidence("all_reduce", out, rc=137), evidence("sendrecv", "", rc=0)
    # a completed job's failed step stays a failure (the hardware's or the software's)
    assert _mark_killed([failed[0], done[0]], "COMPLETED") == [failed[0], done[0]]
    killed, kept = _mark_killed([failed[0], done[0]], "NODE_FAIL")
    assert killed.meta["killed_with_job"] == "NODE_FAIL" and kept == done[0]  # exit 0 is a result
    verdicts = nccl.judge(s, [(killed, failed[1])], s.nodes)
    (launch,) = [v for v in verdicts if v.check == "nccl.launch"]
    assert not [v for v in verdicts if v.outcome is Outcome.FAIL]
    assert launch.outcome is Outcome.ERROR and launch.message == (
        "not tested: the step ended with its Slurm job (NODE_FAIL) before it finished; that says nothing "
        "about the hardware (--resume RUN_DIR reruns it)"
    )
    (timeout,) = _mark_killed([failed[0]], "WAIT_TIMEOUT (gave up waiting)")
    assert timeout.meta["killed_with_job"] == "WAIT_TIMEOUT"
    # only the last spooled round ran while the job died: an earlier round's failure is a result
    from dataclasses import replace

    early = replace(failed[0], meta={**failed[0].meta, "round_index": "1"})
    late = replace(failed[0], meta={**failed[0].meta, "round_index": "3"})
    kept_early, marked_late = _mark_killed([early, late], "TIMEOUT")
    assert "killed_with_job" not in kept_early.meta and marked_late.meta["killed_with_job"] == "TIMEOUT"
