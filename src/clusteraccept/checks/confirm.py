"""The confirmation round, judged (pure): a culprit of the first pass is blamed only if its retest
confirms it, and a straggler of a slow block collective is named from the bisection (plan/confirm.py).

Retest statuses (``Culprit.status``):
- ``confirmed``: slow again with a partner that proved healthy (or, for a path, its own pair slow again);
- ``transient``: slow once, healthy on every retest: its own verdict, never a blame and never a drain;
- ``unconfirmed``: a confirmation job ran but no retest of it did (no healthy partner left, a step that did
  not run): blamed on the first evidence, and says so.
Without any confirmation evidence (turned off, a run from before it) culprits stand as the first pass found
them (status "").

Bisection: for each bit, the side whose busbw (at the largest size) is more than the band (20%) below the
other side's holds the straggler; the candidates are the nodes on every slow side. All bits decided: one node
is named; none decided: the slow block collective did not reproduce (transient); some: a set of nodes is named
on the block, and no node is blamed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from clusteraccept.checks.localize import Culprit
from clusteraccept.judge.items import split_pair
from clusteraccept.plan.confirm import Straggler, Suspects, bisection_sets
from clusteraccept.site.model import Site

RETESTED = ("rail", "node", "path")
# x nccl.peers.below: two noisy results differ by sqrt(2) x the noise of one; at 20% a split is decided
# 3.5 sigma away at twice the noise benchmarks/blame.py assumes, and a straggler at 0.6 is 40% away
BISECT_BAND = 2.0


def _rows_of(c: Culprit, retest: pd.DataFrame) -> pd.DataFrame:
    a, b = retest["a"], retest["b"]
    if c.kind == "path":
        x, y = c.nodes
        rail = int(c.subject.rsplit(":rail", 1)[1])
        return retest[(((a == x) & (b == y)) | ((a == y) & (b == x))) & (retest["rail"] == rail)]
    node = c.nodes[0]
    mine = retest[(a == node) | (b == node)]
    if c.kind == "rail":
        mine = mine[mine["rail"] == int(c.subject.rsplit(":rail", 1)[1])]
    return mine


def _described(rows: pd.DataFrame, me: tuple[str, ...]) -> str:
    parts = []
    for a, b, rail, bw_GBps, failed in zip(
        rows["a"], rows["b"], rows["rail"], rows["busbw_GBps"], rows["failed"], strict=True
    ):
        other = b if a in me else a
        # a step that ran and failed (an init error, a launch check) has no number
        bw = (
            "did not run"
            if failed == "error"
            else "failed"
            if pd.isna(bw_GBps)
            else f"{float(bw_GBps):.1f} GB/s"
        )
        parts.append(f"{other if len(me) == 1 else f'{a}-{b}'} rail {int(rail)} {bw}")
    return ", ".join(parts[:6]) + (" ..." if len(parts) > 6 else "")


def confirm(culprits: Sequence[Culprit], retest: pd.DataFrame) -> list[Culprit]:
    """Each culprit with its retest status and evidence (``retest`` is the retests' pair frame)."""
    out = []
    for c in culprits:
        if c.kind not in RETESTED:
            out.append(c)
            continue
        rows = _rows_of(c, retest) if not retest.empty else retest
        measured = rows[rows["failed"] != "error"] if not rows.empty else rows
        keys = tuple(
            f"{a}-{b}:rail{int(k)}" for a, b, k in zip(rows["a"], rows["b"], rows["rail"], strict=True)
        )
        if measured.empty:
            out.append(
                replace(c, status="unconfirmed", message=f"{c.message}; not confirmed: no retest of it ran")
            )
            continue
        how = _described(measured, c.nodes if c.kind != "path" else ())
        n_slow = int(measured["slow"].sum())
        if n_slow:
            msg = f"{c.message}; confirmed on retest: slow on {n_slow} of {len(measured)} ({how})"
            out.append(replace(c, status="confirmed", message=msg, retest=keys))
        else:
            first = ", ".join(c.convicting[:3]) + (" ..." if len(c.convicting) > 3 else "")
            msg = f"transient: {c.subject} slow once ({first}), healthy on retest ({how})"
            out.append(replace(c, status="transient", message=msg, retest=keys))
    return out


def stragglers(
    site: Site,
    suspects: Sequence[Straggler],
    bisect_rows: Sequence[Mapping[str, Any]],
    culprits: Sequence[Culprit] = (),
) -> list[Culprit]:
    """The bisection of every straggler suspect that has bisection results. A confirmed culprit with a node
    among the candidates (a cable's end, a rail's node: a split between a cable's ends is healthy on both
    sides, and noise can decide it either way), or an uplink of the block, explains the slow collective:
    no straggler is named for it."""
    explaining = [c for c in culprits if c.status in ("confirmed", "") and c.kind != "straggler"]
    band = site.nccl.peers.below * BISECT_BAND
    # the largest size of each bisection step (bandwidth-bound)
    best: dict[tuple[str, str, str], tuple[int, float]] = {}
    for r in bisect_rows:
        if r.get("failed"):
            continue
        k = (r["step"].split(":", 1)[0], r["collective"], r["attempt"])
        if k not in best or r["size_B"] > best[k][0]:
            best[k] = (int(r["size_B"]), float(r["busbw_GBps"]))
    out = []
    for g in suspects:
        sets = bisection_sets(g.nodes)
        candidates = set(g.nodes)
        decided, notes = 0, []
        for j, a, b in sets:
            va = best.get((g.subject, g.collective, f"bisect{j}a"))
            vb = best.get((g.subject, g.collective, f"bisect{j}b"))
            if va is None or vb is None:
                continue
            (_, x), (_, y) = va, vb
            if x < y * (1 - band):
                candidates &= set(a)
                decided += 1
            elif y < x * (1 - band):
                candidates &= set(b)
                decided += 1
            notes.append(f"{_short(a)} {x:.1f} vs {_short(b)} {y:.1f} GB/s")
        if not notes:
            continue  # not bisected (no results): the block's busbw verdict stands alone
        if any(
            (c.nodes and set(c.nodes) & candidates)
            or (c.kind == "uplink" and g.subject in (c.subject, "all"))
            for c in explaining
        ):
            continue
        where = f"{g.subject}'s {g.collective}"
        halves = "; ".join(notes)
        if decided == 0:
            out.append(
                Culprit(
                    "straggler",
                    g.subject,
                    (),
                    (),
                    (),
                    f"transient: {where} was slow once, its halves are alike on retest ({halves})",
                    status="transient",
                )
            )
        elif len(candidates) == 1:
            node = next(iter(candidates))
            out.append(
                Culprit(
                    "straggler",
                    node,
                    (node,),
                    (f"{g.subject}:{g.collective}",),
                    (),
                    f"{node} is the straggler of {where}: it is on the slow side of every split ({halves})",
                    status="confirmed",
                )
            )
        else:
            names = ", ".join(sorted(candidates))
            out.append(
                Culprit(
                    "straggler",
                    g.subject,
                    (),
                    (f"{g.subject}:{g.collective}",),
                    (),
                    f"the straggler of {where} is one of {names}: the splits that would tell them apart "
                    f"are within noise or too small to run ({halves})",
                    status="confirmed",
                    candidates=tuple(sorted(candidates)),
                )
            )
    # a block's bisection and the whole set's see the same straggler: a node one of them names explains
    # the set the other could only narrow it to (a dip in one half can leave a split undecided)
    named = {c.nodes[0] for c in out if c.kind == "straggler" and c.nodes}
    return [c for c in out if not (c.candidates and named.intersection(c.candidates))]


def _short(nodes: Sequence[str]) -> str:
    return "{" + ",".join(nodes[:3]) + (",..." if len(nodes) > 3 else "") + "}"


def suspects_of(site: Site, verdicts: Sequence[Any]) -> Suspects:
    """What the first pass's verdicts ask the confirmation job to re-test (plain data for plan/confirm.py):
    the nodes and paths of node, rail and path culprits, the nodes that proved healthy, and every block
    collective that failed its busbw while no node in it is a culprit."""
    nodes: list[str] = []
    paths: list[tuple[str, str]] = []
    healthy: list[str] = []
    blamed_blocks: set[str] = set()
    node_set = frozenset(site.nodes)
    for v in verdicts:
        if v.check != "nccl.localization":
            continue
        if v.subject not in node_set:  # a block whose uplinks are slow: that explains its collectives
            if v.outcome.value == "fail" and str(v.labels.get("culprits", "")).startswith("uplink:"):
                blamed_blocks.update((v.subject, "all"))
            continue
        if v.outcome.value == "pass":
            healthy.append(v.subject)
            continue
        if v.outcome.value != "fail":
            continue
        for culprit in str(v.labels.get("culprits", "")).split("|"):
            kind, _, subject = culprit.partition(":")
            if kind in ("node", "rail") and v.subject not in nodes:
                nodes.append(v.subject)
                # a slow node or rail slows every collective it is in: that explains its block's
                blamed_blocks.update((site.block_of(v.subject) or "all", "all"))
            elif kind == "path":
                pair = subject.rsplit(":rail", 1)[0]
                a, b = split_pair(pair, node_set)
                if (a, b) not in paths:
                    paths.append((a, b))
                # one slow result is all a cable suspect has, most often a dip: its block is bisected
                # anyway, and a confirmed cable inside the slow side explains it (stragglers())
    seen: set[tuple[str, str]] = set()
    strag: list[Straggler] = []
    for v in verdicts:
        if v.check != "nccl.busbw" or v.outcome.value != "fail" or v.labels.get("attempt"):
            continue
        scope = v.labels.get("scope")
        if scope not in ("block", "all"):
            continue
        block, collective = v.subject.split(":")[:2]
        if block in blamed_blocks or (block, collective) in seen:
            continue
        seen.add((block, collective))
        members = site.nodes if block == "all" else site.blocks.get(block, ())
        order = [n for b in site.blocks.values() for n in b if n in members] if block == "all" else members
        strag.append(Straggler(block, str(scope), collective, tuple(order)))
    return Suspects(tuple(nodes), tuple(paths), tuple(healthy), tuple(strag))
