"""Two Slurm flavours of the virtual cluster and the MPI launch: the files they write, the site keys that
reach a step (slurm.mpi, slurm.bin_dir), and what the launch self-check says about singletons. Offline: the
real daemons, root and MPI are exercised by tests/integration."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from clusteraccept.checks.nccl_launch import launch_checks
from clusteraccept.errors import SiteConfigError
from clusteraccept.jobs.slurm_clients import export_client_env
from clusteraccept.jobs.submit import for_executor
from clusteraccept.parsers import nccl_tests
from clusteraccept.plan.commands import argv_shape
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim.fabric import fabric_from_dict
from clusteraccept.sim.nccl_tests import mpi_world
from clusteraccept.sim.nccl_tests_options import parse_args
from clusteraccept.sim.nccl_tests_output import render_run
from clusteraccept.site.load import parse_site
from clusteraccept.vcluster import config, flavour, root
from clusteraccept.vcluster.config import Layout
from clusteraccept.vcluster.netns import Net

REPO = Path(__file__).resolve().parents[2]


def _site(**slurm: object) -> object:
    return parse_site(
        Path("t.yaml"),
        {
            "name": "t",
            "slurm": {"partition": "gpu", **slurm},
            "nodes": "node[1-2]",
            "node_types": {"x": {"gpus": 2, "rails": {"gpu0": {"hca": "mlx5_0"}, "gpu1": {"hca": "mlx5_1"}}}},
            "nccl": {"pair_collectives": ["sendrecv"], "block_collectives": []},
        },
    )


# --- slurm.conf of each flavour ---------------------------------------------------------------------------
def test_24_11_conf_defaults_to_pmix_enables_scrontab_and_disables_cgroups(tmp_path: Path) -> None:
    lay, net = Layout(tmp_path), Net(3, 4)
    new = config.slurm_conf(lay, net, 8, "24.11")
    old = config.slurm_conf(lay, net, 8, "22.05")
    assert "MpiDefault=pmix\n" in new and "MpiDefault=none\n" in old
    assert "ScronParameters=enable\n" in new and "ScronParameters" not in old
    assert "MpiDefault=none\n" in config.slurm_conf(lay, net, 8, "24.11", mpi_default="none")
    config.write_all(lay, net, 8, "24.11")
    assert (lay.etc / "cgroup.conf").read_text() == "CgroupPlugin=disabled\n"
    assert "PMIxDirectConnEarly=true" in (lay.etc / "mpi.conf").read_text()
    assert "SlurmdSpoolDir=/var/spool/slurmd\n" in (lay.etc / "slurm.conf").read_text()  # same on every node
    config.write_all(lay, net, 8, "22.05")
    assert not (lay.etc / "cgroup.conf").exists()  # 22.05 needs none, and a 24.11 one would be stale
    assert not (lay.etc / "mpi.conf").exists()
    assert f"SlurmdSpoolDir={lay.spool}/%n\n" in (lay.etc / "slurm.conf").read_text()


def test_block_topology_names_the_same_halves_as_blocks() -> None:
    assert config.topology_conf(4, "block") == (
        "BlockName=leaf1 Nodes=node[1-2]\nBlockName=leaf2 Nodes=node[3-4]\nBlockSizes=2,4\n"
    )
    assert config.topology_conf(4) == (
        "SwitchName=leaf1 Nodes=node[1-2]\nSwitchName=leaf2 Nodes=node[3-4]\n"
        "SwitchName=spine Switches=leaf1,leaf2\n"
    )
    conf = config.slurm_conf(Layout(Path("/x")), Net(0, 4), 8, "24.11", "block")
    assert "TopologyPlugin=topology/block" in conf


# --- the files that make the machine use the 24.11 root ---------------------------------------------------
def _fake_root(tmp_path: Path) -> root.Root:
    return root.Root(tmp_path / "roots" / "slurm-24.11", {"suite": "trixie"})


def test_24_11_writes_a_wrapper_per_client_and_the_nodes_python(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "state")
    r = _fake_root(tmp_path)
    flavour.write_files(lay, flavour.Flavour("24.11", r))
    assert sorted(p.name for p in lay.bin.iterdir()) == sorted([".enter-root", *flavour.CLIENTS])
    sbatch = (lay.bin / "sbatch").read_text()
    # On a node (inside the root) the wrapper is the root's own client; elsewhere it enters the root first.
    assert f"if [ -e /{root.MANIFEST} ]; then exec /usr/bin/sbatch" in sbatch
    assert f"unshare --mount --propagation slave -- {lay.bin}/.enter-root /usr/bin/sbatch" in sbatch
    enter = (lay.bin / ".enter-root").read_text()
    assert f"R={r.path}" in enter
    for path in flavour.binds(lay):
        assert f'mount --bind {shlex.quote(str(path))} "$R"{shlex.quote(str(path))}' in enter
    assert f'mount --bind {lay.hosts} "$R/etc/hosts"' in enter
    python = lay.node_python.read_text()
    assert f"PYTHONPATH={REPO / 'src'}:{root.LIB}" in python and "exec /usr/bin/python3" in python
    assert all(os.access(p, os.X_OK) for p in lay.bin.iterdir())


def test_22_05_has_no_wrappers_and_the_nodes_python_is_this_one(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "state")
    flavour.write_files(lay, flavour.Flavour("24.11", _fake_root(tmp_path)))
    flavour.write_files(lay, flavour.Flavour("22.05", None))  # a switch back removes the 24.11 wrappers
    assert list(lay.bin.iterdir()) == []
    argv = [str(lay.node_python), "-c", "import sys; print(sys.executable)"]
    out = subprocess.run(argv, capture_output=True, check=True)
    assert out.stdout.decode().strip() == sys.executable


def test_binds_drop_a_folder_inside_another(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(flavour.SHARED_ENV, f"/srv/x:{REPO}/reports")
    got = flavour.binds(Layout(REPO / ".vcluster" / "test"))
    assert sorted(got) == sorted([Path("/srv/x"), REPO])


def test_a_slurmd_gets_a_tmp_of_its_own_and_clients_the_hosts(tmp_path: Path) -> None:
    lay = Layout(tmp_path / "state")
    fl = flavour.Flavour("24.11", _fake_root(tmp_path))
    enter = str(lay.bin / ".enter-root")
    assert fl.prefix(lay, "node2") == [enter, "--node", str(lay.run / "nodes" / "node2")]
    assert fl.prefix(lay) == [str(lay.bin / ".enter-root")]
    assert flavour.Flavour("22.05", None).prefix(lay, "node2") == []


# --- the root's cache ---------------------------------------------------------------------------------------
def test_root_of_another_spec_or_missing_a_daemon_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "slurm-24.11"
    for rel in root._REQUIRED:
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text("")
    assert root.load(path) is None  # no manifest
    (path / root.MANIFEST).write_text(json.dumps({"spec_hash": root._spec_hash(root.spec())}))
    assert root.load(path) is not None
    (path / root.MANIFEST).write_text(json.dumps({"spec_hash": "0" * 16}))
    assert root.load(path) is None  # built from another package list, format or pins
    (path / root.MANIFEST).write_text(json.dumps({"spec_hash": root._spec_hash(root.spec())}))
    (path / "usr/sbin/slurmd").unlink()
    assert root.load(path) is None


def test_node_packages_are_pinned_to_this_virtualenv() -> None:
    reqs = root.runtime_requirements()
    import submitit

    assert f"submitit=={submitit.__version__}" in reqs
    assert any(r.startswith("cloudpickle==") for r in reqs)  # pickles cross between the two Pythons
    assert not any(r.startswith("python-hostlist") for r in reqs)  # no wheel: Debian's package instead


def test_mirror_is_read_from_apt_sources() -> None:
    deb822 = "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\n\n"
    deb822 += "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm\n"
    assert root.mirror([deb822]) == "http://mirror.example/debian"
    assert (
        root.mirror(["# x\ndeb [arch=amd64] http://m.example/debian bookworm main\n"])
        == "http://m.example/debian"
    )
    assert root.mirror([]) == "http://deb.debian.org/debian"


# --- site keys ----------------------------------------------------------------------------------------
def test_slurm_mpi_goes_on_every_nccl_tests_step_and_nowhere_else() -> None:
    site = _site(mpi="pmix")
    steps = make_plan(site).steps()
    assert steps and all("--mpi=pmix" in s.argv for s in steps)
    assert all(not any(a.startswith("--mpi") for a in s.argv) for s in make_plan(_site()).steps())


def test_slurm_mpi_must_be_a_plugin_name() -> None:
    with pytest.raises(SiteConfigError, match=r"slurm\.mpi.*srun --mpi=list"):
        _site(mpi="--pmix")


def test_bin_dir_goes_first_on_path_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    site = _site(bin_dir="/opt/slurm/bin", slurm_conf="/opt/slurm/etc/slurm.conf")
    export_client_env(site)  # type: ignore[arg-type]
    export_client_env(site)  # type: ignore[arg-type]
    assert os.environ["PATH"] == "/opt/slurm/bin:/usr/bin:/bin"
    assert os.environ["SLURM_CONF"] == "/opt/slurm/etc/slurm.conf"


def test_the_local_executor_runs_on_this_machine_with_this_python() -> None:
    site = _site(python="/cluster/venv/bin/python", bin_dir="/opt/slurm/bin")
    local = for_executor(site, "local")  # type: ignore[arg-type]
    assert (local.slurm.python, local.slurm.bin_dir) == (None, None)
    assert for_executor(site, None) is site  # type: ignore[arg-type]


def test_argv_shape_without_mpi_is_the_golden_shape() -> None:
    site = _site()
    a = argv_shape(("b",), 1, 2, 1, site.nccl, 10)  # type: ignore[attr-defined]
    b = argv_shape(("b",), 1, 2, 1, site.nccl, 10, None)  # type: ignore[attr-defined]
    assert a == b and "--mpi" not in " ".join(a[0])


# --- singletons: what the launch self-check says ------------------------------------------------------------
def _two_singletons() -> str:
    fab = fabric_from_dict({"defaults": {"gpus": 8, "rails": ["mlx5_0"]}})
    opts = parse_args(["-b", "1G", "-e", "1G", "-g", "1"])
    assert not isinstance(opts, str)
    runs = [render_run("sendrecv_perf", opts, fab, [h], [1], {}, pids=(4242,))[0] for h in ("node1", "node2")]
    return "".join(runs)


@pytest.mark.parametrize(
    ("mpi", "says"),
    [
        (None, "srun started 2 singleton processes instead of one 2-rank job: set slurm.mpi (see `srun"),
        ("none", "srun --mpi=none started 2 singleton processes instead of one 2-rank job: set slurm.mpi"),
        ("pmix", "2 separate runs in one output with --mpi=pmix: each task ran alone (nccl-tests built"),
    ],
)
def test_singletons_are_named_by_how_the_step_was_launched(mpi: str | None, says: str) -> None:
    result = nccl_tests.parse(_two_singletons())
    assert result.runs == 2
    (finding,) = [f for f in launch_checks(result, expected_nranks=2, mpi=mpi) if f.name == "multi_rank"]
    assert not finding.ok and finding.message.startswith(says)


def test_rank_lines_carry_the_pids_mpi_gave() -> None:
    fab = fabric_from_dict({"defaults": {"gpus": 8, "rails": ["mlx5_0"]}})
    opts = parse_args(["-b", "1G", "-e", "1G", "-g", "1"])
    assert not isinstance(opts, str)
    text = render_run("sendrecv_perf", opts, fab, ["node1", "node2"], [1, 1], {}, pids=(111, 222))[0]
    result = nccl_tests.parse(text)
    assert [(r.rank, r.pid, r.host) for r in result.ranks] == [(0, 111, "node1"), (1, 222, "node2")]


def test_mpi_world_can_be_turned_off() -> None:
    assert mpi_world({"CLUSTERACCEPT_SIM_MPI": "0"}) is None


# --- blocks: slurm on a rail-optimized tree -----------------------------------------------------------
def test_a_node_under_several_leaf_switches_is_in_one_block_only(fake_slurm: object) -> None:
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    # a rail-optimized topology.conf lists every node under the leaf of each of its rails
    fake_slurm.answer(  # type: ignore[attr-defined]
        "scontrol",
        "SwitchName=rail0 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
        "SwitchName=rail1 Level=0 LinkSpeed=1 Nodes=node[1-2]\n"
        "SwitchName=spine Level=1 LinkSpeed=1 Nodes=node[1-2] Switches=rail[0-1]\n",
    )
    blocks = slurm_blocks(_site())  # type: ignore[arg-type]
    assert blocks == {"rail0": ("node1", "node2")}
