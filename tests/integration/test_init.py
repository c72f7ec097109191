"""``python -m clusteraccept init`` on the virtual cluster (issue 23): the topology probe job through Slurm on
the demo's simulated hosts writes a site whose node type and rail map are site-configs/demo.yaml's, and lists
as deviations exactly the demo's faults that change a node's shape (node1's GPU6 link at x8, node2's GPU3 NIC
on the other socket); peermem and ACS are node state, left to the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from vcsite import REPO, demo_site_text

from clusteraccept.sim.prepare import prepare
from clusteraccept.site.load import load_site, parse_site

pytestmark = pytest.mark.vcluster


def test_init_on_the_demo_cluster_writes_the_demos_node_type_and_its_shape_faults(
    vcluster: Any, tmp_path: Path
) -> None:
    text = demo_site_text(vcluster).replace("{repo}/.vcluster/sim/demo", str(tmp_path / "sim"))
    (tmp_path / "demo.yaml").write_text(text)
    demo = parse_site(tmp_path / "demo.yaml", yaml.safe_load(text))
    prepare(demo)  # the simulated hosts' recorded outputs, as a run of the demo writes them
    out = tmp_path / "site" / "demo-init.yaml"
    python = demo.slurm.python or sys.executable
    hosts = demo.env["CLUSTERACCEPT_HOST_PROFILE"]
    argv = [sys.executable, "-m", "clusteraccept", "init", "--partition", vcluster.partition,
            "--out", str(out), "--slurm-conf", str(vcluster.slurm_conf), "--python", python,
            "--env", f"CLUSTERACCEPT_HOST_PROFILE={hosts}",
            "--reports-dir", str(tmp_path / "reports")]  # fmt: skip
    if vcluster.bin_dir:
        argv += ["--bin-dir", str(vcluster.bin_dir)]
    proc = subprocess.run(argv, cwd=REPO, env={**os.environ, **vcluster.env}, capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    site = load_site(str(out), tmp_path)
    shipped = load_site("demo", REPO / "site-configs")
    ((got,), (want,)) = site.node_types, shipped.node_types
    assert (got.gpus, got.gpu_model, got.link_layer, got.numa_expected) == (
        want.gpus, want.gpu_model, want.link_layer, True
    )  # fmt: skip
    assert [(r.gpu, r.hca, r.port, r.netdev, r.rate_Gbps) for r in got.rails] == [
        (r.gpu, r.hca, r.port, r.netdev, r.rate_Gbps) for r in want.rails
    ]
    assert site.nodes == tuple(vcluster.nodes) and site.blocks_from_slurm  # topology/tree's leaf switches
    table = out.with_name("demo-init.deviations.txt").read_text().splitlines()
    assert [line.split()[:3] for line in table[1:]] == [
        ["node1", "h100", "gpu6.pcie"],
        ["node2", "h100", "mlx5_3.numa"],
        ["node2", "h100", "rail.gpu3"],
    ], proc.stdout[-3000:]
    (run,) = (tmp_path / "reports" / "demo-init").glob("init-*")
    assert list((run / "raw").rglob("*.jsonl.gz")) and (run / "jobs").iterdir()
