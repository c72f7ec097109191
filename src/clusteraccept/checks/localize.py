"""Localization: from the pair x rail busbw matrix, name the node, rail, leaf uplink or pair path that
explains the slow results — never average an outlier away. Pure (pandas in, Culprits out).

A frame has one row per (pair, rail, collective) at its bandwidth-bound size, with columns
``a, b, rail, block_a, block_b, scope, collective, busbw_GBps, ref_GBps, slow`` (slow: judged FAIL at any
size, or the step failed its launch checks or did not run), and optionally ``failed`` ("error": the step did
not run or print numbers; "fail": it failed its launch checks).

Rules, most specific evidence first, each slow row explained at most once; rows with ``failed`` == "error"
count for rules 1 and 2 only (a dead node fails with every partner), and a culprit they alone convict is
``untested``:

1. node rail: every partner of node n on rail k is slow (>= ``min_partners`` distinct partners) while
   n has healthy results on some other rail (or, when only rail k was measured, its partners are healthy
   with others on it) -> ``n:railk``;
2. node: n is a node-rail culprit on at least half of its rails, or slow with every partner on every
   rail -> ``n``;
3. leaf uplink: among the slow cross-block rows not explained above, a block whose cross-block rows are
   slow with every other block (>= ``min_partners`` rows and >= 2 other blocks where that many exist),
   while its in-block rows are healthy -> the block (its uplinks);
4. pair path: any slow row left is blamed on its own pair and rail (a cable or switch port between them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import pandas as pd


@dataclass(frozen=True)
class Culprit:
    kind: str  # rail | node | uplink | path | straggler (checks/confirm.py)
    subject: str  # node3:rail5 | node3 | leaf2 | node1-node3:rail5 | node3 (a straggler) or its block
    nodes: tuple[str, ...]  # the node(s) it implicates (none for an uplink)
    convicting: tuple[str, ...]  # the slow (pair:rail) results that convicted it
    healthy: tuple[str, ...]  # results that exonerate the alternatives (e.g. its other rails)
    message: str
    untested: bool = False  # convicted only by steps that did not run or print numbers (frame "failed")
    status: str = ""  # after the confirmation round (checks/confirm.py): confirmed | transient | unconfirmed
    retest: tuple[str, ...] = ()  # the retest results (pair:rail) that decided it
    candidates: tuple[str, ...] = ()  # a straggler the bisection narrowed to a set: the set


def _keys(frame: pd.DataFrame) -> pd.Series:
    """``a-b:railk`` per row (vectorized: half a million rows at 4,096 nodes)."""
    return (
        frame["a"].astype(str)
        + "-"
        + frame["b"].astype(str)
        + ":rail"
        + frame["rail"].astype(int).astype(str)
    )


def _long(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (node, partner, rail): each pair result seen from both of its ends."""
    ends = []
    for me, other in (("a", "b"), ("b", "a")):
        part = frame.assign(
            node=frame[me],
            partner=frame[other],
            my_block=frame[f"block_{me}"],
            other_block=frame[f"block_{other}"],
        )
        ends.append(part)
    return pd.concat(ends, ignore_index=True)


def localize(frame: pd.DataFrame, min_partners: int = 2) -> list[Culprit]:
    """The culprits; each is ``untested`` when every result convicting it is a step that did not run or
    print numbers (an optional column ``failed`` == "error"): a dead node is named, not measured."""
    if frame.empty or not frame["slow"].any():
        return []
    frame = frame.reset_index(drop=True).assign(key=_keys)
    explained: set[str] = set()
    culprits: list[Culprit] = []
    long = _long(frame)

    # 1 + 2: per (node, rail), are all partners slow?
    stats = long.groupby(["node", "rail"]).agg(
        partners=("partner", "nunique"), n=("slow", "size"), n_slow=("slow", "sum")
    )
    stats["all_slow"] = (stats["n_slow"] == stats["n"]) & (stats["partners"] >= min_partners)
    rails_per_node = long.groupby("node")["rail"].nunique()
    for node_key, grp in stats.groupby(level="node"):
        node = str(node_key)
        bad_rails = [int(r) for r in grp.index.get_level_values("rail")[grp["all_slow"].to_numpy()]]
        if not bad_rails:
            continue
        mine = long[long["node"] == node]
        if len(bad_rails) * 2 >= int(rails_per_node[node]) and len(bad_rails) > 1:
            keys = tuple(sorted(set(mine.loc[mine["slow"], "key"])))
            partners = sorted(set(mine.loc[mine["slow"], "partner"]))
            culprits.append(
                Culprit(
                    "node",
                    node,
                    (node,),
                    keys,
                    (),
                    f"node {node} is slow with every partner on {len(bad_rails)} of "
                    f"{int(rails_per_node[node])} rails (partners {', '.join(partners)})",
                )
            )
            explained.update(keys)
            continue
        for rail in bad_rails:
            on_rail = mine[mine["rail"] == rail]
            keys = tuple(sorted(set(on_rail["key"])))
            partners = sorted(set(on_rail["partner"]))
            healthy = tuple(sorted(set(mine.loc[(mine["rail"] != rail) & ~mine["slow"], "key"])))[:8]
            why = "its other rails are healthy"
            if not healthy and not (long["rail"] != rail).any():
                # only this rail was measured (-k rail5): its partners, healthy with everyone else on it,
                # exonerate themselves; whether the rest of the node is sound this run cannot say
                exonerating = long[
                    (long["rail"] == rail)
                    & long["node"].isin(partners)
                    & (long["partner"] != node)
                    & ~long["slow"]
                ]
                healthy = tuple(sorted(set(exonerating["key"])))[:8]
                why = "its partners are healthy with their other partners (only this rail was measured)"
            if not healthy:
                continue  # nothing exonerates its other rails: leave it to the node/uplink rules
            culprits.append(
                Culprit(
                    "rail",
                    f"{node}:rail{rail}",
                    (node,),
                    keys,
                    healthy,
                    f"{node} rail {rail} is slow with every partner ({', '.join(partners)}) and {why}",
                )
            )
            explained.update(keys)

    # 3 and 4 weigh measurements only: a step that never ran convicts a node that fails with every
    # partner (above), never a cable or an uplink (its verdict stays "not tested", checks/nccl.py)
    if "failed" in frame:
        frame = frame[frame["failed"] != "error"]
        measured = set(frame["key"])
        culprits = [replace(c, untested=not measured.intersection(c.convicting)) for c in culprits]

    # 3: leaf uplinks, from the slow cross-block rows nothing above explains.
    cross = frame[(frame["block_a"] != frame["block_b"])]
    if not cross.empty:
        cl = _long(cross)
        blocks = sorted(set(cl["my_block"]))
        for block in blocks:
            rows = cl[(cl["my_block"] == block) & ~cl["key"].isin(explained)]
            if len(rows) < min_partners or not rows["slow"].all():
                continue
            others = set(rows["other_block"])
            if len(blocks) > 2 and len(others) < 2:
                continue  # one other block only: cannot tell whose uplink it is
            inside = frame[(frame["block_a"] == block) & (frame["block_b"] == block)]
            if not inside.empty and inside["slow"].mean() > 0.5:
                continue  # the block is slow inside too: not its uplinks
            if len(blocks) > 2:
                # another block is slow with everybody too? then only blame this one if the others'
                # rows not touching this block are healthy.
                rest = cl[(cl["my_block"] != block) & (cl["other_block"] != block)]
                if not rest.empty and rest["slow"].mean() > 0.5:
                    continue
            keys = tuple(sorted(set(rows["key"])))
            culprits.append(
                Culprit(
                    "uplink",
                    str(block),
                    (),
                    keys,
                    (),
                    f"every cross-block pair through {block} is slow "
                    f"({len(keys)} results, to {', '.join(sorted(others))}) while inside it "
                    f"pairs are healthy: suspect {block}'s uplinks",
                )
            )
            explained.update(keys)

    # 4: pair paths.
    for _, row in frame[frame["slow"] & ~frame["key"].isin(explained)].iterrows():
        culprits.append(
            Culprit(
                "path",
                row["key"],
                (str(row["a"]), str(row["b"])),
                (row["key"],),
                (),
                f"only {row['a']}-{row['b']} on rail {int(row['rail'])} is slow; both ends "
                "are healthy with other partners: suspect the cable/port path between them",
            )
        )
    return culprits


def blamed_nodes(culprits: Iterable[Culprit]) -> dict[str, list[Culprit]]:
    """Per node, the culprits that name it (transients too: their verdict says so, and blames nobody)."""
    out: dict[str, list[Culprit]] = {}
    for c in culprits:
        for node in c.nodes:
            out.setdefault(node, []).append(c)
    return out
