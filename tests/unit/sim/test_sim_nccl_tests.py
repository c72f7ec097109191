"""The simulated nccl-tests CLI: the real layout byte for byte, parsed back to the model's values, faults."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.checks.nccl_launch import launch_checks
from clusteraccept.parsers.nccl_tests import parse
from clusteraccept.sim import nccl_tests as sim
from clusteraccept.sim.fabric import busbw_GBps, fabric_from_dict

DATA = Path(__file__).parents[2] / "data" / "nccl-tests"
GiB = 1 << 30
H200 = {
    "seed": 1,
    "defaults": {
        "gpus": 2,
        "rails": [],
        "nvlink_GBps": 377.0,
        "gpu_name": "NVIDIA H200",
        "bus_ids": ["0000:00:06", "0000:00:07"],
    },
    "nodes": {"vm": {}},
}


def cluster(**faults: Any) -> dict[str, Any]:
    return {
        "seed": 5,
        "defaults": {"gpus": 8, "rail_GBps": 50, "nvlink_GBps": 450},
        "leaves": [
            {"name": "leaf1", "nodes": "node[01-04]", "uplink_GBps": 1600},
            {"name": "leaf2", "nodes": "node[05-08]", "uplink_GBps": 1600},
        ],
        "faults": faults,
    }


def norm(line: str) -> str:
    return re.sub(r"\d+(\.\d+)?", "9", re.sub(r" +", " ", line))


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    fabric: dict[str, Any],
    argv: list[str],
    **env: str,
) -> tuple[str, int]:
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps(fabric))
    for k in list(os.environ):
        if k.startswith(("SLURM_", "NCCL_", "CLUSTERACCEPT_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("CLUSTERACCEPT_FABRIC", str(path))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    rc = sim.main(argv)
    return capsys.readouterr().out, rc


@pytest.mark.parametrize(
    ("binary", "fixture"),
    [
        ("all_reduce_perf", "allreduce"),
        ("all_gather_perf", "allgather"),
        ("reduce_scatter_perf", "reducescatter"),
        ("alltoall_perf", "alltoall"),
        ("sendrecv_perf", "sendrecv"),
    ],
)
def test_layout_is_byte_for_byte_the_real_one(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    binary: str,
    fixture: str,
) -> None:
    argv = [binary, "-b", "8", "-e", "8G", "-f", "2", "-g", "2"]
    out, rc = run(monkeypatch, capsys, tmp_path, H200, argv, CLUSTERACCEPT_SIM_HOSTS="vm")
    real = (DATA / f"{fixture}-1node-2xh200-v2.19.6.txt").read_text()
    assert rc == 0 and out.count("\n") == real.count("\n") == 48
    for mine, theirs in zip(out.split("\n"), real.split("\n"), strict=True):
        assert len(mine) == len(theirs), (mine, theirs)  # every column at the same place
        if not re.match(r"\s+\d", theirs):  # header and footer lines: equal but for the numbers
            assert norm(mine) == norm(theirs)
        else:  # rows: the same words where they are not numbers (type, redop, N/A)
            assert [w for w in mine.split() if not re.match(r"-?\d", w)] == [
                w for w in theirs.split() if not re.match(r"-?\d", w)
            ]


@pytest.mark.parametrize("binary", sim.BINARIES)
def test_output_parses_back_to_the_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path, binary: str
) -> None:
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        cluster(),
        [binary, "-b", "8", "-e", "1G", "-f", "4", "-g", "1"],
        SLURM_STEP_NODELIST="node[02,06]",
        SLURM_STEP_NUM_TASKS="16",
        SLURM_STEP_TASKS_PER_NODE="8(x2)",
        SLURM_PROCID="0",
    )
    r = parse(out)
    coll = binary.removesuffix("_perf")
    assert rc == 0 and r.collective == coll and r.nranks == 16 and r.hosts == ("node02", "node06")
    assert [x.device for x in r.ranks[:8]] == list(range(8)) and r.version == "2.19.6"
    fab = fabric_from_dict(cluster())
    model = []
    for row in r.rows:
        for m, in_place in ((row.out_of_place, False), (row.in_place, True)):
            assert m is not None
            want = (
                busbw_GBps(
                    fab, coll, ["node02", "node06"], None, row.size_B, ranks_per_node=8, in_place=in_place
                )
                if row.size_B
                else 0.0
            )
            assert abs(m.busbw_GBps - want) <= 0.005, (row.size_B, m, want)
            model.append(want)
            assert m.wrong == (None if in_place and coll in ("alltoall", "sendrecv") else 0)
    assert r.avg_busbw_GBps == pytest.approx(sum(model) / len(model), rel=1e-4)
    assert not [
        f
        for f in launch_checks(r, expected_hosts=["node02", "node06"], expected_nranks=16, ceiling_GBps=50.0)
        if not f.ok
    ]


@pytest.mark.parametrize(("hca", "rail_ok"), [("=mlx5_5:1", False), ("mlx5_4", True), ("=mlx5_0", True)])
def test_slow_rail_shows_on_that_rail_only(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    hca: str,
    rail_ok: bool,
) -> None:
    fabric = cluster(slow_rail={"node": "node03", "rail": 5, "factor": 0.5})
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        fabric,
        ["all_reduce_perf", "-b", "8G", "-e", "8G"],
        SLURM_JOB_NODELIST="node[03,07]",
        SLURM_NTASKS="2",
        NCCL_IB_HCA=hca,
    )
    r = parse(out)
    assert rc == 0 and r.nranks == 2 and len(r.rows) == 1
    assert r.peak_busbw_GBps == pytest.approx(46 if rail_ok else 23, rel=0.015)


def test_other_ranks_print_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        cluster(),
        ["sendrecv_perf"],
        SLURM_STEP_NODELIST="node[01-02]",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_PROCID="1",
    )
    assert (out, rc) == ("", 0)


def test_non_mpi_every_task_runs_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        cluster(non_mpi=True),
        ["all_reduce_perf", "-b", "1M", "-e", "4M", "-f", "2"],
        SLURM_STEP_NODELIST="node[01-02]",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_PROCID="1",
        SLURM_NODEID="1",
    )
    r = parse(out)
    assert rc == 0 and r.nranks == 1 and r.hosts == ("node02",) and r.peak_busbw_GBps == 0.0
    assert {f.name for f in launch_checks(r) if not f.ok} == {"multi_rank"}


def test_wrong_fault_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        cluster(wrong={"node": "node05"}),
        ["alltoall_perf", "-b", "1M", "-e", "2M", "-f", "2"],
        SLURM_STEP_NODELIST="node[04-05]",
        SLURM_STEP_NUM_TASKS="2",
    )
    r = parse(out)
    assert rc == 7 and r.out_of_bounds == 4 and r.out_of_bounds_ok is False  # 2 rows x 2 processes
    assert r.rows[0].out_of_place is not None and r.rows[0].out_of_place.wrong == 132
    assert r.failure == f".. node04 pid {sim._pid('node04', 0)}: Test failure common.cu:1454"
    assert {f.name for f in launch_checks(r, returncode=rc) if not f.ok} == {
        "exit_code",
        "completed",
        "no_wrong",
        "out_of_bounds",
    }


def test_too_many_gpus_and_bad_command_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, rc = run(
        monkeypatch, capsys, tmp_path, H200, ["all_reduce_perf", "-g", "3"], CLUSTERACCEPT_SIM_HOSTS="vm"
    )
    r = parse(out)
    assert rc == 5 and r.rows == () and r.failure is not None and "Test failure" in r.failure
    assert run(monkeypatch, capsys, tmp_path, H200, ["all_reduce_perf", "-Q"]) == ("invalid option 'Q'\n", 0)
    out, rc = run(monkeypatch, capsys, tmp_path, H200, ["all_reduce_perf", "-b", "2G", "-e", "1G"])
    assert rc == 255 and out.startswith("invalid sizes")
    out, rc = run(monkeypatch, capsys, tmp_path, H200, ["all_reduce_perf", "--minbytes", "1X"])
    assert rc == 255 and out == "invalid size specified for 'minbytes'\n"
    assert run(monkeypatch, capsys, tmp_path, H200, ["nothing_perf"])[1] == 2
    _, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        cluster(),
        ["all_reduce_perf"],
        SLURM_STEP_NODELIST="node[01-02]",
        NCCL_IB_HCA="=mlx4_0",
    )
    assert rc == 3


def test_min_bw_and_bytes_step(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out, rc = run(
        monkeypatch,
        capsys,
        tmp_path,
        H200,
        ["all_gather_perf", "-b", "0", "-e", "2M", "-i", "1M", "-g", "2", "-d", "half"],
        CLUSTERACCEPT_SIM_HOSTS="vm",
        NCCL_TESTS_MIN_BW="10000",
    )
    r = parse(out)
    assert rc == 7 and r.avg_busbw_verdict == "FAILED" and [x.size_B for x in r.rows] == [0, 1 << 20, 2 << 20]
    assert (
        r.rows[1].type == "half" and r.rows[1].count == (1 << 20) // 2 // 2 and "step: 1048576(bytes)" in out
    )


def test_helpers() -> None:
    assert [sim.parsesize(v) for v in ("8", "1G", "1.5M", "4k", "x", "1T", "")] == [
        8,
        1 << 30,
        3 << 19,
        4096,
        -1,
        -1,
        -1,
    ]
    assert [sim.float_str(v, 7) for v in (24815.04, 14.6149, 1234567.0, 98765432.0)] == [
        "24815.0",
        "  14.61",
        "1234567",
        "9.9e+07",
    ]
    assert [sim.float_str(v, 6) for v in (346.1634, 1715.44, 43046.1, 1234567.0)] == [
        "346.16",
        "1715.4",
        " 43046",
        " 1e+06",
    ]
    hcas = tuple(f"mlx5_{k}" for k in range(12))
    assert sim.rails_from_hca("mlx5_1", hcas) == (1, 10, 11)  # a prefix (NCCL's own warning)
    assert sim.rails_from_hca("=mlx5_1:1", hcas) == (1,)
    assert sim.rails_from_hca("^=mlx5_1,mlx5_4", hcas) == (0, 2, 3, *range(5, 12))
    assert sim.rails_from_hca(None, hcas[:2]) == (0, 1) and sim.rails_from_hca("=ib0", hcas) == ()


def test_install_bin_dir_runs_like_the_real_binary(tmp_path: Path) -> None:
    bindir = tmp_path / "bin"
    sim.install_bin_dir(bindir, sys.executable)
    assert sorted(p.name for p in bindir.iterdir()) == sorted(sim.BINARIES)
    (tmp_path / "f.json").write_text(json.dumps(cluster()))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "NCCL_"))}
    env.update(
        CLUSTERACCEPT_FABRIC=str(tmp_path / "f.json"),
        CLUSTERACCEPT_SIM_HOSTS="node[07-08]",
        PYTHONPATH=str(Path(sim.__file__).parents[2]),
    )
    done = subprocess.run(
        [str(bindir / "all_gather_perf"), "-b", "1M", "-e", "4M", "-f", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    r = parse(done.stdout)
    assert r.collective == "all_gather" and r.hosts == ("node07", "node08") and len(r.rows) == 3


def test_json_output_like_the_real_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "out.json"
    argv = ["all_reduce_perf", "-b", "1M", "-e", "4M", "-f", "2", "-J", str(target)]
    env = {"SLURM_STEP_NODELIST": "node[01,05]", "SLURM_STEP_NUM_TASKS": "2"}
    out, rc = run(monkeypatch, capsys, tmp_path, cluster(), argv, **env)
    assert rc == 0 and out.startswith(f"# Writing JSON output to {target}\n")
    text, js = parse(out), parse(target.read_text())
    assert js.source_format == "json" and js.collective == "all_reduce" and js.nranks == 2
    assert [r.host for r in js.ranks] == ["node01", "node05"] and js.nccl_version == "2.28.9"
    for a, b in zip(js.rows, text.rows, strict=True):
        assert a.size_B == b.size_B and a.out_of_place is not None and b.out_of_place is not None
        assert abs(a.out_of_place.busbw_GBps - b.out_of_place.busbw_GBps) <= 0.005
    assert js.avg_busbw_GBps == pytest.approx(text.avg_busbw_GBps, rel=1e-5)
    assert dict(js.env)["SLURM_STEP_NUM_TASKS"] == "2"
    doc = json.loads(target.read_text())
    assert doc["version"] == 3 and doc["results"][0]["root"] == "    -1" and doc["config"]["step_factor"] == 2
    out, _ = run(monkeypatch, capsys, tmp_path, cluster(), argv, **env)  # never overwrites: out.json.0
    assert out.startswith(f"# Writing JSON output to {target}.0\n") and Path(f"{target}.0").exists()
