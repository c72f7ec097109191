"""Due-only nights (nightly.only_due / --only-due): complete, compared on what they judged, in the entries."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept.errors import SiteConfigError
from clusteraccept.ops import nightly
from clusteraccept.site.cron import parse_scrontab
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

REPO = Path(__file__).resolve().parents[3]


def site_with(tmp_path: Path, nightly_cfg: dict[str, Any]) -> Site:
    data = yaml.safe_load((REPO / "site-configs" / "demo.yaml").read_text())
    data["nightly"] = {"reports_dir": str(tmp_path / "r"), **nightly_cfg}
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site(str(path), REPO / "site-configs")


def loc(node: str, outcome: str) -> dict[str, Any]:
    return {"check": "nccl.localization", "family": "nccl", "subject": node, "outcome": outcome,
            "message": "m", "value": None, "labels": {}}  # fmt: skip


def run(
    run_id: str, day: int, verdicts: list[dict[str, Any]], due: list[str] | None = None
) -> dict[str, Any]:
    """A finished run; ``due``: a due-only run over those nodes (None: a full run)."""
    out: dict[str, Any] = {
        "site": "demo",
        "run_id": run_id,
        "started": f"2026-11-{day:02d}T02:00:00+00:00",
        "jobs": [{"name": "campaign-leaf1", "state": "COMPLETED", "missing": []}],
        "verdicts": verdicts,
    }
    if due is not None:
        scope = [{"subject": n, "why": "failed in the latest run that judged it"} for n in due]
        out["scope"] = {"only_due": True, "as_of": out["started"], "nodes": due, "n_links": 0, "due": scope}
    return out


def stored(root: Path, *runs: dict[str, Any]) -> None:
    for r in runs:
        (root / r["run_id"]).mkdir(parents=True)
        (root / r["run_id"] / "results.json").write_text(json.dumps(r))


def test_a_due_only_night_is_complete_and_compared_on_what_it_judged(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    full = run(
        "r1", 27, [loc("node1", "pass"), loc("node2", "fail"), loc("node3", "fail"), loc("node4", "fail")]
    )
    due_only = run("r2", 28, [loc("node3", "fail")], due=["node3"])
    stored(root, full, due_only)
    tonight = run("r3", 29, [loc("node2", "fail"), loc("node3", "pass")], due=["node2", "node3"])
    assert nightly.complete(due_only) and nightly.complete(tonight)
    ref = nightly.reference(root, tonight, tmp_path / "no-store.sqlite")
    assert ref is not None and ref["run_id"] == "r2" and ref["backfilled_from"] == ["r1"]
    # each test id tonight judged, against the newest good run that judged it; node1/node4: not tonight's
    assert sorted((v["subject"], v["outcome"]) for v in ref["verdicts"]) == [
        ("node2", "fail"),
        ("node3", "fail"),
    ]
    night = nightly.verdict_of_night("demo", tonight, ref, [])
    assert night.code == nightly.OK
    assert night.line == (
        "clusteraccept nightly demo run r3: OK: 0 new failure(s); 1 fixed, 1 still failing vs r2 and 1 "
        "earlier run(s); only due: 2 node(s) and 0 link(s)"
    )
    assert night.detail["diff"]["n_gone_tests"] == 0  # node1/node4 not tested tonight: not "gone" either


def test_a_full_night_after_due_only_ones_is_compared_per_subject(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    stored(root, run("r1", 27, [loc("node1", "fail"), loc("node2", "pass")]), run("r2", 28, [], due=[]))
    tonight = run("r3", 29, [loc("node1", "fail"), loc("node2", "fail")])
    ref = nightly.reference(root, tonight, tmp_path / "no-store.sqlite")
    assert ref is not None and ref["backfilled_from"] == ["r1"]  # r2 found nothing due: it judged nothing
    night = nightly.verdict_of_night("demo", tonight, ref, [])
    assert night.code == nightly.REGRESSED and night.detail["diff"]["new_failures"] == [
        "nccl.localization[node2]"
    ]  # node1's failure is old (r1), not new because the due-only r2 did not test it


def test_nothing_due_is_an_ok_night_that_says_so() -> None:
    nothing = run("r3", 29, [], due=[])
    nothing["jobs"] = []
    assert nightly.complete(nothing)
    night = nightly.verdict_of_night("demo", nothing, None, [])
    assert night.code == nightly.OK
    assert night.line == (
        "clusteraccept nightly demo run r3: OK: nothing due: every node and link holds a valid attestation"
    )
    lost = {**nothing, "jobs": [{"name": "probe-nodes", "state": "NODE_FAIL", "missing": ["node3"]}]}
    assert not nightly.complete(lost)


def test_only_due_in_the_site_and_the_flag_reach_pytest_and_the_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = site_with(tmp_path, {"only_due": True})
    (entry,) = parse_scrontab(nightly.render_scrontab(site, python="/venv/bin/python"))
    assert entry.command.endswith(f"nightly --site {tmp_path}/demo.yaml --only-due")
    (cron,) = parse_scrontab(nightly.render_crontab(site, python="/venv/bin/python"))
    assert f"--site {tmp_path}/demo.yaml --only-due >>" in cron.command
    plain = site_with(tmp_path, {})
    assert "--only-due" not in nightly.render_scrontab(plain)
    seen: list[list[str]] = []

    def fake_pytest(argv: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 4)  # no results.json: an INCOMPLETE night

    monkeypatch.setattr("clusteraccept.ops.nightly.subprocess.run", fake_pytest)
    assert nightly.night(site).code == nightly.INCOMPLETE
    nightly.night(plain, due_only=True)
    nightly.night(plain)
    assert ["--only-due" in argv for argv in seen] == [True, True, False]
    with pytest.raises(SiteConfigError, match=r"nightly\.only_due"):
        site_with(tmp_path, {"only_due": "yes"})


def test_the_cli_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from clusteraccept.__main__ import main

    site_with(tmp_path, {})
    monkeypatch.setenv("SLURM_CONF", "restored-after-the-test")  # main() exports the site's slurm_conf
    got: list[bool] = []

    def fake_night(site: Site, extra: Any, due_only: bool = False) -> nightly.Night:
        got.append(due_only)
        return nightly.Night(nightly.OK, "line", {})

    monkeypatch.setattr(nightly, "night", fake_night)
    assert main(["nightly", "--site", str(tmp_path / "demo.yaml"), "--only-due"]) == 0
    assert got == [True]
