"""Drain the nodes a run convicted, undrain the ones clusteraccept drained that pass again (opt-in).

Which nodes: a FAIL of ``nccl.localization`` on a node whose culprit is the node or one of its rails
(``labels["culprits"]`` ``node:node3`` / ``rail:node3:rail5`` / ``straggler:node3``; a ``path`` culprit is a
cable between two healthy nodes and drains neither; a culprit the confirmation round could not re-test,
``labels["confirmation"]`` "unconfirmed", drains nothing; a transient is a PASS), or a FAIL of a node check
(``drain.checks`` patterns) on the node or one of its GPUs/rails. Guards: a node that already has a reason
that is not ours (drained, down, ... by someone else) is never touched and keeps its reason; more than
``drain.max_fraction`` of a block convicted in one run drains none of that block (a broken baseline or a
shared component must not empty the cluster).

The commands (run by jobs/slurm_clients.py, where every Slurm client call of the submit host is):
- state: ``sinfo -N -h -o '%N|%T|%E'`` (slurm_clients.node_states);
- drain: ``scontrol update NodeName=X State=DRAIN Reason="clusteraccept: <check> <what> <run-id>"``
  (scontrol(1): DRAIN needs a Reason);
- undrain: ``scontrol update NodeName=X State=UNDRAIN``: scontrol(1) "Clears the node from being drained
  (like RESUME), but will not change the node's base state (e.g. DOWN)".
"""

from __future__ import annotations

import fnmatch
import math
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.jobs.slurm_clients import REASON_PREFIX, NodeState, node_states, scontrol_update

NODE_KINDS = ("node", "rail", "straggler")  # localization culprit kinds that convict a node
_RUN_TS = re.compile(r"^(\d{8}T\d{6}Z)")


@dataclass(frozen=True)
class Conviction:
    node: str
    check: str
    what: str  # rail5 | gpu6 | node


@dataclass(frozen=True)
class Action:
    node: str
    verb: str  # drain | undrain
    argv: tuple[str, ...]
    why: str

    @property
    def line(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class DrainPlan:
    actions: tuple[Action, ...]
    skipped: tuple[tuple[str, str], ...]  # (node, why nothing is done to it)


def _node_of(subject: str, nodes: set[str]) -> str | None:
    head = subject.split(":", 1)[0]
    return head if head in nodes else None


def _culprits(labels: Mapping[str, Any], known: set[str]) -> Iterator[tuple[str, str, str, str]]:
    """(kind, node, subject, confirmation) of each culprit a verdict's labels name on one of ``known``
    (``culprits``: ``kind:subject|...``, with ``confirmation`` in the same order where a round ran)."""
    culprits = str(labels.get("culprits", "")).split("|")
    statuses = str(labels.get("confirmation", "")).split("|")
    for culprit, status in zip(culprits, statuses + [""] * len(culprits), strict=False):
        kind, _, subject = culprit.partition(":")
        node = _node_of(subject, known)
        if node is not None:
            yield kind, node, subject, status


def convictions(
    results: Mapping[str, Any], nodes: Sequence[str], patterns: Sequence[str]
) -> dict[str, list[Conviction]]:
    """Per node, what convicted it in this run (pure)."""
    known = set(nodes)
    out: dict[str, list[Conviction]] = {}
    for v in results.get("verdicts", []):
        check = str(v["check"])
        if v["outcome"] != "fail" or not any(fnmatch.fnmatchcase(check, p) for p in patterns):
            continue
        labels = v.get("labels", {})
        if check != "nccl.localization" and labels.get("culprits"):
            # a verdict on a group (an NVLink domain: nvlink.clique, nvlink.imex) that names its culprits
            for kind, node, _, _ in _culprits(labels, known):
                if kind == "node":
                    out.setdefault(node, []).append(Conviction(node, check, str(v["subject"])))
            continue
        if check == "nccl.localization":
            for kind, node, subject, status in _culprits(labels, known):
                if status == "unconfirmed":
                    continue  # a confirmation job ran, but no retest of this one did: not drained on it
                if kind in NODE_KINDS:
                    what = subject.split(":", 1)[1] if ":" in subject else "node"
                    out.setdefault(node, []).append(Conviction(node, check, what))
            continue
        own = _node_of(str(v["subject"]), known)
        if own is not None:
            subject = str(v["subject"])
            out.setdefault(own, []).append(
                Conviction(own, check, subject.split(":")[1] if ":" in subject else "node")
            )
    return out


def reason(convicted: Sequence[Conviction], run_id: str) -> str:
    """``clusteraccept: nccl.localization rail5 <run-id>``; more convictions are counted, not listed."""
    first = convicted[0]
    more = f" (+{len(convicted) - 1} more)" if len(convicted) > 1 else ""
    return f"{REASON_PREFIX} {first.check} {first.what}{more} {run_id}"


def _run_ts(run_id: str) -> str | None:
    m = _RUN_TS.match(run_id)
    return m[1] if m else None


def plan_drain(
    convicted: Mapping[str, Sequence[Conviction]],
    states: Mapping[str, NodeState],
    blocks: Mapping[str, Sequence[str]],
    run_id: str,
    max_fraction: float,
) -> DrainPlan:
    """What to drain (pure). Nodes with someone else's reason are left alone; a block over its limit too."""
    skipped: list[tuple[str, str]] = []
    wanted: list[str] = []
    for node in sorted(convicted):
        st = states.get(node)
        if st is None:
            skipped.append((node, "unknown to Slurm (not in sinfo): not drained"))
        elif st.reason and not st.ours:
            skipped.append(
                (node, f"left alone: already {st.state} by someone else (reason kept: {st.reason!r})")
            )
        elif st.drained:
            skipped.append((node, f"already drained by clusteraccept ({st.reason!r})"))
        else:
            wanted.append(node)
    block_of = {n: b for b, members in blocks.items() for n in members}
    by_block: dict[str, list[str]] = {}
    for node in wanted:
        by_block.setdefault(block_of.get(node, "(no block)"), []).append(node)
    actions: list[Action] = []
    for block, members in sorted(by_block.items()):
        size = len(blocks.get(block, members))
        limit = math.floor(max_fraction * size + 1e-9)
        if len(members) > limit:
            why = (
                f"held back: {len(members)} of {size} nodes of {block} convicted in one run, over the "
                f"limit of {limit} (drain.max_fraction {max_fraction:g}): suspect the baseline or a shared "
                "component"
            )
            skipped += [(n, why) for n in members]
            continue
        for node in members:
            text = reason(convicted[node], run_id)
            argv = ("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={text}")
            actions.append(Action(node, "drain", argv, text))
    return DrainPlan(tuple(actions), tuple(skipped))


def passed_nodes(results: Mapping[str, Any], nodes: Sequence[str], patterns: Sequence[str]) -> set[str]:
    """Nodes this run tested with the convicting checks and found clean: some PASS, no FAIL or ERROR."""
    known = set(nodes)
    seen: dict[str, set[str]] = {}
    for v in results.get("verdicts", []):
        check = str(v["check"])
        if not any(fnmatch.fnmatchcase(check, p) for p in patterns):
            continue
        node = _node_of(str(v["subject"]), known)
        if node is not None:
            seen.setdefault(node, set()).add(str(v["outcome"]))
    return {n for n, outcomes in seen.items() if "pass" in outcomes and not outcomes & {"fail", "error"}}


def plan_undrain(
    passed: set[str],
    convicted: Mapping[str, Sequence[Conviction]],
    states: Mapping[str, NodeState],
    run_id: str,
) -> DrainPlan:
    """Undrain nodes drained by clusteraccept (reason prefix) that this run found clean (pure).

    A run older than the drain never undoes it (run ids start with their UTC start time).
    """
    actions: list[Action] = []
    skipped: list[tuple[str, str]] = []
    for node, st in sorted(states.items()):
        if not (st.drained and st.ours) or node in convicted:
            continue
        if node not in passed:
            skipped.append((node, f"stays drained: not found clean by run {run_id} ({st.reason!r})"))
            continue
        drained_by = st.reason.split()[-1]
        mine, theirs = _run_ts(run_id), _run_ts(drained_by)
        if mine is None or theirs is None or mine <= theirs:
            skipped.append((node, f"stays drained: run {run_id} is not newer than the drain ({st.reason!r})"))
            continue
        argv = ("scontrol", "update", f"NodeName={node}", "State=UNDRAIN")
        actions.append(Action(node, "undrain", argv, f"passes again in {run_id}"))
    return DrainPlan(tuple(actions), tuple(skipped))


def apply(actions: Sequence[Action], slurm_conf: str | None) -> list[str]:
    """Run the scontrol commands; one line per command saying what happened."""
    out = []
    for a in actions:
        ev = scontrol_update(a.argv, slurm_conf)
        status = "ok" if ev.ok else f"FAILED rc={ev.returncode}: {(ev.stderr or ev.stdout).strip()}"
        out.append(f"{a.line}  # {status}")
    return out


def run_ops(
    results: Mapping[str, Any],
    nodes: Sequence[str],
    blocks: Mapping[str, Sequence[str]],
    run_dir: Path,
    *,
    slurm_conf: str | None,
    max_fraction: float,
    patterns: Sequence[str],
    apply_now: bool,
    drain_nodes: bool = True,
    undrain: bool = True,
) -> list[str]:
    """Plan drains (and undrains) for a judged run, write ``drain.sh`` + ``drain.json`` into the run, and
    run the commands when ``apply_now``. Returns the lines to show the operator."""
    from clusteraccept.rundir import write_json

    run_id = str(results.get("run_id") or run_dir.name)
    states = node_states(slurm_conf)
    convicted = convictions(results, nodes, patterns)
    none = DrainPlan((), ())
    drain = plan_drain(convicted, states, blocks, run_id, max_fraction) if drain_nodes else none
    passed = passed_nodes(results, nodes, patterns)
    back = plan_undrain(passed, convicted, states, run_id) if undrain else none
    actions = drain.actions + back.actions
    script = "".join(f"{a.line}\n" for a in actions)
    (run_dir / "drain.sh").write_text(f"#!/bin/sh\n# clusteraccept drain/undrain for run {run_id}\n{script}")
    done = apply(actions, slurm_conf) if apply_now else []
    write_json(
        run_dir / "drain.json",
        {
            "run_id": run_id,
            "applied": apply_now,
            "actions": [{"node": a.node, "verb": a.verb, "command": a.line, "why": a.why} for a in actions],
            "skipped": [{"node": n, "why": w} for n, w in drain.skipped + back.skipped],
            "results": done,
        },
    )
    head = "applied" if apply_now else "preview (--drain-failed=apply or --apply runs it)"
    lines = [
        f"drain {head}: {len(drain.actions)} to drain, {len(back.actions)} to undrain "
        f"({run_dir / 'drain.sh'})"
    ]
    lines += done if apply_now else [f"  {a.line}" for a in actions]
    lines += [f"  skipped {n}: {w}" for n, w in drain.skipped + back.skipped]
    return lines


def run_for_site(site: Any, run_dir: Path, *, apply_now: bool, drain_nodes: bool = True) -> list[str]:
    """:func:`run_ops` for a judged run of ``site`` (``--drain-failed``, ``clusteraccept drain``)."""
    from clusteraccept.errors import SubmitError
    from clusteraccept.judge import record

    results = record.load(run_dir)
    if results.get("dry_run"):
        return ["drain: a dry run convicts nothing; nothing to drain"]
    try:
        return run_ops(
            results,
            site.nodes,
            site.blocks,
            run_dir,
            slurm_conf=site.slurm.slurm_conf,
            max_fraction=site.ops.drain.max_fraction,
            patterns=site.ops.drain.checks,
            apply_now=apply_now,
            drain_nodes=drain_nodes,
        )
    except SubmitError as exc:
        return [f"drain: nothing done: {exc}"]
