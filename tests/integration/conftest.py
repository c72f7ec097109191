"""Integration tests run against the virtual Slurm cluster (clusteraccept.vcluster): root + Debian's Slurm.

The session fixture ``vcluster`` brings the cluster up in ``<repo>/.vcluster/test`` (reusing a healthy one,
rebuilding stale state from an earlier session) and down at the end of the session. It runs the Slurm that
$CLUSTERACCEPT_VCLUSTER_SLURM names (24.11 by default, the Debian 13 root; 22.05 the host's packages, where
tools/test runs the ``smoke`` subset); set
CLUSTERACCEPT_VCLUSTER_KEEP=1 to leave it up for the next run (under pytest-xdist it is always left up:
the workers share one cluster, and none of them knows it is the last).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusteraccept.vcluster import ClusterInfo, InstallError, daemons, down, status, up
from clusteraccept.vcluster.cluster import cancel_jobs
from clusteraccept.vcluster.config import Layout
from clusteraccept.vcluster.flavour import DEFAULT
from clusteraccept.vcluster.record import load
from clusteraccept.vcluster.start import client_env, node_states, nodes_idle

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = REPO / ".vcluster" / "test"
KEEP_ENV = "CLUSTERACCEPT_VCLUSTER_KEEP"
SLURM = os.environ.get("CLUSTERACCEPT_VCLUSTER_SLURM", DEFAULT)
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
    shutil.rmtree(STATE_DIR / "shared" / "tmp", ignore_errors=True)  # the last session's tmp_path folders
    try:
        info = up(STATE_DIR, n_nodes=4, gpus_per_node=8, slurm=SLURM)
    except InstallError as exc:
        unavailable(f"Slurm cannot be installed here: {exc}")
        raise
    how = "reused" if info.reused else "up"
    print(f"\nvcluster: Slurm {info.slurm} {how} in {info.up_s:.2f} s ({info.slurm_conf})")
    # Every client a test starts, and submitit's, is this cluster's: slurm.conf, clients first on PATH.
    saved = {k: os.environ.get(k) for k in info.env}
    os.environ.update(info.env)
    try:
        yield info
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        # Under pytest-xdist every worker has this fixture: the first to finish would stop the cluster
        # under the others, so workers leave it up (the next session reuses or rebuilds it).
        if os.environ.get(KEEP_ENV) != "1" and "PYTEST_XDIST_WORKER" not in os.environ:
            for note in down(STATE_DIR):
                print(f"vcluster down: {note}")


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest) -> Path:
    """A fresh folder the nodes see too: under the cluster's shared dir, not /tmp (the 24.11 nodes have a
    /tmp of their own, as real nodes do: vcluster/flavour.node_dir)."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    path = STATE_DIR / "shared" / "tmp" / f"{name}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


# Lines of the daemons' logs that say nothing about a failure (no MPI plugin in this setup).
_NOISE = ("pmix", "MPI: Cannot create context", "Couldn't load specified plugin")


def _run(argv: list[str], env: dict[str, str]) -> str:
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"$ {' '.join(argv)}: {exc}"
    return f"$ {' '.join(argv)} (rc {out.returncode})\n{out.stdout}{out.stderr}".rstrip()


def diagnose(state_dir: Path = STATE_DIR, log_lines: int = 12) -> str:
    """What the cluster looks like now, compactly: which daemons are alive, what Slurm thinks of each node
    (state and reason; ``*`` = not responding), what is queued, the last log lines that are not noise, and
    any kernel report of a crash or an OOM kill. Attached to every failed integration test: a cluster that
    broke on the CI machine must say how, since its state is gone with the machine."""
    env = {**os.environ, **client_env(Layout(state_dir.resolve()))}
    parts = [status(state_dir)]
    parts.append(_run(["sinfo", "-N", "-h", "-o", "%N %T %E"], env))
    parts.append(_run(["squeue", "-h", "-o", "%i %j %T %M %R"], env))
    for log in sorted((state_dir / "logs").glob("slurm*.log")):
        try:
            lines = [
                ln for ln in log.read_text(errors="replace").splitlines() if not any(n in ln for n in _NOISE)
            ]
        except OSError as exc:
            lines = [str(exc)]
        parts.append(f"--- {log.name} (last {log_lines} lines)\n" + "\n".join(lines[-log_lines:]))
    kernel = _run(["dmesg"], env)
    crashes = [
        ln
        for ln in kernel.splitlines()
        if any(w in ln.lower() for w in ("segfault", "oom", "killed process", "traps:"))
    ]
    parts.append("--- kernel: " + ("\n".join(crashes[-8:]) if crashes else "no segfault/OOM report"))
    return "\n".join(parts)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.failed and "vcluster" in getattr(item, "fixturenames", ()) and (STATE_DIR / "etc").exists():
        report.sections.append(("virtual cluster at the failure", diagnose()))


def _settled(info: ClusterInfo, timeout_s: float = 60.0) -> str | None:
    """Wait until no job of an earlier test is left and every node is idle and answering; None, else what
    is not. Jobs left behind are cancelled, nodes an earlier test set DOWN or DRAIN are resumed; a dead
    daemon is reported at once (waiting does not mend it); a node that does not answer (``*``) has until
    the timeout to come back."""
    lay = Layout(info.state_dir.resolve())
    rec = load(lay)
    procs = rec.procs if rec else ()
    dead = [p.name for p in procs if not daemons.running(p)]
    if dead:
        return f"daemon(s) dead: {', '.join(dead)}"
    cancel_jobs(lay)
    for node, state in (node_states(lay) or {}).items():
        if state.startswith(("down", "drain", "drng")) and not state.endswith("*"):
            subprocess.run(
                ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
                env=client_env(lay),
                cwd=lay.root,
                check=False,
                timeout=10,
            )
    try:
        daemons.wait_until("every node idle", lambda: nodes_idle(lay, list(info.nodes)), timeout_s, procs)
    except (TimeoutError, RuntimeError) as exc:
        return f"{exc}; nodes: {node_states(lay)}"
    return None


@pytest.fixture(autouse=True)
def _fresh_cluster_state(request: pytest.FixtureRequest) -> None:
    """Every integration test starts on an idle cluster whose daemons all answer. One that finds jobs an
    earlier test left behind cancels them; one that finds a daemon dead or a node not responding says so
    (a warning with the diagnosis, kept in the session summary) and rebuilds the cluster, so one broken
    daemon fails the test that broke it, not every test after it."""
    if "vcluster" not in request.fixturenames:
        return
    info: ClusterInfo = request.getfixturevalue("vcluster")
    problem = _settled(info)
    if problem is None:
        return
    diagnosis = diagnose()
    warnings.warn(
        f"virtual cluster not usable before {request.node.nodeid} ({problem}); rebuilding\n{diagnosis}",
        stacklevel=2,
    )
    again = up(STATE_DIR, n_nodes=len(info.nodes), gpus_per_node=info.gpus_per_node, slurm=info.slurm)
    if again.slurm_conf != info.slurm_conf or _settled(again, 30.0) is not None:
        pytest.fail(f"virtual cluster could not be rebuilt for this test:\n{diagnose()}")
