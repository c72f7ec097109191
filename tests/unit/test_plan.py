"""The planner: perfect matchings by the circle method, seeded cross-block sampling, the jobs of a run."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from clusteraccept.plan.jobs import make_plan, pair_steps
from clusteraccept.plan.matchings import circle_rounds, cross_block_pairs, greedy_matchings
from clusteraccept.site.load import load_site

CONFIGS = Path(__file__).resolve().parents[2] / "site-configs"


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=2, max_value=70))
def test_circle_rounds_cover_every_pair_once(n: int) -> None:
    nodes = [f"n{i:03d}" for i in range(n)]
    rounds = circle_rounds(nodes)
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)  # odd blocks: one bye per round
    seen = [p for r in rounds for p in r]
    assert sorted(seen) == sorted(combinations(nodes, 2))  # every pair exactly once
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))  # no node twice in a round
        assert len(r) == n // 2  # perfect matching (one node idle when n is odd)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=12), min_size=2, max_size=6),
    st.integers(0, 3),
    st.integers(0, 1000),
)
def test_cross_block_sampling_is_seeded_and_valid(sizes: list[int], k: int, seed: int) -> None:
    blocks = {f"b{i}": tuple(f"b{i}n{j}" for j in range(s)) for i, s in enumerate(sizes)}
    pairs = cross_block_pairs(blocks, k, seed)
    assert pairs == cross_block_pairs(blocks, k, seed)
    block_of = {n: b for b, m in blocks.items() for n in m}
    assert all(block_of[a] != block_of[b] for a, b in pairs)
    assert len(set(pairs)) == len(pairs)
    for node in block_of:  # every node has at least min(k, others) partners
        others = sum(len(m) for b, m in blocks.items() if b != block_of[node])
        assert sum(node in p for p in pairs) >= min(k, others)
    for r in greedy_matchings(pairs):
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    assert sorted(p for r in greedy_matchings(pairs) for p in r) == sorted(pairs)


def test_demo_plan_shape() -> None:
    site = load_site("demo", CONFIGS)
    plan = make_plan(site)
    assert [j.name for j in plan.probe_jobs] == ["probe-nodes"]
    assert plan.probe_jobs[0].nodes == ("node1", "node2", "node3", "node4")
    names = [j.name for j in plan.campaign_jobs]
    assert names == ["campaign-leaf1", "campaign-leaf2", "campaign-cross"]  # <= 1 sbatch per block + cross
    leaf1 = plan.campaign_jobs[0]
    pair_round = [r for r in leaf1.rounds if "pairs" in r.label]
    assert len(pair_round) == 1 and len(pair_round[0].steps) == 8  # one pair, all 8 rails at once
    step = pair_round[0].steps[3]
    assert step.subject == "node1-node2:rail3"
    argv = list(step.argv)
    assert argv[:10] == [
        *("srun", "-N", "2", "-n", "2", "--ntasks-per-node=1", "-w", "node1,node2"),
        *("--overlap", "--cpu-bind=none"),
    ]
    # no --exact/--cpus-per-task: the step gets the node's CPUs, and the launch record binds each rank
    assert "--exact" not in argv and not any(a.startswith("--cpus-per-task") for a in argv)
    assert "NCCL_IB_HCA==mlx5_3:1" in argv and "CUDA_VISIBLE_DEVICES=3" in argv
    assert "CUDA_DEVICE_ORDER=PCI_BUS_ID" in argv and "NCCL_DEBUG=INFO" in argv
    after = argv[argv.index("clusteraccept.probes.launch") + 1 :]
    assert after[:2] == ["--", f"{site.tools.nccl_tests_bin}/sendrecv_perf"]


def test_steps_over_every_gpu_use_only_the_rail_hcas() -> None:
    """Intra-node, block and SHARP steps name exactly the site's rail HCAs (never a storage port), and the
    SHARP "off" run keeps the site's SHARP settings: only NCCL_COLLNET_ENABLE differs."""
    site = load_site("demo", CONFIGS)
    rails = "=" + ",".join(f"mlx5_{k}:1" for k in range(8))
    steps = [s for s in make_plan(site).steps() if s.kind in ("node", "block")]
    assert steps and all(dict(s.env)["NCCL_IB_HCA"] == rails for s in steps)
    sharp = {s.variant: dict(s.env) for s in steps if s.family == "sharp"}
    if sharp:
        on, off = sharp["on"], sharp["off"]
        assert {k for k in on if on[k] != off.get(k)} == {"NCCL_COLLNET_ENABLE"}


def test_big_block_rounds() -> None:
    site = load_site("example-h100-ib", CONFIGS)
    su1 = make_plan(site).campaign_jobs[0]
    sendrecv_rounds = [r for r in su1.rounds if r.label.startswith("sendrecv pairs")]
    assert len(sendrecv_rounds) == 15  # n - 1 rounds for 16 nodes
    assert all(len(r.steps) == 8 * 8 for r in sendrecv_rounds)  # 8 pairs x 8 rails


def test_the_selection_filter_returns_the_plan_itself_when_every_step_is_wanted_and_drops_the_rest() -> None:
    from clusteraccept import flow

    site = load_site("example-h100-ib", CONFIGS)
    plan = make_plan(site, families=("sharp",), nccl=True)
    families = {s.family for s in plan.steps()}
    assert families == {"nccl", "sharp"}  # the SHARP on/off runs are steps of their own family
    assert flow._filter(plan, None, ("sharp",), True) is plan
    without_sharp = flow._filter(plan, None, (), True)
    assert list(without_sharp.steps()) == [s for s in plan.steps() if s.family == "nccl"]
    only_sharp = flow._filter(plan, None, ("sharp",), False)
    assert {s.family for s in only_sharp.steps()} == {"sharp"}
    one = next(s.subject for s in plan.steps() if s.kind == "pair")
    picked = flow._filter(plan, frozenset({one}), ("sharp",), True)
    assert {s.subject for s in picked.steps() if s.family == "nccl"} == {one}


def test_pair_steps_share_their_shapes_per_site_and_node_type() -> None:
    """The shape and rail environments of pair steps are worked out once per site, node type, collective
    and MNNVL setting: each site's own rails, also when another site was planned in between."""
    for name in ("demo.yaml", "example-h100-ib.yaml", "demo.yaml"):
        one = load_site(CONFIGS / name, CONFIGS)
        a, b = one.nodes[0], one.nodes[1]
        steps = pair_steps(one, a, b, "pair_in_block", "sendrecv")
        rails = one.node_type(a).rails
        assert [s.rail for s in steps] == [r.index for r in rails]
        for step, rail in zip(steps, rails, strict=True):
            assert step.env == (
                ("CUDA_VISIBLE_DEVICES", str(rail.gpu)),
                ("NCCL_IB_HCA", f"={rail.hca}:{rail.port}"),
            )
            assert (
                step.argv[step.argv.index("-w") + 1] == f"{a},{b}"
                and step.subject == f"{a}-{b}:rail{rail.index}"
            )
