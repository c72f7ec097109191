"""The virtual Slurm cluster behaves like the real clusters the suite targets (4 nodes x 8 GPUs, accounting,
topology tree, time limits, node state changes) and submitit works against it."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
import submitit
from submitit.core.utils import UncompletedJobError

from clusteraccept.vcluster import ClusterInfo, status, up

pytestmark = pytest.mark.vcluster

T = TypeVar("T")


def slurm(info: ClusterInfo, *argv: str, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run a Slurm client with SLURM_CONF set (without it the clients try DNS look-ups off the machine)."""
    return subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **info.env},
        check=False,
    )


def poll(what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float = 0.5) -> T:
    """Call ``probe`` until it returns something other than None/False, or fail at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(every_s)


def node_states(info: ClusterInfo) -> dict[str, str]:
    out = slurm(info, "sinfo", "-h", "-N", "-o", "%N %t")
    assert out.returncode == 0, out.stderr
    return dict(line.split() for line in out.stdout.splitlines() if line.strip())


def sacct_state(info: ClusterInfo, *selector: str) -> str | None:
    out = slurm(info, "sacct", "-n", "-X", "-P", "-a", "-o", "State", *selector)
    states = out.stdout.split()
    return states[-1] if out.returncode == 0 and states else None


def fresh_folder(info: ClusterInfo, request: pytest.FixtureRequest) -> Path:
    # A fresh submitit folder per test: a reused one could hand back an older run's result pickle.
    return info.shared_dir / "submitit" / f"{request.node.name}-{uuid.uuid4().hex[:8]}"


def wait_done(job: submitit.Job[Any], timeout_s: float = 90.0) -> None:
    """submitit's result() waits forever; bound it, and cancel the job if the deadline passes."""
    deadline = time.monotonic() + timeout_s
    while not job.done():
        if time.monotonic() > deadline:
            job.cancel(check=False)
            pytest.fail(f"job {job.job_id} not done after {timeout_s:.0f} s (state {job.state})")
        time.sleep(0.5)


def test_four_idle_nodes(vcluster: ClusterInfo) -> None:
    assert vcluster.nodes == ("node1", "node2", "node3", "node4")
    assert os.environ["SLURM_CONF"] == str(vcluster.slurm_conf)

    def all_idle() -> dict[str, str] | None:
        states = node_states(vcluster)
        return states if set(states.values()) == {"idle"} else None

    states = poll("4 idle nodes", all_idle, 30)
    service = ["svc"] if vcluster.service_partition else []  # 24.11: the service host of scrontab's jobs
    assert sorted(states) == [*vcluster.nodes, *service]
    out = slurm(vcluster, "sinfo", "-h", "-o", "%P %a")
    parts = [f"{vcluster.partition}*", "up"] + ([vcluster.service_partition, "up"] if service else [])
    assert out.stdout.split() == parts  # `*` marks the default partition


def test_srun_on_four_nodes_and_accounting(vcluster: ClusterInfo) -> None:
    name = f"ca-hostname-{uuid.uuid4().hex[:8]}"
    # --mpi=none: hostname is no MPI program (the 24.11 cluster's MpiDefault is pmix; docs/vcluster.md)
    out = slurm(vcluster, "srun", "-N4", "-n4", "--mpi=none", f"--job-name={name}", "hostname")
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == ["node1", "node2", "node3", "node4"]
    # submitit learns job states from sacct, which lags slurmctld by a few seconds.
    assert poll("sacct to record the job", lambda: sacct_state(vcluster, f"--name={name}"), 30) == "COMPLETED"


def test_fake_gpus(vcluster: ClusterInfo) -> None:
    gpus = ["--mpi=none", "--gpus-per-node=8"]
    out = slurm(vcluster, "srun", "-N1", "-n1", *gpus, "printenv", "CUDA_VISIBLE_DEVICES")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0,1,2,3,4,5,6,7"
    too_many = slurm(vcluster, "srun", "-N1", "-n1", "--gpus-per-node=9", "true")
    assert too_many.returncode != 0
    assert "Requested node configuration is not available" in too_many.stderr


def test_submitit_auto_executor(vcluster: ClusterInfo, request: pytest.FixtureRequest) -> None:
    # Only functions importable on the nodes travel (cloudpickle pickles them by reference): a closure's
    # bytecode would go by value, and the 24.11 nodes' Python (3.13) cannot load this one's (3.11).
    executor = submitit.AutoExecutor(
        folder=fresh_folder(vcluster, request), cluster="slurm", slurm_python=str(vcluster.python)
    )
    executor.update_parameters(
        slurm_partition=vcluster.partition,
        timeout_min=5,
        nodes=1,
        tasks_per_node=1,
        gpus_per_node=8,
        slurm_srun_args=["--mpi=none"],  # no MPI program (MpiDefault=pmix on 24.11)
    )
    job = executor.submit(subprocess.check_output, ["sh", "-c", "echo $(hostname) $CUDA_VISIBLE_DEVICES"])
    wait_done(job)
    host, gpus = job.result().decode().split()
    assert host in vcluster.nodes
    assert gpus == "0,1,2,3,4,5,6,7"


def test_submitit_slurm_executor_two_nodes(vcluster: ClusterInfo, request: pytest.FixtureRequest) -> None:
    executor = submitit.SlurmExecutor(folder=fresh_folder(vcluster, request), python=str(vcluster.python))
    executor.update_parameters(
        partition=vcluster.partition,
        time=5,
        nodes=2,
        ntasks_per_node=1,
        gpus_per_node=8,
        srun_args=["--mpi=none"],
    )
    job = executor.submit(socket.gethostname)
    wait_done(job)
    hosts = job.results()
    assert len(hosts) == 2 and len(set(hosts)) == 2
    assert set(hosts) <= set(vcluster.nodes)


def test_submitit_notices_cancelled_job(vcluster: ClusterInfo, request: pytest.FixtureRequest) -> None:
    # Needs accounting: without sacct submitit never learns that a job died without a result.
    executor = submitit.AutoExecutor(
        folder=fresh_folder(vcluster, request), cluster="slurm", slurm_python=str(vcluster.python)
    )
    executor.update_parameters(
        slurm_partition=vcluster.partition, timeout_min=5, nodes=1, slurm_srun_args=["--mpi=none"]
    )
    job = executor.submit(time.sleep, 600)
    poll("the job to run", lambda: sacct_state(vcluster, "-j", str(job.job_id)) == "RUNNING", 30)
    assert slurm(vcluster, "scancel", str(job.job_id)).returncode == 0
    wait_done(job, timeout_s=60)
    with pytest.raises(UncompletedJobError):
        job.result()


def test_up_twice_is_idempotent(vcluster: ClusterInfo) -> None:
    again = up(vcluster.state_dir, n_nodes=4, gpus_per_node=8, slurm=vcluster.slurm)
    assert again.reused
    assert (again.slurm_conf, again.nodes, again.controller_ip) == (
        vcluster.slurm_conf,
        vcluster.nodes,
        vcluster.controller_ip,
    )
    assert status(vcluster.state_dir).startswith("UP")


def test_topology_tree(vcluster: ClusterInfo) -> None:
    out = slurm(vcluster, "scontrol", "show", "topology")
    assert out.returncode == 0, out.stderr
    switches = {
        fields["SwitchName"]: fields
        for line in out.stdout.splitlines()
        if line.startswith("SwitchName=")
        for fields in [dict(f.split("=", 1) for f in line.split())]
    }
    assert switches["leaf1"]["Nodes"] == "node[1-2]"
    assert switches["leaf2"]["Nodes"] == "node[3-4]"
    assert switches["spine"]["Switches"] == "leaf1,leaf2"
    assert switches["spine"]["Level"] == "1"


def test_node_down_and_resume(vcluster: ClusterInfo) -> None:
    def state() -> str:
        return node_states(vcluster).get("node3", "?")

    try:
        out = slurm(vcluster, "scontrol", "update", "nodename=node3", "state=down", "reason=test")
        assert out.returncode == 0, out.stderr
        poll("node3 down", lambda: state().startswith("down"), 10)
        # Every slurmd registers again on reconfigure; node3 must stay DOWN (ReturnToService=1).
        assert slurm(vcluster, "scontrol", "reconfigure").returncode == 0
        too_many = slurm(vcluster, "srun", "-N4", "-n4", "--immediate=1", "true")
        assert too_many.returncode != 0
        assert state().startswith("down")
    finally:
        slurm(vcluster, "scontrol", "update", "nodename=node3", "state=resume")
    poll("node3 idle again", lambda: state() == "idle", 60)


def test_time_limit_enforced(vcluster: ClusterInfo, request: pytest.FixtureRequest) -> None:
    # slurmctld checks time limits every 30 s (PERIODIC_TIMEOUT, compiled in), so a 1-minute job ends
    # 60-90 s after it starts; OverTimeLimit=0 adds no grace.
    folder = fresh_folder(vcluster, request)
    folder.mkdir(parents=True)
    out = slurm(
        vcluster, "sbatch", "--parsable", "--time=1", f"--output={folder}/%j.out", "--wrap", "sleep 600"
    )
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip().split(";")[0]
    poll("the job to run", lambda: sacct_state(vcluster, "-j", job_id) == "RUNNING", 30)
    started = time.monotonic()
    final = poll(
        "the time limit to end the job",
        lambda: s if (s := sacct_state(vcluster, "-j", job_id)) not in (None, "RUNNING", "PENDING") else None,
        130,
        every_s=2,
    )
    assert final == "TIMEOUT"
    assert time.monotonic() - started < 100
