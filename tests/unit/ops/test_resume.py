"""What --resume reruns (pure), how the rerun plan is cut, how job records merge, and superseding."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusteraccept.evidence import Evidence
from clusteraccept.jobs.archive import archive_job, load_all, read
from clusteraccept.ops.resume import Rerun, merge_jobs, reduced_plan, supersede, what_to_rerun
from clusteraccept.plan.jobs import make_plan, step_names
from clusteraccept.site.load import load_site

REPO = Path(__file__).resolve().parents[3]
SITE = load_site("demo", REPO / "site-configs")
PLAN = make_plan(SITE, families=("topology",), nccl=True)
RECORDED = dict(step_names(PLAN))  # the step names the run recorded (judge/record.step_names)


def results(jobs: list[dict[str, Any]], verdicts: list[dict[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    return {"jobs": jobs, "verdicts": list(verdicts), "families": ["topology", "nccl"]}


def test_missing_and_error_subjects_are_rerun_nothing_else() -> None:
    r = results(
        [
            {"name": "probe-nodes", "state": "COMPLETED", "missing": ["node4"]},
            {
                "name": "campaign-leaf2",
                "state": "NODE_FAIL",
                "missing": ["sendrecv:node3-node4:rail0", "all_reduce:leaf2"],
            },
            {"name": "campaign-leaf1", "state": "COMPLETED", "missing": []},
        ],
        [
            {
                "check": "nccl.launch",
                "family": "nccl",
                "subject": "node1-node4:rail3:sendrecv",
                "outcome": "error",
            },
            {
                "check": "topology.pcie_link",
                "family": "topology",
                "subject": "node2:gpu1",
                "outcome": "error",
            },
            {
                "check": "nccl.busbw",
                "family": "nccl",
                "subject": "node1-node2:rail1:sendrecv:1GiB",
                "outcome": "fail",
            },
        ],
    )
    rerun = what_to_rerun(r, PLAN, RECORDED)
    assert rerun.nodes == ("node2", "node4")
    assert rerun.steps == {"sendrecv:node3-node4:rail0", "all_reduce:leaf2", "sendrecv:node1-node4:rail3"}
    assert rerun.unknown == ()


def test_a_refused_campaign_reruns_all_its_steps() -> None:
    subjects = [
        s.subject
        for cj in PLAN.campaign_jobs
        if cj.name == "campaign-leaf1"
        for r in cj.rounds
        for s in r.steps
    ]
    r = results([{"name": "campaign-leaf1", "state": "SUBMIT_ERROR", "missing": subjects}])
    rerun = what_to_rerun(r, PLAN, RECORDED)
    leaf1 = {
        s.name for cj in PLAN.campaign_jobs if cj.name == "campaign-leaf1" for r in cj.rounds for s in r.steps
    }
    assert rerun.steps == leaf1 and rerun.nodes == ()


def test_reduced_plan_keeps_round_order_and_only_the_nodes_needed() -> None:
    rerun = Rerun(
        (), frozenset({"sendrecv:node3-node4:rail0", "sendrecv:node3-node4:rail5", "all_reduce:leaf2"})
    )
    small = reduced_plan(PLAN, rerun, "r1")
    assert small.probe_jobs == ()
    (cj,) = small.campaign_jobs
    assert (cj.name, cj.nodes) == ("campaign-leaf2-r1", ("node3", "node4"))
    assert [(r.index, [s.name for s in r.steps]) for r in cj.rounds] == [
        (0, ["sendrecv:node3-node4:rail0", "sendrecv:node3-node4:rail5"]),
        (1, ["all_reduce:leaf2"]),
    ]
    probe = reduced_plan(PLAN, Rerun(("node2",), frozenset()), "r2")
    assert [(p.name, p.nodes) for p in probe.probe_jobs] == [("probe-nodes-r2", ("node2",))]


def test_merge_moves_fully_rerun_jobs_out_and_keeps_the_rest() -> None:
    old = [
        {"name": "campaign-leaf1", "state": "COMPLETED", "missing": []},
        {"name": "campaign-leaf2", "state": "NODE_FAIL", "missing": ["sendrecv:node3-node4:rail0"]},
        {
            "name": "campaign-cross",
            "state": "TIMEOUT",
            "missing": ["all_reduce:all", "sendrecv:node1-node4:rail0"],
        },
    ]
    rerun = Rerun((), frozenset({"sendrecv:node3-node4:rail0", "all_reduce:all"}))
    new = [{"name": "campaign-leaf2-r1", "state": "COMPLETED", "missing": []}]
    jobs, superseded = merge_jobs(old, new, rerun)
    assert [j["name"] for j in superseded] == ["campaign-leaf2"]
    assert jobs == [old[0], {**old[2], "missing": ["sendrecv:node1-node4:rail0"]}, new[0]]


def test_supersede_moves_exactly_the_replaced_evidence(tmp_path: Path) -> None:
    def ev(host: str, check: str, **meta: str) -> Evidence:
        return Evidence(host, "x", stdout="y", meta={"check": check, **meta})

    step = {"collective": "sendrecv", "round_index": "2"}
    archived = dict(
        (e.host + e.meta.get("subject", ""), ref)
        for e, ref in [
            *archive_job(tmp_path, "campaign-leaf2", [
                ev("node3", "nccl", subject="node3-node4:rail1", **step),
                ev("node3", "nccl", subject="node3-node4:rail10", **step),
            ]),
            *archive_job(tmp_path, "probe-nodes", [ev("node4", "topology"), ev("node3", "topology")]),
        ]
    )  # fmt: skip
    moved = supersede(tmp_path, Rerun(("node4",), frozenset({"sendrecv:node3-node4:rail1"})), 1)
    assert len(moved) == 2 and all(m.startswith("superseded/r1/") for m in moved)
    left = {ref for _, ref in load_all(tmp_path)}
    assert left == {archived["node3node3-node4:rail10"], archived["node3"]}
    assert {read(tmp_path, m)["host"] for m in moved} == {"node3", "node4"}
    assert all(read(tmp_path, m)["stdout"] == "y" for m in moved)
    assert not (tmp_path / "raw" / "probe-nodes" / "node4.jsonl.gz").exists()  # nothing left in it


def test_steps_killed_with_their_job_are_rerun_finished_ones_are_not() -> None:
    leaf2 = next(cj for cj in PLAN.campaign_jobs if cj.name == "campaign-leaf2")
    names = [s.name for r in leaf2.rounds for s in r.steps]
    done, killed, never = names[0], names[3], names[-1]

    def launch(step: str, outcome: str) -> dict[str, Any]:
        collective, subject = step.split(":", 1)
        return {
            "check": "nccl.launch",
            "family": "nccl",
            "subject": f"{subject}:{collective}",
            "outcome": outcome,
        }

    r = {
        "families": ["nccl"],
        "jobs": [{"name": "campaign-leaf2", "state": "NODE_FAIL", "missing": [never]}],
        "verdicts": [launch(done, "pass"), launch(killed, "fail")],
    }
    recorded = {"campaign-leaf2": [names]}
    assert what_to_rerun(r, PLAN, recorded).steps == {killed, never}
    r["jobs"][0]["state"] = "COMPLETED"  # a failing launch in a job that ran to its end is a finding
    assert what_to_rerun(r, PLAN, recorded).steps == {never}


def test_a_resumes_job_killed_again_reruns_its_own_steps_from_their_recorded_names() -> None:
    """A resume's shard (``campaign-leaf2-r1``) that Slurm ended early too: its steps are known from the
    names the resume recorded (judge/record.resume_step_names), not from the plan's job."""
    leaf2 = next(cj for cj in PLAN.campaign_jobs if cj.name == "campaign-leaf2")
    names = [s.name for r in leaf2.rounds for s in r.steps]
    second = names[4:8]
    r = {
        "families": ["nccl"],
        "jobs": [
            {"name": "campaign-leaf2", "state": "COMPLETED", "missing": []},
            {"name": "campaign-leaf2-r1", "state": "TIMEOUT", "missing": []},
        ],
        "verdicts": [
            {
                "check": "nccl.launch",
                "family": "nccl",
                "subject": f"{s.split(':', 1)[1]}:{s.split(':')[0]}",
                "outcome": "fail" if s in second or s == names[-1] else "pass",
            }
            for s in names
        ],
        "resumes": [{"resume": 1, "n_rerun_steps": 8, "job_step_counts": {"campaign-leaf2-r1": 4}}],
    }
    recorded = {"campaign-leaf2": [names], "campaign-leaf2-r1": [second]}
    assert what_to_rerun(r, PLAN, recorded).steps == set(second)
    # the first pass's job ran to its end: its own failing launch is a finding, never a rerun
    assert names[-1] not in what_to_rerun(r, PLAN, recorded).steps
