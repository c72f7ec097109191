"""Slurm's limits on a job (plan/limits.py): which value wins, waves, shards, --time; and what the cluster
says (parsers/scontrol_config.py on real `scontrol show config` / `show partition` output)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clusteraccept.errors import SiteConfigError
from clusteraccept.parsers import scontrol_config
from clusteraccept.plan import limits
from clusteraccept.plan.jobs import make_plan
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

DATA = Path(__file__).resolve().parents[1] / "data" / "scontrol-config"
CONFIG = (DATA / "slurm-22.05.8-vcluster.txt").read_text()
PARTITION = (DATA / "partition-22.05.8-vcluster.txt").read_text()


def make_site(n_nodes: int, block: int, rails: int = 2, **slurm: object) -> Site:
    nodes = [f"n{i:03d}" for i in range(1, n_nodes + 1)]
    blocks = {f"b{k}": ",".join(nodes[i : i + block]) for k, i in enumerate(range(0, n_nodes, block))}
    data = {
        "name": "limits",
        "slurm": {"executor": "slurm", "step_timeout_s": 60, **slurm},
        "tools": {"nccl_tests_bin": "/opt/nccl-tests/bin"},
        "nodes": ",".join(nodes),
        "blocks": blocks,
        "node_types": {
            "t": {"gpus": rails, "rails": {f"gpu{g}": {"hca": f"mlx5_{g}"} for g in range(rails)}}
        },
    }
    return parse_site(Path("limits.yaml"), data)


# --- which value wins ----------------------------------------------------------------------------------


def test_neither_says_gives_the_fallbacks() -> None:
    lim = limits.resolve(make_site(4, 2).slurm)
    assert (lim.max_steps_per_job, lim.max_concurrent_steps, lim.step_rate_per_s) == (40_000, 256, None)
    assert lim.time_limit_min is None
    assert any("fallback" in n for n in lim.notes)


def test_the_smaller_of_site_and_cluster_wins_and_a_site_above_the_cluster_is_said() -> None:
    cluster = limits.ClusterLimits(max_step_count=40_000, srun_ports=3000, max_time_min=600, source="t")
    above = limits.resolve(make_site(4, 2, max_steps_per_job=50_000).slurm, cluster)
    assert above.max_steps_per_job == 40_000
    assert any("max_steps_per_job=50000 is above the cluster's MaxStepCount=40000" in n for n in above.notes)
    below = limits.resolve(make_site(4, 2, max_steps_per_job=100, time_limit_min=60).slurm, cluster)
    assert (below.max_steps_per_job, below.time_limit_min) == (100, 60)
    assert below.max_concurrent_steps == 750  # 3,000 ports / 4 per srun


def test_rl_enable_paces_at_half_the_refill_rate() -> None:
    cluster = limits.ClusterLimits(rpc_refill_per_s=2.0, source="t")
    assert limits.resolve(make_site(4, 2).slurm, cluster).step_rate_per_s == 1.0
    assert limits.resolve(make_site(4, 2, step_rate_per_s=0.5).slurm, cluster).step_rate_per_s == 0.5


# --- what the cluster says (real captures; edited lines are said so) ----------------------------------


def test_real_show_config_22_05() -> None:
    cfg = scontrol_config.parse(CONFIG)
    assert cfg.max_step_count == 40_000
    assert cfg.srun_port_range is None  # "0-0": ephemeral ports
    assert cfg.slurmctld_parameters == {}  # "(null)"
    assert cfg.get("SLURM_VERSION") == "22.05.8"


def test_show_config_with_a_port_range_and_rl_enable() -> None:
    # the real capture with two lines edited as a site with these settings prints them
    rl = "enable_configless,rl_enable,rl_refill_rate=10"
    text = CONFIG.replace("SrunPortRange           = 0-0", "SrunPortRange           = 60001-63000")
    text = text.replace("SlurmctldParameters     = (null)", f"SlurmctldParameters     = {rl}")
    cfg = scontrol_config.parse(text)
    assert cfg.srun_port_range == (60001, 63000)
    assert cfg.slurmctld_parameters == {"enable_configless": "", "rl_enable": "", "rl_refill_rate": "10"}


def test_show_partition_max_time() -> None:
    parts = scontrol_config.parse_partitions(PARTITION)
    assert parts["gpu"].max_time_min == 7 * 1440 and parts["gpu"].default
    unlimited = scontrol_config.parse_partitions(PARTITION.replace("MaxTime=7-00:00:00", "MaxTime=UNLIMITED"))
    assert unlimited["gpu"].max_time_min is None
    assert scontrol_config.minutes("01:30:00") == 90 and scontrol_config.minutes("00:30:30") == 30  # a cap


def test_not_show_config_is_a_parse_error() -> None:
    with pytest.raises(scontrol_config.ParseError, match="line 1: expected scontrol show config output"):
        scontrol_config.parse("slurm_load_ctl_conf error: Unable to contact slurm controller\n")


# --- waves, shards, time --------------------------------------------------------------------------------


def test_a_round_over_the_cap_runs_in_waves_with_a_pairs_rails_together() -> None:
    site = make_site(8, 8, rails=2)
    job = make_plan(site, families=()).campaign_jobs[0]
    pair_round = next(r for r in job.rounds if "pairs" in r.label)  # 4 pairs x 2 rails
    parts = limits.waves(pair_round.steps, 3)
    assert [len(w) for w in parts] == [2, 2, 2, 2]  # 3 would split a pair: 2 per wave
    assert all(len({s.nodes for s in w}) == 1 for w in parts)
    assert [len(w) for w in limits.waves(pair_round.steps, 4)] == [4, 4]
    assert [len(w) for w in limits.waves(pair_round.steps, 1)] == [1] * 8  # a pair alone over the cap


def test_job_time_is_its_worst_case() -> None:
    site = make_site(4, 4, rails=1)
    job = make_plan(site, families=()).campaign_jobs[0]
    lim = limits.resolve(site.slurm)
    rounds = len(job.rounds)
    # every wave to its step timeout, one relaunch wave (steps hung at launch or not created, after a wait
    # for the controller and for its earlier steps to end), the snapshots, the margin
    relaunch = limits.RELAUNCH_WAVES * (
        60 + limits.CONTROLLER_WAIT_S + limits.STEPS_SETTLE_S + limits.PENDING_RETRY_S
    )
    expected = rounds * 60 + relaunch + (rounds + 1) * limits.SNAPSHOT_S + limits.DRIVER_MARGIN_S
    assert limits.job_seconds(job, lim, snapshots=True) == expected
    paced = limits.resolve(make_site(4, 4, rails=1, step_rate_per_s=2).slurm)
    steps = sum(len(r.steps) for r in job.rounds)
    assert limits.job_seconds(job, paced, snapshots=True) == expected + steps / 2


def _check_fitted(site: Site, lim: limits.Limits) -> None:
    plan = make_plan(site, families=())
    fitted = limits.fit(plan, site, lim)
    before = Counter(s.name for s in plan.steps())
    after = Counter(s.name for s in fitted.steps())
    assert after == before  # every planned step once, none lost, none twice
    by_name = {j.name: j for j in fitted.campaign_jobs}
    for job in fitted.campaign_jobs:
        snaps = limits.snapshots_of(site, job.nodes)
        assert limits.job_steps(job, snaps) <= lim.max_steps_per_job
        if lim.time_limit_min is not None:
            assert job.time_min <= lim.time_limit_min
        assert job.after == "" or by_name[job.after].block == job.block  # a shard after its own campaign
        for rnd in job.rounds:
            for wave in limits.waves(rnd.steps, job.max_concurrent):
                assert len(wave) <= lim.max_concurrent_steps
                for rail in {s.rail for s in wave}:  # a node runs one step per rail at a time
                    nodes = [n for s in wave if s.rail == rail for n in s.nodes]
                    assert len(nodes) == len(set(nodes))
            assert all(set(s.nodes) <= set(job.nodes) for s in rnd.steps)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(2, 24),
    st.integers(2, 8),
    st.integers(1, 3),
    st.integers(12, 200),
    st.integers(1, 16),
)
def test_fitted_plan_keeps_every_pair_once_within_the_limits(
    n_nodes: int, block: int, rails: int, max_steps: int, concurrent: int
) -> None:
    site = make_site(n_nodes, block, rails, max_steps_per_job=max_steps, max_concurrent_steps=concurrent)
    _check_fitted(site, limits.resolve(site.slurm))


def test_small_limits_shard_and_wave_the_cross_job() -> None:
    site = make_site(16, 4, rails=2, max_steps_per_job=20, max_concurrent_steps=4, step_rate_per_s=2)
    lim = limits.resolve(site.slurm)
    _check_fitted(site, lim)
    fitted = limits.fit(make_plan(site, families=()), site, lim)
    cross = [j for j in fitted.campaign_jobs if j.block == "cross"]
    assert len(cross) > 1 and cross[0].name == "campaign-cross-p1" and cross[1].after == "campaign-cross-p1"
    # 2 starts/s for the user, shared by the 5 campaigns (4 blocks and the cross job) that may run at once
    assert all(j.step_interval_s == 2.5 for j in fitted.campaign_jobs)


def test_time_cap_shards_and_a_wave_over_the_cap_is_refused() -> None:
    # a wave: 60 s + 120 s snapshot; its relaunch 60 + 60 + 90 + 310 s; margin 300 s
    site = make_site(8, 8, rails=1, time_limit_min=20)
    _check_fitted(site, limits.resolve(site.slurm))
    tight = make_site(8, 8, rails=1, time_limit_min=5, step_timeout_s=600)
    with pytest.raises(SiteConfigError, match=r"slurm.time_limit_min: expected room for one wave .* got 5"):
        limits.fit(make_plan(tight, families=()), tight, limits.resolve(tight.slurm))


def test_small_sites_are_not_sharded() -> None:
    site = make_site(8, 4, rails=2)
    plan = make_plan(site, families=())
    fitted = limits.fit(plan, site, limits.resolve(site.slurm))
    assert [j.name for j in fitted.campaign_jobs] == [j.name for j in plan.campaign_jobs]
    assert all(j.time_min > 0 and j.max_concurrent == 256 for j in fitted.campaign_jobs)


def test_squeue_starts_only_a_running_job_has_started() -> None:
    from clusteraccept.jobs.slurm_clients import parse_squeue_starts

    text = (DATA.parent / "squeue" / "pending-behind-running.txt").read_text()
    starts = parse_squeue_starts(text)
    assert starts["2"].start_epoch is None and starts["2"].reason == "Resources"  # %S: only expected
    assert starts["1"].state == "RUNNING" and starts["1"].start_epoch is not None and starts["1"].reason == ""
    epoch = parse_squeue_starts((DATA.parent / "squeue" / "epoch-pending-behind-running.txt").read_text())
    assert epoch["5"].start_epoch == 1796137924.0 and epoch["6"].start_epoch is None
    assert epoch["6"].reason == "Resources"


def test_shards_are_submitted_one_after_the_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each shard waits for the one before it, also while that one is itself still waiting."""
    from clusteraccept.jobs import submit

    site = make_site(16, 4, rails=2, max_steps_per_job=14, max_concurrent_steps=4)
    fitted = limits.fit(make_plan(site, families=()), site, limits.resolve(site.slurm))
    cross = [j for j in fitted.campaign_jobs if j.block == "cross"]
    assert len(cross) >= 3
    layer = submit.JobLayer(site, tmp_path, executor="local")
    started: list[str] = []

    def start(job: Any, params: Any, left_out: Any = (), note: str = "") -> None:
        started.append(job.name)
        layer._pending.append(submit._Pending(job.name, None, (), "campaign", 60.0))

    monkeypatch.setattr(layer, "_start_campaign", start)
    for job in cross:
        layer.submit_campaign(job)
    assert started == ["campaign-cross-p1"]
    for k in range(1, len(cross)):
        layer._pending = [p for p in layer._pending if p.name != f"campaign-cross-p{k}"]
        layer._release(f"campaign-cross-p{k}")
        assert started == [f"campaign-cross-p{i}" for i in range(1, k + 2)]


def test_a_shard_after_a_failed_one_leaves_out_the_nodes_slurm_will_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusteraccept.jobs import slurm_clients, submit

    site = make_site(16, 4, rails=2, max_steps_per_job=14, max_concurrent_steps=4)
    fitted = limits.fit(make_plan(site, families=()), site, limits.resolve(site.slurm))
    p1, p2 = [j for j in fitted.campaign_jobs if j.block == "cross"][:2]
    victim = next(n for n in p2.nodes if n in p1.nodes)
    layer = submit.JobLayer(site, tmp_path, executor="slurm")
    started: list[tuple[Any, tuple[str, ...], str]] = []
    record = lambda job, params, left=(), note="": started.append((job, left, note))  # noqa: E731
    monkeypatch.setattr(layer, "_start_campaign", record)
    down = {victim: slurm_clients.NodeState(victim, "down*", "not responding")}
    monkeypatch.setattr(slurm_clients, "node_states", lambda conf: down)
    layer._deferred.append(p2)
    layer._release(p1.name, "NODE_FAIL")
    ((job, left, note),) = started
    assert left and all(victim in name for name in left)  # reported missing: not tested
    assert not any(victim in s.nodes for r in job.rounds for s in r.steps) and victim not in job.nodes
    assert sum(len(r.steps) for r in job.rounds) + len(left) == sum(len(r.steps) for r in p2.rounds)
    assert note == f"not tested, left out after {p1.name} ended NODE_FAIL: {victim} is down* (not responding)"


def test_a_wave_never_needs_more_steps_than_a_job_may_create() -> None:
    """12 steps per job and up to 16 at once: a 12-step round would not fit a job beside its two counter
    snapshots; its waves are made smaller instead of the site being refused (found by the property
    test above)."""
    site = make_site(12, 12, rails=2, max_steps_per_job=12, max_concurrent_steps=16)
    lim = limits.resolve(site.slurm)
    _check_fitted(site, lim)
    fitted = limits.fit(make_plan(site, families=()), site, lim)
    assert {j.max_concurrent for j in fitted.campaign_jobs} == {10}


def test_a_job_slurm_will_never_start_ends_at_once_and_says_why(tmp_path: Path) -> None:
    from clusteraccept.jobs import submit

    site = make_site(4, 2, queue_timeout_min=600)
    layer = submit.JobLayer(site, tmp_path, executor="slurm")
    steps = ("sendrecv:n001-n002:rail0",)
    waiting = submit._Pending("campaign-b0", None, steps, "campaign", 60.0, ("n001", "n002"))
    layer._pending.append(waiting)
    assert layer._overdue(waiting) == ""  # queued a moment: not overdue
    waiting.reason = "PartitionTimeLimit"
    assert layer._overdue(waiting) == "QUEUE_TIMEOUT"
    assert layer._queue_message(waiting) == (
        "never started (Slurm: PartitionTimeLimit): "
        "the job is outside a limit of its partition, QOS or account"
    )
    waiting.started = waiting.submitted - 10_000  # running, long past its --time and the grace
    assert layer._overdue(waiting) == "WAIT_TIMEOUT"


def test_cluster_limits_from_scontrol_and_when_it_cannot_be_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusteraccept.evidence import Evidence
    from clusteraccept.jobs import slurm_clients

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\n")
    site = make_site(4, 2, slurm_conf=str(conf), partition="gpu")
    answers = {"config": (0, CONFIG, ""), "partition": (0, PARTITION, "")}
    seen: list[dict[str, str] | None] = []

    def run(argv: Any, timeout_s: float, source: str | None = None, env: Any = None) -> Evidence:
        seen.append(env)
        rc, out, err = answers[argv[2]]
        src = source or "scontrol"
        return Evidence("submit", src, argv=tuple(argv), returncode=rc, stdout=out, stderr=err)

    monkeypatch.setattr(slurm_clients.hostio, "run", run)
    got = slurm_clients.cluster_limits(site)
    said = (got.max_step_count, got.srun_ports, got.rpc_refill_per_s, got.max_time_min)
    assert said == (40_000, None, None, 10080)
    assert got.source == "scontrol show config (Slurm 22.05.8)"
    assert all(env == {"SLURM_CONF": str(conf)} for env in seen)  # never configless DNS
    answers["config"] = (1, "", "slurm_load_ctl_conf error: Unable to contact slurm controller")
    failed = slurm_clients.cluster_limits(site)
    assert failed.max_step_count is None
    assert failed.source.startswith("scontrol show config failed: slurm_load_ctl_conf error")
    missing = slurm_clients.cluster_limits(make_site(4, 2, slurm_conf=str(tmp_path / "none.conf")))
    assert missing.source == f"not asked: no slurm.conf at {tmp_path / 'none.conf'}"


# --- topology/block: where Slurm places a job that names its nodes ----------------------------------------
# (measured on the 24.11 virtual cluster, BlockSizes=2,4: tests/data/scontrol-topology/block-2x2-vcluster-*)
UNITS = (
    (2, ("node1", "node2")),
    (2, ("node3", "node4")),
    (4, ("node1", "node2", "node3", "node4")),
)


def test_a_job_inside_one_block_names_its_own_nodes() -> None:
    assert limits.block_nodes(("node1", "node2"), UNITS) == ("node1", "node2")
    assert limits.block_nodes(("node1", "node2", "node3"), UNITS) == ("node1", "node2", "node3")  # 4-block
    assert limits.block_nodes(("node1", "node3"), ()) == ("node1", "node3")  # not topology/block


def test_a_job_across_blocks_names_the_block_that_holds_them() -> None:
    # -N2 -w node1,node3 is refused by Slurm; -N4 -w node[1-4] runs, and its steps keep their own -w
    assert limits.block_nodes(("node1", "node3"), UNITS) == ("node1", "node2", "node3", "node4")
    assert limits.block_nodes(("node1", "node5"), UNITS) is None  # no block holds node5: Slurm refuses


def test_a_partial_block_is_named_with_the_nodes_it_has() -> None:
    units = ((2, ("a1", "a2")), (2, ("b1",)), (4, ("a1", "a2", "b1")))
    assert limits.block_nodes(("a1", "b1"), units) == ("a1", "a2", "b1")


def test_probe_jobs_split_by_base_block_in_node_order() -> None:
    nodes = ("node3", "node1", "node4", "node2", "other")
    assert limits.block_parts(nodes, UNITS) == [("node1", "node2"), ("node3", "node4"), ("other",)]


def test_sigterm_inside_a_job_poll_cancels_the_run(tmp_path: Path) -> None:
    """A SIGTERM that lands while submitit's done() asks Slurm (where the wait spends its time) interrupts
    the run: it is not taken for one of sacct's lags, which the poll guards as "not done yet"."""
    import os
    import signal

    from clusteraccept.jobs import submit

    class Polled:
        job_id = "7"
        cancelled = False
        polls = 0

        def done(self, force_check: bool = False) -> bool:
            Polled.polls += 1
            os.kill(os.getpid(), signal.SIGTERM)  # delivered here: the handler raises inside done()
            return False

        def cancel(self, check: bool = False) -> None:
            Polled.cancelled = True

        def result(self) -> list[Any]:
            raise OSError("no result: cancelled")

        @property
        def state(self) -> str:
            return "CANCELLED"

    site = make_site(4, 2)
    layer = submit.JobLayer(site, tmp_path, executor="local")
    step = "sendrecv:n001-n002:rail0"
    layer._pending.append(submit._Pending("campaign-b0", Polled(), (step,), "campaign", 60.0))
    before = signal.getsignal(signal.SIGTERM)
    (outcome,) = layer.wait(poll_s=0.01)
    assert layer.interrupted == "SIGTERM" and Polled.cancelled
    assert Polled.polls == 1  # the first signal ended the wait (swallowed, the poll went on until --time)
    assert outcome.state == "CANCELLED" and outcome.missing == (step,)
    assert "interrupted (SIGTERM)" in outcome.message
    assert signal.getsignal(signal.SIGTERM) == before
