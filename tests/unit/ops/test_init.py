"""``python -m clusteraccept init`` (ops/init.py) through its command line, on the demo's simulated hosts with
the local executor: the file it writes, what it says, and the one-line refusals. On the virtual cluster:
tests/integration/test_init.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from harness import FakeSlurm

from clusteraccept.__main__ import main
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.site.load import load_site, parse_site


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("init") / "hosts"
    build_profiles(load_site("demo", REPO_ROOT / "site-configs"), where)
    return where


def _init(hosts: Path, tmp: Path, *extra: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)  # restored after: init sets it (local)
    argv = [
        "init",
        "--executor",
        "local",
        "--nodes",
        "node[1-4]",
        "--out",
        str(tmp / "site" / "demo-init.yaml"),
    ]
    argv += ["--env", f"CLUSTERACCEPT_HOST_PROFILE={hosts}", "--reports-dir", str(tmp / "reports"), *extra]
    return main(argv)


def test_init_writes_a_site_the_loader_accepts_with_the_demos_node_type_and_deviations(
    hosts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _init(hosts, tmp_path, monkeypatch=monkeypatch) == 0
    assert "CLUSTERACCEPT_HOST_PROFILE" not in os.environ  # given to the probes only while they ran
    out = capsys.readouterr().out
    path = tmp_path / "site" / "demo-init.yaml"
    site = parse_site(path, yaml.safe_load(path.read_text()))
    demo = load_site("demo", REPO_ROOT / "site-configs")
    assert site.slurm.executor == "local" and site.nodes == demo.nodes
    ((got,), (want,)) = site.node_types, demo.node_types
    assert [(r.gpu, r.hca, r.netdev, r.rate_Gbps) for r in got.rails] == [
        (r.gpu, r.hca, r.netdev, r.rate_Gbps) for r in want.rails
    ]
    assert (
        "init: node type h100: 4 node(s), 8x NVIDIA H100 80GB HBM3, NICs: 8x InfiniBand (MT4129 InfiniBand), "
        "8 rails" in out
    )
    beside = (tmp_path / "site" / "demo-init.deviations.txt").read_text().splitlines()
    assert [line.split()[:3] for line in beside[1:]] == [
        ["node1", "h100", "gpu6.pcie"], ["node2", "h100", "mlx5_3.numa"], ["node2", "h100", "rail.gpu3"]
    ]  # fmt: skip
    (run,) = (tmp_path / "reports" / "demo-init").glob("init-*")
    assert list((run / "raw").rglob("*.jsonl.gz")), "the evidence is archived before it is read"
    assert (run / "demo-init.yaml").read_text() == path.read_text()


def test_init_never_overwrites_a_site_file_it_shows_the_diff(
    hosts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _init(hosts, tmp_path, monkeypatch=monkeypatch) == 0
    path = tmp_path / "site" / "demo-init.yaml"
    assert _init(hosts, tmp_path, monkeypatch=monkeypatch) == 0
    assert capsys.readouterr().out.rstrip().endswith(f"init: {path} is unchanged")
    edited = path.read_text().replace("rate_Gbps: 400}", "rate_Gbps: 200}", 1)
    path.write_text(edited)
    assert _init(hosts, tmp_path, monkeypatch=monkeypatch) == 1
    out = capsys.readouterr().out
    assert (
        "-      gpu0: {hca: mlx5_0, netdev: ibp24s0, rate_Gbps: 200}  # PIX\n"
        "+      gpu0: {hca: mlx5_0, netdev: ibp24s0, rate_Gbps: 400}  # PIX" in out
    )
    assert "exists: the diff above" in out and path.read_text() == edited  # untouched
    assert _init(hosts, tmp_path, "--force", monkeypatch=monkeypatch) == 0
    assert "rate_Gbps: 200" not in path.read_text()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--nodes", "node[1-"], "init: --nodes: expected a hostlist like 'node[001-128]', got 'node[1-'"),
        (["--executor", "slurm"], "init: expected --partition P or --nodes HOSTLIST, got neither"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "--out", str(tmp_path / "x.yaml"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(said) and err.count("\n") == 1


def test_a_partition_sinfo_does_not_know_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_slurm: FakeSlurm
) -> None:
    fake_slurm.answer("sinfo", "")
    assert main(["init", "--out", str(tmp_path / "x.yaml"), "--partition", "nosuch"]) == 2
    assert capsys.readouterr().err == (
        "init: --partition nosuch: expected a partition with nodes, sinfo lists none\n"
    )


def test_nodes_with_no_gpu_are_said_and_none_answering_is_one_line(
    hosts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """node9 has no host profile: nvidia-smi is not found there."""
    monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)
    argv = ["init", "--executor", "local", "--nodes", "node9", "--out", str(tmp_path / "x.yaml")]
    argv += ["--env", f"CLUSTERACCEPT_HOST_PROFILE={hosts}", "--reports-dir", str(tmp_path / "reports")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "init: node9: expected GPUs, nvidia-smi listed none: left out of the node types" in captured.out
    assert captured.err.startswith("init: expected at least one node with GPUs to answer, got none of 1 (")
    assert not (tmp_path / "x.yaml").exists()


def test_dry_run_writes_the_probe_jobs_script_and_submits_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["init", "--nodes", "gpu[01-04]", "--partition", "gpu", "--account", "acct", "--out"]
    assert main([*argv, str(tmp_path / "c.yaml"), "--reports-dir", str(tmp_path / "r"), "--dry-run"]) == 0
    (run,) = (tmp_path / "r" / "c").glob("init-*")
    (script,) = (run / "jobs").glob("*.sbatch")
    text = script.read_text()
    assert "#SBATCH --nodelist='gpu[01-04]'" in text and "#SBATCH --exclusive" in text
    assert "#SBATCH --account=acct" in text and "#SBATCH --partition=gpu" in text
    assert not (run / "submitit").exists() and not (tmp_path / "c.yaml").exists()
    assert "init: dry run: the probe job's script is in" in capsys.readouterr().out


def test_sample_takes_n_nodes_per_hostname_pattern_and_feature_set(fake_slurm: FakeSlurm) -> None:
    from clusteraccept.ops.init import InitRequest, select_nodes

    listed = "gpu001|h100,ib\ngpu002|h100,ib\ngpu003|h100,ib\ngpu004|h200,ib\ngpu005|h200,ib\ncpu01|(null)\n"
    fake_slurm.answer("sinfo", listed)
    req = InitRequest(out=Path("x.yaml"), partition="all", sample=1)
    assert select_nodes(req) == ("gpu001", "gpu004", "cpu01")
    assert select_nodes(InitRequest(out=Path("x.yaml"), partition="all", sample=2)) == (
        "gpu001", "gpu002", "gpu004", "gpu005", "cpu01"
    )  # fmt: skip
    assert fake_slurm.calls[0][0] == ("sinfo", "-N", "-h", "-p", "all", "-o", "%N|%f")
