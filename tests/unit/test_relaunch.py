"""A campaign step that hung before its benchmark printed a line (the PMI fence of MPI_Init) is launched once
more; one that hung after its benchmark began is a measurement and is not (jobs/node_entry.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.jobs.node_entry import drive_campaign
from clusteraccept.plan.jobs import CampaignJob, Round, Step
from clusteraccept.plan.limits import (
    CONTROLLER_WAIT_S,
    DRIVER_MARGIN_S,
    PENDING_RETRY_S,
    RELAUNCH_WAVES,
    STEPS_SETTLE_S,
    Limits,
    job_seconds,
)

LAUNCH = "echo 'CLUSTERACCEPT-LAUNCH {}'"


def _step(subject: str, script: str) -> Step:
    return Step("pair", "pair_in_block", "sendrecv", ("a", "b"), 0, subject, shape=("sh", "-c", script))


def _hangs_once(marker: Path) -> str:
    # the first run prints its launch record and hangs (as srun in a PMIx fence), the next one measures
    measure = "echo '# nThread 1 nGpus 1'; exit 0"
    return f"{LAUNCH}; if [ -e {marker} ]; then {measure}; fi; touch {marker}; exec sleep 30"


def _job(*rounds: tuple[Step, ...]) -> CampaignJob:
    return CampaignJob(
        "campaign-x", "x", ("a", "b"), tuple(Round(i, f"r{i}", s) for i, s in enumerate(rounds))
    )


def test_a_step_hung_at_launch_runs_once_more_and_keeps_its_first_attempt(tmp_path: Path) -> None:
    ok = _step("a-b:rail1", "echo '# nThread 1 nGpus 1'")
    (ev_hung, ev_ok) = drive_campaign(_job((_step("a-b:rail0", _hangs_once(tmp_path / "m")), ok)), 1.5)
    assert ev_hung.returncode == 0 and "# nThread" in ev_hung.stdout
    assert re.match(r"hung \d+ s before the benchmark printed a line", ev_hung.meta["relaunched"])
    assert ev_ok.returncode == 0 and "relaunched" not in ev_ok.meta


def test_a_step_hung_after_its_benchmark_began_is_not_rerun(tmp_path: Path) -> None:
    script = f"{LAUNCH}; echo '# nThread 1 nGpus 1'; exec sleep 30"
    (ev,) = drive_campaign(_job((_step("a-b:rail0", script),)), 1.0)
    assert ev.returncode is None and "relaunched" not in ev.meta


def test_one_relaunch_wave_per_job_and_its_time_is_counted(tmp_path: Path) -> None:
    always = f"{LAUNCH}; exec sleep 30"
    first, second = drive_campaign(_job((_step("a-b:rail0", always),), (_step("a-b:rail1", always),)), 0.5)
    assert first.returncode is None and "relaunched" in first.meta  # relaunched, and hung again
    assert second.returncode is None and "relaunched" not in second.meta  # the job's relaunch is spent
    limits = Limits(
        max_steps_per_job=10,
        max_concurrent_steps=0,
        step_rate_per_s=None,
        time_limit_min=None,
        step_timeout_s=100,
    )
    one_round = _job((_step("a-b:rail0", always),))
    two_rounds = _job((_step("a-b:rail0", always),), (_step("a-b:rail1", always),))
    assert job_seconds(two_rounds, limits, False) - job_seconds(one_round, limits, False) == 100
    # the controller back, its steps ended, the wave with time for srun's own retry of a pending step
    relaunch = 100 + CONTROLLER_WAIT_S + STEPS_SETTLE_S + PENDING_RETRY_S
    assert RELAUNCH_WAVES == 1 and job_seconds(one_round, limits, False) == 100 + relaunch + DRIVER_MARGIN_S


def _hung_step(
    stdout: str,
    meta: dict[str, str],
    returncode: int | None = None,
    stderr: str = "srun: StepId=7.3 tasks 0-1: running\nsrun: forcing job termination\ntimed out after 120 s",
) -> list[str]:
    from clusteraccept.checks import nccl
    from clusteraccept.evidence import Evidence
    from clusteraccept.site.load import parse_site

    s = parse_site(
        Path("h.yaml"),
        {
            "name": "h",
            "nodes": "vm",
            "slurm": {"executor": "local"},
            "node_types": {"h200x2": {"gpus": 2, "numa_expected": False}},
            "nccl": {"intra_collectives": ["all_reduce"]},
        },
    )
    where = {
        "kind": "node",
        "scope": "intra_node",
        "collective": "all_reduce",
        "subject": "vm",
        "nodes": "vm",
    }
    ev = Evidence("vm", "nccl-tests", argv=("srun",), returncode=returncode, stdout=stdout, stderr=stderr,
                  meta={**where, "rail": "", **meta})  # fmt: skip
    return [v.message for v in nccl.judge(s, [(ev, "raw/x")], s.nodes) if v.check == "nccl.launch"]


def test_the_error_of_a_hung_step_says_whether_its_benchmark_began_and_whether_it_was_relaunched() -> None:
    (msg,) = _hung_step(f"{LAUNCH[6:-1]}\n", {"relaunched": "hung 120 s before the benchmark printed a line"})
    assert msg.startswith("step timed out or could not start: timed out after 120 s; its benchmark never")
    assert "launched twice, the first attempt hung 120 s" in msg
    (msg,) = _hung_step("# nThread 1 nGpus 1\n", {})
    assert "its benchmark had begun" in msg and "launched twice" not in msg


def test_a_step_srun_could_not_create_runs_once_more_and_one_that_ran_and_failed_does_not(
    tmp_path: Path, fake_slurm: Any
) -> None:
    # srun's own words when slurmctld stays unreachable past MessageTimeout (src/common/slurm_protocol_api.c
    # _open_controller retries that long; SLURMCTLD_COMMUNICATIONS_CONNECTION_ERROR is not retried by srun)
    refused = (
        "srun: error: Unable to create step for job 7: Unable to contact slurm controller (connect failure)"
    )
    marker = tmp_path / "m"
    first_refused = (
        f"if [ -e {marker} ]; then {LAUNCH}; echo '# nThread 1 nGpus 1'; exit 0; fi; "
        f"touch {marker}; echo '{refused}' >&2; exit 1"
    )
    ran_and_failed = f"{LAUNCH}; echo 'NCCL WARN init failed' >&2; exit 1"
    fake_slurm.answer("scontrol", "Slurmctld(primary) at ctl is UP\n")  # before the relaunch: it is back
    ev_refused, ev_failed = drive_campaign(
        _job((_step("a-b:rail0", first_refused), _step("a-b:rail1", ran_and_failed))), 10.0
    )
    assert ev_refused.returncode == 0 and "# nThread" in ev_refused.stdout
    assert re.match(
        r"exited 1 after \d+ s before any rank started; stderr: srun: error: Unable to create",
        ev_refused.meta["relaunched"],
    )
    assert ev_refused.meta["relaunched"].endswith("; slurmctld answered after 0 s")
    assert [argv for argv, _ in fake_slurm.calls] == [("scontrol", "ping")]
    assert ev_failed.returncode == 1 and "relaunched" not in ev_failed.meta  # its program ran: a result


def test_the_relaunch_waits_for_the_controller_a_bounded_time(
    tmp_path: Path, fake_slurm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clusteraccept.jobs import node_entry

    monkeypatch.setattr(node_entry, "CONTROLLER_WAIT_S", 3)
    fake_slurm.answer(
        "scontrol", "", 1, "slurm_ping error: Unable to contact slurm controller (connect failure)"
    )
    refused = (
        "echo 'srun: error: Unable to create step for job 7: Unable to contact slurm controller' >&2; exit 1"
    )
    (ev,) = drive_campaign(_job((_step("a-b:rail0", refused),)), 10.0)
    assert ev.returncode == 1  # refused again: the caller reports it, launched twice
    assert re.search(
        r"; slurmctld did not answer within [23] s \(slurm_ping error: Unable to contact",
        ev.meta["relaunched"],
    )
    assert 2 <= len(fake_slurm.calls) <= 3  # every 2 s, for at most 3 s


def test_the_relaunch_waits_until_the_controller_has_ended_the_jobs_earlier_steps(
    tmp_path: Path, fake_slurm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restarted slurmctld holds the CPUs of a step that ended while it was down until that step's
    slurmstepd retries its completion (every 60 s); a step created before then pends, and may pend past its
    timeout (plan/limits.STEPS_SETTLE_S). The relaunch waits until squeue lists no step of the job but the
    driver's own and Slurm's; bounded: then it relaunches anyway and says so."""
    from clusteraccept.jobs import node_entry

    monkeypatch.setenv("SLURM_JOB_ID", "25")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    fake_slurm.answer("scontrol", "Slurmctld(primary) at ctl is UP\n")
    fake_slurm.answer("squeue", "25.0\n25.batch\n25.extern\n")  # the driver's own step and Slurm's
    marker = tmp_path / "m"
    refused = "srun: error: Unable to confirm allocation for job 25: Unable to contact slurm controller"
    script = f"if [ -e {marker} ]; then {LAUNCH}; exit 0; fi; touch {marker}; echo '{refused}' >&2; exit 1"
    (ev,) = drive_campaign(_job((_step("a-b:rail0", script),)), 10.0)
    assert ev.returncode == 0 and ev.meta["relaunched"].endswith("; slurmctld answered after 0 s")
    assert [a for a, _ in fake_slurm.calls] == [
        ("scontrol", "ping"),
        ("squeue", "-h", "-s", "-j", "25", "-o", "%i"),
    ]

    monkeypatch.setattr(node_entry, "STEPS_SETTLE_S", 3)
    fake_slurm.answer("squeue", "25.0\n25.3\n25.batch\n")  # step 3 ended while slurmctld was down
    marker.unlink()
    (ev,) = drive_campaign(_job((_step("a-b:rail0", script),)), 10.0)
    assert ev.returncode == 0
    said = ev.meta["relaunched"]
    assert re.search(r"; steps still listed after [23] s \(25\.3\); relaunched anyway$", said), said
    assert 2 <= sum(a[0] == "squeue" for a, _ in fake_slurm.calls) - 1 <= 3  # every 2 s, for at most 3 s


def test_a_multi_node_step_is_launched_with_its_own_nodes_as_slurm_job_nodelist() -> None:
    """Slurm's mpi/pmix resolves some peers of a step through SLURM_JOB_NODELIST by their index in the step
    (node_entry.step_env): each step's srun gets its own nodes there."""
    (ev,) = drive_campaign(_job((_step("a-b:rail0", 'echo "# nodes $SLURM_JOB_NODELIST"'),)), 10.0)
    assert ev.returncode == 0 and ev.stdout.strip() == "# nodes a,b"


# slurmstepd's line when the step's srun --time ends it (src/slurmd/slurmstepd/req.c)
SLURM_LIMIT = (
    "slurmstepd: error: *** STEP 5.1 ON node1 CANCELLED AT 2026-12-05T14:02:11 DUE TO TIME LIMIT ***"
)


def _ended_by_slurm(marker: Path, began: bool) -> str:
    """The first run is ended by Slurm's step time limit before the driver's timeout (SIGTERM: 143), with
    its launch record and, where ``began``, a benchmark line; the next one measures."""
    first = f"{LAUNCH}; " + ("echo '# nThread 1 nGpus 1'; " if began else "")
    measure = f"{LAUNCH}; echo '# nThread 1 nGpus 1'; echo '#  8  2  float' ; exit 0"
    return (
        f"if [ -e {marker} ]; then {measure}; fi; touch {marker}; {first}echo '{SLURM_LIMIT}' >&2; exit 143"
    )


def test_a_launch_hang_ended_by_slurms_step_time_limit_runs_once_more(
    tmp_path: Path, fake_slurm: Any
) -> None:
    """srun --time is the same bound as the driver's timeout (srun_step.j2), so Slurm may end a step hung in
    its launch first: rc 143 and slurmstepd's "DUE TO TIME LIMIT" line, no benchmark line. It hung: it is
    relaunched, with no wait for the controller (which answered it)."""
    (ev,) = drive_campaign(_job((_step("a-b:rail0", _ended_by_slurm(tmp_path / "m", began=False)),)), 10.0)
    assert ev.returncode == 0 and "#  8  2  float" in ev.stdout
    assert re.match(
        r"hung \d+ s before the benchmark printed a line \(Slurm's step time limit\); stderr: slurmstepd: "
        r"error: \*\*\* STEP 5\.1 ON node1 CANCELLED AT",
        ev.meta["relaunched"],
    ), ev.meta["relaunched"]
    assert fake_slurm.calls == []  # no scontrol ping: srun reached the controller


def test_only_a_failed_step_is_taken_for_one_slurm_ended_at_its_time_limit() -> None:
    from clusteraccept.evidence import Evidence
    from clusteraccept.jobs.node_entry import never_started

    launched = f"{LAUNCH[6:-1]}\n"
    assert never_started(Evidence("a", "nccl-tests", returncode=143, stdout=launched, stderr=SLURM_LIMIT))
    assert not never_started(Evidence("a", "nccl-tests", returncode=0, stdout=launched, stderr=SLURM_LIMIT))


def test_a_measurement_ended_by_slurms_step_time_limit_is_not_rerun(tmp_path: Path) -> None:
    (ev,) = drive_campaign(_job((_step("a-b:rail0", _ended_by_slurm(tmp_path / "m", began=True)),)), 10.0)
    assert ev.returncode == 143 and "relaunched" not in ev.meta


def test_step_time_limit_reads_slurmstepds_and_sruns_words_only() -> None:
    from clusteraccept.parsers.launch_record import step_time_limit

    assert step_time_limit(143, f"srun: Job step aborted\n{SLURM_LIMIT}\n")
    assert step_time_limit(
        143, "srun: error: *** STEP 7.3 CANCELLED AT 2026-12-05T14:02:11 DUE TO TIME LIMIT ***"
    )
    assert not step_time_limit(143, SLURM_LIMIT.replace("TIME LIMIT", "PREEMPTION"))
    # SLURM_TIME_FORMAT in slurmd's environment may write the time with spaces
    assert step_time_limit(143, SLURM_LIMIT.replace("2026-12-05T14:02:11", "Sat Dec 5 14:02"))
    assert not step_time_limit(143, SLURM_LIMIT.replace("STEP 5.1", "JOB 5"))  # the batch step's words
    assert not step_time_limit(143, "NCCL WARN timed out")
    # a step that exited 0 is a result, one without a returncode the driver's timeout ended
    assert not step_time_limit(0, SLURM_LIMIT) and not step_time_limit(None, SLURM_LIMIT)


def test_a_retest_pair_is_launched_with_its_nodes_in_the_allocations_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A confirmation retest names its suspect first ("node3-node1"); Slurm's mpi/pmix indexes
    SLURM_JOB_NODELIST by the step's own node order, so it must be the allocation's (node_entry.step_env)."""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-4]")
    step = Step("pair", "pair_in_block", "sendrecv", ("node3", "node1"), 0, "node3-node1:rail0",
                shape=("sh", "-c", 'echo "# nodes $SLURM_JOB_NODELIST"'))  # fmt: skip
    job = CampaignJob("campaign-x", "x", ("node1", "node3"), (Round(0, "r0", (step,)),))
    (ev,) = drive_campaign(job, 10.0)
    assert ev.returncode == 0 and ev.stdout.strip() == "# nodes node1,node3"


def test_a_one_node_step_is_launched_with_its_node_as_slurm_job_nodelist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An intra-node step on node2 of a job on node[1-2] is peer 0 of its step: with the job's list, Slurm's
    mpi/pmix sent its early connection to node1 (33.8 s against 2.2 s on node1, the demo)."""
    monkeypatch.setenv("SLURM_JOB_NODELIST", "node[1-2]")
    step = Step("node", "intra_node", "all_reduce", ("node2",), None, "node2",
                shape=("sh", "-c", 'echo "# nodes $SLURM_JOB_NODELIST"'))  # fmt: skip
    job = CampaignJob("campaign-x", "x", ("node1", "node2"), (Round(0, "r0", (step,)),))
    (ev,) = drive_campaign(job, 10.0)
    assert ev.returncode == 0 and ev.stdout.strip() == "# nodes node2"


def test_slurm_order_is_the_allocations_and_numeric_where_it_says_nothing() -> None:
    from clusteraccept.jobs.node_entry import slurm_order

    assert slurm_order(("node3", "node1"), "node[1-4]") == ("node1", "node3")
    # Slurm's own sort (the allocation's order) compares the prefix before the last number as a string
    assert slurm_order(("a9-n1", "a10-n1"), "a10-n1,a9-n1") == ("a10-n1", "a9-n1")
    assert slurm_order(("node10", "node9", "node2"), "") == ("node2", "node9", "node10")
    assert slurm_order(("x2", "node1", "x1"), "node1") == ("node1", "x1", "x2")
    assert slurm_order(("b", "a"), "node[") == ("a", "b")  # an allocation that does not expand


def test_a_step_slurm_ended_at_its_time_limit_before_its_benchmark_began_is_said_to_have_hung_at_launch() -> (
    None
):
    """Not "could not parse nccl-tests output": the step's output is its launch records, and slurmstepd says
    why it ended."""
    stderr = f"srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n{SLURM_LIMIT}\n"
    relaunched = {"relaunched": "hung 120 s before the benchmark printed a line (Slurm's step time limit)"}
    (msg,) = _hung_step(f"{LAUNCH[6:-1]}\n", relaunched, returncode=143, stderr=stderr)
    assert msg.startswith(f"step timed out or could not start: {SLURM_LIMIT}; its benchmark never began")
    assert "launched twice, the first attempt hung 120 s" in msg and "last line" not in msg
    # one that Slurm ended after its benchmark began is parsed: what it printed is a measurement
    (msg,) = _hung_step(f"{LAUNCH[6:-1]}\n# nThread 1 nGpus 1\n", {}, returncode=143, stderr=stderr)
    assert msg.startswith("could not parse nccl-tests output")
