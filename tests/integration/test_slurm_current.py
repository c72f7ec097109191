"""What Slurm 24.11 brings that 22.05 did not: a real MPI launch through PMIx, singletons without one, and
topology/block. On the session cluster (24.11, MpiDefault=pmix, topology/tree) and on a second 24.11
cluster with a block topology and Slurm's own MpiDefault=none. Skipped on the 22.05 flavour."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from vcsite import REPO, demo_site_text, make_site

from clusteraccept.jobs import slurm_clients
from clusteraccept.judge import record
from clusteraccept.parsers import nccl_tests
from clusteraccept.plan import limits
from clusteraccept.plan.jobs import CampaignJob, Round, Step
from clusteraccept.site.load import parse_site
from clusteraccept.vcluster import ClusterInfo, down, up

pytestmark = pytest.mark.vcluster
BLOCK_DIR = REPO / ".vcluster" / "test-block"


@pytest.fixture(autouse=True)
def _current_slurm_only(vcluster: ClusterInfo) -> None:
    if vcluster.slurm == "22.05":
        pytest.skip("Slurm 24.11 behaviour (PMIx, topology/block); this session runs 22.05")


@pytest.fixture(scope="module")
def block_cluster(vcluster: ClusterInfo) -> Iterator[ClusterInfo]:
    """A second 4-node 24.11 cluster: blocks leaf1 = node[1-2], leaf2 = node[3-4], BlockSizes=2,4, and
    MpiDefault=none (Slurm's default). Its own state dir and slot; down at the end of the module."""
    info = up(BLOCK_DIR, n_nodes=4, gpus_per_node=8, slurm="24.11", topology="block", mpi_default="none")
    try:
        yield info
    finally:
        down(BLOCK_DIR)


def _env(info: ClusterInfo, **extra: str) -> dict[str, str]:
    return {**os.environ, **info.env, **extra}


def test_an_mpi_pair_step_is_one_world_of_two_ranks_on_two_nodes(
    vcluster: ClusterInfo, tmp_path: Path
) -> None:
    fabric = tmp_path / "fabric.json"
    fabric.write_text(json.dumps({"defaults": {"gpus": 8, "rails": ["mlx5_0"]}}))
    argv = [
        "srun",
        "-N2",
        "-n2",
        "--ntasks-per-node=1",
        "-w",
        "node1,node2",
        "--mpi=pmix",
        str(vcluster.python),
    ]
    argv += ["-m", "clusteraccept.sim.nccl_tests", "sendrecv_perf", "-b", "1M", "-e", "1M", "-g", "1"]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(vcluster, CLUSTERACCEPT_FABRIC=str(fabric)),
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = nccl_tests.parse(out.stdout)
    assert (result.runs, result.nranks) == (1, 2)
    assert [r.host for r in result.ranks] == ["node1", "node2"]
    # the pids are the ranks' own, as MPI gathered them (the non-MPI path makes them up from the host name)
    from clusteraccept.sim.nccl_tests_output import _pid

    assert all(r.pid != _pid(r.host, 0) for r in result.ranks), result.ranks


def _run_suite(info: ClusterInfo, tmp_path: Path, *args: str) -> Path:
    site = tmp_path / "demo.yaml"
    site.write_text(demo_site_text(info))
    reports = tmp_path / "reports"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "suites/",
            f"--site={site}",
            f"--reports-dir={reports}",
            "-q",
            "-p",
            "no:randomly",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        check=False,
        env=_env(info),
    )
    runs = [p for p in (reports / "demo").iterdir() if not p.is_symlink() and (p / "results.json").exists()]
    assert len(runs) == 1, proc.stdout[-3000:]
    return runs[0]


def test_without_a_pmi_every_rank_is_a_singleton_and_the_launch_check_says_so(
    block_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """MpiDefault=none and no slurm.mpi: the real reproduction of a cluster where --mpi is missing. Also a
    whole campaign under topology/block: the cross-block job names node[1-4] (one aggregated block)."""
    run = _run_suite(block_cluster, tmp_path, "-m", "nccl")
    results = record.load(run)
    assert {j["state"] for j in results["jobs"]} == {"COMPLETED"}, results["jobs"]
    launch = [v for v in results["verdicts"] if v["check"] == "nccl.launch"]
    pairs = [v for v in launch if v["subject"].count("-") == 1 and ":rail" in v["subject"]]
    assert pairs and all(v["outcome"] == "fail" for v in launch)
    for v in pairs:
        says = "srun started 2 singleton processes instead of one 2-rank job: set slurm.mpi (see `srun --mpi"
        assert says in v["message"], v


def test_blocks_come_from_a_block_topology(block_cluster: ClusterInfo) -> None:
    site = parse_site(
        Path("vtest.yaml"),
        {
            "name": "vtest",
            "slurm": {
                "partition": block_cluster.partition,
                "slurm_conf": str(block_cluster.slurm_conf),
                "bin_dir": str(block_cluster.bin_dir),
            },
            "nodes": ",".join(block_cluster.nodes),
            "blocks": "slurm",
            "node_types": {"fake": {"gpus": 8, "rails": {"gpu0": {"hca": "mlx5_0"}}}},
        },
    )
    saved = {k: os.environ.get(k) for k in block_cluster.env}
    os.environ.update(block_cluster.env)
    try:
        assert slurm_clients.slurm_blocks(site) == {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}
        units = slurm_clients.cluster_limits(site).block_units
    finally:
        for key, value in saved.items():
            if value is not None:
                os.environ[key] = value
    assert sorted(size for size, _ in units) == [2, 2, 4]


def test_a_job_across_blocks_asks_for_the_block_that_holds_its_nodes(
    block_cluster: ClusterInfo, tmp_path: Path
) -> None:
    """Slurm refuses `-N2 -w node1,node3` under topology/block; the job layer names the aggregated block
    (node[1-4]) and still steps on node1 and node3 only."""
    from clusteraccept.jobs.submit import JobLayer

    refused = subprocess.run(
        ["srun", "-N2", "-w", "node1,node3", "--exclusive", "true"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(block_cluster),
    )
    assert refused.returncode != 0 and "Requested node configuration is not available" in refused.stderr
    site = parse_site(
        Path("vtest.yaml"),
        {
            "name": "vtest",
            "slurm": {
                "partition": block_cluster.partition,
                "slurm_conf": str(block_cluster.slurm_conf),
                "bin_dir": str(block_cluster.bin_dir),
                "python": str(block_cluster.python),
                "step_timeout_s": 60,
            },
            "nodes": ",".join(block_cluster.nodes),
            "node_types": {"fake": {"gpus": 8, "rails": {}}},
        },
    )
    saved = {k: os.environ.get(k) for k in block_cluster.env}
    os.environ.update(block_cluster.env)
    try:
        units = slurm_clients.cluster_limits(site).block_units
        assert limits.block_nodes(("node1", "node3"), units) == ("node1", "node2", "node3", "node4")
        argv = ("srun", "-N2", "-n2", "-w", "node1,node3", "--exact", "--overlap", "hostname")
        rnd = Round(
            0,
            "pairs 1",
            (
                Step(
                    "pair",
                    "pair_cross_block",
                    "sendrecv",
                    ("node1", "node3"),
                    0,
                    "node1-node3:rail0",
                    shape=argv,
                ),
            ),
        )
        run = tmp_path / "run"
        (run / "raw").mkdir(parents=True)
        layer = JobLayer(site, run, block_units=units)
        layer.submit_campaign(CampaignJob("campaign-x", "x", ("node1", "node3"), (rnd,)))
        (outcome,) = layer.wait()
    finally:
        for key, value in saved.items():
            if value is not None:
                os.environ[key] = value
    assert outcome.state == "COMPLETED", outcome.message
    (ev,) = [e for e in outcome.evidence if e.source != "counters"]
    assert sorted(ev.stdout.split()) == ["node1", "node3"]
    script = (run / "jobs" / "campaign-x.sbatch").read_text()
    assert "#SBATCH --nodes=4" in script and "#SBATCH --nodelist='node[1-4]'" in script, script


def test_status_says_which_slurm_runs_and_what_its_root_holds(vcluster: ClusterInfo) -> None:
    from clusteraccept.vcluster import status

    text = status(vcluster.state_dir)
    assert "Slurm 24.11.5" in text and "Debian trixie" in text and "openmpi-bin 5.0.7" in text, text


def test_pmix_steps_on_any_nodes_of_their_job_launch_without_pmix_retries(
    vcluster: ClusterInfo, tmp_path: Path
) -> None:
    """The campaign driver gives each step's srun its own nodes as SLURM_JOB_NODELIST, in Slurm's order
    (jobs/node_entry.step_env): without it, Slurm's mpi/pmix sends a step's early connections to the nodes
    of the job's list by the step's own peer index. Under MpiDefault=pmix, in a job on node[1-4]: a one-node
    step on node2 (peer 0 of its step: sent to node1), a pair on node3,node4 (sent to node1, node2) and a
    retest's pair written in its suspect-first order, node3-node1 (each node's connection sent to itself).
    Each went to pmix's retries ("pmixp_p2p_send: ... send failed, rc=2, exceeded the retry limit" in
    slurmd's log, ~31 s) or hung until the driver relaunched it."""
    from clusteraccept.jobs.submit import JobLayer

    site = make_site(vcluster, step_timeout_s=90, time_limit_min=5)

    def step(nodes: tuple[str, ...], subject: str) -> Step:
        n = str(len(nodes))
        argv = ("srun", f"-N{n}", f"-n{n}", "-w", ",".join(nodes), "--exact", "--overlap", "--mpi=pmix")
        kind, scope = ("node", "intra_node") if len(nodes) == 1 else ("pair", "pair_in_block")
        # a step that lives a few seconds, as a benchmark does: one that ends at once leaves its peers'
        # connections to a step daemon that is gone, which pmix retries for ~31 s as well
        return Step(
            kind, scope, "sendrecv", nodes, 0, subject, shape=(*argv, "sh", "-c", "sleep 3; hostname")
        )

    rnd = Round(
        0,
        "pmix",
        (
            step(("node2",), "node2"),
            step(("node3", "node4"), "node3-node4:rail0"),
            step(("node3", "node1"), "node3-node1:rail0"),
        ),
    )
    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    layer = JobLayer(site, run)
    layer.submit_campaign(CampaignJob("campaign-pmix", "x", tuple(vcluster.nodes), (rnd,), snapshots=False))
    (outcome,) = layer.wait()
    assert outcome.state == "COMPLETED", outcome.message
    steps = {e.meta.get("subject"): e for e in outcome.evidence if e.source != "counters"}
    assert set(steps) == {"node2", "node3-node4:rail0", "node3-node1:rail0"}, steps
    for subject, ev in steps.items():
        assert ev.returncode == 0 and "relaunched" not in ev.meta, (subject, ev.stderr[-800:], ev.meta)
        assert sorted(ev.stdout.split()) == sorted(subject.split(":")[0].split("-")), (subject, ev.stdout)
    retries = [
        f"{log.name}: {line}"
        for log in sorted(vcluster.log_dir.glob("slurmd-*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if f"[{outcome.job_id}." in line and "pmixp" in line and "error" in line
    ]
    assert not retries, "\n".join(retries[:5])
