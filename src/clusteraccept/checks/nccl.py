"""nccl-tests campaigns: launch self-checks, busbw per size against baselines, and localization.

Steps measured by the PyTorch NCCL fallback (evidence source ``torch-nccl``, parsers/torch_nccl.py) are
judged the same way under the same baseline keys; their messages say "(PyTorch NCCL fallback)".
Evidence: one per srun step, ``meta`` = kind (node|pair|block), scope, collective, subject, nodes, rail.
Verdicts:
- ``nccl.launch``  on ``<subject>:<collective>``: the step ran as intended (parser's launch self-checks);
- ``nccl.busbw``   on ``<subject>:<collective>:<size>``: out-of-place busbw vs the baseline of
  ``nccl.busbw.<collective>.<scope>[.rail<k>].<size>`` (out-of-place is the figure nccl-tests users quote);
- ``nccl.localization`` on every node and every block: blamed or not by :mod:`localize`.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from clusteraccept.checks import Archived, counters, efa, kept, launched, slingshot, tcpx
from clusteraccept.checks.confirm import confirm, stragglers, suspects_of
from clusteraccept.checks.launch import (
    Finding,
    Findings,
    crowded_steps,
    gating,
    node_verdicts,
    step_findings,
    step_id,
)
from clusteraccept.checks.launched import Launched
from clusteraccept.checks.libfabric import NicPci, device_addresses
from clusteraccept.checks.localize import Culprit, blamed_nodes, localize
from clusteraccept.checks.nccl_launch import launch_checks
from clusteraccept.checks.nvlink import fabric_down
from clusteraccept.checks.peers import judge_row, peer_stats
from clusteraccept.evidence import Evidence, is_timed_out_line
from clusteraccept.judge.verdicts import Outcome, Verdict, against, error, expect, skip
from clusteraccept.judge.verdicts import judge as judge_value
from clusteraccept.parsers import launch_record
from clusteraccept.parsers.stored import StepParse, Stored, dumps, loads, pack, parse_step
from clusteraccept.plan.subjects import rail_subject
from clusteraccept.site.baselines import Reference, lookup
from clusteraccept.site.memo import ByIdentity
from clusteraccept.site.model import Site
from clusteraccept.site.schema import format_size

FAMILY = "nccl"
SOURCES = ("nccl-tests", "torch-nccl")  # torch-nccl: the PyTorch NCCL fallback collector, never nccl-tests
FALLBACK_TAG = " (PyTorch NCCL fallback)"


def _context(meta: dict[str, str], size: str) -> str:
    if meta["kind"] == "pair":
        return f"pair {meta['subject'].split(':')[0]}, rail {meta['rail']}, {size}"
    if meta["kind"] == "node":
        return f"intra-node {meta['subject']}, {size}"
    return f"{meta['scope']} {meta['subject']} ({len(meta['nodes'].split(','))} nodes), {size}"


def _ceiling(site: Site, meta: dict[str, str]) -> float | None:
    if meta["kind"] == "pair":
        return site.nccl.rail_ceiling_GBps
    if meta["kind"] == "node":
        return None
    return site.nccl.node_ceiling_GBps


def _expected_hosts(meta: dict[str, str]) -> tuple[str, ...]:
    return tuple(meta["nodes"].split(","))


Judged = tuple[list[Verdict], list[dict[str, Any]], list[Finding]]
# what judging many steps gives: their verdicts and rows in step order, their findings folded
JudgedSteps = tuple[list[Verdict], list[dict[str, Any]], Findings]


def _what_ran(
    site: Site, ev: Evidence, parsed: StepParse, result: Any, nic_pci: NicPci
) -> tuple[list[Finding], Any, list[Verdict]]:
    """The step's launch findings (checks/launch.py) and its NCCL INFO log (None without one); a garbage
    launch record is an ERROR of its own, the numbers still judged."""
    debug = parsed.debug
    if parsed.records is None:
        why = f"unreadable launch record: {parsed.records_error}"
        return [], debug, [error("launch.binding", FAMILY, step_id(ev.meta), why)]
    return step_findings(site, ev.meta, ev.argv or (), parsed.records, debug, result, nic_pci), debug, []


def _timed_out(ev: Evidence) -> str:
    """A step the driver ended at its timeout, or Slurm at its time limit: the driver's "timed out after"
    line or slurmstepd's "DUE TO TIME LIMIT" one, the last stderr line the step itself printed (srun's own
    ``srun: `` lines are left out: after the step is interrupted they narrate the kill, not the hang),
    whether the benchmark had begun, and whether this was already the relaunch of a hung launch."""
    lines = [line.strip() for line in ev.stderr.splitlines() if line.strip()]
    ours = [line for line in lines if is_timed_out_line(line) or launch_record.step_time_limit_line(line)]
    theirs = [line for line in lines if line not in ours and not line.startswith("srun: ")]
    began = (
        "its benchmark had begun"
        if launch_record.benchmark_began(ev.stdout)
        else "its benchmark never began (hung at launch)"
    )
    msg = f"step timed out or could not start: {ours[-1] if ours else 'no output'}; {began}"
    if theirs:
        msg += f"; last line: {theirs[-1][:200]}"
    if ev.meta.get("relaunched"):
        msg += f"; launched twice, the first attempt {ev.meta['relaunched'][:200]}"
    return msg


def parsed_at_all(ev: Evidence) -> bool:
    """Whether :func:`judge_step` parses the step's output: not when it was killed with its job, timed out,
    or was ended by Slurm's step time limit before its benchmark began (no output to speak of: judged from
    how it ended)."""
    if ev.returncode is None or (ev.meta.get("killed_with_job") and ev.returncode != 0):
        return False
    return not (
        launch_record.step_time_limit(ev.returncode, ev.stderr)
        and not launch_record.benchmark_began(ev.stdout)
    )


def judge_step(
    site: Site, ev: Evidence, path: str, nic_pci: NicPci | None = None, parsed: StepParse | None = None
) -> Judged:
    """Verdicts of one step, the rows (for the localization frame) it contributes, its launch findings.
    ``parsed``: its output's parse as stored (parsers/stored.py); None: parsed here."""
    if not parsed_at_all(ev):
        return _not_parsed(ev, path)
    part = launch_part(site, ev, path, nic_pci, parsed or parse_step(ev.source, ev.stdout))
    return judged_launch(site, ev.meta, part, path, ev.source)


def _not_parsed(ev: Evidence, path: str) -> Judged:
    """A step killed with its job or timed out: judged from how it ended, its output not read."""
    meta = ev.meta
    subject = step_id(meta)
    evid = (path,)
    if meta.get("killed_with_job") and ev.returncode != 0:  # spool.mark_killed
        killed = error(
            "nccl.launch",
            FAMILY,
            subject,
            f"not tested: the step ended with its Slurm job ({meta['killed_with_job']}) before it "
            "finished; that says nothing about the hardware (--resume RUN_DIR reruns it)",
            evid,
        )
        # neither node was tested by it: their items say so (judge/items.py), localization does not blame
        return [replace(killed, labels={"untested": "killed_with_job"})], [], []
    return (
        [error("nccl.launch", FAMILY, subject, _timed_out(ev), evid)],
        _failed_row(meta, "error"),
        [],
    )


def launch_part(site: Site, ev: Evidence, path: str, nic_pci: NicPci | None, parsed: StepParse) -> Launched:
    """What the judge says of a parsed step before it reads a baseline (checks/launched.py stores it): its
    launch verdict and findings, and the results to judge against the baselines, if any."""
    meta = ev.meta
    subject = step_id(meta)
    evid = (path,)
    assert ev.returncode is not None, "launch_part of a step not parsed at all (parsed_at_all)"
    fallback = ev.source == "torch-nccl"
    result = parsed.result
    if result is None:
        tail = (ev.stderr.strip().splitlines() or [""])[-1][:200]
        unparsable = error(
            "nccl.launch",
            FAMILY,
            subject,
            f"could not parse {ev.source} output ({path}): {parsed.result_error}"
            + (f"; stderr: {tail}" if tail else "")
            + (
                f"; launched twice, the first attempt {ev.meta['relaunched'][:200]}"
                if ev.meta.get("relaunched")
                else ""
            ),
            evid,
        )
        return Launched((unparsable,), (), None, failed="error")
    ran, debug, unreadable = _what_ran(site, ev, parsed, result, nic_pci or {})
    # NVLS and CollNet/SHARP reduce in the switch: their busbw may exceed the point-to-point ceiling
    # (nccl-tests doc/PERFORMANCE.md, "bus bandwidth")
    in_network = debug is not None and (debug.nvls_used() or debug.collnet_used())
    gpus = site.node_type(_expected_hosts(meta)[0]).gpus
    nranks = 2 if meta["kind"] == "pair" else len(_expected_hosts(meta)) * gpus
    findings = launch_checks(
        result,
        expected_hosts=_expected_hosts(meta),
        expected_nranks=nranks,
        ceiling_GBps=None if in_network else _ceiling(site, meta),
        returncode=ev.returncode,
        mpi=site.slurm.mpi,
    )
    # The fallback collector has no out-of-bounds check; its "completed" finding (end record) stands for it.
    bad = [f for f in findings if not f.ok and not (fallback and f.name == "out_of_bounds")]
    tag = FALLBACK_TAG if fallback else ""
    verdicts = [
        expect(
            "nccl.launch",
            FAMILY,
            subject,
            not bad,
            "; ".join(f.message for f in bad) + tag
            if bad
            else f"{result.nranks} ranks on the intended hosts, exit 0, no #wrong, below the ceiling{tag}",
            evidence=evid,
            labels={"collective": meta["collective"], "source": ev.source},
        ),
        *unreadable,
    ]
    if bad and any(f.name in ("multi_rank", "nranks", "no_single_rank_group", "busbw_ceiling") for f in bad):
        # the numbers are not what they claim to be: judging them would mislead
        return Launched(tuple(verdicts), tuple(ran), None, failed="fail")
    if (why := gating(ran)) is not None:
        # measured, but not the hardware the plan meant: neither a verdict on it nor evidence against a node
        return Launched((*verdicts, *_not_judged(meta, result, why, evid)), tuple(ran), None)
    measured = tuple(
        (row.size_B, m.busbw_GBps)
        for row in result.rows
        if (m := row.out_of_place or row.in_place) is not None
    )
    return Launched(tuple(verdicts), tuple(ran), measured, bad=bool(bad))


def judged_launch(site: Site, meta: dict[str, str], launched: Launched, path: str, source: str) -> Judged:
    """A parsed step's verdicts, rows and findings from its :func:`launch_part`: its results judged
    against the current baselines."""
    verdicts = list(launched.verdicts)
    findings = list(launched.findings)
    if launched.measured is None:
        return verdicts, _failed_row(meta, launched.failed) if launched.failed else [], findings
    vs, rows = judge_measured(site, meta, launched.measured, path, source=source, bad=launched.bad)
    verdicts += vs
    return verdicts, rows or (_failed_row(meta, "fail") if launched.bad else []), findings


def judge_measured(
    site: Site,
    meta: dict[str, str],
    measured: Sequence[tuple[int, float]],
    path: str,
    *,
    source: str = "nccl-tests",
    bad: bool = False,
) -> tuple[list[Verdict], list[dict[str, Any]]]:
    """The busbw verdicts of one step's (size_B, busbw_GBps) results against their baselines, and its rows
    of the localization frame (``bad``: the step failed its launch checks, its rows count as slow). A result
    with no baseline is SKIP here and judged once every step is in (:func:`judge_rows`). A pair step whose
    every result has a baseline gives only its rows at its largest size, slow when any size was: all that
    :func:`pair_frame` reads of it (the rest were ~3 of every 4 rows sent back from the workers)."""
    subject = step_id(meta)
    evid = (path,)
    tag = FALLBACK_TAG if source == "torch-nccl" else ""
    verdicts: list[Verdict] = []
    rows: list[dict[str, Any]] = []
    rail = meta.get("rail", "")
    combos = _COMBOS.of(site)
    for size_B, value in measured:
        combo = (meta["collective"], meta["scope"], rail, size_B, source, meta.get("attempt", ""))
        got = combos.get(combo)
        if got is None:
            got = combos[combo] = _combo(site, *combo)
        size, reference, lo, hi, labels = got
        context = _context(meta, size) + tag
        if reference is None:
            v = judge_value(
                "nccl.busbw",
                FAMILY,
                f"{subject}:{size}",
                value,
                reference,
                what="busbw_GBps",
                context=context,
                evidence=evid,
                labels=labels,
            )
        else:  # judge_value's verdict, the reference's bounds and the labels worked out once per combination
            outcome, msg = against(value, reference, lo, hi, "busbw_GBps")
            v = Verdict(
                "nccl.busbw",
                FAMILY,
                f"{subject}:{size}",
                outcome,
                f"{msg} [{context}]",
                value,
                reference.ref,
                lo,
                hi,
                reference.unit,
                evid,
                labels,
            )
        verdicts.append(v)
        rows.append(
            {
                "kind": meta["kind"],
                "scope": meta["scope"],
                "collective": meta["collective"],
                "nodes": _expected_hosts(meta),
                "rail": meta.get("rail"),
                "size_B": size_B,
                "busbw_GBps": value,
                "ref_GBps": reference.ref if reference else None,
                "slow": v.outcome is Outcome.FAIL or bool(bad),  # a failed launch counts against the pair
                "failed": "fail" if bad else "",
                "step": subject,
                "attempt": meta.get("attempt", ""),
                "evidence": evid,
                # no baseline: judged by its peers and the line rate once every step is in (checks/peers.py)
                **({"peer": (context, labels), "subject": f"{subject}:{size}"} if reference is None else {}),
            }
        )
    if rows and meta["kind"] == "pair" and not any("peer" in r for r in rows):
        top = max(r["size_B"] for r in rows)
        slow = any(r["slow"] for r in rows)
        rows = [{**r, "slow": slow} for r in rows if r["size_B"] == top]
    return verdicts, rows


# A busbw result's size text, reference, bounds and labels, by (collective, scope, rail, size_B, source,
# attempt): a few hundred combinations among millions of results. One label set is shared by every
# verdict of its combination (a Verdict's labels are read-only): pickled once per range of steps, and
# stored once (judge/record.py).
Combo = tuple[str, Reference | None, float | None, float | None, Mapping[str, str]]
_COMBOS: ByIdentity[tuple[str, str, str, int, str, str], Combo] = ByIdentity()


def _combo(
    site: Site, collective: str, scope: str, rail: str, size_B: int, source: str, attempt: str
) -> Combo:
    size = format_size(size_B)
    key = f"nccl.busbw.{collective}.{scope}{f'.rail{rail}' if rail else ''}.{size}"
    reference = lookup(site.baselines, key)
    lo, hi = reference.bounds() if reference is not None else (None, None)
    labels = {
        "key": key,
        "scope": scope,
        "collective": collective,
        "size_B": str(size_B),
        "rail": rail,
        "source": source,
        **({"attempt": attempt} if attempt else {}),
    }
    return size, reference, lo, hi, labels


def _without_crowded(
    verdicts: list[Verdict], rows: list[dict[str, Any]], crowded: dict[str, tuple[str, str]]
) -> tuple[list[Verdict], list[dict[str, Any]]]:
    """The busbw verdicts of rail steps that shared their CPUs with the steps beside them turned "not
    judged" (they measured CPU contention), and their rows out of the localization frame."""
    if not crowded:
        return verdicts, rows
    out = []
    for v in verdicts:
        hit = crowded.get(v.subject.rpartition(":")[0]) if v.check == "nccl.busbw" else None
        if hit is not None:
            v = replace(v, outcome=Outcome.SKIP, message=f"not judged: launch.binding on {hit[0]}: {hit[1]}")
        out.append(v)

    return out, [r for r in rows if r["kind"] != "pair" or r["step"] not in crowded]


def _without_fabric(
    verdicts: list[Verdict],
    rows: list[dict[str, Any]],
    steps: Sequence[tuple[Evidence, str]],
    down: dict[str, str],
) -> tuple[list[Verdict], list[dict[str, Any]]]:
    """The steps on a node whose NVSwitch fabric is not up could not start CUDA there (checks/nvlink.py):
    what they and the node's own launch checks would say is "not judged: nvlink.fabric on <node> ...", the
    one finding, and they give the localization no row (they would convict the node a second time)."""
    cause: dict[str, str] = {}
    for ev, _ in steps:
        hit = next((n for n in ev.meta.get("nodes", "").split(",") if n in down), None)
        if hit is not None:
            cause[step_id(ev.meta)] = down[hit]
    out = []
    for v in verdicts:
        why = (
            cause.get(v.subject)
            or cause.get(v.subject.rpartition(":")[0])
            or down.get(v.subject.split(":")[0])
        )
        if why is not None and v.outcome is not Outcome.PASS:
            v = replace(v, outcome=Outcome.SKIP, message=f"not judged: {why}")
        out.append(v)
    return out, [r for r in rows if r["step"] not in cause]


def _not_judged(meta: dict[str, str], result: Any, why: str, evid: tuple[str, ...]) -> list[Verdict]:
    """The busbw verdicts a step would have had, each SKIP "not judged: <the launch fault>"."""
    subject = step_id(meta)
    return [
        skip("nccl.busbw", FAMILY, f"{subject}:{format_size(row.size_B)}", f"not judged: {why}", evid)
        for row in result.rows
    ]


def _failed_row(meta: dict[str, str], how: str) -> list[dict[str, Any]]:
    """A pair step that failed its launch checks (``how`` "fail") or did not run or print numbers at all
    ("error": timed out, could not start, unparsable), as a slow row of the localization frame: a node that
    fails with every partner is the culprit, its partners are not (checks/localize.py); one blamed on
    errors alone was not measured, and its verdict is an ERROR, not a FAIL."""
    if meta.get("kind") != "pair":
        return []
    return [
        {
            "kind": "pair",
            "scope": meta["scope"],
            "collective": meta["collective"],
            "nodes": _expected_hosts(meta),
            "rail": meta.get("rail"),
            "size_B": 0,
            "busbw_GBps": float("nan"),
            "ref_GBps": None,
            "slow": True,
            "failed": how,
            "step": step_id(meta),
            "attempt": meta.get("attempt", ""),
            "evidence": (),
        }
    ]


def pair_frame(site: Site, rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """One row per (pair, rail, collective) at its largest (bandwidth-bound) size."""
    pairs = [r for r in rows if r["kind"] == "pair"]
    cols = [
        "a",
        "b",
        "rail",
        "block_a",
        "block_b",
        "scope",
        "collective",
        "size_B",
        "busbw_GBps",
        "ref_GBps",
        "slow",
        "failed",
    ]
    if not pairs:
        return pd.DataFrame(columns=cols)
    df = pd.DataFrame(pairs)
    df["failed"] = df["failed"].fillna("") if "failed" in df else ""
    df["a"] = df["nodes"].str[0]
    df["b"] = df["nodes"].str[1]
    df["rail"] = df["rail"].astype(int)
    df["block_a"] = df["a"].map(lambda n: site.block_of(n) or "?")
    df["block_b"] = df["b"].map(lambda n: site.block_of(n) or "?")
    group = df.groupby(["a", "b", "rail", "collective"])
    # slow at any size is slow: a pair that fails at 1 GiB but not at 8 GiB must still be explained
    df["slow"] = group["slow"].transform("any")
    biggest = group["size_B"].transform("max")
    return df[df["size_B"] == biggest][cols].reset_index(drop=True)


def _convicted_by(c: Culprit, paths: dict[str, str]) -> tuple[str, tuple[str, ...]]:
    """`` [convicted by ...]`` and the evidence: the first pass's steps, then the retests' beside them."""
    text = f" [convicted by {', '.join(c.convicting[:6])}{' ...' if len(c.convicting) > 6 else ''}]"
    if not c.convicting:
        text = ""
    evid = [paths[k] for k in c.convicting[:6] if k in paths]
    evid += [paths[f"retest|{k}"] for k in c.retest[:6] if f"retest|{k}" in paths]
    return text, tuple(dict.fromkeys(evid))


def localization_verdicts(
    site: Site, frame: pd.DataFrame, culprits: list[Culprit], paths: dict[str, str] | None = None
) -> list[Verdict]:
    """``nccl.localization`` on every node and block. A transient (slow once, healthy on retest) is a PASS
    that says so (label ``transient``): never a blame, never a drain."""
    paths = paths or {}
    verdicts: list[Verdict] = []
    by_node = blamed_nodes(culprits)
    # results per node, counted once (a comparison over the frame per node is quadratic in the nodes)
    per_node = pd.concat([frame["a"], frame["b"]]).value_counts().to_dict() if not frame.empty else {}
    for node in site.nodes:
        cs = [c for c in by_node.get(node, []) if c.status != "transient"]
        passing = [c for c in by_node.get(node, []) if c.status == "transient"]
        if cs:
            parts = [_convicted_by(c, paths) for c in cs]
            msg = "; ".join(c.message + text for c, (text, _) in zip(cs, parts, strict=True))
            untested = all(c.untested for c in cs)
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    node,
                    Outcome.ERROR if untested else Outcome.FAIL,
                    (
                        f"not tested: every step that names it did not run or print numbers (timed out, "
                        f"could not start): a dead or unreachable node, not a measurement: {msg}"
                        if untested
                        else f"culprit: {msg}"
                    ),
                    value=", ".join(c.subject for c in cs),
                    evidence=tuple(dict.fromkeys(p for _, ev in parts for p in ev)),
                    labels={
                        "culprits": "|".join(f"{c.kind}:{c.subject}" for c in cs),
                        "confirmation": "|".join(c.status or "none" for c in cs),
                    },
                )
            )
        elif node in per_node or passing:
            n = int(per_node.get(node, 0))
            text = "; ".join(c.message for c in passing)
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    node,
                    Outcome.PASS,
                    text + f" (not blamed; {n} pair x rail results involve it)"
                    if passing
                    else f"not blamed by localization ({n} pair x rail results involve it)",
                    evidence=tuple(p for c in passing for p in _convicted_by(c, paths)[1]),
                    labels={"transient": "|".join(c.subject for c in passing)} if passing else {},
                )
            )
        else:
            verdicts.append(skip("nccl.localization", FAMILY, node, "no pair results involve this node"))
    on_block = {c.subject: c for c in culprits if c.kind in ("uplink", "straggler") and not c.nodes}
    named = {c.subject: c for c in culprits if c.kind == "straggler" and c.nodes}
    for block in dict.fromkeys([*site.blocks, "all"]):  # a site without blocks has one called "all"
        c = on_block.get(block)
        if c is not None:
            text, evid = _convicted_by(c, paths)
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    block,
                    Outcome.PASS if c.status == "transient" else Outcome.FAIL,
                    c.message if c.status == "transient" else f"culprit: {c.message}{text}",
                    evidence=evid,
                    labels={"transient": block}
                    if c.status == "transient"
                    else {"culprits": f"{c.kind}:{block}"},
                )
            )
            continue
        stragglers = [s for s in named.values() if s.convicting and s.convicting[0].split(":")[0] == block]
        if stragglers:
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    block,
                    Outcome.PASS,
                    "; ".join(s.message for s in stragglers) + " (the node carries the blame)",
                )
            )
        elif block == "all" or frame.empty:
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    block,
                    Outcome.PASS if not frame.empty else Outcome.SKIP,
                    "no uplink blamed" if not frame.empty else "no pair results",
                )
            )
        else:
            verdicts.append(
                Verdict(
                    "nccl.localization",
                    FAMILY,
                    block,
                    Outcome.PASS,
                    f"{block}'s uplinks not blamed by the cross-block pairs",
                )
            )
    return verdicts


PARALLEL_MIN = 4_000  # steps: below, a process pool costs more than it saves
LINK_ERRORS = "nccl.link_errors"  # what the link errors' verdicts are kept as (checks/kept.py)
# The link errors' work: the nodes in verdict order, each node's counter snapshots.
LinkWork = tuple[list[str], dict[str, list[Archived]]]
# what forked workers read (copy-on-write); the last: the site launch_part is given and the key of the stored
# judgements (checks/launched.py), or None where nothing is stored
_SHARED: (
    tuple[Site, list[Archived], NicPci, LinkWork, Callable[[str], Mapping[str, str]], tuple[Site, str] | None]
    | None
) = None


# A range's stored lines by bundle: every line of the steps it judged there, as one gzip member
# (parsers/stored.pack), and whether any was made anew.
Part = dict[str, tuple[bytes, bool]]


def _bundle_of(step: Archived) -> str:
    return step[1].partition("#")[0]


def _judge_range(bounds: tuple[int, int]) -> tuple[JudgedSteps, Part]:
    """The steps of ``bounds`` judged, each from its stored judgement up to the baselines where one is
    there and still holds (checks/launched.py), else from its stored parse where that holds
    (parsers/stored.py), else parsed here; and the stored lines of every bundle where some were made
    anew, or which the range shares with the one before or after it (whose steps may have been made anew):
    whole, the kept lines beside the new ones, so that the parent writes them as they come (re-reading and
    re-packing every parsed file there, after a site edit, was the parent's alone)."""
    assert _SHARED is not None
    site, steps, nic_pci, _, read, launching = _SHARED
    bare, key = launching or (site, None)
    lo, hi = bounds
    shared = {
        _bundle_of(steps[i])
        for i, j in ((lo, lo - 1), (hi - 1, hi))
        if lo < hi and 0 <= j < len(steps) and _bundle_of(steps[j]) == _bundle_of(steps[i])
    }
    verdicts: list[Verdict] = []
    rows: list[dict[str, Any]] = []
    findings = Findings()
    out: Part = {}
    # the steps come bundle by bundle: each bundle's stored lines read once, by the worker judging them
    bundle: str | None = None
    lines: Mapping[str, str] = {}
    whole: list[tuple[str, str]] = []  # the bundle's lines as they will be stored
    anew = False

    def close() -> None:
        if key is not None and bundle is not None and whole and (anew or bundle in shared):
            out[bundle] = (pack(whole), anew)

    for ev, path in steps[lo:hi]:
        if not parsed_at_all(ev):
            vs, rs, fs = _not_parsed(ev, path)
        else:
            where, _, member = path.partition("#")
            if where != bundle:
                close()
                bundle, lines, whole, anew = where, read(where), [], False
            line = lines.get(member)
            stored_line = lines.get(member + launched.SUFFIX) if key is not None else None
            done = None
            if stored_line is not None and line is not None and key is not None:
                done = launched.loads(stored_line, key, ev, line, path)
            if done is None:
                parsed = loads(line, ev.stdout) if line is not None else None
                if parsed is None or line is None:  # (a stored parse is one of a line)
                    parsed = parse_step(ev.source, ev.stdout)
                    line = dumps(parsed, ev.stdout)
                    anew = True
                done = launch_part(bare, ev, path, nic_pci, parsed)
                if key is not None:
                    stored_line, anew = launched.dumps(key, ev, line, path, done), True
            if member and line is not None:  # in a bundle (a run archived one file per Evidence stores none)
                whole.append((member, line))
                if stored_line is not None:
                    whole.append((member + launched.SUFFIX, stored_line))
            vs, rs, fs = judged_launch(site, ev.meta, done, path, ev.source)
        verdicts.extend(vs)
        rows.extend(rs)
        findings.add(fs)
    close()
    return (verdicts, rows, findings), out


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use (a Slurm/cgroup allocation)
    except AttributeError:
        return os.cpu_count() or 1


def may_fork() -> bool:
    """Fork only where no other Python thread runs: a lock one holds at fork time stays held in the child
    (a pytest-xdist worker has execnet's I/O thread; it judges serially). Native threads do not count:
    numpy's OpenBLAS starts one at import (so every process that imports pandas has two) and stops its pool
    around fork (openblas_fork_handler: pthread_atfork(blas_thread_shutdown_, ...), OpenBLAS
    driver/others/memory.c), and a worker does no linear algebra; counting them (the task list under
    /proc) left every run judging on one core."""
    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


def _links_range(bounds: tuple[int, int]) -> list[Verdict]:
    assert _SHARED is not None
    site, _, _, (order, by_node), _, launching = _SHARED
    seen = site if launching is None else launching[0]  # where kept (checks/kept.py): the site of its key
    return _node_link_errors(seen, order[bounds[0] : bounds[1]], by_node)


def _ranges(n: int, parts: int) -> list[tuple[int, int]]:
    chunk = -(-n // parts) if n else 1
    return [(i, min(i + chunk, n)) for i in range(0, n, chunk)]


def judge_steps(
    site: Site,
    steps: list[Archived],
    nic_pci: NicPci | None = None,
    links: LinkWork | None = None,
    stored: Stored | None = None,
) -> tuple[JudgedSteps, list[Verdict]]:
    """:func:`judge_step` over every step, in order, and the link errors of ``links``' nodes (their
    counter snapshots: :func:`link_error_verdicts`, independent of the steps): spread over the cores
    (forked workers, each judging a contiguous range of steps or nodes) when there are many steps.
    Each step is judged from its parse in ``stored`` where that holds, else parsed (~300 us a step,
    4 million steps at 16,384 nodes) and its parse added to ``stored.fresh``; the link errors take ~15 s
    of one core at 1,024 nodes."""
    global _SHARED
    workers = min(cpus(), len(steps) // (PARALLEL_MIN // 2) or 1)
    links = links or ([], {})
    launching = (
        (launched.unjudged(site), launched.key_of(site, nic_pci or {})) if stored is not None else None
    )
    stored = stored if stored is not None else Stored()
    _SHARED = (site, steps, nic_pci or {}, links, stored.read, launching)
    if workers < 2 or len(steps) < PARALLEL_MIN or not may_fork():
        try:
            judged, fresh = _judge_range((0, len(steps)))
            _add_fresh(stored, [fresh])
            return judged, _links_range((0, len(links[0])))
        finally:
            _SHARED = None
    # the collector would walk every object the parent holds (the whole run's evidence) in each worker,
    # copying every page it touches: frozen, the workers leave them alone (gc.freeze's own advice for fork).
    # What was frozen before (the pytest plugin's items, for the session) stays frozen after: gc.unfreeze
    # cannot tell whose objects are whose, and un-freezing the items had them walked at every collection.
    already = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            # one queue: a worker done with its steps takes nodes' counters, and the reverse
            in_steps = pool.map_async(_judge_range, _ranges(len(steps), workers * 4))
            linked = pool.map_async(_links_range, _ranges(len(links[0]), workers * 4))
            parts, link_parts = in_steps.get(), linked.get()
    finally:
        _SHARED = None
        if not already:
            gc.unfreeze()
    _add_fresh(stored, [fresh for _, fresh in parts])
    findings = Findings()
    for (_, _, fs), _ in parts:
        findings.merge(fs)
    return (
        [v for (vs, _, _), _ in parts for v in vs],
        [r for (_, rs, _), _ in parts for r in rs],
        findings,
    ), [v for vs in link_parts for v in vs]


def _add_fresh(stored: Stored, parts: Sequence[Part]) -> None:
    """The ranges' stored lines of each bundle where some were made anew, in step order (a bundle may span
    two ranges): ``stored.fresh`` then holds each such bundle whole."""
    whole: dict[str, list[bytes]] = {}
    anew: set[str] = set()
    for part in parts:
        for bundle, (blob, made) in part.items():
            whole.setdefault(bundle, []).append(blob)
            if made:
                anew.add(bundle)
    for bundle in anew:
        stored.fresh[bundle] = whole[bundle]


def _untested_unless_explained(verdicts: list[Verdict], culprits: list[Culprit]) -> list[Verdict]:
    """A pair step that did not run or print numbers (a launch ERROR) and that no culprit explains (its
    node did not fail with every partner: it dropped out mid-run) leaves both its nodes not tested: the
    verdict is theirs (label ``untested``, judge/items.py), as a step killed with its job is."""
    explained = {k for c in culprits for k in c.convicting}
    out = []
    for v in verdicts:
        if (
            v.check == "nccl.launch"
            and v.outcome is Outcome.ERROR
            and ":rail" in v.subject
            and not v.subject.endswith(":retest")  # a retest that did not run leaves its suspect unconfirmed
            and "untested" not in v.labels
            and v.subject.rpartition(":")[0] not in explained
        ):
            v = replace(v, labels={**v.labels, "untested": "did_not_run"})
        out.append(v)
    return out


def judge(
    site: Site, evidence: Sequence[tuple[Evidence, str]], nodes: Sequence[str], stored: Stored | None = None
) -> list[Verdict]:
    """``stored``: the run's stored parses of its steps (read, and added to with what was parsed here)."""
    steps = [(ev, p) for ev, p in evidence if ev.source in SOURCES and "kind" in ev.meta]
    snaps = [a for a in evidence if a[0].source == "counters"]
    # the link errors' verdicts, kept where their counter snapshots, nodes and site are those they were
    # judged from (checks/kept.py; ~4 s of 2 cores at 256 nodes): none left to judge
    key, kept_errors = "", None
    if stored is not None:
        key = kept.key_of(LINK_ERRORS, launched.unjudged(site), nodes, snaps)
        line = stored.kept(LINK_ERRORS)
        kept_errors = None if line is None else kept.loads(line, key)
    links = link_work(site, snaps, nodes) if kept_errors is None else None
    # where an EFA or Slingshot node's devices sit on PCI: aws-ofi-nccl names the devices it uses by address
    addresses = device_addresses(evidence)
    (verdicts, rows, findings), link_errors = judge_steps(site, steps, addresses, links, stored)
    if kept_errors is not None:
        link_errors = kept_errors
    elif stored is not None and (judged := kept.dumps(key, link_errors)) is not None:
        stored.keep[LINK_ERRORS] = judged
    paths = {step_id(ev.meta): p for ev, p in steps}
    crowded = crowded_steps(findings.bound, paths)
    verdicts, rows = _without_crowded(verdicts, rows, crowded)
    verdicts.extend(node_verdicts(findings, list(dict.fromkeys([*nodes, *site.nodes])), paths, crowded))
    down = fabric_down(site, [a for a in evidence if a[0].source == "nvidia-smi-q"])
    short = (
        efa.incomplete(site, evidence)
        | slingshot.incomplete(site, evidence)
        | tcpx.incomplete(site, evidence)
    )
    down |= short
    if down:
        verdicts, rows = _without_fabric(verdicts, rows, steps, down)
    verdicts = judge_rows(site, verdicts, rows)
    verdicts.extend(link_errors)
    if down:  # the node's own verdicts its fabric left without evidence (no pair rows, no traffic) say why
        verdicts = [_fabric_cause(v, down, short) for v in verdicts]
    return verdicts


def _fabric_cause(v: Verdict, down: dict[str, str], short: dict[str, str]) -> Verdict:
    """A SKIP for want of evidence on a node whose fabric is down names the fabric; a FAIL stays one (IB
    port errors rise without CUDA: a bad cable there is still a finding). On a node short of an EFA device
    (``short``) the counters it could not read are that finding too, not an ERROR of their own."""
    node = v.subject.split(":")[0]
    why = down.get(node)
    lost = node in short and v.check == "nccl.link_errors" and v.outcome is Outcome.ERROR
    if why is None or not (v.outcome is Outcome.SKIP or lost) or v.message.startswith("not judged"):
        return v
    return replace(v, outcome=Outcome.SKIP, message=f"not judged: {why}")


def judge_rows(site: Site, verdicts: list[Verdict], rows: list[dict[str, Any]]) -> list[Verdict]:
    """Every step judged (:func:`judge_measured`): the results with no baseline judged by their peers, the
    localization of the first pass, and, where a confirmation job ran (plan/confirm.py), its retests and
    bisections deciding what is blamed. The verdicts with ``nccl.localization`` on every node and block."""
    first = [r for r in rows if not r["attempt"]]
    retests = [r for r in rows if r["attempt"] == "retest"]
    halves = [r for r in rows if r["attempt"].startswith("bisect")]
    verdicts = _judged_by_peers(site, verdicts, first, [*retests, *halves])
    frame = pair_frame(site, first)
    culprits = localize(frame)
    if retests or halves:  # blame only what the confirmation job confirms
        culprits = confirm(culprits, pair_frame(site, retests))
        culprits += stragglers(site, suspects_of(site, verdicts).stragglers, halves, culprits)
    verdicts = _untested_unless_explained(verdicts, culprits)
    return verdicts + localization_verdicts(site, frame, culprits, _evidence_by_key(first, retests))


def _judged_by_peers(
    site: Site, verdicts: list[Verdict], first: list[dict[str, Any]], later: list[dict[str, Any]]
) -> list[Verdict]:
    """The busbw of every result with no baseline judged by its peers of the first pass and by the line
    rate (checks/peers.py); its row is slow when that verdict fails. Confirmation steps are judged by the
    first pass's peers (a handful of retests is no population)."""
    unjudged = [r for r in first if "peer" in r]
    later_unjudged = [r for r in later if "peer" in r]
    if not unjudged and not later_unjudged:
        return verdicts
    stats = peer_stats(site, unjudged)
    new: dict[str, Verdict] = {}
    rates: dict[tuple[Any, ...], Any] = {}
    for r in (*unjudged, *later_unjudged):
        context, labels = r["peer"]
        v = judge_row(
            site,
            {**r, "labels": labels},
            stats,
            check="nccl.busbw",
            subject=r["subject"],
            context=context,
            rates=rates,
        )
        new[r["subject"]] = v
        r["slow"] = r["slow"] or v.outcome is Outcome.FAIL
    return [
        new.get(v.subject, v) if v.check == "nccl.busbw" and v.outcome is Outcome.SKIP else v
        for v in verdicts
    ]


def _evidence_by_key(first: list[dict[str, Any]], retests: list[dict[str, Any]]) -> dict[str, str]:
    """``a-b:railk`` -> the step's raw evidence (``retest|a-b:railk`` for a retest)."""
    out: dict[str, str] = {}
    for prefix, rows in (("", first), ("retest|", retests)):
        for r in rows:
            if r["kind"] == "pair" and r["evidence"]:
                a, b = r["nodes"]
                out.setdefault(f"{prefix}{a}-{b}:rail{r['rail']}", r["evidence"][0])
    return out


def link_work(site: Site, snaps: Sequence[Archived], nodes: Sequence[str]) -> LinkWork:
    """The nodes whose link errors are judged, in verdict order, and each node's counter snapshots."""
    by_node: dict[str, list[Archived]] = {}
    for a in snaps:
        by_node.setdefault(a[0].host, []).append(a)
    # every node with snapshots too: a due-only run's partners are counted, and their errors never hidden
    return list(dict.fromkeys([*nodes, *(n for n in site.nodes if n in by_node)])), by_node


def link_error_verdicts(site: Site, snaps: Sequence[Archived], nodes: Sequence[str]) -> list[Verdict]:
    """``nccl.link_errors`` per node and rail, from the campaign's counter snapshots around traffic."""
    order, by_node = link_work(site, snaps, nodes)
    return _node_link_errors(site, order, by_node)


def _node_link_errors(site: Site, order: Sequence[str], by_node: dict[str, list[Archived]]) -> list[Verdict]:
    out = []
    for node in order:
        ivs, problems = counters.intervals(by_node.get(node, []), nvlink=False)  # NVLink's: nvlink.errors
        nt = site.node_type(node)
        for r in nt.rails:
            if not nt.verbs:
                how = {"slingshot": "cxi_stat -r prints them: HewlettPackard/shs-libcxi"}.get(
                    nt.fabric, "the interface's statistics in sysfs"
                )
                why = (
                    f"{node} rail{r.index} ({r.hca}): a {nt.nic_noun}'s error rates are not read yet "
                    f"({how}); its link is judged by {nt.family}.devices"
                )
                out.append(skip("nccl.link_errors", "nccl", rail_subject(node, r.index), why))
                continue
            where = f"{node} rail{r.index} ({r.hca} port {r.port})"
            out.append(counters.link_errors(where, r.index, rail_subject(node, r.index), ivs, problems))
    return out


def judge_frame(site: Site, frame: pd.DataFrame) -> pd.DataFrame:
    """Vectorized busbw judgement of a pair frame (columns a, b, rail, collective, scope, size_B,
    busbw_GBps): adds ref_GBps, low_GBps and slow with the same keys and bounds as :func:`judge_step`.
    One baseline lookup per distinct (collective, scope, rail, size), not per row (4,096 nodes: half a
    million rows)."""
    cols = ["collective", "scope", "rail", "size_B"]
    combos = frame[cols].drop_duplicates().reset_index(drop=True)
    refs = [
        lookup(site.baselines, f"nccl.busbw.{c}.{sc}.rail{r}.{format_size(int(sz))}")
        for c, sc, r, sz in combos.itertuples(index=False)
    ]
    combos["ref_GBps"] = [None if ref is None else ref.ref for ref in refs]
    combos["low_GBps"] = [None if ref is None else ref.bounds()[0] for ref in refs]
    out = frame.merge(combos, on=cols, how="left")
    low = pd.to_numeric(out["low_GBps"], errors="coerce")
    return out.assign(slow=low.notna() & (out["busbw_GBps"] < low.fillna(0.0)))
