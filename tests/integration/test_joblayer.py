"""The job layer on the virtual Slurm cluster: probe jobs, campaign rounds, timeouts, node loss, refusals."""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from vcsite import make_site

from clusteraccept.errors import SubmitError
from clusteraccept.jobs.submit import JobLayer
from clusteraccept.plan.jobs import CampaignJob, ProbeJob, Round, Step
from clusteraccept.site.load import parse_site

pytestmark = pytest.mark.vcluster


def run_dir(info: Any, name: str) -> Path:
    d = Path(info.shared_dir) / "runs" / f"{name}-{time.time_ns()}"
    (d / "raw").mkdir(parents=True)
    return d


def step(nodes: tuple[str, ...], argv: list[str], subject: str) -> Step:
    return Step("pair", "pair_in_block", "sendrecv", nodes, 0, subject, shape=tuple(argv))


def test_probe_job_over_4_nodes_returns_4_results(vcluster: Any) -> None:
    site = make_site(vcluster)
    layer = JobLayer(site, run_dir(vcluster, "probe"))
    t0 = time.monotonic()
    layer.submit_probes(ProbeJob("probe-nodes", vcluster.nodes, ()), {"timeout_s": 10})
    (outcome,) = layer.wait()
    latency = time.monotonic() - t0
    assert outcome.state == "COMPLETED", outcome.message
    assert outcome.missing == ()
    hosts = sorted({ev.host for ev in outcome.evidence})
    assert hosts == sorted(vcluster.nodes)  # one result per node, from the node itself
    uname = [ev for ev in outcome.evidence if ev.source == "uname"]
    assert len(uname) == 4 and all(ev.returncode == 0 for ev in uname)
    print(f"submit->result latency of a 4-node probe job: {latency:.2f} s")


def test_campaign_round_runs_two_steps_concurrently(vcluster: Any) -> None:
    site = make_site(vcluster)
    a, b, c, d = vcluster.nodes[:4]
    # --mpi=none on steps that are no MPI program (the 24.11 cluster's MpiDefault is pmix)
    sleeper = ["--exact", "--overlap", "--mpi=none", "sh", "-c", "sleep 2; hostname"]
    rnd = Round(
        0,
        "pairs 1",
        (
            step((a, b), ["srun", "-N2", "-n2", "-w", f"{a},{b}", *sleeper], f"{a}-{b}:rail0"),
            step((c, d), ["srun", "-N2", "-n2", "-w", f"{c},{d}", *sleeper], f"{c}-{d}:rail0"),
        ),
    )
    layer = JobLayer(site, run_dir(vcluster, "campaign"))
    layer.submit_campaign(CampaignJob("campaign-t", "t", vcluster.nodes, (rnd,)))
    (outcome,) = layer.wait()
    assert outcome.state == "COMPLETED", outcome.message
    steps = [ev for ev in outcome.evidence if ev.source != "counters"]
    assert len(steps) == 2 and all(ev.returncode == 0 for ev in steps)
    # and a port-counter snapshot of each of the 4 nodes before the round and after it (jobs/node_entry.py)
    snaps = [ev for ev in outcome.evidence if ev.source == "counters"]
    assert sorted((ev.host, ev.meta["seq"]) for ev in snaps) == sorted(
        (n, seq) for n in vcluster.nodes for seq in ("0", "1")
    )
    by_subject = {ev.host: ev for ev in steps}
    assert sorted(by_subject[f"{a}-{b}:rail0"].stdout.split()) == sorted([a, b])
    assert sorted(by_subject[f"{c}-{d}:rail0"].stdout.split()) == sorted([c, d])
    wall = float(steps[0].meta["round_wall_s"])
    steps_sum = sum(ev.duration_s for ev in steps)
    assert wall < steps_sum * 0.8, (wall, steps_sum)  # they overlapped: not run one after the other
    print(f"campaign round wall {wall:.2f} s vs sum of step run times {steps_sum:.2f} s")


def test_job_over_its_time_limit_is_a_timeout(vcluster: Any) -> None:
    site = make_site(vcluster, time_limit_min=1, step_timeout_s=600)  # Slurm's limit must act first
    a, b = vcluster.nodes[:2]
    slow = ["srun", "-N2", "-n2", "-w", f"{a},{b}", "--mpi=none", "sleep", "300"]
    rnd = Round(0, "slow", (step((a, b), slow, f"{a}-{b}:rail0"),))
    layer = JobLayer(site, run_dir(vcluster, "timeout"))
    layer.submit_campaign(CampaignJob("campaign-slow", "t", (a, b), (rnd,)))
    (outcome,) = layer.wait()
    assert outcome.state == "TIMEOUT", outcome
    assert "TIMEOUT" in outcome.message
    # The killed step either never reported, or its evidence (spooled as the driver died) shows the kill.
    killed = [ev for ev in outcome.evidence if ev.host == f"{a}-{b}:rail0"]
    assert outcome.missing == (f"sendrecv:{a}-{b}:rail0",) or (killed and killed[0].returncode != 0)


def _set_down_when_running(info: Any, node: str, env: dict[str, str], stop: threading.Event) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not stop.is_set():
        out = subprocess.run(
            ["squeue", "-h", "-o", "%T", "-n", "clusteraccept-probe-hold"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        if "RUNNING" in out:
            time.sleep(1.0)  # let the tasks start their hold
            subprocess.run(
                ["scontrol", "update", f"nodename={node}", "state=down", "reason=clusteraccept-test"],
                env=env,
                check=True,
            )
            return
        time.sleep(0.2)


@pytest.mark.smoke  # also on Slurm 22.05 (tools/test)
def test_node_down_mid_run_keeps_other_results(vcluster: Any) -> None:
    site = make_site(vcluster)
    env = {**vcluster.env, "PATH": f"{vcluster.bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin"}
    victim = vcluster.nodes[2]
    stop = threading.Event()
    t = threading.Thread(target=_set_down_when_running, args=(vcluster, victim, env, stop))
    t.start()
    try:
        layer = JobLayer(site, run_dir(vcluster, "down"))
        layer.submit_probes(ProbeJob("probe-hold", vcluster.nodes, ()), {"timeout_s": 10, "hold_s": 8})
        (outcome,) = layer.wait()
    finally:
        stop.set()
        t.join()
        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"], env=env, check=False)
    assert outcome.missing == (victim,), outcome
    assert victim in outcome.message
    assert sorted({ev.host for ev in outcome.evidence}) == sorted(n for n in vcluster.nodes if n != victim)


@pytest.mark.smoke  # also on Slurm 22.05 (tools/test)
def test_sbatch_refusal_is_an_error_with_sbatch_message(vcluster: Any) -> None:
    site = make_site(vcluster, partition="nosuchpartition")
    layer = JobLayer(site, run_dir(vcluster, "refused"))
    layer.submit_probes(ProbeJob("probe-nodes", vcluster.nodes, ()), {})
    (outcome,) = layer.wait()
    assert outcome.state == "SUBMIT_ERROR"
    assert "invalid partition" in outcome.message.lower(), outcome.message
    assert outcome.missing == vcluster.nodes
    assert isinstance(SubmitError(outcome.message), SubmitError)


def test_blocks_from_scontrol_topology(vcluster: Any) -> None:
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    site = parse_site(
        Path("vtest.yaml"),
        {
            "name": "vtest",
            "slurm": {
                "partition": vcluster.partition,
                "slurm_conf": str(vcluster.slurm_conf),
                "bin_dir": str(vcluster.bin_dir),
            },
            "nodes": ",".join(vcluster.nodes),
            "blocks": "slurm",
            "node_types": {"fake": {"gpus": 8, "rails": {"gpu0": {"hca": "mlx5_0"}}}},
        },
    )
    assert site.blocks_from_slurm
    assert slurm_blocks(site) == {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}


def test_drained_node_is_left_out_and_reported(vcluster: Any) -> None:
    from clusteraccept.flow import Request, execute

    site = make_site(vcluster)
    env = {**vcluster.env, "PATH": f"{vcluster.bin_dir}:/usr/bin:/bin:/usr/sbin:/sbin"}
    victim = vcluster.nodes[1]
    subprocess.run(
        ["scontrol", "update", f"nodename={victim}", "state=drain", "reason=admin: PSU swap"],
        env=env,
        check=True,
    )
    try:
        results = execute(
            Request(site=site, run_dir=run_dir(vcluster, "preflight"), families=("topology",), nccl=False)
        )
    finally:
        subprocess.run(["scontrol", "update", f"nodename={victim}", "state=resume"], env=env, check=False)
    pre, probe = results["jobs"]
    assert pre["name"] == "preflight" and pre["missing"] == [victim]
    assert "admin: PSU swap" in pre["message"] and "drain" in pre["message"]
    assert probe["state"] == "COMPLETED" and probe["missing"] == []
    assert results["plan"]["probe_jobs"][0]["nodes"] == [n for n in vcluster.nodes if n != victim]


def _holder_and_quick(vcluster: Any, hold_s: int) -> tuple[CampaignJob, CampaignJob]:
    """Two campaigns on the same two nodes (exclusive jobs: the second queues behind the first): one
    step that holds them ``hold_s``, and one quick step with a one-minute --time."""
    a, b = vcluster.nodes[:2]
    srun = ["srun", "-N2", "-n2", "-w", f"{a},{b}", "--exact", "--overlap", "--mpi=none"]
    hold = Round(0, "hold", (step((a, b), [*srun, "sleep", str(hold_s)], f"{a}-{b}:rail0"),))
    quick = Round(0, "quick", (step((a, b), [*srun, "hostname"], f"{a}-{b}:rail0"),))
    return (
        CampaignJob("campaign-hold", "t", (a, b), (hold,), time_min=3),
        CampaignJob("campaign-quick", "t", (a, b), (quick,), time_min=1),
    )


def test_a_job_queued_behind_another_is_not_timed_out_for_waiting(vcluster: Any) -> None:
    """campaign-quick's own bound is 1 min + 5 s: from its submission it would run out while it waits
    ~70 s behind campaign-hold; counted from its start (squeue %S) it completes."""
    site = make_site(vcluster, time_limit_min=5, step_timeout_s=120)
    layer = JobLayer(site, run_dir(vcluster, "queued"))
    layer.grace_s = 5.0
    hold, quick = _holder_and_quick(vcluster, 70)
    layer.submit_campaign(hold)
    time.sleep(2)  # hold is submitted (and scheduled) first
    layer.submit_campaign(quick)
    t0 = time.monotonic()
    outcomes = {o.name: o for o in layer.wait()}
    assert outcomes["campaign-hold"].state == "COMPLETED", outcomes["campaign-hold"].message
    assert outcomes["campaign-quick"].state == "COMPLETED", outcomes["campaign-quick"].message
    assert time.monotonic() - t0 > 65  # it really waited past its own bound before it started


def test_a_job_that_never_starts_ends_queue_timeout_naming_what_it_waits_behind(vcluster: Any) -> None:
    site = make_site(vcluster, time_limit_min=5, step_timeout_s=200, queue_timeout_min=1)
    layer = JobLayer(site, run_dir(vcluster, "queue-timeout"))
    hold, quick = _holder_and_quick(vcluster, 85)  # holds the nodes past quick's 1-minute queue bound
    layer.submit_campaign(hold)
    time.sleep(2)
    layer.submit_campaign(quick)
    outcomes = {o.name: o for o in layer.wait()}
    assert outcomes["campaign-hold"].state == "COMPLETED", outcomes["campaign-hold"].message
    queued = outcomes["campaign-quick"]
    assert queued.state == "QUEUE_TIMEOUT", queued
    assert re.search(r"waited 0 h 1 min in the queue without starting \(Slurm: \w+\)", queued.message), queued
    assert "behind campaign-hold (running on the same nodes); slurm.queue_timeout_min=1" in queued.message
    assert queued.missing == (f"sendrecv:{vcluster.nodes[0]}-{vcluster.nodes[1]}:rail0",)
    assert queued.evidence == ()
