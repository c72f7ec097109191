"""The pytest plugin end to end on the demo site with submitit's local executor (no Slurm needed):
subject selection submits only what is selected, pytest-xdist workers share one submission, --dry-run
submits nothing, and --rejudge re-judges archived evidence."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import PytestRun, PytestRunner

from clusteraccept.checks import launched
from clusteraccept.errors import ArchiveError
from clusteraccept.jobs import archive
from clusteraccept.judge import record
from clusteraccept.parsers import stored

REPO = Path(__file__).resolve().parents[2]


def demo_site(tmp_path: Path) -> Path:
    """The demo site with its simulated hosts/fabric under tmp_path: tests running at once (xdist) must not
    rewrite each other's simulated nodes."""
    text = (REPO / "site-configs" / "demo.yaml").read_text()
    site = tmp_path / "site" / "demo.yaml"
    site.parent.mkdir(exist_ok=True)
    site.write_text(text.replace("{repo}/.vcluster/sim/demo", str(tmp_path / "sim")))
    return site


def pytest_run(run_pytest: PytestRunner, tmp_path: Path, *args: str, **kw: Any) -> PytestRun:
    site = demo_site(tmp_path)
    return run_pytest(f"--site={site}", "--executor=local", f"--reports-dir={tmp_path}", *args, **kw)


def only_run(tmp_path: Path) -> Path:
    (run,) = [p for p in (tmp_path / "demo").iterdir() if not p.is_symlink() and (p / "jobs").is_dir()]
    assert (tmp_path / "demo" / "latest").resolve() == run.resolve()
    return run


@pytest.fixture(scope="module")
def rail5_run(run_pytest: PytestRunner, tmp_path_factory: pytest.TempPathFactory) -> tuple[PytestRun, Path]:
    """One run of the rail-5 node tests, shared: -k selects, then --rejudge re-judges a copy of it."""
    tmp = tmp_path_factory.mktemp("rail5")
    return pytest_run(run_pytest, tmp, "suites/test_nccl_nodes.py", "-k", "rail5", "-rA"), tmp


def test_k_selects_and_submits_only_that_rail(rail5_run: tuple[PytestRun, Path]) -> None:
    proc, tmp_path = rail5_run
    assert proc.returncode == 1, proc.stdout[-2000:]  # rail 5 of node3 is the injected fault
    # one item per node: node3 (the culprit) fails; node2 and node4, slow only with node3, do not; node2's
    # rail-1 link errors (another injected fault) are not rail 5's and are not judged by this selection
    assert "1 failed, 3 passed" in proc.stdout, proc.stdout[-1500:]
    assert "FAILED suites/test_nccl_nodes.py::test_nccl_node[node3]" in proc.stdout
    assert "PASSED suites/test_nccl_nodes.py::test_nccl_node[node2]" in proc.stdout
    results = record.load(only_run(tmp_path))
    busbw = [v for v in results["verdicts"] if v["check"] == "nccl.busbw"]
    subjects = {v["subject"].split(":sendrecv")[0] for v in busbw if not v["labels"].get("attempt")}
    assert subjects == {"node1-node2:rail5", "node3-node4:rail5", "node1-node4:rail5", "node2-node3:rail5"}
    # the confirmation round re-tests node3 on the selected rail only, with a node that proved healthy
    retests = {v["subject"].split(":sendrecv")[0] for v in busbw if v["labels"].get("attempt")}
    assert retests == {"node3-node1:rail5"}, retests


def test_nodes_selects_exact_names_and_submits_their_pairs(run_pytest: PytestRunner, tmp_path: Path) -> None:
    proc = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py", "--nodes=node[1]", "-k", "rail0")
    assert "1 passed" in proc.stdout, proc.stdout[-1500:]
    results = record.load(only_run(tmp_path))
    pairs = {v["subject"].split(":sendrecv")[0] for v in results["verdicts"] if v["check"] == "nccl.launch"}
    assert pairs == {"node1-node2:rail0", "node1-node4:rail0"}  # node1's in-block and cross-block partner
    bad = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py", "--nodes=node9", "--dry-run")
    assert bad.returncode != 0 and "--nodes: node9 not in" in bad.stdout + bad.stderr


def test_selected_nodes_alone_are_probed_and_judged(run_pytest: PytestRunner, tmp_path: Path) -> None:
    """After a repair, --nodes node2 rechecks node2: its probes only, not the cluster's."""
    proc = pytest_run(run_pytest, tmp_path, "suites/test_topology.py", "--nodes=node2")
    assert "1 failed" in proc.stdout and "test_topology[node2]" in proc.stdout, proc.stdout[-1500:]
    results = record.load(only_run(tmp_path))
    assert [j["nodes"] for j in results["plan"]["probe_jobs"]] == [["node2"]]
    assert results["selected_nodes"] == ["node2"] and results["subset"] is True
    assert {v["subject"].split(":")[0] for v in results["verdicts"]} == {"node2"}  # no ERROR for the others


def test_xdist_workers_share_one_submission(run_pytest: PytestRunner, tmp_path: Path) -> None:
    suites = ("suites/test_nccl_nodes.py", "suites/test_nccl_blocks.py")
    proc = pytest_run(run_pytest, tmp_path, *suites, "-n", "2")
    # node2 (rail-1 link errors), node3 (slow rail 5), leaf2 and the whole set (slow block collectives)
    assert "4 failed, 3 passed" in proc.stdout, proc.stdout[-2000:]
    run = only_run(tmp_path)
    # every planned job submitted exactly once for the whole run (not once per worker)
    for job in ("campaign-leaf1", "campaign-leaf2", "campaign-cross"):
        job_dirs = [p for p in (run / "submitit" / job).iterdir() if p.is_dir() and "%" not in p.name]
        assert len(job_dirs) == 1, (job, job_dirs)
    assert (run / "junit.xml").exists() and (run / "report.html").exists()


def test_a_dry_runs_items_after_the_first_skip_before_their_fixtures(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    proc = pytest_run(run_pytest, tmp_path, "suites/", "--dry-run", "--setup-show", "-rs")
    assert proc.returncode == 0, proc.stdout[-2000:]
    skipped = int(proc.stdout.split(" skipped")[0].rsplit(None, 1)[-1])
    assert skipped > 10
    # the first item plans the run through its fixture; the others skip before any fixture of theirs
    assert proc.stdout.count("SETUP    F judged") == 1, proc.stdout[-3000:]
    reasons = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED [")]
    assert reasons and all(
        ln.endswith("--dry-run: job scripts written to the run's jobs/, nothing submitted") for ln in reasons
    )
    assert sum(int(ln.split("[", 1)[1].split("]")[0]) for ln in reasons) == skipped


def test_a_dry_runs_skipped_items_leave_a_following_plain_test_its_fixtures(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """The skipped items are reported without pytest's setup state; a plain test collected after them still
    gets its own module fixture (and the suite's first item's fixtures are torn down at the end)."""
    plain = tmp_path / "plain" / "test_plain.py"
    plain.parent.mkdir()
    plain.write_text(
        "import pytest\n\n@pytest.fixture(scope='module')\ndef answer():\n    return 42\n\n"
        "def test_plain(answer):\n    assert answer == 42\n"
    )
    proc = pytest_run(run_pytest, tmp_path, "suites/test_topology.py", str(plain), "--dry-run", "-rA")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "PASSED ::test_plain" in proc.stdout or "test_plain.py::test_plain PASSED" in proc.stdout, (
        proc.stdout[-4000:]
    )
    assert "1 passed, 4 skipped" in proc.stdout and " error" not in proc.stdout, proc.stdout[-1500:]


def test_dry_run_submits_nothing(run_pytest: PytestRunner, tmp_path: Path) -> None:
    proc = pytest_run(run_pytest, tmp_path, "suites/", "--dry-run")
    assert proc.returncode == 0, proc.stdout[-2000:]
    run = only_run(tmp_path)
    names = sorted(p.name for p in (run / "jobs").iterdir())
    assert names[:2] == ["campaign-cross.sbatch", "campaign-cross.steps.sh"]
    assert not (run / "submitit").exists()
    assert not list((run / "raw").rglob("*.json"))
    assert "dry run: job scripts in" in proc.stdout
    out = proc.stdout  # 2 blocks + the cross job: 18 steps + 4 counter snapshots; 2 pairs x 8 rails at once
    assert "limits: 3 campaign jobs (0 shards), the largest 22 steps (max_steps_per_job 40,000)" in out
    assert "at most 16 at once (max_concurrent_steps 256), unpaced, the longest --time 33 min" in out


def test_rejudge_with_changed_baseline(
    run_pytest: PytestRunner, rail5_run: tuple[PytestRun, Path], tmp_path: Path
) -> None:
    first, first_dir = rail5_run
    assert first.returncode == 1
    run = tmp_path / "demo" / only_run(first_dir).name
    shutil.copytree(only_run(first_dir), run)  # the shared run stays as it was
    site = demo_site(tmp_path).read_text()
    lenient = tmp_path / "lenient.yaml"
    lenient.write_text(
        site.replace(
            '"nccl.busbw.sendrecv.pair_in_block.*": {ref: 46.0, lower: -0.08',
            '"nccl.busbw.sendrecv.pair_in_block.*": {ref: 46.0, lower: -0.5',
        )
    )
    again = run_pytest(
        f"--site={lenient}", f"--rejudge={run}", "suites/test_nccl_nodes.py", "-k", "rail5", "-rA"
    )
    # in-block node3-node4 now passes against the lenient baseline; the cross-block pair node2-node3 alone
    # still fails: one slow result cannot tell its ends apart, so localization blames their cable (both ends)
    assert "2 failed, 2 passed" in again.stdout, again.stdout[-2000:]
    assert "FAILED suites/test_nccl_nodes.py::test_nccl_node[node2]" in again.stdout
    assert "only node2-node3 on rail 5 is slow" in again.stdout
    # the three campaigns and the confirmation job
    assert not (run / "submitit" / "campaign-leaf1").exists() or len(list((run / "submitit").iterdir())) == 4


def stored_parses(run: Path) -> dict[str, str]:
    """Every stored parse of the run (jobs/archive.py's parsed/), by evidence reference (not the steps'
    judgements stored beside them: checks/launched.py)."""
    bundles = [
        f"raw/{p.relative_to(run / archive.PARSED)}" for p in (run / archive.PARSED).glob("*/*.jsonl.gz")
    ]
    assert bundles
    return {
        f"{b}#{m}": line
        for b in bundles
        for m, line in archive.parsed_bundle(run, stored.VERSION, b).items()
        if not m.endswith(launched.SUFFIX)
    }


def test_rejudge_reads_the_stored_parses_and_reparse_parses_raw_again(
    run_pytest: PytestRunner, rail5_run: tuple[PytestRun, Path], tmp_path: Path
) -> None:
    """The run stored its steps' parses (parsers/stored.py) beside raw/; --rejudge judges from them, and
    --reparse from raw/. Shown by a stored parse changed on purpose: it is what --rejudge judges."""
    _, first_dir = rail5_run
    run = tmp_path / "demo" / only_run(first_dir).name
    shutil.copytree(only_run(first_dir), run)
    refs = stored_parses(run)
    steps = [(ev, ref) for ev, ref in archive.load_all(run) if ref in refs]
    assert len(steps) == len(refs) and any(":rail5" in ev.meta.get("subject", "") for ev, _ in steps)
    ev, ref = next((ev, ref) for ev, ref in steps if ev.meta.get("subject") == "node1-node2:rail5")
    parsed = stored.loads(refs[ref], ev.stdout)
    assert parsed is not None and parsed.result is not None
    marked = replace(parsed, result=None, result_error="the stored parse, marked")
    bundle, _, member = ref.partition("#")
    lines = archive.parsed_bundle(run, stored.VERSION, bundle)
    changed = stored.pack({**lines, member: stored.dumps(marked, ev.stdout)}.items())
    archive.write_parsed(run, stored.VERSION, bundle, [changed])
    site = demo_site(tmp_path)
    args = (f"--site={site}", f"--rejudge={run}", "suites/test_nccl_nodes.py", "-k", "rail5", "-rA")
    again = run_pytest(*args)
    launch = {v["subject"]: v for v in record.load(run)["verdicts"] if v["check"] == "nccl.launch"}
    assert "the stored parse, marked" in launch["node1-node2:rail5:sendrecv"]["message"], again.stdout[-1500:]
    reparsed = run_pytest(*args, "--reparse")
    launch = {v["subject"]: v for v in record.load(run)["verdicts"] if v["check"] == "nccl.launch"}
    assert launch["node1-node2:rail5:sendrecv"]["outcome"] == "pass", reparsed.stdout[-1500:]
    # and what --reparse parsed is stored again: the marked line is gone
    back = stored_parses(run)
    assert stored.loads(back[ref], ev.stdout) == parsed
    # --reparse alone, with no run to re-judge, is a usage error
    assert run_pytest(f"--site={site}", "--reparse", "--dry-run", "suites/").returncode == 4


def test_an_item_chosen_by_its_id_submits_its_steps_only(run_pytest: PytestRunner, tmp_path: Path) -> None:
    """By node id or by -k on the item's id: node3's pair and intra-node steps, no other's, no block's."""
    for how, args in (
        ("id", ("suites/test_nccl_nodes.py::test_nccl_node[node3]",)),
        ("k", ("suites/", "-k", "test_nccl_node[node3]")),
    ):
        out = tmp_path / how
        out.mkdir()
        proc = pytest_run(run_pytest, out, *args, "--dry-run")
        assert proc.returncode == 0, proc.stdout[-1500:]
        run = only_run(out)
        results = record.load(run)
        named = record.step_names(run, results)
        steps = {s.split(":", 1)[1] for rounds in named.values() for r in rounds for s in r}
        assert steps and all("node3" in s for s in steps), (how, steps)
        assert "node3" in steps and "node3-node4:rail5" in steps and "node2-node3:rail0" in steps, how
        assert results["subset"] is True


def test_a_bad_k_expression_is_a_usage_error(run_pytest: PytestRunner, tmp_path: Path) -> None:
    proc = pytest_run(run_pytest, tmp_path, "suites/", "--dry-run", "-k", "rail3 and (")
    assert proc.returncode == 4, proc.stdout[-1000:]  # pytest's usage error
    assert "Wrong expression passed to '-k': rail3 and (" in proc.stdout + proc.stderr


def test_small_limits_shard_and_wave_a_run_and_judge_it_the_same(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """The nccl items of the demo, once as planned and once within small limits (14 steps per job, 4 at
    once, 20 step starts/s): the cross-block campaign is sharded, its rounds run in waves, and every
    verdict is the same."""
    outcomes = {}
    for how, extra in (("plain", ""), ("limited", LIMITS)):
        out = tmp_path / how
        out.mkdir()
        site = demo_site(out)
        timeout = "  step_timeout_s: 120\n"
        site.write_text(site.read_text().replace(timeout, timeout + extra))
        proc = run_pytest(f"--site={site}", "--executor=local", f"--reports-dir={out}", "suites/", "-knccl")
        assert proc.returncode == 1, proc.stdout[-2000:]
        run = only_run(out)
        results = record.load(run)
        # the local executor runs a job's steps on one host, its first node, and that is who the launch
        # records name: the confirmation job, cut in two shards here, starts on another node (its
        # launch checks are judged on the virtual cluster, tests/integration)
        launch = ("launch.binding", "launch.nic", "nccl.transport", "nccl.config")
        outcomes[how] = {
            (v["check"], v["subject"]): v["outcome"]
            for v in results["verdicts"]
            if not (v["check"] in launch and v["subject"] in ("node1", "node2"))
        }
        if how == "limited":
            jobs = {j["name"]: j for j in results["plan"]["campaign_jobs"]}
            assert "campaign-cross-p1" in jobs and jobs["campaign-cross-p2"]["after"] == "campaign-cross-p1"
            assert {j["state"] for j in results["jobs"]} == {"FINISHED"}, results["jobs"]
            assert results["limits"]["max_steps_per_job"] == 14
            steps = (run / "jobs" / "campaign-leaf1-p1.steps.sh").read_text()
            assert "# wave 2/2: 4 steps" in steps  # a pair's 8 rails over the cap of 4
    assert outcomes["limited"] == outcomes["plain"]


LIMITS = "  max_steps_per_job: 14\n  max_concurrent_steps: 4\n  step_rate_per_s: 20\n"


def test_limits_that_cannot_hold_a_wave_are_one_line_usage_error(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    site = demo_site(tmp_path)
    site.write_text(
        site.read_text().replace("  step_timeout_s: 120\n", "  step_timeout_s: 600\n  time_limit_min: 5\n")
    )
    proc = run_pytest(
        f"--site={site}", "--executor=local", f"--reports-dir={tmp_path}", "suites/", "--dry-run"
    )
    assert proc.returncode == 4, proc.stdout[-1500:]
    assert (
        "demo.yaml: slurm.time_limit_min: expected room for one wave of campaign-leaf1 (37 min: "
        in proc.stdout
    )


def test_a_run_that_raises_runs_once_not_once_per_item(
    run_pytest: PytestRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every item asks for the run's results: a run that raised (a crash in judging, after its jobs ran)
    must not be run again by the next item, which would submit its jobs again, once per item."""
    from clusteraccept import flow

    calls: list[object] = []

    def crash(request: object) -> dict[str, Any]:
        calls.append(request)
        raise RuntimeError("the judge blew up\nits second line")

    monkeypatch.setattr(flow, "execute", crash)
    proc = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py")
    assert len(calls) == 1, proc.stdout[-2000:]
    assert proc.returncode == pytest.ExitCode.INTERNAL_ERROR, proc.stdout[-2000:]
    assert "RuntimeError: the judge blew up" in proc.stdout  # the first item's traceback
    assert "failed (RuntimeError: the judge blew up; its traceback is the first item's error)" in proc.stdout


def test_an_interrupted_run_exits_1_even_when_no_item_failed(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """A run SIGTERM'd late (docs/faults.md): each item passes on the steps that came back and skips those
    the cancelled jobs never ran, so no item fails; the exit must still say the run is not whole. Seen in
    the project's CI: the campaign SIGTERM'd after its pair steps, its block job still queued, exit 0."""
    first = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py", "--nodes=node[1]", "-k", "rail0")
    assert first.returncode == 0 and "1 passed" in first.stdout, first.stdout[-1500:]
    run = only_run(tmp_path)
    results = json.loads((run / "results.json").read_text())
    results["interrupted"] = "SIGTERM"  # what flow.execute records when the wait was interrupted
    (run / "results.json").write_text(json.dumps(results))
    site = demo_site(tmp_path)
    again = run_pytest(f"--site={site}", f"--rejudge={run}", "suites/test_nccl_nodes.py", "-k", "rail0")
    assert "passed" in again.stdout and "failed" not in again.stdout, again.stdout[-1500:]  # no item fails
    assert again.returncode == 1, again.stdout[-1500:]
    assert "INCOMPLETE, exit 1: the run was interrupted (SIGTERM)" in again.stdout
    assert f"--resume {run} completes it" in again.stdout


def test_a_job_that_ended_badly_exits_1_even_when_no_item_failed(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """A job Slurm ended badly (NODE_FAIL, TIMEOUT, its script failing after its steps) leaves the run
    INCOMPLETE in every report, though each item may pass on what came back: the exit, which the nightly
    entry reads, agrees with the report. A subset run (-k, --nodes) alone is no such failure."""
    first = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py", "--nodes=node[1]", "-k", "rail0")
    assert first.returncode == 0 and "1 passed" in first.stdout, first.stdout[-1500:]
    run = only_run(tmp_path)
    results = json.loads((run / "results.json").read_text())
    results["jobs"][-1]["state"] = "NODE_FAIL"
    (run / "results.json").write_text(json.dumps(results))
    site = demo_site(tmp_path)
    again = run_pytest(f"--site={site}", f"--rejudge={run}", "suites/test_nccl_nodes.py", "-k", "rail0")
    assert "passed" in again.stdout and "failed" not in again.stdout, again.stdout[-1500:]  # no item fails
    assert again.returncode == 1, again.stdout[-1500:]
    name = results["jobs"][-1]["name"]
    assert f"INCOMPLETE, exit 1: 1 job(s) did not finish cleanly or returned nothing ({name})" in again.stdout


def test_a_family_that_does_not_apply_has_no_items_made_at_all(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """The demo is an IB site of HGX nodes without SHARP: no RoCE, EFA, Slingshot, TCPX or SHARP items and
    no NVLink-domain items are made (not made and then deselected: 4 items per node, 65,000 at 16,384
    nodes), and the summary says why each family has none."""
    proc = pytest_run(run_pytest, tmp_path, "suites/", "--collect-only", "-q")
    assert proc.returncode == 0, proc.stdout[-1500:]
    ids = [line for line in proc.stdout.splitlines() if line.startswith("suites/")]
    files = {i.split("::")[0].split(":")[0] for i in ids}
    assert files == {
        "suites/test_gpudirect.py",
        "suites/test_nccl_blocks.py",
        "suites/test_nccl_nodes.py",
        "suites/test_nvlink.py",
        "suites/test_topology.py",
    }, files
    assert "deselected" not in proc.stdout
    assert "no roce items: demo has no roce: section (not a RoCE fabric)" in proc.stdout
    assert "no efa items: demo has no EFA node type" in proc.stdout
    assert "no sharp items: SHARP is not enabled on demo (sharp.enabled)" in proc.stdout


def test_a_session_leaves_nothing_frozen_and_the_exit_freezes_what_is_alive(tmp_path: Path) -> None:
    """plugin.pytest_unconfigure / _freeze_at_exit: once pytest returns, nothing of its session is frozen
    (a process that goes on collects it); at the interpreter's exit what is alive is frozen, so the last
    full collection does not walk it (an atexit handler registered before pytest runs after the plugin's)."""
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            """
            import atexit, gc, sys
            import pytest
            atexit.register(lambda: print("at exit frozen", gc.get_freeze_count() > 0, flush=True))
            rc = pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[1]])
            print("after pytest frozen", gc.get_freeze_count(), "rc", int(rc), flush=True)
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "test_x.py")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert "after pytest frozen 0 rc 0" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "at exit frozen True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_resume_that_cannot_record_its_steps_stops_before_it_moves_any_evidence(
    run_pytest: PytestRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--resume writes the names of the steps it reruns (resume-r<N>-steps.json.gz) before it moves any
    evidence out of raw/: a reports filesystem too full for them ends it with one line, the run as it was."""
    first = pytest_run(run_pytest, tmp_path, "suites/test_nccl_nodes.py", "--nodes=node[1]", "-k", "rail0")
    assert first.returncode == 0 and "1 passed" in first.stdout, first.stdout[-1500:]
    run = only_run(tmp_path)
    results = json.loads((run / "results.json").read_text())
    job = next(j for j in results["jobs"] if j["name"].startswith("campaign"))
    lost = next(s for r in record.step_names(run, results)[job["name"]] for s in r)
    job["state"], job["missing"] = "NODE_FAIL", [lost]  # Slurm lost the node before this step ran
    (run / "results.json").write_text(json.dumps(results))

    # what the run is (raw/, the record, the parses): every file but the reports the session writes again
    def files() -> dict[Path, bytes]:
        return {
            p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.suffix not in (".html", ".xml")
        }

    before = files()

    def full(run_dir: Path, section: str, *_: object) -> None:
        raise ArchiveError(
            f"{run_dir / f'{section}-steps.json.gz'}: could not write: No space left on device"
        )

    monkeypatch.setattr(record, "write_step_names", full)
    again = pytest_run(run_pytest, tmp_path, f"--resume={run}", "suites/test_nccl_nodes.py", "-k", "rail0")
    assert again.returncode != 0, again.stdout[-1500:]
    assert "resume-r1-steps.json.gz: could not write: No space left on device" in again.stdout, again.stdout[
        -1500:
    ]
    assert files() == before and not (run / "superseded").exists()  # nothing moved, nothing rewritten
