"""A step's judgement up to its baselines, stored (checks/launched.py): read back equal to the one worked out,
used only for the very step, code and site (less its baselines) it was made under, and a rejudge against
new baselines from it gives what judging the step from its parse gives."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from clusteraccept.checks import launched, nccl
from clusteraccept.checks.launch import Finding
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import error, expect, skip
from clusteraccept.parsers import stored
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

DATA = Path(__file__).resolve().parents[2] / "data"
# every capture a campaign step's stdout can hold (as tests/unit/parsers/test_stored.py reads them)
FIXTURES = sorted(
    [
        *(
            ("nccl-tests", p)
            for d in ("nccl-tests", "nccl-debug", "launch-record")
            for p in (DATA / d).iterdir()
        ),
        *(("torch-nccl", p) for p in (DATA / "torch-nccl").iterdir()),
    ]
)
FIXTURES = [(source, p) for source, p in FIXTURES if p.name != "SOURCES.md"]
PATH = "raw/c/r001.jsonl.gz#nccl/a/step.json"
LINE = "[1,[]]"  # the stored parse a judgement was made from (its line: only its CRC is read here)


def _site() -> Site:
    return load_site("demo", REPO_ROOT / "site-configs")


def _step(site: Site, source: str, text: str) -> Evidence:
    a, b = site.nodes[0], site.nodes[1]
    meta = {"kind": "pair", "scope": "pair_in_block", "collective": "sendrecv", "nodes": f"{a},{b}"}
    meta.update(rail="0", subject=f"{a}-{b}:rail0", check="nccl")
    return Evidence(a, source, argv=("sendrecv_perf",), stdout=text, returncode=0, meta=meta)


def _sendrecv(site: Site) -> Evidence:
    return _step(site, "nccl-tests", (DATA / "nccl-tests" / "sendrecv-1node-2xh200-v2.19.6.txt").read_text())


@pytest.mark.parametrize(("source", "path"), FIXTURES, ids=lambda x: getattr(x, "name", x))
def test_a_stored_judgement_reads_back_equal_to_the_one_worked_out(source: str, path: Path) -> None:
    site = _site()
    ev = _step(site, source, path.read_text())
    made = nccl.launch_part(site, ev, PATH, {}, stored.parse_step(source, ev.stdout))
    key = launched.key_of(site, {})
    assert launched.loads(launched.dumps(key, ev, LINE, PATH, made), key, ev, LINE, PATH) == made


def test_the_fixtures_give_findings_results_and_refusals() -> None:
    """The round trip above covers each kind of step the fixtures make: numbers judged (from a launch
    that failed a check, so they count as slow), numbers not judged, output not parsed."""
    site = _site()
    made = [
        nccl.launch_part(site, ev, PATH, {}, stored.parse_step(source, ev.stdout))
        for source, p in FIXTURES
        for ev in [_step(site, source, p.read_text())]
    ]
    assert any(m.findings for m in made)
    assert any(m.measured and m.bad for m in made)
    assert any(m.measured is None and m.failed == "fail" for m in made)
    assert any(m.measured is None and m.failed == "error" for m in made)


def test_what_no_fixture_makes_reads_back_too() -> None:
    """A gated step (its numbers SKIP, not judged), a verdict without evidence (an unreadable launch
    record), findings with CPUs, versions and no verdict of their own (ok None)."""
    made = launched.Launched(
        (
            expect("nccl.launch", "nccl", "a-b:rail0", True, "fine", evidence=(PATH,), labels={"x": "y"}),
            error("launch.binding", "nccl", "a-b:rail0", "unreadable launch record: no"),
            skip("nccl.busbw", "nccl", "a-b:rail0:1GiB", "not judged: launch.nic on a: off rail", (PATH,)),
        ),
        (
            Finding("launch.binding", "a", True, "bound", "a-b:rail0", cpus=frozenset({3, 1, 2})),
            Finding("nccl.config", "a", None, "no log", "a-b:rail0", versions=("2.21.5", "2.19.3")),
        ),
        None,
    )
    ev = _sendrecv(_site())
    assert launched.loads(launched.dumps("k", ev, LINE, PATH, made), "k", ev, LINE, PATH) == made
    # a verdict that names other evidence than its step's keeps it
    odd = replace(made, verdicts=(error("nccl.launch", "nccl", "s", "m", ("raw/other#x", PATH)),))
    assert launched.loads(launched.dumps("k", ev, LINE, PATH, odd), "k", ev, LINE, PATH) == odd
    # a result measured as an int (the PyTorch fallback may print one) comes back an int, as judged
    ints = replace(made, measured=((1024, 12), (2048, 12.5)))
    back = launched.loads(launched.dumps("k", ev, LINE, PATH, ints), "k", ev, LINE, PATH)
    assert back is not None and repr(back.measured) == "((1024, 12), (2048, 12.5))"


def test_a_stored_judgement_is_only_for_its_step_and_key() -> None:
    site = _site()
    ev = _sendrecv(site)
    key = launched.key_of(site, {})
    line = launched.dumps(
        key, ev, LINE, PATH, nccl.launch_part(site, ev, PATH, {}, stored.parse_step(ev.source, ev.stdout))
    )
    assert launched.loads(line, key, ev, LINE, PATH) is not None
    assert launched.loads(line, "0" * 16, ev, LINE, PATH) is None  # another site, code or parsers
    assert launched.loads(line, key, ev, "[2,[]]", PATH) is None  # its parse stored anew (--reparse)
    for other in (
        replace(ev, stdout=ev.stdout.replace("sendrecv", "sendrecV", 1)),
        replace(ev, meta={**ev.meta, "rail": "1"}),
        replace(ev, returncode=1),
        replace(ev, argv=("sendrecv_perf", "-b", "8")),
        replace(ev, stderr="srun: error: node1: task 1: Exited with exit code 1"),
    ):
        assert launched.loads(line, key, other, LINE, PATH) is None
    for damaged in (line[:-3], "[]", "{}", line.replace(f'"{key}"', "7", 1), "not json"):
        assert launched.loads(damaged, key, ev, LINE, PATH) is None
    # a verdict row whose reference is not a number, or whose evidence is neither refs nor true/false
    got_key, crc, verdicts, *rest = json.loads(line)
    for bad in ({6: "1"}, {8: [1]}, {10: None}):
        rows = [[bad.get(i, x) for i, x in enumerate(v)] for v in verdicts]
        assert launched.loads(json.dumps([got_key, crc, rows, *rest]), key, ev, LINE, PATH) is None
    assert launched.loads(json.dumps([got_key, crc, verdicts, *rest]), key, ev, LINE, PATH) is not None


def test_the_key_is_the_site_less_its_baselines_and_the_same_in_every_process() -> None:
    """What launch_part is given (launched.unjudged) is what the key hashes: a baselines edit, or the site
    file copied elsewhere, keeps it; any other edit changes it."""
    site = _site()
    key = launched.key_of(site, {})
    moved = {k: replace(r, ref=r.ref / 2) for k, r in site.baselines.items()}
    assert launched.key_of(replace(site, baselines=moved, baselines_file="/elsewhere.yaml"), {}) == key
    assert launched.key_of(replace(site, nccl=replace(site.nccl, rail_ceiling_GBps=10.0)), {}) != key
    assert launched.key_of(replace(site, nodes=site.nodes[:-1]), {}) != key
    assert launched.key_of(replace(site, file="/copied/demo.yaml", description="copied"), {}) == key
    pci = {site.nodes[0]: {"0000:0a:00.0": "rdmap10s0", "0000:0b:00.0": "rdmap11s0"}, site.nodes[1]: {}}
    assert launched.key_of(site, pci) != key
    # the order a run found them in (its jobs' ending) or a rejudge (its bundles'): the same key
    backwards = {n: dict(reversed(d.items())) for n, d in reversed(pci.items())}
    assert launched.key_of(site, backwards) == launched.key_of(site, pci)
    # sets and the hash seed: another interpreter, another seed, the same key
    code = (
        "from clusteraccept.checks import launched; from clusteraccept.site.load import load_site;"
        "from clusteraccept.render import REPO_ROOT;"
        "print(launched.key_of(load_site('demo', REPO_ROOT / 'site-configs'), {}))"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == key


def _lines(fresh: stored.Stored) -> dict[str, str]:
    return stored.unpack(gzip.decompress(b"".join(fresh.fresh["raw/c/r001.jsonl.gz"])).decode().splitlines())


def _judged(site: Site, ev: Evidence, lines: dict[str, str]) -> tuple[object, stored.Stored]:
    again = stored.Stored(lambda bundle: lines if bundle == "raw/c/r001.jsonl.gz" else {})
    return nccl.judge_steps(site, [(ev, PATH)], {}, None, again), again


def test_a_rejudge_against_new_baselines_reads_the_stored_judgement_and_judges_the_numbers_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a rail ceiling above this capture's busbw (two ranks on one host): its numbers are judged
    site = _site()
    site = replace(site, nccl=replace(site.nccl, rail_ceiling_GBps=1000.0))
    ev = _sendrecv(site)
    first = stored.Stored()
    (before, _, _), _ = nccl.judge_steps(site, [(ev, PATH)], {}, None, first)
    lines = _lines(first)
    # baselines ten times higher: the busbw that passed them fails these
    strict = replace(site, baselines={k: replace(r, ref=r.ref * 10) for k, r in site.baselines.items()})
    expected = nccl.judge_steps(strict, [(ev, PATH)], {}, None, stored.Stored())

    def never(*args: object) -> None:
        raise AssertionError("judged from its parse: the stored judgement was not used")

    monkeypatch.setattr(nccl, "launch_part", never)
    got, again = _judged(strict, ev, lines)
    # by repr: a failed pair's localization row holds NaN, never equal to itself
    assert repr(got) == repr(expected)
    assert again.fresh == {}
    (verdicts, _, _), _ = got
    busbw = {v.subject: v.outcome.value for v in verdicts if v.check == "nccl.busbw"}
    assert busbw and set(busbw.values()) == {"fail"}
    judged_before = {v.subject: v.outcome.value for v in before if v.check == "nccl.busbw"}
    assert judged_before.keys() == busbw.keys() and "pass" in judged_before.values()


def test_a_site_edited_elsewhere_than_its_baselines_judges_the_step_again() -> None:
    """The stored judgement says the launch broke the rail ceiling (this capture's two ranks shared one
    host); under a ceiling above its busbw it does not, and the rejudge says so (a key on too little would
    have kept the stale message)."""
    site = _site()
    ev = _sendrecv(site)
    first = stored.Stored()
    (before, _, _), _ = nccl.judge_steps(site, [(ev, PATH)], {}, None, first)
    assert "above the physical ceiling 50.00" in next(v.message for v in before if v.check == "nccl.launch")
    high = replace(site, nccl=replace(site.nccl, rail_ceiling_GBps=1000.0))
    ((verdicts, _, _), _), again = _judged(high, ev, _lines(first))
    assert "ceiling" not in next(v.message for v in verdicts if v.check == "nccl.launch")
    # the bundle stored anew, whole: its parse kept as it was, its judgement made anew
    stored_again, before_lines = _lines(again), _lines(first)
    assert stored_again["nccl/a/step.json"] == before_lines["nccl/a/step.json"]
    assert stored_again["nccl/a/step.json|launch"] != before_lines["nccl/a/step.json|launch"]


def test_a_bundle_judged_by_two_workers_is_stored_whole_from_their_two_parts() -> None:
    """The forked judge gives each worker a range of steps, and a bundle may span two: where only the
    second range made lines anew, the first still gives its part, and the bundle is stored with both (the
    parent no longer reads a bundle's file again to add to it)."""
    site = _site()
    ev = _sendrecv(site)
    members = [f"nccl/a/step{i}.json" for i in range(4)]
    steps = [
        (replace(ev, meta={**ev.meta, "rail": str(i)}), f"raw/c/r001.jsonl.gz#{m}")
        for i, m in enumerate(members)
    ]
    first = stored.Stored()
    nccl.judge_steps(site, steps, {}, None, first)
    lines = _lines(first)
    assert sorted(lines) == sorted([*members, *(m + launched.SUFFIX for m in members)])
    del lines[members[3]], lines[members[3] + launched.SUFFIX]  # the last step's lines lost: parsed anew
    nccl._SHARED = (
        site,
        steps,
        {},
        ([], {}),
        lambda bundle: lines,
        (launched.unjudged(site), launched.key_of(site, {})),
    )
    try:
        parts = [nccl._judge_range((0, 2)), nccl._judge_range((2, 4))]
    finally:
        nccl._SHARED = None
    assert [part["raw/c/r001.jsonl.gz"][1] for _, part in parts] == [False, True]
    again = stored.Stored()
    nccl._add_fresh(again, [part for _, part in parts])
    assert _lines(again) == _lines(first)
    # a bundle no range made anew is not stored again
    nccl._SHARED = (
        site,
        steps,
        {},
        ([], {}),
        lambda bundle: _lines(first),
        (launched.unjudged(site), launched.key_of(site, {})),
    )
    try:
        parts = [nccl._judge_range((0, 2)), nccl._judge_range((2, 4))]
    finally:
        nccl._SHARED = None
    untouched = stored.Stored()
    nccl._add_fresh(untouched, [part for _, part in parts])
    assert untouched.fresh == {}
