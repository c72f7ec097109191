"""Site files of the integration tests, pointed at the session's virtual cluster."""

from __future__ import annotations

from pathlib import Path

from clusteraccept.vcluster import ClusterInfo

REPO = Path(__file__).resolve().parents[2]


def demo_site_text(info: ClusterInfo, name: str = "demo") -> str:
    """site-configs/<name>.yaml (a demo site) pointed at this cluster: its slurm.conf, its clients and its
    nodes' python (the demo's are under .vcluster/demo/, the tests' cluster is elsewhere)."""
    text = (REPO / "site-configs" / f"{name}.yaml").read_text()
    assert "{repo}/.vcluster/demo/" in text
    return text.replace("{repo}/.vcluster/demo/", f"{info.state_dir}/")
