"""Integration tests run against the virtual Slurm cluster (clusteraccept.vcluster): root + Debian's Slurm.

The session fixture ``vcluster`` brings the cluster up in ``<repo>/.vcluster/test`` (reusing a healthy one,
rebuilding stale state from an earlier session) and down at the end of the session; set
CLUSTERACCEPT_VCLUSTER_KEEP=1 to leave it up for the next run (under pytest-xdist it is always left up:
the workers share one cluster, and none of them knows it is the last).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusteraccept.vcluster import ClusterInfo, InstallError, down, up

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = REPO / ".vcluster" / "test"
KEEP_ENV = "CLUSTERACCEPT_VCLUSTER_KEEP"
_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test under tests/integration needs the cluster: mark them all, whatever their module says.
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.vcluster)


@pytest.fixture(scope="session")
def vcluster() -> Iterator[ClusterInfo]:
    """A running 4-node, 8-GPU-per-node virtual cluster; os.environ['SLURM_CONF'] points at it."""
    # CI (tools/test as root) sets CLUSTERACCEPT_REQUIRE_VCLUSTER=1: there a missing cluster is a failure,
    # never a quiet skip.
    unavailable = pytest.fail if os.environ.get("CLUSTERACCEPT_REQUIRE_VCLUSTER") == "1" else pytest.skip
    if os.geteuid() != 0:
        unavailable("the virtual Slurm cluster needs root (network namespaces, bridge, bind mounts)")
    if shutil.which("nsenter") is None or shutil.which("ip") is None:
        unavailable("the virtual Slurm cluster needs nsenter and iproute2")
    try:
        info = up(STATE_DIR, n_nodes=4, gpus_per_node=8)
    except InstallError as exc:
        unavailable(f"Slurm cannot be installed here: {exc}")
        raise
    print(f"\nvcluster: {'reused' if info.reused else 'up'} in {info.up_s:.2f} s ({info.slurm_conf})")
    saved = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(info.slurm_conf)
    try:
        yield info
    finally:
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        # Under pytest-xdist every worker has this fixture: the first to finish would stop the cluster
        # under the others, so workers leave it up (the next session reuses or rebuilds it).
        if os.environ.get(KEEP_ENV) != "1" and "PYTEST_XDIST_WORKER" not in os.environ:
            for note in down(STATE_DIR):
                print(f"vcluster down: {note}")
