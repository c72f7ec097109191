"""A campaign big enough for the step judging's worker processes has its other families judged meanwhile in
a forked child (flow._beside): the same verdicts, in the same order, as judged one after the other, and what
a judge raises there is raised here."""

from __future__ import annotations

import gc

import pytest

from clusteraccept import checks, flow
from clusteraccept.checks import nccl
from clusteraccept.judge import record
from clusteraccept.site.load import load_site

from .conftest import DemoRun


def _judged(demo_run: DemoRun) -> list[object]:
    site = load_site(demo_run.site, demo_run.site.parent)
    results = record.load(demo_run.run, "bad")
    archived = flow.load_archived(demo_run.run)
    families = tuple(f for f in results["families"] if f != "nccl")
    return flow.judge_all(site, archived, families, "nccl" in results["families"])


def test_families_judged_beside_the_steps_give_the_same_verdicts(
    demo_run: DemoRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    serial = _judged(demo_run)
    forks: list[bool] = []
    beside = flow._beside

    def spy(work, fork):  # type: ignore[no-untyped-def]
        forks.append(fork)
        return beside(work, fork)

    monkeypatch.setattr(flow, "_beside", spy)
    monkeypatch.setattr(nccl, "PARALLEL_MIN", 8)
    monkeypatch.setattr(nccl, "cpus", lambda: 2)
    monkeypatch.setattr(nccl, "may_fork", lambda: True)  # (an xdist worker has an I/O thread: serial)
    frozen = gc.get_freeze_count()
    assert _judged(demo_run) == serial and forks == [True]
    assert gc.get_freeze_count() <= frozen  # what it froze for the fork is unfrozen


def test_what_a_family_raises_in_the_child_is_raised_here(
    demo_run: DemoRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nccl, "PARALLEL_MIN", 8)
    monkeypatch.setattr(nccl, "cpus", lambda: 2)
    monkeypatch.setattr(nccl, "may_fork", lambda: True)
    judge = checks.judge

    def broken(family, *args, **kwargs):  # type: ignore[no-untyped-def]
        if family == "topology":
            raise ValueError("topology: a judge that fails")
        return judge(family, *args, **kwargs)

    monkeypatch.setattr(checks, "judge", broken)
    with pytest.raises(ValueError, match="topology: a judge that fails"):
        _judged(demo_run)
