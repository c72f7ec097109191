"""A family's verdicts kept whole (checks/kept.py): read back equal, used only under the key they were judged
under, and that key is what the judge was given (its view of the site, its nodes, every byte of its
evidence); nccl's link errors kept beside the steps' parses."""

from __future__ import annotations

import fnmatch
import itertools
import math
from dataclasses import replace
from pathlib import Path

import pytest

from clusteraccept.checks import kept, launched, nccl
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers.stored import Stored
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

from .test_counters import Nodes, site


def _demo() -> Site:
    return load_site("demo", REPO_ROOT / "site-configs")


@pytest.mark.parametrize(
    ("pattern", "matches"),
    [
        ("gpudirect.write_bw.*", True),
        ("gpudirect.*", True),
        ("gpudirect.write_bw.node1.rail0", True),
        ("*", True),
        ("*.rail3", True),
        ("gpu*", True),
        ("g?udirect.write_bw.*", True),
        ("[gs]*", True),
        ("gpudirect", False),  # no key of the family is the bare name
        ("gpudirectx.*", False),
        ("nccl.busbw.sendrecv.*", False),
        ("sharp.uplift.*", False),
        ("nvlink.mnnvl.*", False),
    ],
)
def test_a_pattern_is_in_a_family_s_view_where_it_could_match_a_key_of_the_family(
    pattern: str, matches: bool
) -> None:
    assert kept.could_match(pattern, "gpudirect.") is matches


def test_no_pattern_that_matches_a_key_of_the_family_is_left_out() -> None:
    """Every pattern over a small alphabet with the wildcards, against every key of that alphabet: where
    fnmatch matches a key of the prefix, the pattern is in the view (left out, its edit would not judge the
    family again)."""
    alphabet = ["a", "b", ".", "*", "?", "[ab]"]
    keys = ["".join(k) for n in range(1, 5) for k in itertools.product("ab.", repeat=n)]
    for n in range(1, 4):
        for parts in itertools.product(alphabet, repeat=n):
            pattern = "".join(parts)
            for prefix in ("a.", "ab."):
                if any(k.startswith(prefix) and fnmatch.fnmatchcase(k, pattern) for k in keys):
                    assert kept.could_match(pattern, prefix), (pattern, prefix)


def test_a_family_s_view_is_the_site_with_its_own_baselines_only() -> None:
    site = _demo()
    seen = kept.view("gpudirect", site)
    assert sorted(seen.baselines) == ["gpudirect.write_bw.*"]
    assert seen.file == "" and seen.description == "" and seen.baselines_file is None
    assert kept.view("topology", site).baselines == {}
    assert replace(seen, baselines={}) == launched.unjudged(site)


VERDICTS = [
    Verdict(
        "topology.numa", "topology", "node1", Outcome.PASS, "ok", evidence=("raw/a.jsonl.gz#x", "raw/b#y")
    ),
    Verdict(
        "gpudirect.write_bw",
        "gpudirect",
        "node1:rail0",
        Outcome.FAIL,
        "slow",
        187.5,
        390.0,
        -0.1,
        None,
        "Gb/s",
    ),
    Verdict("nccl.link_errors", "nccl", "node2:rail1", Outcome.FAIL, "rose", 60, labels={"key": "k"}),
    Verdict("sharp.hello", "sharp", "b1", Outcome.ERROR, "no sharp_hello", "n/a"),
    Verdict("x.nan", "x", "s", Outcome.SKIP, "nan", math.nan),
    Verdict("x.inf", "x", "s", Outcome.WAIVED, "inf", math.inf, 1, 0, 2),
]


def test_kept_verdicts_read_back_as_they_were_judged() -> None:
    line = kept.dumps("k1", VERDICTS)
    assert line is not None
    got = kept.loads(line, "k1")
    assert repr(got) == repr(VERDICTS)  # by repr: NaN is never equal to itself
    assert [type(v.value) for v in got or []] == [type(v.value) for v in VERDICTS]  # an int stays one


def test_kept_verdicts_are_used_only_under_their_key_and_whole() -> None:
    line = kept.dumps("k1", VERDICTS)
    assert line is not None
    assert kept.loads(line, "k2") is None
    assert kept.loads(line[:-3], "k1") is None
    assert kept.loads('["k1", [["c"]]]', "k1") is None
    assert (
        kept.loads('["k1", [["c","f","s","not-an-outcome","m",null,null,null,null,"",[],{}]]]', "k1") is None
    )
    # kept rows name their evidence: 'true' (the stored step judgements' "its own step's") is no row of them
    assert kept.loads('["k1", [["c","f","s","pass","m",null,null,null,null,"",true,{}]]]', "k1") is None
    assert kept.loads('["k1", [["c","f","s","pass","m",null,"1",null,null,"",[],{}]]]', "k1") is None
    # a value JSON would not give back as it is: nothing kept, the family is judged every time
    assert kept.dumps("k1", [replace(VERDICTS[0], value=(1, 2))]) is None  # type: ignore[arg-type]
    assert kept.dumps("k1", [replace(VERDICTS[0], ref=complex(1, 2))]) is None  # type: ignore[arg-type]


def _evidence() -> list[tuple[Evidence, str]]:
    ev = Evidence(
        "node1", "nvidia-smi-topo", argv=("nvidia-smi", "topo", "-m"), stdout="GPU0 X", meta={"a": "1"}
    )
    return [(ev, "raw/probe-nodes/node1.jsonl.gz#topology/node1/x.json")]


def test_the_key_is_what_the_judge_was_given() -> None:
    site = _demo()
    seen = kept.view("gpudirect", site)
    nodes = site.nodes
    ev = _evidence()
    key = kept.key_of("gpudirect", seen, nodes, ev)
    assert kept.key_of("gpudirect", kept.view("gpudirect", site), nodes, ev) == key
    (e, ref) = ev[0]
    changed = [
        kept.key_of("topology", seen, nodes, ev),
        kept.key_of("gpudirect", seen, nodes[:-1], ev),
        kept.key_of("gpudirect", seen, nodes, [(replace(e, stdout="GPU0 Y"), ref)]),
        kept.key_of("gpudirect", seen, nodes, [(replace(e, stderr="warn"), ref)]),
        kept.key_of("gpudirect", seen, nodes, [(replace(e, returncode=1), ref)]),
        kept.key_of("gpudirect", seen, nodes, [(replace(e, meta={"a": "2"}), ref)]),
        kept.key_of("gpudirect", seen, nodes, [(e, ref + "2")]),
        kept.key_of("gpudirect", seen, nodes, ev + ev),
    ]
    assert key not in changed and len(set(changed)) == len(changed)
    # the family's own baselines are in its view; another family's, its file and description are not
    own = {k: replace(r, ref=r.ref * 2) for k, r in site.baselines.items() if k.startswith("gpudirect.")}
    assert (
        kept.key_of(
            "gpudirect", kept.view("gpudirect", replace(site, baselines={**site.baselines, **own})), nodes, ev
        )
        != key
    )
    other = {k: replace(r, ref=r.ref * 2) for k, r in site.baselines.items() if k.startswith("nccl.")}
    moved = replace(site, baselines={**site.baselines, **other}, file="/elsewhere.yaml", description="x")
    assert kept.key_of("gpudirect", kept.view("gpudirect", moved), nodes, ev) == key


def test_link_errors_kept_are_used_while_their_snapshots_and_site_are_those_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site("demo", [{"kind": "link_errors", "node": "node2", "rail": 1, "count": 25}])
    n = Nodes(s, tmp_path, monkeypatch)
    n.snapshot()
    n.pair_round("node1", "node2", list(range(8)), "sendrecv pairs 1")
    first = Stored()
    judged = [v for v in nccl.judge(s, n.snaps, s.nodes, first) if v.check == "nccl.link_errors"]
    assert [v.subject for v in judged if v.outcome is Outcome.FAIL] == ["node2:rail1"]
    line = first.keep[nccl.LINK_ERRORS]

    def never(seen: Site, order: list[str], by_node: object) -> list[Verdict]:
        if order:
            raise AssertionError(f"judged again: the kept link errors were not used ({order})")
        return []

    judge_nodes = nccl._node_link_errors
    monkeypatch.setattr(nccl, "_node_link_errors", never)
    again = Stored(kept=lambda name: line if name == nccl.LINK_ERRORS else None)
    got = [v for v in nccl.judge(s, n.snaps, s.nodes, again) if v.check == "nccl.link_errors"]
    assert got == judged and again.keep == {}
    # new baselines (a rejudge's reason) keep them too
    strict = replace(s, baselines={k: replace(r, ref=r.ref * 10) for k, r in s.baselines.items()})
    assert [v for v in nccl.judge(strict, n.snaps, s.nodes, again) if v.check == "nccl.link_errors"] == judged
    # a snapshot that is not the one judged: judged again, and kept anew
    monkeypatch.setattr(nccl, "_node_link_errors", judge_nodes)
    i = max(k for k, (ev, _) in enumerate(n.snaps) if ev.host == "node2")
    (ev, ref) = n.snaps[i]
    changed = [
        *n.snaps[:i],
        (replace(ev, meta={**ev.meta, "after_round": "another round"}), ref),
        *n.snaps[i + 1 :],
    ]
    again = Stored(kept=lambda name: line)
    regot = [v for v in nccl.judge(s, changed, s.nodes, again) if v.check == "nccl.link_errors"]
    assert "another round" in next(v.message for v in regot if v.subject == "node2:rail1")
    assert again.keep[nccl.LINK_ERRORS] != line
