"""A step's busbw verdicts (checks/nccl.judge_measured): each is the verdict ``judge`` gives its value against
its key's reference, though the key, reference, bounds and labels are worked out once per combination and
its labels are one set shared by every verdict of the combination."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

from clusteraccept.checks import nccl
from clusteraccept.judge import record
from clusteraccept.judge.verdicts import Outcome
from clusteraccept.judge.verdicts import judge as judge_value
from clusteraccept.site.baselines import Reference, lookup
from clusteraccept.site.load import load_site
from clusteraccept.site.schema import format_size

REPO = Path(__file__).resolve().parents[3]
GiB = 1 << 30


def _site():  # type: ignore[no-untyped-def]
    site = load_site("demo", REPO / "site-configs")
    baselines = {
        "nccl.busbw.sendrecv.pair.rail*.1GiB": Reference(48.0, lower=-0.08, unit="GB/s"),
        "nccl.busbw.sendrecv.pair.rail1.*": Reference(48.0, lower=-0.08, unit="GB/s", xfail="cable RMA 123"),
        "nccl.busbw.sendrecv.pair.rail*.8GiB": Reference(48.0, lower=-0.08, upper=0.05, unit="GB/s"),
    }
    return replace(site, baselines=baselines)


def _expected(site, meta, size_B, value, path, source="nccl-tests"):  # type: ignore[no-untyped-def]
    """What the verdict was before the combinations were remembered: judge() on every result."""
    size = format_size(size_B)
    rail = f".rail{meta['rail']}" if meta.get("rail") else ""
    key = f"nccl.busbw.{meta['collective']}.{meta['scope']}{rail}.{size}"
    labels = {
        "key": key,
        "scope": meta["scope"],
        "collective": meta["collective"],
        "size_B": str(size_B),
        "rail": meta.get("rail", ""),
        "source": source,
        **({"attempt": meta["attempt"]} if meta.get("attempt") else {}),
    }
    context = nccl._context(meta, size) + (nccl.FALLBACK_TAG if source == "torch-nccl" else "")
    return judge_value(
        "nccl.busbw",
        "nccl",
        f"{nccl.step_id(meta)}:{size}",
        value,
        lookup(site.baselines, key),
        what="busbw_GBps",
        context=context,
        evidence=(path,),
        labels=labels,
    )


def test_busbw_verdicts_are_judge_s_whatever_the_outcome() -> None:
    site = _site()
    measured = [(GiB, 47.0), (GiB, 30.0), (8 * GiB, 60.0), (8 * GiB, 47.5), (2 * GiB, 47.0), (4 * GiB, 10.0)]
    seen = set()
    for rail, attempt, source in (("0", "", "nccl-tests"), ("1", "retest", "torch-nccl"), ("3", "", "x")):
        meta = {
            "kind": "pair",
            "scope": "pair",
            "collective": "sendrecv",
            "subject": f"n01-n02:rail{rail}",
            "nodes": "n01,n02",
            "rail": rail,
            **({"attempt": attempt} if attempt else {}),
        }
        verdicts, rows = nccl.judge_measured(site, meta, measured, "raw/x.jsonl.gz#m", source=source)
        for (size_B, value), v in zip(measured, verdicts, strict=True):
            want = _expected(site, meta, size_B, value, "raw/x.jsonl.gz#m", source)
            assert v == want and dict(v.labels) == dict(want.labels), (v, want)
            seen.add(v.outcome)
        if len(rows) == len(measured):  # a result without baseline: every row (else the largest size's)
            for row, v in zip(rows, verdicts, strict=True):
                assert row["slow"] == (v.outcome is Outcome.FAIL) and ("peer" in row) == (v.ref is None)
    # every way a result is judged occurred: within, below, above, waived, no baseline
    assert seen == {Outcome.PASS, Outcome.FAIL, Outcome.WAIVED, Outcome.SKIP}


def test_a_combination_s_verdicts_share_one_label_set_stored_once(tmp_path: Path) -> None:
    site = _site()
    meta = {"kind": "pair", "scope": "pair", "collective": "sendrecv", "subject": "n01-n02:rail0"}
    meta |= {"nodes": "n01,n02", "rail": "0"}
    first, _ = nccl.judge_measured(site, meta, [(GiB, 47.0)], "raw/a#1")
    second, _ = nccl.judge_measured(site, {**meta, "subject": "n03-n04:rail0"}, [(GiB, 20.0)], "raw/a#2")
    assert first[0].labels is second[0].labels
    # the record stores it once, and reads each verdict back with its labels
    record.write(tmp_path, {"families": ["nccl"]}, [*first, *second])
    back = list(record.rows(tmp_path))
    assert [v["labels"] for v in back] == [dict(first[0].labels)] * 2
    assert [v["outcome"] for v in back] == ["pass", "fail"]
    with sqlite3.connect(tmp_path / record.STORE) as con:
        assert con.execute("SELECT COUNT(*) FROM labels").fetchone() == (1,)


def test_a_pair_step_sends_its_largest_size_only_and_the_pair_frame_is_the_same() -> None:
    """pair_frame reads a pair at its largest size, slow when any size was: a pair step whose results all
    have baselines gives only those rows (two at its largest size stay two), and the frame is the one made
    from every row."""
    site = _site()
    meta = {"kind": "pair", "scope": "pair", "collective": "sendrecv", "subject": "n01-n02:rail0"}
    meta |= {"nodes": "n01,n02", "rail": "0"}
    for measured, bad in (
        ([(GiB, 30.0), (8 * GiB, 47.0)], False),  # slow at 1 GiB only: slow
        ([(GiB, 47.0), (8 * GiB, 47.0), (8 * GiB, 47.2)], False),  # two results at 8 GiB
        ([(GiB, 47.0), (8 * GiB, 47.0)], True),  # the launch failed: slow
        ([(GiB, 47.0), (8 * GiB, 47.0)], False),
    ):
        verdicts, rows = nccl.judge_measured(site, meta, measured, "raw/a#1", bad=bad)
        top = max(s for s, _ in measured)
        assert [r["size_B"] for r in rows] == [s for s, _ in measured if s == top]
        every = [
            {**rows[0], "size_B": s, "busbw_GBps": x, "slow": v.outcome is Outcome.FAIL or bad}
            for (s, x), v in zip(measured, verdicts, strict=True)
        ]
        assert nccl.pair_frame(site, rows).equals(nccl.pair_frame(site, every))
        assert rows[0]["slow"] == (bad or any(v.outcome is Outcome.FAIL for v in verdicts))
    # a result with no baseline keeps every row: its peers judge it once every step is in
    _, rows = nccl.judge_measured(site, {**meta, "rail": "3"}, [(2 * GiB, 1.0), (8 * GiB, 47.0)], "raw/a#2")
    assert [r["size_B"] for r in rows] == [2 * GiB, 8 * GiB]
