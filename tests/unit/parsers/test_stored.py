"""A step's stored parse (parsers/stored.py) reads back equal to a fresh parse, only for the very output it
was made from, and a damaged one is refused, never half read."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from clusteraccept.parsers import stored

DATA = Path(__file__).resolve().parents[2] / "data"
# every capture a campaign step's stdout can hold: nccl-tests tables (text and -J JSON), NCCL INFO logs,
# launch records, the PyTorch fallback's JSON lines
STDOUT = ("nccl-tests", "nccl-debug", "launch-record")
FIXTURES = sorted(
    [
        *(("nccl-tests", p) for d in STDOUT for p in (DATA / d).iterdir()),
        *(("torch-nccl", p) for p in (DATA / "torch-nccl").iterdir()),
    ]
)
FIXTURES = [(source, p) for source, p in FIXTURES if p.name != "SOURCES.md"]


@pytest.mark.parametrize(("source", "path"), FIXTURES, ids=lambda x: getattr(x, "name", x))
def test_a_stored_parse_reads_back_equal_to_a_fresh_one(source: str, path: Path) -> None:
    text = path.read_text()
    fresh = stored.parse_step(source, text)
    back = stored.loads(stored.dumps(fresh, text), text)
    assert back == fresh
    # the derived and the cached members of the parsers' dataclasses answer alike
    if fresh.result is not None:
        assert back is not None and back.result is not None
        assert back.result.hosts == fresh.result.hosts
    if fresh.debug is not None:
        assert back is not None and back.debug is not None
        assert back.debug.net_channels() == fresh.debug.net_channels()
        assert back.debug.transports() == fresh.debug.transports()


def test_the_fixtures_cover_each_part_and_each_refusal() -> None:
    """What the round trip above is worth: results, logs, launch records and each parser's refusal."""
    parses = [stored.parse_step(source, path.read_text()) for source, path in FIXTURES]
    assert sum(p.result is not None for p in parses) >= 10
    assert sum(p.result_error is not None for p in parses) >= 5
    assert sum(p.debug is not None and bool(p.debug.connections) for p in parses) >= 5
    assert sum(bool(p.records) for p in parses) >= 2
    assert any(p.result is not None and p.result.source_format == "json" for p in parses)


def test_a_stored_parse_is_only_for_the_output_it_was_made_from() -> None:
    text = (DATA / "nccl-tests" / "allreduce-1node-2xh200-v2.19.6.txt").read_text()
    line = stored.dumps(stored.parse_step("nccl-tests", text), text)
    assert stored.loads(line, text) is not None
    # one digit of the output changed: the step is parsed again, not judged from the stored numbers
    assert stored.loads(line, text.replace("46.", "47.", 1)) is None


@pytest.mark.parametrize(
    "damage",
    [
        lambda line: line[: len(line) // 2],  # cut off
        lambda line: line.replace("[", "{", 1),  # not the shape it was written in
        lambda line: line.replace(",", ",0,", 3),  # fields shifted: a field count that does not match
        lambda line: "null",
        lambda line: "",
    ],
)
def test_a_damaged_stored_parse_is_refused_whole(damage: object) -> None:
    text = (DATA / "nccl-tests" / "allreduce-1node-2xh200-nccl-debug-info-v2.19.6.txt").read_text()
    line = stored.dumps(stored.parse_step("nccl-tests", text), text)
    assert callable(damage)
    assert stored.loads(damage(line), text) is None


def test_the_version_names_the_parsers_sources() -> None:
    assert len(stored.VERSION) == 16 and int(stored.VERSION, 16) >= 0
    assert stored._version() == stored.VERSION  # computed from the files, not written by hand


def test_a_refused_part_keeps_its_reason() -> None:
    text = "no table here\n"
    fresh = stored.parse_step("nccl-tests", text)
    assert fresh.result is None and fresh.result_error
    back = stored.loads(stored.dumps(fresh, text), text)
    assert back == fresh and back is not None and back.result_error == fresh.result_error
    changed = replace(fresh, result_error="another reason")
    assert stored.loads(stored.dumps(changed, text), text) == changed


def test_the_judge_stores_the_parses_of_bundled_steps_only_and_judges_alike_from_them() -> None:
    """nccl.judge_steps: a step in a bundle (``raw/<bundle>#<member>``) gets its parse stored, one of a run
    archived one file per Evidence (no ``#``) does not; judged again from what was stored, the same."""
    import gzip

    from clusteraccept.checks.nccl import judge_steps
    from clusteraccept.evidence import Evidence
    from clusteraccept.render import REPO_ROOT
    from clusteraccept.site.load import load_site

    s = load_site("demo", REPO_ROOT / "site-configs")
    a, b = s.nodes[0], s.nodes[1]
    meta = {"kind": "pair", "scope": "pair_in_block", "collective": "sendrecv", "nodes": f"{a},{b}"}
    meta.update(rail="0", subject=f"{a}-{b}:rail0", check="nccl")
    text = (DATA / "nccl-tests" / "sendrecv-1node-2xh200-v2.19.6.txt").read_text()
    ev = Evidence(a, "nccl-tests", argv=("sendrecv_perf",), stdout=text, meta=meta)
    steps = [(ev, "raw/c/r001.jsonl.gz#nccl/a/step.json"), (ev, "raw/nccl/a/step.json")]
    first = stored.Stored()
    judged = judge_steps(s, steps, {}, None, first)
    assert list(first.fresh) == ["raw/c/r001.jsonl.gz"]
    lines = stored.unpack(gzip.decompress(b"".join(first.fresh["raw/c/r001.jsonl.gz"])).decode().splitlines())
    # its parse, and its judgement up to the baselines (checks/launched.py)
    assert list(lines) == ["nccl/a/step.json", "nccl/a/step.json|launch"]
    again = stored.Stored(lambda bundle: lines if bundle == "raw/c/r001.jsonl.gz" else {})
    # by repr: a failed pair's localization row holds NaN, never equal to itself
    assert repr(judge_steps(s, steps, {}, None, again)) == repr(judged)
    assert list(again.fresh) == []  # the bundled step read back; the unbundled one parsed, not stored
