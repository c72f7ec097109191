"""--only-due: what a run restricted to the attestation-due nodes and links submits, judges and skips."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness import PytestRun, PytestRunner

from clusteraccept.families import JUDGED
from clusteraccept.flow import judged_nodes
from clusteraccept.judge import record
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.ops import scope
from clusteraccept.ops.attest import judged
from clusteraccept.outcome import Judged
from clusteraccept.plan.jobs import Plan, make_plan
from clusteraccept.plan.subjects import subjects
from clusteraccept.report.model import NOTHING_DUE, Banner, banner, not_planned_reason
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

REPO = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)


def demo(tmp_path: Path, nodes: str | None = None, leaf2: str | None = None) -> Path:
    """The demo site (its simulated hosts under tmp_path: xdist runs must not share them), resized."""
    text = (REPO / "site-configs" / "demo.yaml").read_text()
    data = yaml.safe_load(text.replace("{repo}/.vcluster/sim/demo", str(tmp_path / "sim")))
    if nodes:
        data["nodes"], data["blocks"]["leaf2"] = nodes, leaf2
    path = tmp_path / "site" / "demo.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def site_of(path: Path) -> Site:
    return load_site(str(path), REPO / "site-configs")


def prior_run(
    root: Path, site: Site, run_id: str, started: datetime, unverified: Iterable[str] = (), **extra: Any
) -> None:
    """A finished run that verified every node and link of ``site`` except those naming ``unverified``."""
    skip = set(unverified)
    keep = [n for n in site.nodes if n not in skip]
    links = [k for k in subjects(site, "pair_rail") if not skip & set(k.split(":")[0].split("-"))]
    verdicts = [
        *({"check": c, "family": c.split(".")[0], "subject": n, "outcome": "pass"}
          for n in keep for c in ("topology.gpu_inventory", "nccl.localization")),
        *({"check": "nccl.busbw", "family": "nccl", "subject": f"{k}:sendrecv:1GiB", "outcome": "pass"}
          for k in links),
    ]  # fmt: skip
    run = {"run_id": run_id, "started": started.isoformat(timespec="seconds"), "verdicts": verdicts, **extra}
    (root / run_id).mkdir(parents=True)
    (root / run_id / "results.json").write_text(json.dumps(run))


def names(plan: Plan) -> set[str]:
    return {s.name for s in plan.steps()}


def test_only_node3_due_submits_node3_its_pairs_intra_and_blocks(tmp_path: Path) -> None:
    site = site_of(demo(tmp_path))
    prior_run(tmp_path / "demo", site, "r1", NOW - timedelta(days=1), unverified=["node3"])
    sc = scope.compute(site, tmp_path / "demo", None, NOW)
    assert sc.nodes == {"node3"} and sc.pairs == {"node3-node4", "node2-node3"}  # in-block + cross pair
    assert {d.why for d in sc.due} == {"never verified"} and sc.n_links == 16
    assert not sc.record()["all_due"]
    full = make_plan(site)
    plan = sc.restrict(full)
    assert [(pj.name, pj.nodes) for pj in plan.probe_jobs] == [("probe-nodes", ("node3",))]
    assert sc.unplanned(plan) == () and sc.record(plan)["not_planned"] == []
    # the whole-set collectives (every node, exclusive) wait for a night when everything is due
    assert names(plan) == {s.name for s in full.steps() if "node3" in s.nodes and s.scope != "all"}
    assert {(s.kind, s.subject) for s in plan.steps() if s.kind != "pair"} == {
        ("node", "node3"),
        ("block", "leaf2"),
    }
    # campaigns allocate only the nodes their kept steps use; leaf1 (node1, node2) has nothing due, and
    # the cross-block job keeps node3's cross pair only (not the whole set)
    assert [(cj.name, cj.nodes) for cj in plan.campaign_jobs] == [
        ("campaign-leaf2", ("node3", "node4")),
        ("campaign-cross", ("node2", "node3")),
    ]
    held = "attestation valid until 2026-12-07T02:00:00+00:00 (run r1)"
    assert sc.skip_reason("node", "node1") == held
    assert sc.skip_reason("gpu", "node4:gpu3") == held
    assert sc.skip_reason("pair_rail", "node1-node2:rail5") == held
    assert sc.skip_reason("block", "leaf1") == held
    in_scope = [("node", "node3"), ("rail", "node3:rail5"), ("pair_rail", "node2-node3:rail0")]
    in_scope += [("pair_rail", "node3-node4:rail7"), ("intra_node", "node3"), ("block", "leaf2")]
    for per, subject in in_scope:
        assert sc.skip_reason(per, subject) is None, (per, subject)


def one_failed_link(tmp_path: Path) -> tuple[Site, scope.Scope]:
    """Everything verified yesterday; an hour ago node1-node2 rail5 failed: that link alone is due."""
    site = site_of(demo(tmp_path))
    prior_run(tmp_path / "demo", site, "r1", NOW - timedelta(days=1))
    failed = {"check": "nccl.busbw", "family": "nccl", "subject": "node1-node2:rail5:sendrecv:1GiB"}
    later = {"run_id": "r2", "started": (NOW - timedelta(hours=1)).isoformat(), "verdicts": [
        {**failed, "outcome": "fail"}]}  # fmt: skip
    (tmp_path / "demo" / "r2").mkdir()
    (tmp_path / "demo" / "r2" / "results.json").write_text(json.dumps(later))
    return site, scope.compute(site, tmp_path / "demo", None, NOW)


def test_a_due_link_brings_every_rail_of_its_pair_and_nothing_else(tmp_path: Path) -> None:
    site, sc = one_failed_link(tmp_path)
    assert [(d.subject, d.why) for d in sc.due] == [
        ("node1-node2:rail5", "failed in the latest run that judged it")
    ]
    plan = sc.restrict(make_plan(site))
    assert plan.probe_jobs == ()
    assert names(plan) == {f"sendrecv:node1-node2:rail{k}" for k in range(8)}
    assert [(cj.name, cj.nodes) for cj in plan.campaign_jobs] == [("campaign-leaf1", ("node1", "node2"))]


def test_a_due_link_the_plan_does_not_hold_is_named_and_stays_due(tmp_path: Path) -> None:
    """A due link whose pair step is not in the plan (here: the campaigns filtered away, as -k or a pair
    selection that changed would) is not passed over: the scope names it, the banner and the summary say
    it stays due, and the run is not an acceptance even when every node was due."""
    site, sc = one_failed_link(tmp_path)
    assert sc.unplanned(sc.restrict(make_plan(site))) == ()  # the full plan has the pair
    without_pairs = sc.restrict(Plan(make_plan(site).probe_jobs, ()))
    assert sc.unplanned(without_pairs) == ("node1-node2:rail5",)
    rec = sc.record(without_pairs)
    assert rec["not_planned"] == ["node1-node2:rail5"]
    line = scope.summary_line({"scope": rec})
    assert line is not None and line.endswith(
        "1 due subject(s) not in this run's plan, still due: node1-node2:rail5"
    ), line
    # every node due and every verdict passed: still no ACCEPT while a due link went untested
    b = banner({"scope": {**rec, "all_due": True}, "verdicts": [{"outcome": "pass"}], "families": JUDGED})
    assert b == Banner("INCOMPLETE", (not_planned_reason(["node1-node2:rail5"]),)), b


def test_a_new_node_is_due_with_its_checks_and_pairs(tmp_path: Path) -> None:
    four = site_of(demo(tmp_path))
    prior_run(tmp_path / "demo", four, "r1", NOW - timedelta(days=1))  # node[1-4] and their links verified
    five = site_of(demo(tmp_path, nodes="node[1-5]", leaf2="node[3-5]"))
    sc = scope.compute(five, tmp_path / "demo", None, NOW)
    assert sc.nodes == {"node5"} and ("node5", "never verified") in {(d.subject, d.why) for d in sc.due}
    full = make_plan(five)
    plan = sc.restrict(full)
    assert [pj.nodes for pj in plan.probe_jobs] == [("node5",)]
    assert {s.name for s in full.steps() if "node5" in s.nodes and s.scope != "all"} <= names(plan)
    for partner in ("node3", "node4"):  # its in-block pairs, every rail
        assert {f"sendrecv:{partner}-node5:rail{k}" for k in range(8)} <= names(plan)
    assert "all_reduce:node5" in names(plan) and "all_reduce:node4" not in names(plan)


def test_an_expired_ttl_makes_everything_due(tmp_path: Path) -> None:
    site = site_of(demo(tmp_path))
    prior_run(tmp_path / "demo", site, "r1", NOW - timedelta(days=8))  # attest.ttl_days: 7 (default)
    sc = scope.compute(site, tmp_path / "demo", None, NOW)
    assert sc.nodes == set(site.nodes) and sc.n_links == len(subjects(site, "pair_rail"))
    assert sc.due[0].why == "attestation expired 2026-11-30T02:00:00+00:00 (run r1)"
    full = make_plan(site)
    plan = sc.restrict(full)
    assert names(plan) == names(full) and plan.probe_jobs == full.probe_jobs
    # every node was due: nothing was left out, so the run is judged like a full one
    assert sc.record()["all_due"] and banner({"scope": sc.record(), "verdicts": [{"outcome": "pass"}]}) == (
        Banner("ACCEPT", ("every check passed or was skipped with a reason",))
    )


def test_nothing_due_plans_nothing_and_says_so(tmp_path: Path) -> None:
    site = site_of(demo(tmp_path))
    prior_run(tmp_path / "demo", site, "r1", NOW - timedelta(days=1))
    sc = scope.compute(site, tmp_path / "demo", "r-now", NOW)
    assert sc.due == () and sc.restrict(make_plan(site)) == Plan((), ())
    results = {"scope": sc.record(), "verdicts": [], "jobs": []}
    assert banner(results).verdict == "INCOMPLETE" and banner(results).reasons == (NOTHING_DUE,)
    assert scope.summary_line(results) == NOTHING_DUE
    assert judged_nodes(results, site.nodes) == ()


def test_a_due_only_run_attests_only_what_it_probed() -> None:
    results = {
        "scope": {
            "only_due": True,
            "nodes": ["node3"],
            "n_links": 0,
            "due": [{"subject": "node3", "why": "x"}],
        },
        "verdicts": [
            {"check": "nccl.localization", "family": "nccl", "subject": n, "outcome": o}
            for n, o in (("node3", "pass"), ("node2", "pass"), ("node4", "fail"))
        ],
    }
    nodes, _ = judged(results, ("node1", "node2", "node3", "node4"))
    # node2 only met node3 tonight: not verified; a failure found on node4 still makes it due
    assert nodes == {"node3": True, "node4": False}


def test_tests_outside_the_scope_skip_with_the_attestation_unless_they_failed() -> None:
    def judged_with(*verdicts: Verdict) -> Judged:
        dicts = [v.to_dict() for v in verdicts]
        return Judged("nccl", "node2", dicts, [], False, lambda k, v: None, "held: r1")

    with pytest.raises(pytest.skip.Exception, match="held: r1"):
        judged_with().assert_accepted()  # no verdict at all: not an ERROR
    with pytest.raises(pytest.skip.Exception, match="held: r1"):
        judged_with(Verdict("nccl.localization", "nccl", "node2", Outcome.PASS, "ok")).assert_accepted()
    blamed = Verdict("nccl.localization", "nccl", "node2", Outcome.FAIL, "culprit: node2 rail1")
    with pytest.raises(pytest.fail.Exception, match="culprit: node2 rail1"):
        judged_with(blamed).assert_accepted()


# --- the plugin end to end (submitit's local executor, simulated hosts) ---------------------------
def pytest_run(run_pytest: PytestRunner, tmp_path: Path, *args: str) -> PytestRun:
    return run_pytest("-rs", f"--site={demo(tmp_path)}", "--executor=local", f"--reports-dir={tmp_path}",
                      "--run-id=tonight", "--only-due", *args)  # fmt: skip


def test_dry_run_writes_only_the_due_jobs(run_pytest: PytestRunner, tmp_path: Path) -> None:
    prior_run(tmp_path / "demo", site_of(demo(tmp_path)), "r1", datetime.now(UTC), unverified=["node3"])
    proc = pytest_run(run_pytest, tmp_path, "suites/", "--dry-run")
    assert proc.returncode == 0, proc.stdout[-2000:]
    run = tmp_path / "demo" / "tonight"
    results = record.load(run)
    assert results["scope"]["only_due"] and results["scope"]["nodes"] == ["node3"]
    assert results["scope"]["n_links"] == 16
    assert [j["nodes"] for j in results["plan"]["probe_jobs"]] == [["node3"]]
    assert [j["name"] for j in results["plan"]["campaign_jobs"]] == ["campaign-leaf2", "campaign-cross"]
    assert sorted(p.name for p in (run / "jobs").glob("*.sbatch")) == [
        "campaign-cross.sbatch", "campaign-leaf2.sbatch", "probe-nodes.sbatch"]  # fmt: skip
    assert "only due: 1 node(s) and 16 link(s): node3 (never verified)" in proc.stdout


def test_a_due_only_run_judges_the_due_node_and_skips_the_others(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    started = datetime.now(UTC).replace(microsecond=0)
    prior_run(tmp_path / "demo", site_of(demo(tmp_path)), "r1", started, unverified=["node3"])
    proc = pytest_run(run_pytest, tmp_path, "suites/test_topology.py")
    assert proc.returncode == 0, proc.stdout[-3000:]
    until = (started + timedelta(days=7)).isoformat()
    assert re.search(
        rf"SKIPPED \[3\] \S+: attestation valid until {re.escape(until)} \(run r1\)", proc.stdout
    )
    assert "1 passed, 3 skipped" in proc.stdout  # node3's item; the 3 others' skip
    run = tmp_path / "demo" / "tonight"
    results = record.load(run)
    assert {v["subject"].split(":")[0] for v in results["verdicts"]} == {"node3"}  # no ERROR for the others
    reason = (
        "restricted to 1 due node(s) and 16 due link(s) (--only-due): not a full acceptance; "
        "the other nodes and links keep their attestations"
    )
    said = next(r for r in banner(results).reasons if r.startswith(reason))
    # only the topology suite ran: node3's 16 due links had no nccl step, so they stay due, said so
    assert "; 16 due subject(s) not in this run's plan, still due: node3-node4:rail0" in said, said
    assert banner(results).verdict == "INCOMPLETE"
    assert reason in (run / "report.html").read_text()
    assert 'name="verdict" value="INCOMPLETE"' in (run / "junit.xml").read_text()


def test_nothing_due_submits_nothing_and_every_test_skips(run_pytest: PytestRunner, tmp_path: Path) -> None:
    started = datetime.now(UTC).replace(microsecond=0)
    prior_run(tmp_path / "demo", site_of(demo(tmp_path)), "r1", started)
    proc = pytest_run(run_pytest, tmp_path, "suites/")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " passed" not in proc.stdout and " failed" not in proc.stdout
    assert f"attestation valid until {(started + timedelta(days=7)).isoformat()} (run r1)" in proc.stdout
    assert NOTHING_DUE in proc.stdout
    run = tmp_path / "demo" / "tonight"
    assert not (run / "submitit").exists() and not list((run / "jobs").iterdir())
    results = record.load(run)
    assert results["scope"]["due"] == [] and results["jobs"] == []
    assert banner(results).reasons == (NOTHING_DUE,)
    assert NOTHING_DUE in (run / "report.html").read_text()
