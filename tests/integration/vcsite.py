"""Site files of the integration tests, pointed at the session's virtual cluster, and what their runs left."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

from clusteraccept.jobs.archive import load_all
from clusteraccept.judge import record
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site
from clusteraccept.vcluster import ClusterInfo

REPO = Path(__file__).resolve().parents[2]


def make_site(info: Any, **slurm: Any) -> Site:
    """A one-rail site of the cluster's nodes for the job layer's own tests, ``slurm`` keys over these."""
    data = {
        "name": "vtest",
        "slurm": {
            "executor": "slurm",
            "partition": info.partition,
            "time_limit_min": 2,
            "step_timeout_s": 60,
            "slurm_conf": str(info.slurm_conf),
            "bin_dir": str(info.bin_dir),
            "python": str(info.python),
            **slurm,
        },
        "nodes": ",".join(info.nodes),
        "node_types": {"fake": {"gpus": 8, "rails": {"gpu0": {"hca": "mlx5_0"}}}},
    }
    return parse_site(Path("vtest.yaml"), data)


def demo_site_text(info: ClusterInfo, name: str = "demo") -> str:
    """site-configs/<name>.yaml (a demo site) pointed at this cluster: its slurm.conf, its clients and its
    nodes' python (the demo's are under .vcluster/demo/, the tests' cluster is elsewhere)."""
    text = (REPO / "site-configs" / f"{name}.yaml").read_text()
    assert "{repo}/.vcluster/demo/" in text
    return text.replace("{repo}/.vcluster/demo/", f"{info.state_dir}/")


def nccl_members(run: Path) -> set[str]:
    """The names of the run's archived nccl evidence (jobs/archive.py: members of raw/'s bundles)."""
    return {m for _, ref in load_all(run) if (m := ref.split("#", 1)[-1]).startswith("nccl/")}


def write_site(vcluster: Any, tmp: Path, faults: list[str], name: str = "site.yaml") -> Path:
    """The demo site on this cluster, its simulated hardware under ``tmp``, with ``faults`` only."""
    text = demo_site_text(vcluster)
    text = text.replace("{repo}/.vcluster/sim/demo", str(tmp / "sim"))
    text = text.replace("block_collectives: [all_reduce, alltoall]", "block_collectives: [all_reduce]")
    text = re.sub(r"sim:\n  faults:\n(    - .*\n)+", "sim:\n  faults: [" + ", ".join(faults) + "]\n", text)
    text += f"""
nightly:
  reports_dir: "{tmp / "reports"}"
  schedule: "15 3 * * *"
  summary_file: "{tmp / "summary.txt"}"
  pytest_args: ["-m", "nccl", "-p", "no:randomly"]
  scron_options: ["--partition={vcluster.service_partition or vcluster.partition}"]
drain:
  max_fraction: 0.5
"""
    path = tmp / name
    path.write_text(text)
    return path


def nccl_run_argv(site: Path, reports: Path) -> list[str]:
    """``pytest suites/`` of ``site`` into ``reports``, the campaigns only (-m nccl, for time); a
    ``--resume=RUN`` goes after the first five words."""
    return [sys.executable, "-m", "pytest", "suites/", f"--site={site}", f"--reports-dir={reports}", "-q",
            "-p", "no:randomly", "-m", "nccl"]  # fmt: skip


def wait_for_spooled_step(reports: Path, timeout_s: float = 240) -> bool:
    """Wait until a campaign of the run has spooled a finished step (some evidence came back, not all);
    False when none has within ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if any(reports.glob("*/*/spool/campaign-*/*.json")):
            return True
        time.sleep(0.2)
    return False


def runs(reports: Path, site: str = "demo") -> list[Path]:
    return sorted(p for p in (reports / site).iterdir() if p.name != "latest" and p.is_dir())


def why(reports: Path, limit: int = 12) -> str:
    """The newest run's job states and its first failed or errored verdicts with their messages (for an
    assertion message: the summary line names checks, not what went wrong in them)."""
    try:
        doc = record.load(runs(reports)[-1])
    except (OSError, IndexError, ValueError) as exc:
        return f"(no results.json: {exc})"
    jobs = ", ".join(f"{j['name']}={j['state']}" for j in doc.get("jobs", []))
    # errors first: one ERROR makes the run INCOMPLETE, and a dozen FAILs would hide it
    bad = [v for v in doc.get("verdicts", []) if v["outcome"] == "error"]
    bad += [v for v in doc.get("verdicts", []) if v["outcome"] == "fail"]
    lines = [f"{v['outcome']} {v['check']}[{v['subject']}]: {v['message'][:300]}" for v in bad[:limit]]
    return f"jobs: {jobs}\n" + "\n".join(lines)
