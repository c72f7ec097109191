"""The families judged beside the steps keep their verdicts in the run (flow._judge_family, checks/kept.py):
on the demo's real run, what a family judges from its view of the site is what it judged from the whole site,
a rejudge after a baselines edit uses the kept verdicts of every family whose baselines did not change, and
an edit of its own baselines, of its evidence, or ``--reparse`` judges it again."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from clusteraccept import checks, flow
from clusteraccept.checks import kept
from clusteraccept.jobs.archive import PARSED
from clusteraccept.site.load import load_site

from .conftest import DemoRun


def test_families_keep_their_verdicts_until_what_they_read_changes(
    demo_run: DemoRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run)
    for old in (run / PARSED).glob("*.verdicts.json.gz"):
        old.unlink()
    site = load_site(demo_run.site, demo_run.site.parent)
    archived = flow.load_archived(run)
    families = tuple(f for f in demo_run.results["families"] if f != "nccl")
    assert {"topology", "gpudirect"} <= set(families)
    # the view changes nothing the demo's judges say
    whole = {f: checks.judge(f, site, flow._evidence_of(f, archived), site.nodes) for f in families}
    first = flow._judge_families(site, archived, families, site.nodes, run)
    assert first == whole
    assert sorted(p.name for p in (run / PARSED).glob("*.verdicts.json.gz")) == sorted(
        f"{f}.verdicts.json.gz" for f in families
    )

    judge = checks.judge
    judged: list[str] = []

    def spy(family, seen, *args, **kwargs):  # type: ignore[no-untyped-def]
        judged.append(family)
        assert seen.file == "" and all(kept.could_match(k, f"{family}.") for k in seen.baselines)
        return judge(family, seen, *args, **kwargs)

    monkeypatch.setattr(checks, "judge", spy)
    assert flow._judge_families(site, archived, families, site.nodes, run) == first and judged == []
    # new nccl baselines, the site file moved: nothing judged again
    nccl_x10 = {k: replace(r, ref=r.ref * 10) for k, r in site.baselines.items() if k.startswith("nccl.")}
    moved = replace(site, baselines={**site.baselines, **nccl_x10}, file=str(tmp_path / "x.yaml"))
    assert flow._judge_families(moved, archived, families, site.nodes, run) == first and judged == []
    # new GPUDirect baselines: GPUDirect judged again (against them), the rest kept
    bw_x10 = {k: replace(r, ref=r.ref * 10) for k, r in site.baselines.items() if k.startswith("gpudirect.")}
    strict = replace(site, baselines={**site.baselines, **bw_x10})
    got = flow._judge_families(strict, archived, families, site.nodes, run)
    assert judged == ["gpudirect"] and got["gpudirect"] != first["gpudirect"]
    assert {f: v for f, v in got.items() if f != "gpudirect"} == {
        f: v for f, v in first.items() if f != "gpudirect"
    }
    # a topology evidence that is not the one judged: topology judged again
    judged.clear()
    (ev, ref), *rest = archived["topology"]
    edited = {**archived, "topology": [(replace(ev, stdout=ev.stdout + "\n"), ref), *rest]}
    flow._judge_families(strict, edited, families, site.nodes, run)
    assert judged == ["topology"]
    # --reparse: every family judged again
    judged.clear()
    flow._judge_families(strict, edited, families, site.nodes, run, reparse=True)
    assert judged == list(families)
