"""The fault matrix's rows about the run itself (docs/faults.md): a node that comes back rebooted or
re-imaged with another identity between the jobs of a run, and two runs of one site at once (the nightly
entry's command and a manual run). On the virtual cluster, -m nccl: the campaigns only, for time."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vcsite import nccl_run_argv, runs, why, write_site

from clusteraccept.jobs import archive
from clusteraccept.judge import record
from clusteraccept.report.model import banner

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.vcluster
NEW_BOOT = "0b9e7d3c-1a2f-4e5d-8c6b-7a9f0e1d2c33"  # any UUID other than the simulated node's
NEW_KERNEL = "5.15.0-140-generic"


def _slurm(vcluster: Any, *argv: str) -> str:
    proc = subprocess.run(
        argv, env={**os.environ, **vcluster.env}, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 0, f"{argv}: {proc.stderr}"
    return proc.stdout


def _queue(vcluster: Any) -> dict[str, str]:
    """The run's jobs in squeue: ``campaign-leaf2`` -> its state, and ``<name>:id`` -> its job id."""
    out: dict[str, str] = {}
    for line in _slurm(vcluster, "squeue", "-h", "-o", "%i %j %T").splitlines():
        job_id, name, state = line.split()
        short = name.removeprefix("clusteraccept-")
        out[short], out[f"{short}:id"] = state, job_id
    return out


def _wait_for(vcluster: Any, until: Callable[[dict[str, str]], bool], timeout_s: float = 300) -> str:
    """Poll squeue until ``until(queue)``; the id of campaign-cross (the job the test holds)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        queue = _queue(vcluster)
        if until(queue):
            return queue.get("campaign-cross:id", "")
        time.sleep(0.2)
    raise AssertionError(f"squeue never showed what the test waits for: {_queue(vcluster)}")


def _leaf2_runs_and_cross_waits(queue: dict[str, str]) -> bool:
    return queue.get("campaign-leaf2") == "RUNNING" and queue.get("campaign-cross") == "PENDING"


def _whole(doc: dict[str, Any]) -> None:
    """Nothing lost: every job COMPLETED with nothing missing, every evidence a verdict cites is there."""
    assert all(j["state"] == "COMPLETED" and not j["missing"] for j in doc["jobs"]), doc["jobs"]


def test_a_node_back_with_another_identity_mid_run_is_not_accepted_and_says_where_each_was_seen(
    vcluster: Any, tmp_path: Path
) -> None:
    """node3 "reboots into a new kernel" between campaign-leaf2 and campaign-cross: cross is held until
    leaf2 has ended, node3's simulated boot id and kernel release change, cross is released. Every family's
    item of node3 is an ERROR naming both identities and the jobs that saw each; node4, in the same jobs,
    is not; the run is INCOMPLETE, nothing is lost."""
    site = write_site(vcluster, tmp_path, [])
    reports = tmp_path / "reports"
    kernel = tmp_path / "sim" / "hosts" / "node3" / "fs" / "proc" / "sys" / "kernel"
    with subprocess.Popen(
        nccl_run_argv(site, reports), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        try:
            cross = _wait_for(vcluster, _leaf2_runs_and_cross_waits)
            _slurm(vcluster, "scontrol", "hold", cross)  # it pends behind leaf1 and leaf2 (all four nodes)
            try:
                _wait_for(vcluster, lambda q: "campaign-leaf2" not in q)
                old_boot = (kernel / "random" / "boot_id").read_text().strip()
                (kernel / "random" / "boot_id").write_text(NEW_BOOT + "\n")
                (kernel / "osrelease").write_text(NEW_KERNEL + "\n")
            finally:
                _slurm(vcluster, "scontrol", "release", cross)
            out, _ = proc.communicate(timeout=900)
        except BaseException:
            proc.kill()
            raise
    assert proc.returncode == 1, out[-3000:]
    (run,) = runs(reports)
    doc = record.load(run)
    _whole(doc)
    same = [v for v in doc["verdicts"] if v["check"].endswith(".same_node")]
    assert [(v["check"], v["subject"], v["outcome"]) for v in same] == [("nccl.same_node", "node3", "error")]
    message = same[0]["message"]
    assert f"boot_id {old_boot[:8]}" in message and f"boot_id {NEW_BOOT[:8]}" in message, message
    assert f"kernel '{NEW_KERNEL}' in campaign-cross" in message, message
    assert "in campaign-leaf2" in message.split(";")[0], message  # leaf2 saw it first, as it was
    assert same[0]["labels"]["node_changed"] == "boot_id,kernel"
    for ref in same[0]["evidence"]:  # each identity's first evidence resolves
        archive.read(run, ref)
    assert doc["fingerprint"]["changed_mid_run"] == ["node3"]
    assert banner(doc).verdict == "INCOMPLETE", why(reports)
    assert "ERROR: nccl.same_node: not tested as one node: node3" in out, out[-3000:]


def test_the_nightly_and_a_manual_run_of_one_site_at_once_both_end_whole(
    vcluster: Any, tmp_path: Path
) -> None:
    """The nightly entry's command (what Slurm's cron starts) and an engineer's run of the same site at the
    same moment, into one reports dir: each gets its own run directory, their jobs share the nodes through
    Slurm, both end whole and clean, both land in history.sqlite, and `latest` is the one that started
    last (rundir.make_run_dir)."""
    site = write_site(vcluster, tmp_path, [])
    reports = tmp_path / "reports"
    nightly = [sys.executable, "-m", "clusteraccept", "nightly", "--site", str(site)]
    pipe = {"cwd": REPO, "stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    with (
        subprocess.Popen(nightly, **pipe) as night,  # type: ignore[call-overload]
        subprocess.Popen(nccl_run_argv(site, reports), **pipe) as manual,  # type: ignore[call-overload]
    ):
        try:
            outs = [p.communicate(timeout=1200)[0] for p in (night, manual)]
        except BaseException:
            night.kill()
            manual.kill()
            raise
    assert [night.returncode, manual.returncode] == [0, 0], [o[-2000:] for o in outs] + [why(reports)]
    both = runs(reports)
    assert len(both) == 2, both
    docs = [record.load(r) for r in both]
    for doc in docs:
        _whole(doc)
        assert not [v for v in doc["verdicts"] if v["outcome"] in ("fail", "error")], why(reports)
        assert banner(doc).reasons == ("check families not run: topology, nvlink, gpudirect",), banner(doc)
    with sqlite3.connect(reports / "demo" / "history.sqlite") as con:
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)
    latest = (reports / "demo" / "latest").resolve()
    assert latest in [r.resolve() for r in both]
    started = sorted((d["started"], r.resolve()) for d, r in zip(docs, both, strict=True))
    if started[0][0] != started[1][0]:  # one second apart or more: the later one
        assert latest == started[1][1], started
    assert ": OK: " in (tmp_path / "summary.txt").read_text()
