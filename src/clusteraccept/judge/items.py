"""The units a run is accepted in: one item per (family, node) and per (family, block).

These are the pytest items of suites/ and the testcases of junit.xml. They grow with the nodes, never with
the pairs: a 16,384-node cluster has ~2 million pair x rail results per pair collective, and pytest costs
~0.5 ms and ~7 KB per item. A pair's verdicts are the evidence of the localization (checks/localize.py),
which names the culprit node, rail, cable or leaf uplink; the culprit's item fails with the slow pairs as
its evidence, and a healthy node never fails because its partner is bad.

A verdict belongs to the item named by its subject up to the first ':' (``node07``, ``node07:rail3``,
``node07:all_reduce:1GiB`` -> node07; ``leaf2:all_reduce:8GiB`` -> leaf2). A pair verdict (``a-b:rail3...``)
belongs to no item, except a step that could not be tested because its Slurm job ended (label
``untested``): that one belongs to both of its nodes, which were not tested either.

Each verdict also has a *part*, the finer subject pytest's ``-k`` selects on as it did when there was one
test per part: the node, ``node:gpuK`` or ``node:railK`` (:func:`part_of`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

NODE, BLOCK = "node", "block"
# The localization reads every rail's pair results: selecting any of a node's rails keeps it.
EVERY_RAIL = frozenset({"nccl.localization"})
EVIDENCE_CAP = 50  # failing pair verdicts kept per node as the evidence of its item (the rest are counted)
_PART = re.compile(r"(?:gpu|rail)\d+")


def part_of(subject: str) -> str:
    """``node07:rail3:...`` -> ``node07:rail3``; ``node07:gpu2`` -> itself; anything else -> its owner."""
    head, _, rest = subject.partition(":")
    second = rest.split(":", 1)[0]
    return f"{head}:{second}" if second and _PART.fullmatch(second) else head


def split_pair(pair: str, nodes: frozenset[str]) -> tuple[str, str]:
    """``node1-node3`` -> (node1, node3); host names may contain '-', so the site's nodes decide."""
    if pair.count("-") == 1:
        a, b = pair.split("-")
        return a, b
    for i, ch in enumerate(pair):
        if ch == "-" and pair[:i] in nodes and pair[i + 1 :] in nodes:
            return pair[:i], pair[i + 1 :]
    mid = pair.count("-") // 2 + 1  # unknown names: split at the middle dash
    parts = pair.split("-")
    return "-".join(parts[:mid]), "-".join(parts[mid:])


@dataclass
class Items:
    """A run's verdicts (results.json dicts) by item: ``owned[(family, per, owner)]``, and per node the
    pair verdicts that did not pass (``evidence``, at most EVIDENCE_CAP each; ``evidence_n`` counts all)."""

    owned: dict[tuple[str, str, str], list[Mapping[str, Any]]] = field(default_factory=dict)
    evidence: dict[str, list[Mapping[str, Any]]] = field(default_factory=dict)
    evidence_n: dict[str, int] = field(default_factory=dict)

    def of(self, family: str, per: str, owner: str) -> list[Mapping[str, Any]]:
        return self.owned.get((family, per, owner), [])


def group(verdicts: Iterable[Mapping[str, Any]], nodes: Iterable[str], blocks: Iterable[str]) -> Items:
    """One pass over the verdicts (linear: a dict look-up each)."""
    node_set, block_set = frozenset(nodes), frozenset(blocks)
    items = Items()
    owned, evidence, evidence_n = items.owned, items.evidence, items.evidence_n
    ends: dict[str, tuple[str, str]] = {}
    for v in verdicts:
        subject = v["subject"]
        owner = subject.split(":", 1)[0]
        family = v["family"]
        if owner in node_set:
            key = (family, NODE, owner)
        elif owner in block_set:
            key = (family, BLOCK, owner)
        else:
            if v["outcome"] == "pass":
                continue
            pair = ends.get(owner)
            if pair is None:
                pair = ends[owner] = split_pair(owner, node_set)
            untested = bool((v.get("labels") or {}).get("untested"))
            for node in pair:
                if untested:
                    owned.setdefault((family, NODE, node), []).append(v)
                n = evidence_n[node] = evidence_n.get(node, 0) + 1
                if n <= EVIDENCE_CAP:
                    evidence.setdefault(node, []).append(v)
            continue
        bucket = owned.get(key)
        if bucket is None:
            bucket = owned[key] = []
        bucket.append(v)
    return items


def parts(owner: str, per: str, kinds: Sequence[str], gpus: int, rails: Sequence[int]) -> list[str]:
    """An item's parts: the owner and, as its family declares (``gpu``, ``rail``), each GPU and rail."""
    out = [owner]
    if per == NODE:
        if "gpu" in kinds:
            out += [f"{owner}:gpu{g}" for g in range(gpus)]
        if "rail" in kinds:
            out += [f"{owner}:rail{r}" for r in rails]
    return out


def selected(
    verdicts: Sequence[Mapping[str, Any]], picked: frozenset[str] | None, owner: str = ""
) -> list[Mapping[str, Any]]:
    """The verdicts of the parts ``-k`` picked (None: every part); an untested pair step of ``owner``'s is
    the part of its rail (``a-b:rail3:...`` -> ``owner:rail3``)."""
    if picked is None:
        return list(verdicts)
    return [v for v in verdicts if _picked(v, picked, owner)]


def _picked(v: Mapping[str, Any], picked: frozenset[str], owner: str) -> bool:
    subject = v["subject"]
    head = subject.split(":", 1)[0]
    if (v.get("labels") or {}).get("untested") and head not in (owner, ""):
        rail = subject.split(":")[1] if ":" in subject else ""
        return owner in picked or f"{owner}:{rail}" in picked
    if part_of(subject) in picked:
        return True
    return v["check"] in EVERY_RAIL and any(p.startswith(head + ":rail") for p in picked)


SHOWN = 20  # failing verdicts quoted in an item's failure message (all of them stay in the record)
EVIDENCE_SHOWN = 6  # failing pair results quoted as a culprit's evidence


def outcome_of(verdicts: Sequence[Mapping[str, Any]]) -> str:
    """An item's outcome: fail if a verdict failed, else error if one could not be judged, else pass if one
    passed, else waived, else skip (what pytest and junit.xml both say)."""
    seen = {v["outcome"] for v in verdicts}
    for outcome in ("fail", "error", "pass", "waived"):
        if outcome in seen:
            return outcome
    return "skip"


def counts_line(verdicts: Sequence[Mapping[str, Any]]) -> str:
    """``fail=1 pass=12``: an item's verdicts by outcome (its pytest property and junit.xml system-out)."""
    counts = Counter(v["outcome"] for v in verdicts)
    return " ".join(f"{o}={n}" for o, n in sorted(counts.items()))


def failure_lines(
    verdicts: Sequence[Mapping[str, Any]],
    subject: str,
    evidence: Sequence[Mapping[str, Any]] = (),
    evidence_n: int = 0,
) -> list[str]:
    """The message of a failing item: its failing verdicts, then, when localization blamed it, the failing
    pair results that involve it (its evidence; a partner's own fault is not quoted as this node's)."""
    bad = [v for v in verdicts if v["outcome"] in ("fail", "error")]
    lines = [
        ("ERROR: " if v["outcome"] == "error" else "") + f"{v['check']}: {v.get('message') or ''}"
        for v in bad[:SHOWN]
    ]
    if len(bad) > SHOWN:
        lines.append(f"... and {len(bad) - SHOWN} more failing verdicts (results, report.html)")
    if evidence_n and any(v["check"] == "nccl.localization" for v in bad):
        lines.append(f"evidence: {evidence_n} pair results involving {subject} did not pass, e.g.:")
        lines += [f"  {v.get('message') or v['subject']}" for v in evidence[:EVIDENCE_SHOWN]]
    return lines
