"""SHARP in-network reduction, judged per block (subjects ``subjects(site, "block")``: block names + "all").

- ``sharp.hello``: the site's SHARP check command (``sharp.hello``, default sharp_hello), run on every node
  by probes/sharp.py, passes on all the block's nodes; a block fails naming each failing node and the reason
  libsharp gave ("No resource").
- ``sharp.collnet``: an NCCL all_reduce across the block with the site's SHARP/CollNet settings shows CollNet
  connections through SHARP in its INFO log (parsers/sharp.py ``collnet_active``), no fallback.
- ``sharp.uplift``: that run's busbw over the same run without SHARP, at the largest size both reached,
  against the baseline ``sharp.uplift.<block>``.
The last two need a SHARP campaign: evidence of family "sharp" with source "nccl-tests" and meta
``{"subject": <block>, "sharp": "on"|"off"}``. The campaign planner does not plan it in this version, so
without such evidence both SKIP saying so. A site without SHARP skips all three with its declared reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.judge.verdicts import judge as judge_value
from clusteraccept.parsers import nccl_tests, sharp
from clusteraccept.plan.subjects import subjects
from clusteraccept.site.baselines import lookup
from clusteraccept.site.model import Site
from clusteraccept.site.schema import format_size

FAMILY = "sharp"
CHECKS = ("sharp.hello", "sharp.collnet", "sharp.uplift")
NO_CAMPAIGN = "no SHARP on/off all_reduce run came back for this block (see the campaign job in results.json)"
Archived = tuple[Evidence, str]


def members(site: Site, block: str) -> tuple[str, ...]:
    """The nodes of block subject ``block`` ("all": every node)."""
    return site.blocks.get(block) or (site.nodes if block == "all" else ())


def _tail(ev: Evidence) -> str:
    lines = (ev.stderr or ev.stdout).strip().splitlines()
    return lines[-1][:160] if lines else "no output"


def hello_outcome(ev: Evidence, path: str) -> tuple[str, str]:
    """One node's sharp_hello: ("pass" | "fail" | "error", reason)."""
    if ev.returncode == 127:
        return "error", f"{ev.argv[0] if ev.argv else 'sharp_hello'} not found ({_tail(ev)})"
    if ev.returncode is None:
        return "fail", f"did not finish ({_tail(ev)})"
    try:
        report = sharp.parse(ev.stdout)
    except ParseError as exc:
        if ev.returncode != 0:
            return "fail", f"exit {ev.returncode}: {_tail(ev)}"
        return "error", f"could not parse sharp output ({path}): {exc}"
    if report.hello_passed:
        return "pass", "Test Passed."
    if report.hello_passed is False:
        return "fail", report.hello_reason or 'no "Test Passed."'
    return "error", f"no sharp_hello result in its output ({path})"


def judge_hello(site: Site, block: str, by_host: dict[str, list[Archived]]) -> Verdict:
    nodes = members(site, block)
    results: dict[str, tuple[str, str]] = {}
    paths: list[str] = []
    for node in nodes:
        hello = [(ev, p) for ev, p in by_host.get(node, []) if ev.meta.get("role") == "hello"]
        if not hello:
            results[node] = ("error", "no sharp_hello evidence came back")
            continue
        paths.append(hello[0][1])
        results[node] = hello_outcome(*hello[0])
    where = f"[block {block}, {len(nodes)} nodes]"
    failed = [f"{n} ({why})" for n, (o, why) in results.items() if o == "fail"]
    broken = [f"{n} ({why})" for n, (o, why) in results.items() if o == "error"]
    if failed:
        msg = f"sharp_hello failed on {', '.join(failed)} {where}"
        msg += f"; could not run on {', '.join(broken)}" if broken else ""
        return expect("sharp.hello", FAMILY, block, False, msg, value=len(failed), evidence=tuple(paths))
    if broken:
        msg = f"sharp_hello could not run on {', '.join(broken)} {where}"
        return error("sharp.hello", FAMILY, block, msg, tuple(paths))
    return expect(
        "sharp.hello",
        FAMILY,
        block,
        True,
        f"sharp_hello passed on {', '.join(nodes)} {where}",
        value=0,
        evidence=tuple(paths),
    )


def _campaign(evidence: Sequence[Archived], block: str, mode: str) -> Archived | None:
    return next(
        (
            (ev, p)
            for ev, p in evidence
            if ev.source == "nccl-tests" and ev.meta.get("subject") == block and ev.meta.get("sharp") == mode
        ),
        None,
    )


def judge_collnet(block: str, run: Archived | None) -> Verdict:
    if run is None:
        return skip("sharp.collnet", FAMILY, block, NO_CAMPAIGN)
    ev, path = run
    try:
        report = sharp.parse(ev.stdout + "\n" + ev.stderr)
    except ParseError as exc:
        msg = f"could not parse NCCL INFO log ({path}): {exc}"
        return error("sharp.collnet", FAMILY, block, msg, (path,))
    conns = report.collnet_connections
    if report.collnet_active:
        plugins = ", ".join(sorted({c.plugin for c in conns}))
        msg = (
            f"all_reduce across {block} with SHARP: {len(conns)} CollNet connections via COLLNET/{plugins}"
            f", {report.collnet_channels or '?'} collnet channels"
        )
        return expect("sharp.collnet", FAMILY, block, True, msg, value=len(conns), evidence=(path,))
    why = (
        "NCCL fell back to point-to-point (Cannot initialize CollNet)"
        if report.collnet_fallback
        else "no CollNet connection in the INFO log (NCCL_DEBUG=INFO and NCCL_COLLNET_ENABLE=1 set?)"
    )
    warn = f"; SHARP warnings: {' | '.join(report.sharp_warnings[:3])}" if report.sharp_warnings else ""
    return expect(
        "sharp.collnet",
        FAMILY,
        block,
        False,
        f"all_reduce across {block}: {why}{warn}",
        value=len(conns),
        evidence=(path,),
    )


def judge_uplift(site: Site, block: str, on: Archived | None, off: Archived | None) -> Verdict:
    if on is None or off is None:
        return skip("sharp.uplift", FAMILY, block, NO_CAMPAIGN)
    paths = (on[1], off[1])
    try:
        rows = [
            {r.size_B: (r.out_of_place or r.in_place) for r in nccl_tests.parse(ev.stdout).rows}
            for ev, _ in (on, off)
        ]
    except ParseError as exc:
        msg = f"could not parse nccl-tests output ({', '.join(paths)}): {exc}"
        return error("sharp.uplift", FAMILY, block, msg, paths)
    both = {s: (m1.busbw_GBps, m2.busbw_GBps) for s, m1 in rows[0].items() if m1 and (m2 := rows[1].get(s))}
    if not both:
        return error("sharp.uplift", FAMILY, block, "no message size measured with and without SHARP", paths)
    size = max(both)
    with_sharp, without = both[size]
    if without <= 0:
        return error("sharp.uplift", FAMILY, block, f"busbw without SHARP is {without} at {size} B", paths)
    key = f"sharp.uplift.{block}"
    context = (
        f"block {block}, all_reduce {format_size(size)}: {with_sharp:.1f} GB/s with SHARP, "
        f"{without:.1f} without"
    )
    return judge_value(
        "sharp.uplift",
        FAMILY,
        block,
        with_sharp / without,
        lookup(site.baselines, key),
        what="busbw_uplift",
        context=context,
        evidence=paths,
        labels={"key": key},
    )


def judge(site: Site, evidence: Sequence[Archived], nodes: Sequence[str]) -> list[Verdict]:
    blocks = subjects(site, "block")
    if not site.sharp.enabled:
        reason = f"site declares no SHARP: {site.sharp.reason}"
        return [skip(c, FAMILY, b, reason) for b in blocks for c in CHECKS]
    by_host: dict[str, list[Archived]] = {}
    for ev, path in evidence:
        by_host.setdefault(ev.host, []).append((ev, path))
    verdicts: list[Verdict] = []
    for block in blocks:
        on, off = _campaign(evidence, block, "on"), _campaign(evidence, block, "off")
        verdicts += [
            judge_hello(site, block, by_host),
            judge_collnet(block, on),
            judge_uplift(site, block, on, off),
        ]
    return verdicts
