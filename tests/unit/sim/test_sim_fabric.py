"""The fabric model of the simulated nccl-tests: bottlenecks, faults, size curve, determinism, scale."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.errors import SiteConfigError
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim import nccl_tests
from clusteraccept.sim.fabric import Fabric, bottleneck_GBps, busbw_GBps, fabric_from_dict, load_fabric
from clusteraccept.sim.nccl_tests_output import step_attempt
from clusteraccept.sim.prepare import fabric_doc, fabric_of, simulate_step
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

GiB = 1 << 30


def doc(**faults: Any) -> dict[str, Any]:
    return {
        "seed": 3,
        "defaults": {
            "gpus": 8,
            "rails": [f"mlx5_{k}" for k in range(8)],
            "rail_GBps": 50,
            "nvlink_GBps": 450,
        },
        "leaves": [
            {"name": "leaf1", "nodes": "node[01-08]", "uplink_GBps": 3200},
            {"name": "leaf2", "nodes": "node[09-16]", "uplink_GBps": 3200},
        ],
        "faults": faults,
    }


def bw(
    fab: Fabric,
    hosts: list[str],
    rails: list[int] | None,
    rpn: int = 1,
    size: int = 8 * GiB,
    coll: str = "all_reduce",
) -> float:
    return busbw_GBps(fab, coll, hosts, rails, size, ranks_per_node=rpn)


def test_healthy_pair_reaches_092_of_the_rail() -> None:
    fab = fabric_from_dict(doc())
    assert fab.nodes["node09"].leaf == "leaf2" and fab.rail_of("node01", "mlx5_3") == 3
    assert bw(fab, ["node01", "node02"], [3]) == pytest.approx(0.92 * 50, rel=0.012)
    # 8 ranks per node over 8 rails: one rail per rank, the same bottleneck
    assert bw(fab, ["node01", "node02"], None, rpn=8) == pytest.approx(46, rel=0.012)
    # 8 ranks on one rail share it; within one node NVLink is the bottleneck
    assert bottleneck_GBps(fab, ["node01", "node02"], [0], 8) == 50 / 8
    assert bw(fab, ["node05"], None, rpn=8) == pytest.approx(0.92 * 450, rel=0.012)


def test_size_curve_latency_bound_then_asymptote() -> None:
    fab = fabric_from_dict(doc())
    sizes = [1 << k for k in range(3, 34)]
    vals = [bw(fab, ["node01", "node02"], [0], size=s) for s in sizes]
    assert vals[0] < 0.01 and vals[-1] == pytest.approx(46, rel=0.012)
    assert all(b > a for a, b in itertools.pairwise(vals[:21]))  # rising while latency-bound
    assert 0.3 < vals[sizes.index(1 << 20)] / 46 < 0.7  # about half way at 1 MiB (20 us x 46 GB/s)
    assert bw(fab, ["node01", "node02"], [0], size=0) == 0.0


def test_deterministic_with_small_seeded_noise() -> None:
    a, b = fabric_from_dict(doc()), fabric_from_dict({**doc(), "seed": 4})
    x = bw(a, ["node01", "node02"], [1])
    assert x == bw(a, ["node02", "node01"], [1]) == bw(fabric_from_dict(doc()), ["node01", "node02"], [1])
    assert x != bw(b, ["node01", "node02"], [1]) and abs(x / bw(b, ["node01", "node02"], [1]) - 1) < 0.021
    ip = busbw_GBps(a, "all_reduce", ["node01", "node02"], [1], 8 * GiB, ranks_per_node=1, in_place=True)
    assert ip != x and abs(ip / x - 1) < 0.021


def test_slow_rail_slows_every_pair_with_that_node_on_that_rail() -> None:
    fab = fabric_from_dict(doc(slow_rail={"node": "node03", "rail": 5, "factor": 0.5}))
    for other in ("node01", "node07", "node12"):
        assert bw(fab, ["node03", other], [5]) == pytest.approx(23, rel=0.012)
        assert bw(fab, ["node03", other], [4]) == pytest.approx(46, rel=0.012)
    assert bw(fab, ["node01", "node02"], [5]) == pytest.approx(46, rel=0.012)
    # all rails at once: the rank on rail 5 stalls the whole ring
    assert bw(fab, ["node03", "node04"], None, rpn=8) == pytest.approx(23, rel=0.012)


def test_bad_cable_between_two_nodes_and_to_a_leaf() -> None:
    fab = fabric_from_dict(
        doc(
            bad_cable=[
                {"a": "node05", "b": "node06", "rail": 2, "factor": 0.3},
                {"a": "leaf1", "b": "node08", "factor": 0.5},
            ]
        )
    )
    assert bw(fab, ["node05", "node06"], [2]) == pytest.approx(0.3 * 46, rel=0.012)
    assert bw(fab, ["node05", "node07"], [2]) == pytest.approx(46, rel=0.012)
    assert bw(fab, ["node05", "node06"], [3]) == pytest.approx(46, rel=0.012)
    for rail in (0, 7):
        assert bw(fab, ["node08", "node01"], [rail]) == pytest.approx(23, rel=0.012)


def test_slow_uplink_only_across_leaves() -> None:
    fab = fabric_from_dict(doc(slow_uplink={"leaf": "leaf2", "factor": 0.05}))  # 160 GB/s left
    assert bw(fab, ["node01", "node09"], None, rpn=8) == pytest.approx(0.92 * 160 / 8, rel=0.012)
    assert bw(fab, ["node01", "node09"], [0]) == pytest.approx(46, rel=0.012)  # one ring: 160 > 50
    assert bw(fab, ["node10", "node09"], None, rpn=8) == pytest.approx(46, rel=0.012)


def test_slow_node_non_mpi_unknown_host() -> None:
    fab = fabric_from_dict(doc(slow_node={"node": "node10", "factor": 0.7}))
    assert bw(fab, ["node10", "node11"], [6]) == pytest.approx(0.7 * 46, rel=0.012)
    assert bw(fab, ["node10"], None, rpn=8) == pytest.approx(0.7 * 0.92 * 450, rel=0.012)
    assert bw(fabric_from_dict(doc(non_mpi=True)), ["node01", "node02"], [0]) == 0.0
    assert bw(fab, ["node01"], None, rpn=1) == 0.0  # a single rank measures nothing
    assert fab.node("elsewhere").leaf is None and bw(fab, ["x1", "x2"], [0]) == pytest.approx(46, rel=0.012)
    with pytest.raises(ValueError, match="rails"):
        bw(fab, ["node01", "node02"], [8])


def test_collective_factors_and_efficiency_override() -> None:
    fab = fabric_from_dict({**doc(), "efficiency": {"alltoall": 0.8}})
    assert bw(fab, ["node01", "node02"], [0], coll="alltoall") == pytest.approx(40, rel=0.012)
    assert bw(fab, ["node01", "node02"], [0], coll="sendrecv") == pytest.approx(46, rel=0.012)


def test_load_and_validation(tmp_path: Path) -> None:
    p = tmp_path / "fabric.json"
    p.write_text(
        json.dumps(doc(wrong=[{"node": "node05"}], slow_rail=[{"node": "node03", "rail": 5, "factor": 0.5}]))
    )
    fab = load_fabric(p)
    assert fab.faults.wrong == ("node05",) and fab.faults.slow_rail == (("node03", 5, 0.5),)
    assert len(fab.nodes) == 16 and fab.leaves["leaf1"].nodes[-1] == "node08"
    bad: list[dict[str, Any]] = [
        doc(slow_rail={"node": "node99", "rail": 1, "factor": 0.5}),
        doc(slow_uplink={"leaf": "node01", "factor": 0.5}),
        doc(bad_cable={"a": "node01"}),
        {**doc(), "leaves": [{"name": "x", "nodes": "n[1-"}]},
        {**doc(), "defaults": {"rail_GBps": "fast"}},
    ]
    for d in bad:
        with pytest.raises(SiteConfigError):
            fabric_from_dict(d)
    with pytest.raises(SiteConfigError):
        load_fabric(tmp_path / "missing.json")


def test_scales_to_4096_nodes_times_8_rails() -> None:
    """A 4,096-node fabric loads and answers every pair x rail of a round. How fast is a benchmark's
    question, not a test's (a timed assertion failed CI on a loaded machine: benchmarks/)."""
    fab = fabric_from_dict(
        {
            **doc(slow_rail={"node": "n0003", "rail": 5, "factor": 0.5}),
            "leaves": [
                {"name": f"leaf{i}", "nodes": f"n[{i * 32:04d}-{i * 32 + 31:04d}]", "uplink_GBps": 12800}
                for i in range(128)
            ],
        }
    )
    names = sorted(fab.nodes)
    assert len(names) == 4096
    slow = []
    for i in range(0, 4096, 2):  # one round of pairs, every rail of each pair
        for rail in range(8):
            if bw(fab, [names[i], names[i + 1]], [rail]) < 40:
                slow.append((names[i], rail))
    assert slow == [("n0002", 5)]  # the pair holding n0003 on rail 5, nothing else


# ------------------------------------------------------------------------- run-to-run noise, stragglers
def noisy(**top: Any) -> Fabric:
    return fabric_from_dict({**doc(), **top})


def attempts(fab: Fabric, n: int, hosts: tuple[str, str] = ("node01", "node02")) -> list[float]:
    return [
        busbw_GBps(fab, "sendrecv", hosts, [0], 8 * GiB, ranks_per_node=1, attempt=f"7.{i}") for i in range(n)
    ]


def test_spread_is_a_gaussian_of_the_requested_std_keyed_by_attempt() -> None:
    fab = noisy(spread=0.05)
    vals = attempts(fab, 2000)
    mean = statistics.fmean(vals)
    assert mean == pytest.approx(46, rel=0.012)
    assert statistics.stdev(vals) / mean == pytest.approx(0.05, rel=0.2)
    # about 68% within one std, as a Gaussian (a uniform would give 58%)
    assert 0.63 < sum(abs(v / mean - 1) < 0.05 for v in vals) / len(vals) < 0.73
    one = busbw_GBps(fab, "sendrecv", ["node01", "node02"], [0], 8 * GiB, ranks_per_node=1, attempt="7.3")
    assert one == vals[3] and vals[3] != vals[4]
    # a run's sizes move together: the same attempt scales every row by the same factor
    small = [
        busbw_GBps(fab, "sendrecv", ["node01", "node02"], [0], 1 << 20, ranks_per_node=1, attempt=a)
        for a in ("7.3", "7.4")
    ]
    off = [
        bw(fabric_from_dict(doc()), ["node01", "node02"], [0], size=s, coll="sendrecv")
        for s in (1 << 20, 8 * GiB)
    ]
    assert small[0] / off[0] == pytest.approx(vals[3] / off[1], rel=1e-12)
    assert small[1] / off[0] == pytest.approx(vals[4] / off[1], rel=1e-12)


def test_transient_rate_and_exact_factor() -> None:
    fab, base = noisy(transient={"probability": 0.1, "factor": 0.6}), fabric_from_dict(doc())
    plain = bw(base, ["node01", "node02"], [0], coll="sendrecv")
    vals = attempts(fab, 5000)
    dips = [v for v in vals if v != plain]
    assert 0.085 < len(dips) / len(vals) < 0.115  # 5000 draws of p = 0.1: 3 sigma is 0.013
    assert all(v == pytest.approx(0.6 * plain, rel=1e-12) for v in dips)
    # independent of the Gaussian draw: with a spread as well, dips still come at the same rate
    both = attempts(noisy(spread=0.02, transient={"probability": 0.1, "factor": 0.6}), 5000)
    assert 0.085 < sum(v < 0.8 * plain for v in both) / len(both) < 0.115
    assert all(v == plain for v in attempts(noisy(transient={"probability": 0.0, "factor": 0.6}), 200))


def test_straggler_slows_block_collectives_not_pairs() -> None:
    fab = fabric_from_dict(doc(straggler=[{"node": "node03", "factor": 0.5}]))
    base = fabric_from_dict(doc())
    block = ["node01", "node02", "node03", "node04"]
    assert fab.faults.straggler == (("node03", 0.5),)
    # the ring waits for the straggler: half the bottleneck, half the busbw (latency is nothing at 8 GiB)
    assert bottleneck_GBps(fab, block, None, 8) == 0.5 * bottleneck_GBps(base, block, None, 8)
    assert bw(fab, block, None, rpn=8) == pytest.approx(0.5 * bw(base, block, None, rpn=8), rel=1e-3)
    assert bw(fab, ["node03", "node05"], [2], coll="sendrecv") == bw(
        base, ["node03", "node05"], [2], coll="sendrecv"
    )
    assert bw(fab, ["node03"], None, rpn=8) == bw(base, ["node03"], None, rpn=8)  # one host: NVLink only
    assert bw(fab, ["node01", "node02"], None, rpn=8) == bw(base, ["node01", "node02"], None, rpn=8)


def test_absent_keys_change_nothing() -> None:
    explicit = noisy(spread=0, transient={"probability": 0, "factor": 0.6})
    for fab in (fabric_from_dict(doc()), explicit):
        assert (fab.spread, fab.transient_probability, fab.transient_factor, fab.faults.straggler) == (
            0.0,
            0.0,
            0.6,
            (),
        )
    plain = fabric_from_dict(doc())
    for hosts, rpn in ((["node01", "node02"], 1), (["node01", "node09", "node10"], 8)):
        for size in (1 << 10, 1 << 24, 8 * GiB):
            want = busbw_GBps(explicit, "all_reduce", hosts, None, size, ranks_per_node=rpn)
            assert (
                busbw_GBps(plain, "all_reduce", hosts, None, size, ranks_per_node=rpn, attempt="9.1") == want
            )


@pytest.mark.parametrize(
    ("top", "key"),
    [
        ({"spread": -0.1}, "spread"),
        ({"spread": "wide"}, "spread"),
        ({"spread": True}, "spread"),
        ({"transient": {"probability": 1.5}}, "transient.probability"),
        ({"transient": {"probability": 0.1, "factor": 0}}, "transient.factor"),
        ({"transient": {"probability": 0.1, "factor": 1.2}}, "transient.factor"),
        ({"transient": {"rate": 0.1}}, "transient"),
        ({"transient": 0.1}, "transient"),
        ({"faults": {"straggler": [{"node": "node03", "factor": 0}]}}, "faults.straggler[0].factor"),
        ({"faults": {"straggler": [{"node": "node99", "factor": 0.5}]}}, "faults.straggler"),
        ({"faults": {"straggler": [{"node": "node03"}]}}, "faults"),
    ],
)
def test_bad_noise_and_straggler_values_name_the_key(top: dict[str, Any], key: str) -> None:
    with pytest.raises(SiteConfigError) as err:
        fabric_from_dict({**doc(), **top})
    assert err.value.key == key


def _avg_busbw(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fabric: Path, step: str
) -> str:
    """The simulated binary's "Avg bus bandwidth" line of a 2-node sendrecv run in srun step ``step``."""
    for k in list(os.environ):
        if k.startswith(("SLURM_", "NCCL_", "CLUSTERACCEPT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CLUSTERACCEPT_FABRIC", str(fabric))
    monkeypatch.setenv("CLUSTERACCEPT_SIM_MPI", "0")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[01-02]")
    if step:
        monkeypatch.setenv("SLURM_JOB_ID", "41")
        monkeypatch.setenv("SLURM_STEP_ID", step)
    assert nccl_tests.main(["sendrecv_perf", "-b", "1G", "-e", "1G", "-g", "1"]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if "Avg bus bandwidth" in line)


def test_the_simulated_binary_draws_anew_in_each_srun_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    noisy_json, plain_json = tmp_path / "noisy.json", tmp_path / "plain.json"
    noisy_json.write_text(json.dumps({**doc(), "spread": 0.05}))
    plain_json.write_text(json.dumps(doc()))
    steps = [_avg_busbw(monkeypatch, capsys, noisy_json, s) for s in ("0", "1", "0")]
    assert steps[0] == steps[2] and steps[0] != steps[1]
    plain = {_avg_busbw(monkeypatch, capsys, plain_json, s) for s in ("0", "1", "")}
    assert len(plain) == 1  # without spread or transients every step repeats the same numbers
    assert step_attempt({"SLURM_JOB_ID": "41", "SLURM_STEP_ID": "2"}) == "41.2" and step_attempt({}) == ""


def _site(faults: tuple[dict[str, Any], ...] = ()) -> Site:
    site = parse_site(
        Path("noise.yaml"),
        {
            "name": "noise",
            "simulated": True,
            "nodes": "n[01-04]",
            "blocks": {"leaf1": "n[01-04]"},
            "node_types": {"t": {"gpus": 2, "rails": {"gpu0": {"hca": "mlx5_0", "rate_Gbps": 400}}}},
            "nccl": {
                "pair_collectives": ["sendrecv"],
                "block_collectives": [],
                "min_bytes": "1G",
                "max_bytes": "1G",
            },
        },
    )
    # site/load.py does not know the straggler kind yet: set the loaded faults directly
    return dataclasses.replace(site, sim_faults=faults)


def test_fabric_doc_straggler_spread_transient_and_simulate_step_attempt() -> None:
    site = _site(({"kind": "straggler", "node": "n03", "factor": 0.5},))
    plain_doc = fabric_doc(site)
    assert plain_doc["faults"] == {"straggler": [{"node": "n03", "factor": 0.5}]}
    assert "spread" not in plain_doc and "transient" not in plain_doc
    fab = fabric_of(site, spread=0.05, transient={"probability": 0.2, "factor": 0.5})
    assert (fab.spread, fab.transient_probability, fab.transient_factor) == (0.05, 0.2, 0.5)
    assert fab.faults.straggler == (("n03", 0.5),)
    step = next(s for s in make_plan(site).steps() if len(s.nodes) == 2)
    a, b = (simulate_step(fab, step, attempt=x).stdout for x in ("r1", "r2"))
    assert a != b and a == simulate_step(fab, step, attempt="r1").stdout
    quiet = fabric_of(site)
    assert simulate_step(quiet, step, attempt="r1").stdout == simulate_step(quiet, step).stdout
