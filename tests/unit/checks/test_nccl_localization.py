"""nccl campaigns end to end on the simulated fabric (in-process): plan -> simulated nccl-tests output ->
parse -> judge -> localize. Each injected fault must be blamed on exactly the injected node / rail / cable /
uplink, with zero false blames, over many seeded random injections."""

from __future__ import annotations

import gc
import random
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clusteraccept.checks import nccl
from clusteraccept.judge.verdicts import Outcome
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim.prepare import fabric_of, simulate_step
from clusteraccept.site.load import load_site, parse_site
from clusteraccept.site.model import Site

BLOCKS = {"leaf1": "n[01-04]", "leaf2": "n[05-08]", "leaf3": "n[09-12]"}
RAILS = 4


def make_site(faults: list[dict[str, Any]], seed: int = 3) -> Site:
    return parse_site(
        Path("prop.yaml"),
        {
            "name": "prop",
            "simulated": True,
            "nodes": "n[01-12]",
            "blocks": BLOCKS,
            "node_types": {
                "t": {
                    "gpus": RAILS,
                    "rails": {f"gpu{k}": {"hca": f"mlx5_{k}", "rate_Gbps": 400} for k in range(RAILS)},
                }
            },
            "nccl": {
                "pair_collectives": ["sendrecv"],
                "block_collectives": [],
                "min_bytes": "1G",
                "max_bytes": "1G",
                "cross_block_partners": 2,
                "seed": seed,
                "rail_ceiling_GBps": 50,
            },
            "baselines": {
                "nccl.busbw.sendrecv.*": {"ref": 46.0, "lower": -0.08, "unit": "GB/s"},
                "nccl.busbw.all_reduce.intra_node.*": {"ref": 400.0, "lower": -0.1, "unit": "GB/s"},
            },
            "sim": {"faults": faults},
        },
    )


def run(site: Site) -> list[Any]:
    fabric = fabric_of(site)
    evidence = [
        (simulate_step(fabric, s), f"raw/nccl/{i}.json") for i, s in enumerate(make_plan(site).steps())
    ]
    return nccl.judge(site, evidence, site.nodes)


def blamed(verdicts: list[Any]) -> set[str]:
    return {
        c
        for v in verdicts
        if v.check == "nccl.localization" and v.outcome is Outcome.FAIL
        for c in v.labels["culprits"].split("|")
    }


def test_healthy_fabric_blames_nobody() -> None:
    verdicts = run(make_site([]))
    assert blamed(verdicts) == set()
    assert all(v.outcome is Outcome.PASS for v in verdicts if v.check in ("nccl.busbw", "nccl.launch"))


def test_demo_slow_rail_found_with_convicting_pairs() -> None:
    site = load_site("demo", Path(__file__).resolve().parents[3] / "site-configs")
    verdicts = run(site)
    (node3,) = [v for v in verdicts if v.check == "nccl.localization" and v.outcome is Outcome.FAIL]
    assert node3.subject == "node3" and node3.labels["culprits"] == "rail:node3:rail5"
    assert "node3 rail 5 is slow with every partner" in node3.message
    assert "node3-node4:rail5" in node3.message


def _pairs(site: Site) -> list[tuple[str, str]]:
    return sorted({tuple(s.nodes) for s in make_plan(site).steps() if s.kind == "pair"})  # type: ignore[misc]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["slow_rail", "slow_node", "bad_cable", "slow_uplink"]))
def test_each_injected_fault_is_blamed_exactly(seed: int, kind: str) -> None:
    rng = random.Random(seed)
    nodes = [f"n{i:02d}" for i in range(1, 13)]
    factor = rng.uniform(0.2, 0.75)
    if kind == "slow_rail":
        node, rail = rng.choice(nodes), rng.randrange(RAILS)
        fault = {"kind": kind, "node": node, "rail": rail, "factor": factor}
        expected = f"rail:{node}:rail{rail}"
    elif kind == "slow_node":
        node = rng.choice(nodes)
        fault, expected = {"kind": kind, "node": node, "factor": factor}, f"node:{node}"
    elif kind == "bad_cable":
        a, b = rng.choice(_pairs(make_site([])))
        rail = rng.randrange(RAILS)
        fault = {"kind": kind, "nodes": [a, b], "rail": rail, "factor": factor}
        expected = f"path:{a}-{b}:rail{rail}"
    else:
        leaf = rng.choice(sorted(BLOCKS))
        fault, expected = {"kind": kind, "leaf": leaf, "factor": factor}, f"uplink:{leaf}"
    verdicts = run(make_site([fault]))
    assert blamed(verdicts) == {expected}, (fault, blamed(verdicts))


def test_vectorized_judge_agrees_with_the_per_step_judge() -> None:
    import pandas as pd

    from clusteraccept.checks.nccl import judge_frame

    site = make_site([{"kind": "slow_rail", "node": "n05", "rail": 2, "factor": 0.5}])
    verdicts = run(site)
    pair = [v for v in verdicts if v.check == "nccl.busbw" and v.labels.get("scope", "").startswith("pair")]
    rows = []
    for v in pair:
        ab, rail, coll, _ = v.subject.split(":")
        a, b = ab.split("-")
        rows.append(
            (
                a,
                b,
                int(rail.removeprefix("rail")),
                coll,
                v.labels["scope"],
                int(v.labels["size_B"]),
                float(v.value),
            )
        )  # type: ignore[arg-type]
    frame = pd.DataFrame(rows, columns=["a", "b", "rail", "collective", "scope", "size_B", "busbw_GBps"])
    judged = judge_frame(site, frame)
    assert list(judged["slow"]) == [v.outcome is Outcome.FAIL for v in pair]
    assert judged["slow"].sum() > 0 and list(judged["ref_GBps"].unique()) == [46.0]


def test_a_node_whose_steps_fail_to_launch_is_the_culprit_not_its_partners() -> None:
    """A dead node fails every pair step it is in (timeouts, no output): localization names it, and its
    partners, each failing with it alone, stay healthy (judge/items.py: they pass their items). Named on
    steps that never ran, it was not measured: its verdict is an ERROR (not tested), not a FAIL."""
    import dataclasses

    site = make_site([])
    fabric = fabric_of(site)
    evidence = []
    for i, s in enumerate(make_plan(site).steps()):
        ev = simulate_step(fabric, s)
        if "n07" in s.nodes:
            ev = dataclasses.replace(ev, returncode=None, stdout="", stderr="srun: error: n07: timed out")
        evidence.append((ev, f"raw/nccl/{i}.json"))
    verdicts = nccl.judge(site, evidence, site.nodes)
    assert blamed(verdicts) == set()  # no FAIL: nothing was measured slow
    loc = [v for v in verdicts if v.check == "nccl.localization" and v.outcome is not Outcome.PASS]
    assert [(v.subject, v.outcome, v.labels["culprits"]) for v in loc] == [("n07", Outcome.ERROR, "node:n07")]
    assert loc[0].message.startswith("not tested: every step that names it did not run or print numbers")
    launch = [v for v in verdicts if v.check == "nccl.launch" and v.outcome is Outcome.ERROR]
    assert launch and all("n07" in v.subject for v in launch)


def test_one_rail_measured_alone_still_names_the_rail() -> None:
    """-k rail2 runs rail 2 only: no other rail exonerates n05, its partners' other results on rail 2 do."""
    site = make_site([{"kind": "slow_rail", "node": "n05", "rail": 2, "factor": 0.5}])
    fabric = fabric_of(site)
    steps = [s for s in make_plan(site).steps() if s.rail is None or s.rail == 2]
    evidence = [(simulate_step(fabric, s), f"raw/nccl/{i}.json") for i, s in enumerate(steps)]
    verdicts = nccl.judge(site, evidence, site.nodes)
    assert blamed(verdicts) == {"rail:n05:rail2"}
    (loc,) = [v for v in verdicts if v.check == "nccl.localization" and v.outcome is Outcome.FAIL]
    assert "its partners are healthy with their other partners (only this rail was measured)" in loc.message


def test_a_step_killed_with_its_job_leaves_both_nodes_untested_and_blames_nobody() -> None:
    import dataclasses

    site = make_site([])
    fabric = fabric_of(site)
    steps = make_plan(site).steps()
    killed = next(s for s in steps if s.kind == "pair")
    evidence = []
    for i, s in enumerate(steps):
        ev = simulate_step(fabric, s)
        if s is killed:
            meta = {**ev.meta, "killed_with_job": "123"}
            ev = dataclasses.replace(ev, returncode=1, stdout="", meta=meta)
        evidence.append((ev, f"raw/nccl/{i}.json"))
    verdicts = nccl.judge(site, evidence, site.nodes)
    assert blamed(verdicts) == set()
    (untested,) = [v for v in verdicts if v.labels.get("untested")]
    assert untested.outcome is Outcome.ERROR and untested.subject.startswith(killed.subject)


def test_steps_judged_over_the_cores_give_the_same_verdicts(monkeypatch: Any) -> None:
    site = make_site([{"kind": "slow_rail", "node": "n05", "rail": 2, "factor": 0.5}])
    serial = run(site)
    monkeypatch.setattr(nccl, "PARALLEL_MIN", 8)  # forked workers, each a contiguous range of steps
    monkeypatch.setattr(nccl, "cpus", lambda: 3)
    monkeypatch.setattr(nccl, "may_fork", lambda: True)  # (an xdist worker has an I/O thread: serial)
    gc.freeze()  # as the plugin freezes its items for the session (its pytest_unconfigure unfreezes them)
    held = gc.get_freeze_count()
    assert run(site) == serial
    assert gc.get_freeze_count() > held // 2  # the session's freeze left in place (a few frozen objects die)


def test_a_process_with_numpy_loaded_judges_over_the_cores_and_one_with_a_python_thread_does_not() -> None:
    """numpy's OpenBLAS starts a native thread at import: counted as a thread, it kept every run on one
    core. Only another Python thread (an xdist worker's I/O thread) keeps the judging serial."""
    import subprocess
    import sys

    code = (
        "import threading, time, pandas\n"
        "from clusteraccept.checks.nccl import may_fork\n"
        "print(may_fork())\n"
        "threading.Thread(target=time.sleep, args=(2,), daemon=True).start()\n"
        "print(may_fork())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "False"], out


def test_a_pair_slow_at_a_smaller_size_only_is_still_explained() -> None:
    """Localization reads each pair at its largest size; slow at 1 GiB but fine at 8 GiB is slow."""
    site = make_site([])
    row = {"kind": "pair", "scope": "pair_in_block", "collective": "sendrecv", "nodes": ("n01", "n02"),
           "rail": "1", "busbw_GBps": 46.0, "ref_GBps": 46.0, "failed": ""}  # fmt: skip
    rows = [{**row, "size_B": 1 << 30, "slow": True}, {**row, "size_B": 8 << 30, "slow": False}]
    frame = nccl.pair_frame(site, rows)
    assert frame["slow"].tolist() == [True] and frame["size_B"].tolist() == [8 << 30]


def test_a_node_that_drops_out_mid_run_leaves_its_pairs_untested_and_blames_nobody() -> None:
    """n07 is fine in its first rounds, then its steps time out: not every partner failed, so no culprit;
    the steps that never ran are not tested (their nodes' items say ERROR), and nothing is a FAIL."""
    import dataclasses

    site = make_site([])
    fabric = fabric_of(site)
    evidence, late = [], set()
    for i, s in enumerate(make_plan(site).steps()):
        ev = simulate_step(fabric, s)
        if "n07" in s.nodes and s.kind == "pair" and "n08" not in s.nodes and "n05" not in s.nodes:
            ev = dataclasses.replace(ev, returncode=None, stdout="", stderr="srun: error: n07: timed out")
            late.add(s.subject)
        evidence.append((ev, f"raw/nccl/{i}.json"))
    verdicts = nccl.judge(site, evidence, site.nodes)
    assert late and blamed(verdicts) == set()
    loc = [v for v in verdicts if v.check == "nccl.localization" and v.outcome is not Outcome.PASS]
    assert loc == []  # neither n07 nor its partners are named: n07 was healthy with n05 and n08
    errors = [v for v in verdicts if v.outcome is Outcome.ERROR]
    assert errors and all(v.labels.get("untested") == "did_not_run" for v in errors)
    assert {v.subject.rpartition(":")[0] for v in errors} == late
