"""Operations on the virtual Slurm cluster: the nightly run started from its rendered scrontab entry,
``--resume`` after a node dies mid-campaign, ``--drain-failed`` on a convicted node next to one drained by
someone else. Real sbatch/srun/scontrol, simulated node hardware and fabric (nccl family only, for time).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vcsite import nccl_members, nccl_run_argv, runs, wait_for_spooled_step, why, write_site

from clusteraccept.jobs import archive
from clusteraccept.jobs.slurm_clients import parse_sinfo
from clusteraccept.judge import record
from clusteraccept.report.model import banner
from clusteraccept.site.cron import parse_scrontab

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.vcluster
PY = sys.executable


def slurm(vcluster: Any, *argv: str) -> str:
    env = {**os.environ, **vcluster.env}
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True, timeout=30).stdout


def states(vcluster: Any) -> dict[str, Any]:
    return parse_sinfo(slurm(vcluster, "sinfo", "-N", "-h", "-o", "%N|%T|%E"))


@pytest.fixture
def nodes_back(vcluster: Any) -> Iterator[None]:
    """Whatever a test drained or took down is back in service afterwards."""
    yield
    for node in vcluster.nodes:
        subprocess.run(
            ["scontrol", "update", f"NodeName={node}", "State=RESUME"],
            env={**os.environ, **vcluster.env},
            capture_output=True,
            check=False,
        )


def test_nightly_entry_regression_and_drain(vcluster: Any, tmp_path: Path, nodes_back: None) -> None:
    site = write_site(vcluster, tmp_path, [])
    printed = subprocess.run(
        [PY, "-m", "clusteraccept", "nightly", "--site", str(site), "--print-scrontab"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    (entry,) = parse_scrontab(printed.stdout)  # what scrontab would accept: one entry with its #SCRON lines
    partition = vcluster.service_partition or vcluster.partition
    assert entry.spec == "15 3 * * *" and f"--partition={partition}" in entry.options
    (tmp_path / "nightly.scrontab").write_text(printed.stdout)

    def night() -> subprocess.CompletedProcess[str]:
        # the entry's own command line, as the scrontab job's shell runs it (no waiting for 03:15): as a
        # job on the service host where the cluster has one (24.11: the nodes' python is the root's), else
        # here (22.05: the nodes' python is this one)
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
        service = vcluster.service_partition
        where = ["srun", "-p", service, "-N1", "-n1"] if service else []
        if where:
            env.update(vcluster.env)
        return subprocess.run(
            [*where, "/bin/sh", "-c", entry.command],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )

    first = night()
    assert first.returncode == 0, first.stdout[-1500:] + first.stderr[-1000:] + why(tmp_path / "reports")
    assert ": OK: 0 new failure(s)" in (tmp_path / "summary.txt").read_text()
    (run1,) = runs(tmp_path / "reports")
    # The regression: a slow rail on node3 appears; node1 gets a slow rail too (it is drained by an admin
    # below, so --drain-failed must leave it alone).
    write_site(
        vcluster,
        tmp_path,
        [
            "{kind: slow_rail, node: node3, rail: 5, factor: 0.55}",
            "{kind: slow_rail, node: node1, rail: 2, factor: 0.55}",
        ],
    )
    second = night()
    assert second.returncode == 1, second.stdout[-1500:] + why(tmp_path / "reports")
    summary = (tmp_path / "summary.txt").read_text()
    assert ": REGRESSED: " in summary and f"vs {run1.name}" in summary, summary
    assert "nccl.busbw[node1-node2:rail2:sendrecv" in summary or "new failure(s) (nccl" in summary, summary
    run2 = next(p for p in runs(tmp_path / "reports") if p != run1)
    detail = json.loads((run2 / "nightly.json").read_text())
    assert "nccl.localization[node3]" in detail["diff"]["new_failures"], detail
    assert "nccl.localization[node1]" in detail["diff"]["new_failures"], detail

    slurm(vcluster, "scontrol", "update", "NodeName=node1", "State=DRAIN", "Reason=admin: PSU swap")
    drain = subprocess.run(
        [
            PY,
            "-m",
            "pytest",
            "suites/",
            f"--site={site}",
            f"--rejudge={run2}",
            "-m",
            "nccl",
            "-q",
            "-p",
            "no:randomly",
            "--drain-failed=apply",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert "drain applied: 1 to drain" in drain.stdout, drain.stdout[-3000:]
    now = states(vcluster)
    assert (
        now["node3"].drained and now["node3"].reason == f"clusteraccept: nccl.localization rail5 {run2.name}"
    )
    assert now["node1"].drained and now["node1"].reason == "admin: PSU swap"  # untouched, reason kept
    assert not now["node2"].drained and not now["node4"].drained
    drained = json.loads((run2 / "drain.json").read_text())
    assert [a["node"] for a in drained["actions"]] == ["node3"]
    assert any(s["node"] == "node1" and "someone else" in s["why"] for s in drained["skipped"])
    # An older run that found node3 clean never undoes the newer drain.
    undo = subprocess.run(
        [PY, "-m", "clusteraccept", "undrain", "--site", str(site), str(run1), "--apply"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=True,
    )
    assert "0 to undrain" in undo.stdout and "not newer than the drain" in undo.stdout, undo.stdout
    assert states(vcluster)["node3"].drained

    # Both repaired (faults gone) and returned to service by the admin: night 3, --only-due, tests node3
    # (failed, then drained by clusteraccept) and node1 (failed), their pairs and blocks, nothing else.
    write_site(vcluster, tmp_path, [])
    for node in ("node1", "node3"):
        slurm(vcluster, "scontrol", "update", f"NodeName={node}", "State=RESUME")
    third = subprocess.run(
        [PY, "-m", "clusteraccept", "nightly", "--site", str(site), "--only-due"],
        capture_output=True, text=True, cwd=REPO, timeout=900, check=False,
    )  # fmt: skip
    assert third.returncode == 0, third.stdout[-1500:] + third.stderr[-1000:] + why(tmp_path / "reports")
    run3 = next(p for p in runs(tmp_path / "reports") if p not in (run1, run2))
    results = record.load(run3)
    assert results["scope"]["only_due"] and results["scope"]["nodes"] == ["node1", "node3"], results["scope"]
    steps = {s for rounds in record.step_names(run3, results).values() for r in rounds for s in r}
    # their intra-node runs, every pair (all rails) with one of them, their blocks; no whole-set step
    assert steps and all(
        "node1" in s or "node3" in s or s in ("all_reduce:leaf1", "all_reduce:leaf2") for s in steps
    ), steps
    assert {"all_reduce:node1", "all_reduce:node3"} <= steps and "all_reduce:node2" not in steps, steps
    assert {j["state"] for j in results["jobs"]} == {"COMPLETED"}, results["jobs"]
    assert not [v for v in results["verdicts"] if v["outcome"] in ("fail", "error")]
    assert banner(results).verdict == "INCOMPLETE"  # not a full acceptance, and nothing failed
    summary = (tmp_path / "summary.txt").read_text()
    assert ": OK: " in summary and "only due: 2 node(s)" in summary, summary


def test_scrontab_accepts_the_rendered_file(vcluster: Any, tmp_path: Path) -> None:
    """Only where this Slurm has the scrontab client and ScronParameters=enable (Debian 12's 22.05 has
    no scrontab binary): submit the rendered file, list it back, remove it."""
    if shutil.which("scrontab") is None:
        pytest.skip("no scrontab client here (Debian 12's slurm-client 22.05.8 does not ship it)")
    if "scronparameters=enable" not in Path(vcluster.slurm_conf).read_text().lower():
        pytest.skip("the virtual cluster's slurm.conf has no ScronParameters=enable")
    site = write_site(vcluster, tmp_path, [])
    text = subprocess.run(
        [PY, "-m", "clusteraccept", "nightly", "--site", str(site), "--print-scrontab"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    (tmp_path / "nightly.scrontab").write_text(text)
    try:
        slurm(vcluster, "scrontab", str(tmp_path / "nightly.scrontab"))
        assert "clusteraccept nightly --site" in slurm(vcluster, "scrontab", "-l")
    finally:
        subprocess.run(["scrontab", "-r"], env={**os.environ, **vcluster.env}, check=False)


def test_slurm_starts_the_scrontab_entry_and_the_run_lands_in_the_reports_dir(
    vcluster: Any, tmp_path: Path
) -> None:
    """Slurm's own cron, for real: the printed entry, set to every minute, installed with scrontab; Slurm
    starts it as a batch job on the service host, and the night's run lands in the site's reports dir."""
    if vcluster.service_partition is None:
        pytest.skip("no scrontab here: Debian 12's slurm-client 22.05.8 does not ship it")
    site = write_site(vcluster, tmp_path, [])
    site.write_text(site.read_text().replace('schedule: "15 3 * * *"', 'schedule: "* * * * *"'))
    text = subprocess.run(
        [PY, "-m", "clusteraccept", "nightly", "--site", str(site), "--print-scrontab"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    (tmp_path / "nightly.scrontab").write_text(text)
    reports = tmp_path / "reports"
    try:
        slurm(vcluster, "scrontab", str(tmp_path / "nightly.scrontab"))
        deadline = time.monotonic() + 420
        while time.monotonic() < deadline:
            landed = (reports / "demo").is_dir() and any((r / "results.json").exists() for r in runs(reports))
            if landed and (tmp_path / "summary.txt").exists():
                break
            time.sleep(2)
        else:
            logs = sorted((reports / "demo").glob("nightly-*.out"))
            tail = logs[-1].read_text()[-2000:] if logs else "no nightly-*.out"
            raise AssertionError(f"no nightly run landed in {reports}: {tail}")
    finally:
        env = {**os.environ, **vcluster.env}
        subprocess.run(["scrontab", "-r"], env=env, check=False, input="y\n", text=True)
    fields = "JobID,NodeList,Partition"
    jobs = slurm(vcluster, "sacct", "-X", "-n", "-P", "--name=clusteraccept-nightly", "-o", fields)
    assert f"|svc|{vcluster.service_partition}" in jobs, jobs  # Slurm ran it, on the service host
    assert ": OK: 0 new failure(s)" in (tmp_path / "summary.txt").read_text()


def _kill_mid_campaign(vcluster: Any, reports: Path, victim: str, deadline_s: float = 240) -> None:
    """Set ``victim`` DOWN once its block's campaign has finished some steps (not all), then back."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        spools = list(reports.glob("demo/*/spool/campaign-leaf2/*.json"))
        if spools:
            slurm(
                vcluster, "scontrol", "update", f"NodeName={victim}", "State=DOWN", "Reason=test: node died"
            )
            while time.monotonic() < end:  # until Slurm has ended the job (NODE_FAIL)
                queue = subprocess.run(
                    ["squeue", "-h", "-o", "%j"],
                    env={**os.environ, **vcluster.env},
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if queue.returncode == 0 and "campaign-leaf2" not in queue.stdout:
                    break
                time.sleep(0.3)
            slurm(vcluster, "scontrol", "update", f"NodeName={victim}", "State=RESUME")
            return
        time.sleep(0.2)
    raise AssertionError("campaign-leaf2 never started")


def test_resume_reruns_only_the_missing_pairs(vcluster: Any, tmp_path: Path, nodes_back: None) -> None:
    site = write_site(vcluster, tmp_path, [])
    reports = tmp_path / "reports"
    argv = [
        PY,
        "-m",
        "pytest",
        "suites/",
        f"--site={site}",
        f"--reports-dir={reports}",
        "-q",
        "-p",
        "no:randomly",
    ]  # every family: the resumed run must be able to end ACCEPT
    with subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        _kill_mid_campaign(vcluster, reports, "node4")
        try:
            out, _ = proc.communicate(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()  # else leaving the with-block waits for it, and its jobs outlive the test
            out, _ = proc.communicate()
            pytest.fail(f"the run did not end within 900 s after node4 died:\n{out[-2000:]}\n{why(reports)}")
    (run,) = runs(reports)
    before = record.load(run)
    killed = next(j for j in before["jobs"] if j["name"] == "campaign-leaf2")
    assert killed["state"] == "NODE_FAIL", (before["jobs"], out[-3000:])  # the kill happened mid-campaign
    assert all(j["state"] == "COMPLETED" for j in before["jobs"] if j is not killed), before["jobs"]
    # steps killed with their job are "not tested" (ERROR), not hardware failures: INCOMPLETE, not REJECT
    assert banner(before).verdict == "INCOMPLETE", (banner(before), out[-3000:])
    assert not [v for v in before["verdicts"] if v["outcome"] == "fail"], out[-3000:]
    leaf2 = {s for r in record.step_names(run, before)["campaign-leaf2"] for s in r}
    reached = {
        f"{v['subject'].rpartition(':')[2]}:{v['subject'].rpartition(':')[0]}"
        for v in before["verdicts"]
        if v["check"] == "nccl.launch" and v["outcome"] == "pass"
    }
    kept = nccl_members(run)

    again = subprocess.run(
        [*argv[:5], f"--resume={run}", *argv[5:]],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    after = record.load(run)
    (resume,) = after["resumes"]
    # the names beside results.json (resume-r1-steps.json.gz), counted in it
    assert "rerun_steps" not in resume and "job_steps" not in resume, resume
    rerun = set(record.rerun_steps(run, after, 1))
    shards = record.resume_step_names(run, after)
    assert {s for rounds in shards.values() for r in rounds for s in r} == rerun, shards
    assert resume["n_rerun_steps"] == len(rerun) and set(resume["job_step_counts"]) == set(shards)
    # only what the dead job lost: its missing and killed steps, none it had finished, none of other jobs
    assert set(killed["missing"]) <= rerun <= leaf2 - reached, (resume, killed)
    assert rerun and len(rerun) < len(leaf2)
    assert [j["name"] for j in after["jobs"] if j["name"].endswith("-r1")] == ["campaign-leaf2-r1"]
    assert all(j["state"] == "COMPLETED" and not j["missing"] for j in after["jobs"]), after["jobs"]
    assert banner(after).verdict == "ACCEPT", (banner(after), again.stdout[-3000:])
    assert again.returncode == 0, again.stdout[-3000:]
    assert kept <= nccl_members(run)  # what was reached stays
    report = (run / "report.html").read_text()
    assert "INCOMPLETE" not in report.split("</title>")[0]


def _queue(vcluster: Any) -> str:
    proc = subprocess.run(
        ["squeue", "-h", "-o", "%j"], env={**os.environ, **vcluster.env}, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sigterm_mid_run_cancels_its_jobs_keeps_what_came_back_and_resume_completes_it(
    vcluster: Any, tmp_path: Path
) -> None:
    """The fault matrix (docs/faults.md), "the run killed mid-run": SIGTERM (as `kill` or Slurm ending the
    nightly entry at its --time) while the campaigns run. The run cancels every job of it (none is left
    holding the nodes), archives what came back, records INCOMPLETE; --resume completes it. -m nccl: the
    campaigns only, for time."""
    site = write_site(vcluster, tmp_path, [])
    reports = tmp_path / "reports"
    argv = nccl_run_argv(site, reports)
    with subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        wait_for_spooled_step(reports)  # a campaign has finished a step: some evidence came back, not all
        assert "clusteraccept-campaign" in _queue(vcluster), "no campaign job is running"
        proc.send_signal(signal.SIGTERM)
        try:
            out, _ = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"the run did not end within 300 s of SIGTERM:\n{out[-2000:]}")
    assert proc.returncode == 1, out[-3000:]
    assert "clusteraccept-" not in _queue(vcluster)  # cancelled, not left holding the nodes
    (run,) = runs(reports)
    before = record.load(run)
    assert before["interrupted"] == "SIGTERM", before.get("interrupted")
    cancelled = [j for j in before["jobs"] if j["state"] == "CANCELLED"]
    assert cancelled and all("interrupted (SIGTERM)" in j["message"] for j in cancelled), before["jobs"]
    assert any(j["missing"] for j in cancelled)
    failed = [
        (v["check"], v["subject"], v["message"][:300]) for v in before["verdicts"] if v["outcome"] == "fail"
    ]
    assert banner(before).verdict == "INCOMPLETE", failed[:5]  # a step cut short by the cancel is not a FAIL
    # nothing lost: every bundle reads whole, and every evidence a verdict cites is there
    kept = nccl_members(run)
    assert kept, "nothing came back before the signal"
    cited = {ref for v in before["verdicts"] for ref in v.get("evidence", ()) if "#" in ref}
    for ref in cited:
        archive.read(run, ref)
    again = subprocess.run([*argv[:5], f"--resume={run}", *argv[5:]], capture_output=True, text=True,
                           cwd=REPO, timeout=900, check=False)  # fmt: skip
    after = record.load(run)
    assert all(j["state"] == "COMPLETED" and not j["missing"] for j in after["jobs"]), after["jobs"]
    assert "interrupted" not in after and after["resumes"][0]["after_interrupted"] == "SIGTERM"
    # whole again: INCOMPLETE only because -m nccl ran no probe family
    assert banner(after).reasons == ("check families not run: topology, nvlink, gpudirect",), banner(after)
    assert again.returncode == 0, again.stdout[-3000:]
    assert kept <= nccl_members(run)
