"""--dry-run renders every sbatch script (submitit's own text) and step line; golden files pin them.

Re-record after an intended change with
    CLUSTERACCEPT_RERECORD=1 .venv/bin/pytest tests/unit/test_dryrun_golden.py
then review the diff of tests/golden/ before committing it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from clusteraccept.flow import Request, execute
from clusteraccept.jobs import slurm_clients
from clusteraccept.plan.limits import ClusterLimits
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RERECORD = os.environ.get("CLUSTERACCEPT_RERECORD") == "1"


def _normalize(text: str, run_dir: Path) -> str:
    return (
        text.replace(str(run_dir), "<RUN_DIR>")
        .replace(sys.executable, "<PYTHON>")
        .replace(str(REPO_ROOT), "<REPO>")
    )


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The golden scripts are the site's alone: whatever Slurm this machine runs is not asked."""
    monkeypatch.setattr(slurm_clients, "cluster_limits", lambda site: ClusterLimits(source="golden"))


@pytest.mark.parametrize(
    "site_name",
    [
        "example-h100-ib",
        "example-roce",
        "example-gb200-nvl72",
        "example-efa",
        "example-slingshot",
        "example-tcpx",
        "example-tcpxo",
        "demo",
    ],
)
def test_dry_run_scripts_match_golden(tmp_path: Path, site_name: str) -> None:
    site = load_site(site_name, REPO_ROOT / "site-configs")
    run_dir = tmp_path / "run"
    (run_dir / "raw").mkdir(parents=True)
    # the NVL72 racks' scripts hold their domain all_reduce (family nvlink, NCCL_MNNVL_ENABLE=1) too
    families = ("topology", "nvlink", "sharp") if site.nvlink_domains else ("topology", "sharp")
    results = execute(Request(site=site, run_dir=run_dir, families=families, nccl=True, dry_run=True))
    assert {j["state"] for j in results["jobs"]} == {"DRY_RUN"}
    assert not (run_dir / "submitit").exists() or not any((run_dir / "submitit").rglob("*.pkl"))
    produced = sorted((run_dir / "jobs").iterdir())
    assert [p.name for p in produced][:1] == ["campaign-cross.sbatch"]
    golden_dir = GOLDEN / site_name
    for path in produced:
        text = _normalize(path.read_text(), run_dir)
        golden = golden_dir / path.name
        if RERECORD:
            golden_dir.mkdir(parents=True, exist_ok=True)
            golden.write_text(text)
            continue
        assert golden.exists(), (
            f"no golden file {golden}; record with CLUSTERACCEPT_RERECORD=1 (see module doc)"
        )
        assert text == golden.read_text(), (
            f"{path.name} differs from {golden}; if the change is intended, re-record with "
            "CLUSTERACCEPT_RERECORD=1 .venv/bin/pytest tests/unit/test_dryrun_golden.py and review the diff"
        )
    if not RERECORD:
        assert sorted(p.name for p in golden_dir.iterdir()) == [p.name for p in produced]


def test_probe_script_has_site_access() -> None:
    text = (GOLDEN / "example-h100-ib" / "probe-nodes.sbatch").read_text()
    for line in (
        "#SBATCH --partition=gpu",
        "#SBATCH --account=acceptance",
        "#SBATCH --qos=high",
        "#SBATCH --reservation=bringup",
        "#SBATCH --exclusive",
        "#SBATCH --nodes=32",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --no-kill",
        "#SBATCH --time=30",  # plan/limits.PROBE_TIME_MIN
        "module load cuda/12.4 nccl/2.21.5",
        "export NCCL_DEBUG=INFO",
        "/shared/clusteraccept/.venv/bin/python -u -m submitit.core._submit",
    ):
        assert line in text, line
    campaign = (GOLDEN / "example-h100-ib" / "campaign-su1.sbatch").read_text()
    assert "srun --unbuffered" not in campaign  # the driver launches its own steps
    steps = (GOLDEN / "example-h100-ib" / "campaign-su1.steps.sh").read_text()
    assert "-w gpu001,gpu016" in steps and "NCCL_IB_HCA==mlx5_11:1" in steps
