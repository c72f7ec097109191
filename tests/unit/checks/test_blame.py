"""Blame you can drain on: judging with no baseline (peers and line rate), the confirmation round (retests
with healthy partners, transients) and the bisection of stragglers, in-process on the simulated fabric with
run-to-run noise (the accuracy at 1,024 nodes is benchmarks/blame.py's)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusteraccept.checks import nccl
from clusteraccept.checks.confirm import suspects_of
from clusteraccept.errors import SiteConfigError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.plan.confirm import Suspects, bisection_sets, confirmation_job
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim.prepare import fabric_of, simulate_step
from clusteraccept.site.load import load_site, parse_site
from clusteraccept.site.model import Site

REPO = Path(__file__).resolve().parents[3]
BLOCKS = {"leaf1": "n[01-04]", "leaf2": "n[05-08]", "leaf3": "n[09-12]"}
RAILS = 4


def make_site(faults: list[dict[str, Any]], baselines: bool = True, **nccl_keys: Any) -> Site:
    return parse_site(
        Path("blame.yaml"),
        {
            "name": "blame",
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
                "block_collectives": ["all_reduce"],
                "intra_collectives": [],
                "min_bytes": "1G",
                "max_bytes": "1G",
                "cross_block_partners": 2,
                **nccl_keys,
            },
            "baselines": {"nccl.busbw.*": {"ref": 46.0, "lower": -0.15, "unit": "GB/s"}} if baselines else {},
            "sim": {"faults": faults},
        },
    )


def run(site: Site, seed: int = 0, spread: float = 0.0, transient: float = 0.0) -> list[Verdict]:
    """The run's two passes: judge, re-test the suspects in one confirmation job, judge again."""
    fabric = fabric_of(site, seed, spread=spread, transient={"probability": transient, "factor": 0.6})
    evidence = [
        (simulate_step(fabric, s, attempt="1"), f"raw/c#{s.name}/{i}")
        for i, s in enumerate(make_plan(site).steps())
    ]
    verdicts = nccl.judge(site, evidence, site.nodes)
    job = confirmation_job(site, suspects_of(site, verdicts))
    if job is None:
        return verdicts
    evidence += [
        (simulate_step(fabric, s, attempt="2"), f"raw/confirm#{s.name}/{i}")
        for i, s in enumerate(s for r in job.rounds for s in r.steps)
    ]
    return nccl.judge(site, evidence, site.nodes)


def localization(verdicts: list[Verdict], outcome: Outcome = Outcome.FAIL) -> dict[str, Verdict]:
    return {v.subject: v for v in verdicts if v.check == "nccl.localization" and v.outcome is outcome}


def blamed(verdicts: list[Verdict]) -> set[str]:
    return {c for v in localization(verdicts).values() for c in v.labels["culprits"].split("|")}


def test_no_baseline_is_judged_by_peers_and_line_rate() -> None:
    site = make_site([{"kind": "slow_rail", "node": "n06", "rail": 1, "factor": 0.55}], baselines=False)
    verdicts = run(site)
    busbw = {v.subject: v for v in verdicts if v.check == "nccl.busbw" and not v.labels.get("attempt")}
    slow = busbw["n05-n06:rail1:sendrecv:1GiB"]
    assert slow.outcome is Outcome.FAIL
    assert "below the median of" in slow.message and "% of 400 Gb/s line rate (50 GB/s" in slow.message
    assert slow.labels["judged_by"] == "peers+line rate"
    healthy = busbw["n05-n06:rail0:sendrecv:1GiB"]
    assert healthy.outcome is Outcome.PASS and "within 10% of the median of" in healthy.message
    assert not [v for v in busbw.values() if v.outcome is Outcome.SKIP]
    assert blamed(verdicts) == {"rail:n06:rail1"}
    assert "confirmed on retest" in localization(verdicts)["n06"].message


def test_without_peers_or_line_rate_a_result_is_skipped_never_passed() -> None:
    site = make_site([], baselines=False)
    site = replace(site, node_types=tuple(replace(t, rails=()) for t in site.node_types))
    meta = {"kind": "block", "scope": "all", "collective": "all_reduce", "subject": "all", "nodes": "n01,n02"}
    vs, rows = nccl.judge_measured(site, meta, [(1 << 30, 40.0)], "raw/x")
    (v,) = [x for x in nccl.judge_rows(site, vs, rows) if x.check == "nccl.busbw"]
    assert v.outcome is Outcome.SKIP and "no line rate" in v.message


def test_a_transient_dip_is_its_own_verdict_never_a_blame() -> None:
    site = make_site([])
    fabric = fabric_of(site, 0)
    steps = list(make_plan(site).steps())
    dipped = next(s for s in steps if s.subject == "n01-n02:rail3")
    evidence: list[tuple[Evidence, str]] = []
    for i, s in enumerate(steps):
        ev = simulate_step(fabric, s)
        if s is dipped:  # this one run of the step was slow: the same numbers at 60%
            ev = replace(ev, stdout=_scaled(ev.stdout, 0.6))
        evidence.append((ev, f"raw/c#{i}"))
    first = nccl.judge(site, evidence, site.nodes)
    assert blamed(first) == {"path:n01-n02:rail3"}  # first evidence only: a suspect
    job = confirmation_job(site, suspects_of(site, first))
    assert job is not None and len(job.rounds) == 1  # the path's own pair again, the one round
    evidence += [
        (simulate_step(fabric, s), f"raw/confirm#{i}")
        for i, s in enumerate(x for r in job.rounds for x in r.steps)
    ]
    verdicts = nccl.judge(site, evidence, site.nodes)
    assert blamed(verdicts) == set()
    passed = localization(verdicts, Outcome.PASS)
    assert passed["n01"].labels["transient"] == "n01-n02:rail3"
    assert passed["n01"].message.startswith("transient: n01-n02:rail3 slow once")
    assert any(p.startswith("raw/confirm#") for p in passed["n01"].evidence)  # the retest beside the original


def _scaled(text: str, factor: float) -> str:
    """nccl-tests output with every busbw/algbw of the data lines scaled (the sim's layout)."""
    out = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 13 and cols[0].isdigit():
            for i in (6, 7, 10, 11):  # out-of-place and in-place algbw, busbw (nccl-tests' columns)
                cols[i] = f"{float(cols[i]) * factor:.2f}"
            line = "  ".join(cols)
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_straggler_is_bisected_to_its_node() -> None:
    site = make_site([{"kind": "straggler", "node": "n07", "factor": 0.6}])
    verdicts = run(site)
    assert blamed(verdicts) == {"straggler:n07"}
    assert "n07 is the straggler of leaf2's all_reduce" in localization(verdicts)["n07"].message


def test_bisection_sets_halve_first_and_skip_single_node_sides() -> None:
    nodes = [f"n{i}" for i in range(8)]
    sets = bisection_sets(nodes)
    assert [(j, len(a), len(b)) for j, a, b in sets] == [(2, 4, 4), (1, 4, 4), (0, 4, 4)]
    assert sets[0][1] == ("n0", "n1", "n2", "n3")  # the first split keeps the block's order: halves
    assert bisection_sets(["a", "b"]) == []  # 1-node sides would be intra-node runs: not comparable


def test_retests_are_matchings_with_distinct_healthy_partners() -> None:
    site = make_site([], confirm={"partners": 2})
    s = Suspects(("n01", "n05", "n09"), (("n01", "n05"),), ("n02", "n03", "n06", "n07", "n10"))
    job = confirmation_job(site, s)
    assert job is not None
    partners: dict[str, set[str]] = {}
    for r in job.rounds:
        seen: list[str] = [n for st_ in r.steps for n in st_.nodes]
        pairs = {tuple(st_.nodes) for st_ in r.steps}
        assert len({n for p in pairs for n in p}) == 2 * len(pairs)  # each node in one pair per round
        assert all(st_.attempt == "retest" for st_ in r.steps) and seen
        for a, b in pairs:
            if (a, b) != ("n01", "n05"):
                partners.setdefault(a, set()).add(b)
    assert all(len(p) == 2 and p <= set(s.healthy) for p in partners.values())
    assert len(job.rounds) == 3  # the path, then two partners each (the path's ends are busy in round 1)


def test_confirm_keys_are_validated() -> None:
    with pytest.raises(SiteConfigError, match=r"nccl\.confirm\.partners"):
        make_site([], confirm={"partners": 9})
    with pytest.raises(SiteConfigError, match=r"nccl\.line_rate_floor\.sendrecv"):
        make_site([], line_rate_floor={"sendrecv": 1.5})
    assert confirmation_job(make_site([], confirm={"partners": 0}), Suspects(("n01",), (), ("n02",))) is None


def test_demo_without_baselines_still_names_the_slow_rail() -> None:
    site = replace(load_site("demo", REPO / "site-configs"), baselines={})
    assert blamed(run(site)) == {"rail:node3:rail5"}


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    st.integers(0, 10_000),
    st.sampled_from(["slow_rail", "slow_node", "bad_cable", "none"]),
    st.booleans(),
)
def test_blame_is_exact_under_noise_with_and_without_baselines(seed: int, kind: str, baselines: bool) -> None:
    """At twice the assumed run-to-run noise (sigma 4%), with transient dips: exactly the fault, no other."""
    rng = random.Random(seed)
    nodes = [f"n{i:02d}" for i in range(1, 13)]
    node, rail = rng.choice(nodes), rng.randrange(RAILS)
    faults: list[dict[str, Any]] = []
    expected: set[str] = set()
    if kind == "slow_rail":
        faults, expected = (
            [{"kind": kind, "node": node, "rail": rail, "factor": 0.6}],
            {f"rail:{node}:rail{rail}"},
        )
    elif kind == "slow_node":
        faults, expected = [{"kind": kind, "node": node, "factor": 0.6}], {f"node:{node}"}
    elif kind == "bad_cable":
        a, b = sorted(rng.sample(_expand(rng.choice(list(BLOCKS.values()))), 2))  # a pair of one block
        faults, expected = (
            [{"kind": kind, "nodes": [a, b], "rail": rail, "factor": 0.6}],
            {f"path:{a}-{b}:rail{rail}"},
        )
    verdicts = run(make_site(faults, baselines), seed=seed, spread=0.04, transient=0.003)
    assert blamed(verdicts) == expected


def _expand(hostlist: str) -> list[str]:
    import hostlist as hl

    return list(hl.expand_hostlist(hostlist))
