"""The planned steps' names beside results.json (judge/record.write_step_names, step_names): what --resume
reads of a job Slurm ended early. Written as the plan has them, read back the same; runs that recorded them
inside results.json read as they are; a file missing, cut off or of another shape is one line naming it."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.errors import ArchiveError
from clusteraccept.judge import record
from clusteraccept.plan.jobs import describe, make_plan, step_names
from clusteraccept.site.load import load_site

REPO = Path(__file__).resolve().parents[3]
PLAN = make_plan(load_site("demo", REPO / "site-configs"), families=(), nccl=True)


def _results() -> dict[str, Any]:
    return {"plan": describe(PLAN), "confirmation": {"plan": describe(PLAN)["campaign_jobs"]}}


def test_names_round_trip_and_results_json_counts_them(tmp_path: Path) -> None:
    results = _results()
    for section in ("plan", "confirmation"):
        record.write_step_names(tmp_path, section, step_names(PLAN))
        got = record.step_names(tmp_path, results, section)
        assert got == {cj.name: [[s.name for s in r.steps] for r in cj.rounds] for cj in PLAN.campaign_jobs}
    rounds = [r for cj in results["plan"]["campaign_jobs"] for r in cj["rounds"]]
    assert [r["n_steps"] for r in rounds] == [len(r.steps) for cj in PLAN.campaign_jobs for r in cj.rounds]
    assert not any("steps" in r for r in rounds)  # the names are not in results.json
    assert sorted(p.name for p in tmp_path.iterdir()) == ["confirmation-steps.json.gz", "plan-steps.json.gz"]
    # the same plan, the same bytes: no time and no (temporary) file name in the gzip header (RFC 1952)
    head = (tmp_path / "plan-steps.json.gz").read_bytes()[:10]
    assert head[3] & 0x08 == 0 and head[4:8] == b"\0\0\0\0", head


def test_a_run_that_recorded_the_names_in_results_json_reads_them_there(tmp_path: Path) -> None:
    old = {
        "plan": {"campaign_jobs": [{"name": "campaign-leaf1", "rounds": [{"label": "r0", "steps": ["a:b"]}]}]}
    }
    assert record.step_names(tmp_path, old) == {"campaign-leaf1": [["a:b"]]}
    assert record.step_names(tmp_path, {"plan": {"probe_jobs": []}}) == {}  # no campaign: no file needed


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "missing: results.json plan counts its steps and names them in this file"),
        (b"not gzip at all", "not the run's step names (gzip'd JSON)"),
        (
            gzip.compress(b'{"campaign_jobs":{"campaign-leaf1":[["a:b"'),
            "not the run's step names (gzip'd JSON)",
        ),
        (gzip.compress(json.dumps({"jobs": {}}).encode()), "found ['jobs']"),
        (gzip.compress(json.dumps({"campaign_jobs": {"x": ["a:b"]}}).encode()), 'expected {"campaign_jobs"'),
        (gzip.compress(b"[1, 2]"), "found list"),
    ],
    # Named ids: gzip.compress stamps the time into the bytes, and xdist's workers must collect the same ids.
    ids=["missing", "not-gzip", "cut-off", "wrong-key", "rounds-not-lists", "a-list"],
)
def test_a_step_names_file_missing_cut_off_or_of_another_shape_is_one_line(
    tmp_path: Path, content: bytes | None, says: str
) -> None:
    if content is not None:
        (tmp_path / "plan-steps.json.gz").write_bytes(content)
    with pytest.raises(ArchiveError) as err:
        record.step_names(tmp_path, _results())
    msg = str(err.value)
    assert msg.startswith(f"{tmp_path / 'plan-steps.json.gz'}: ") and says in msg and "\n" not in msg


def test_a_write_that_fails_leaves_the_old_file_and_no_half_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record.write_step_names(tmp_path, "plan", step_names(PLAN))
    before = (tmp_path / "plan-steps.json.gz").read_bytes()

    def full(jobs: Any) -> Any:
        yield next(iter(jobs))
        raise OSError(28, "No space left on device")

    with pytest.raises(ArchiveError, match=r"plan-steps\.json\.gz: could not write: No space left on device"):
        record.write_step_names(tmp_path, "plan", full(step_names(PLAN)))
    assert (tmp_path / "plan-steps.json.gz").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["plan-steps.json.gz"]


def test_a_resumes_names_beside_results_json_and_older_resumes_as_they_recorded_them(tmp_path: Path) -> None:
    shards = [("campaign-leaf2-r1", [["sendrecv:a-b:rail0", "sendrecv:c-d:rail0"], ["sendrecv:a-c:rail1"]])]
    rerun = ["sendrecv:a-b:rail0", "sendrecv:a-c:rail1", "sendrecv:c-d:rail0"]
    record.write_step_names(tmp_path, "resume-r1", iter(shards), rerun)
    results: dict[str, Any] = {
        "resumes": [
            {"resume": 1, "n_rerun_steps": 3, "job_step_counts": {"campaign-leaf2-r1": 3}},
            {"resume": 2, "n_rerun_steps": 0},  # found nothing to rerun: no file
            # recorded in results.json, as resumes did before: read there, not here
            {"resume": 3, "rerun_steps": ["x:y"], "job_steps": {"campaign-leaf1-r3": ["x:y"]}},
        ]
    }
    assert record.resume_step_names(tmp_path, results) == dict(shards)
    assert record.rerun_steps(tmp_path, results, 1) == rerun
    assert record.rerun_steps(tmp_path, results, 2) == []
    assert record.rerun_steps(tmp_path, results, 3) == ["x:y"]
    assert [p.name for p in tmp_path.iterdir()] == ["resume-r1-steps.json.gz"]
    (tmp_path / "resume-r1-steps.json.gz").unlink()
    with pytest.raises(ArchiveError) as err:
        record.resume_step_names(tmp_path, results)
    assert str(err.value) == (
        f"{tmp_path / 'resume-r1-steps.json.gz'}: missing: results.json resumes[1] counts its steps and "
        "names them in this file"
    )
    (tmp_path / "resume-r1-steps.json.gz").write_bytes(
        gzip.compress(json.dumps({"campaign_jobs": {}, "rerun_steps": {"a": 1}}).encode())
    )
    with pytest.raises(
        ArchiveError, match=r"expected \{\"campaign_jobs\".*found \['campaign_jobs', 'rerun_steps'\]"
    ):
        record.rerun_steps(tmp_path, results, 1)
    (tmp_path / "resume-r1-steps.json.gz").write_bytes(gzip.compress(b'{"campaign_jobs": {}}'))
    with pytest.raises(ArchiveError) as err:
        record.rerun_steps(tmp_path, results, 1)  # counted in results.json, not in its file
    assert str(err.value) == (
        f'{tmp_path / "resume-r1-steps.json.gz"}: expected "rerun_steps" (results.json resumes[1] counts 3)'
    )
    with pytest.raises(ArchiveError) as err:
        record.rerun_steps(tmp_path, results, 4)
    assert str(err.value) == f"{tmp_path / 'results.json'}: resumes: expected resume 4, found [1, 2, 3]"
