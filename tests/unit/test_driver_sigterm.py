"""SIGTERM to a campaign driver (Slurm ending its job: scancel, its --time): the driver starts nothing more,
marks the failed steps of the wave in flight ``job_ending`` and raises, so the job's evidence is read from
its spool, where jobs/spool.mark_killed reports those steps as not tested (jobs/node_entry.py)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.jobs.node_entry import JobEnding, drive_campaign
from clusteraccept.jobs.spool import mark_killed, read_spool
from clusteraccept.plan.jobs import CampaignJob, Round, Step


def _step(subject: str, script: str) -> Step:
    return Step("pair", "pair_in_block", "sendrecv", ("a", "b"), 0, subject, shape=("sh", "-c", script))


def _sigterm_in(delay_s: float) -> threading.Timer:
    timer = threading.Timer(delay_s, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    return timer


def test_sigterm_ends_the_campaign_after_the_wave_in_flight_and_marks_its_failed_steps(
    tmp_path: Path,
) -> None:
    dies = _step("a-b:rail0", "sleep 1; exit 143")  # as srun whose step Slurm cancelled
    done = _step("a-b:rail1", "echo '# nThread 1 nGpus 1'")
    later = _step("a-b:rail2", f"touch {tmp_path / 'ran'}")
    job = CampaignJob("campaign-x", "x", ("a", "b"), (Round(0, "r0", (dies, done)), Round(1, "r1", (later,))))
    before = signal.getsignal(signal.SIGTERM)
    timer = _sigterm_in(0.3)
    with pytest.raises(JobEnding, match=r"SIGTERM reached the driver of campaign-x in round 1 of 2"):
        drive_campaign(job, 10.0, spool=str(tmp_path / "spool"))
    timer.join()
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is the driver's only while it drives
    assert not (tmp_path / "ran").exists()  # no later round was started into the dying job
    spooled = {ev.host: ev for ev in read_spool(tmp_path / "spool")}
    assert set(spooled) == {"a-b:rail0", "a-b:rail1"}  # the wave in flight was waited for and kept
    assert spooled["a-b:rail0"].meta["job_ending"] == "SIGTERM"
    assert "job_ending" not in spooled["a-b:rail1"].meta  # it exited 0 before: a result
    # the marked step is not tested even when it is not in the spool's last wave
    last = replace(spooled["a-b:rail1"], returncode=1, meta={**spooled["a-b:rail1"].meta, "round_index": "2"})
    marked = {ev.host: ev for ev in mark_killed([spooled["a-b:rail0"], last], "CANCELLED")}
    assert marked["a-b:rail0"].meta["killed_with_job"] == "CANCELLED"
    assert marked["a-b:rail1"].meta["killed_with_job"] == "CANCELLED"  # the last wave, as before


def test_a_driver_without_sigterm_runs_every_round(tmp_path: Path) -> None:
    later = _step("a-b:rail2", f"touch {tmp_path / 'ran'}")
    job = CampaignJob("campaign-x", "x", ("a", "b"), (Round(0, "r0", (later,)),))
    (ev,) = drive_campaign(job, 10.0, spool=str(tmp_path / "spool"))
    assert ev.returncode == 0 and "job_ending" not in ev.meta and (tmp_path / "ran").exists()
    assert json.loads(next((tmp_path / "spool").glob("*.json")).read_text())["returncode"] == 0


def test_run_many_starts_nothing_once_told_to_stop(tmp_path: Path) -> None:
    t0 = time.monotonic()
    argvs = [["sh", "-c", f"touch {tmp_path / str(i)}"] for i in range(4)]
    started: list[bool] = []

    def stop() -> bool:  # true from the second look on: the first command starts, the rest do not
        started.append(True)
        return len(started) > 1

    evs = hostio.run_many(argvs, 10.0, start_interval_s=0.2, stop=stop)
    assert [ev.returncode for ev in evs] == [0, None, None, None]
    assert all(isinstance(ev, Evidence) and "not started" in ev.stderr for ev in evs[1:])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"] and time.monotonic() - t0 < 5


def test_run_many_gives_each_command_its_own_env_on_top_of_the_common_one() -> None:
    argvs = [["sh", "-c", 'echo "$A $B"']] * 2
    evs = hostio.run_many(argvs, 10.0, env={"A": "all"}, envs=[{"B": "one"}, {}])
    assert [ev.stdout.strip() for ev in evs] == ["all one", "all"]
