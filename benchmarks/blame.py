"""Blame accuracy: seeded trials of one injected fault each on a simulated cluster, judged by the run's own
functions: plan (plan/jobs.make_plan) -> simulated results (sim/fabric.busbw_GBps) -> judge
(checks/nccl.judge_measured, judge_rows: baselines or peers and line rate, localization) -> the
confirmation job (checks/confirm.suspects_of, plan/confirm.confirmation_job) -> its results -> judged again.
This measures accuracy, not speed: the results go in as numbers, not as nccl-tests' text through Slurm.

Noise is a model (there is no fabric here to measure): every result is multiplied by a Gaussian of relative
standard deviation ``--spread`` (default 0.02: the standalone nccl-tests runs on 2x H200 spread by at most
6.7% max - min over 3 runs at >= 64 MiB, docs/examples/h200x2/fidelity.md, and mostly 0.2-3.8%), and the
trials run at ``--noise-x`` times it (default 2). Every trial also has background transient dips (a run
x0.6, about one per trial); the ``transient`` kind has five per trial. ``transients_seen`` counts the
localization verdicts that say "transient" (a suspect healthy on retest): dips and noise, never blamed.

Kinds: slow node, slow rail, bad cable (a pair path: blamed as that pair and rail), slow leaf uplink,
transient dip (must not be blamed), block straggler (slow only in many-rank collectives), and no fault;
each with and without the site's baselines. A trial is exact when the set of blamed culprits is exactly the
injected one; a false blame is a culprit blamed that was not injected.

    python benchmarks/blame.py [--nodes 1024] [--block 32] [--trials 100]

Last line: ``blame: trials=… exact=… false_blames=… transient_blamed=… extra_rounds=…``.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from clusteraccept.checks.confirm import suspects_of
from clusteraccept.checks.nccl import judge_measured, judge_rows
from clusteraccept.judge.verdicts import Verdict
from clusteraccept.plan.confirm import confirmation_job
from clusteraccept.plan.jobs import Step, make_plan
from clusteraccept.sim.fabric import Fabric, busbw_GBps, fabric_from_dict
from clusteraccept.sim.prepare import fabric_doc
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

KINDS = ("slow_node", "slow_rail", "bad_cable", "slow_uplink", "transient", "straggler", "none")
FACTOR = 0.6  # every injected fault: 40% slower (the demo's slow rail is 0.55)
SIZE = "8G"
RAIL_GBPS = 50.0  # NDR400: 400 Gb/s


def site_file(where: Path, nodes: int, block: int, baselines: bool) -> Path:
    """A simulated 8-GPU / 8-rail NDR400 site of ``nodes`` nodes in leaves of ``block``."""
    width = len(str(nodes))
    name = lambda i: f"node{i:0{width}d}"  # noqa: E731
    blocks = {
        f"leaf{b + 1}": f"node[{1 + b * block:0{width}d}-{min(nodes, (b + 1) * block):0{width}d}]"
        for b in range((nodes + block - 1) // block)
    }
    doc: dict[str, Any] = {
        "name": f"blame{nodes}",
        "simulated": True,
        "slurm": {"executor": "local", "partition": "gpu"},
        "nodes": f"node[{name(1)[4:]}-{name(nodes)[4:]}]",
        "blocks": blocks,
        "node_types": {
            "h100": {
                "gpus": 8,
                "link_layer": "InfiniBand",
                "rails": {f"gpu{k}": {"hca": f"mlx5_{k}", "rate_Gbps": 400} for k in range(8)},
            }
        },
        "nccl": {
            "pair_collectives": ["sendrecv"],
            "block_collectives": ["all_reduce"],
            "min_bytes": SIZE,
            "max_bytes": SIZE,
            "cross_block_partners": 1,
            "seed": 7,
        },
    }
    if baselines:  # as --propose-baselines would write them from a healthy run, bounds wide enough for noise
        doc["baselines"] = {
            "nccl.busbw.sendrecv.pair_in_block.*": {"ref": 46.0, "lower": -0.15, "unit": "GB/s"},
            "nccl.busbw.sendrecv.pair_cross_block.*": {"ref": 46.0, "lower": -0.15, "unit": "GB/s"},
            "nccl.busbw.all_reduce.block.*": {"ref": 46.0, "lower": -0.15, "unit": "GB/s"},
            "nccl.busbw.all_reduce.all.*": {"ref": 46.0, "lower": -0.15, "unit": "GB/s"},
        }
    path = where / f"blame{nodes}{'' if baselines else '-nobase'}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def inject(site: Site, kind: str, rng: random.Random, n_steps: int) -> tuple[dict[str, Any], set[str], float]:
    """The fabric faults of one trial, the culprits it must blame, its transient probability per run: about
    one dip per trial in the background, five in the ``transient`` kind."""
    node = rng.choice(site.nodes)
    background = 1.0 / n_steps
    rail = rng.randrange(8)
    if kind == "slow_node":
        return {"slow_node": [{"node": node, "factor": FACTOR}]}, {f"node:{node}"}, background
    if kind == "slow_rail":
        return (
            {"slow_rail": [{"node": node, "rail": rail, "factor": FACTOR}]},
            {f"rail:{node}:rail{rail}"},
            1e-5,
        )
    if kind == "bad_cable":
        block = site.blocks[site.block_of(node) or ""]
        other = rng.choice([n for n in block if n != node])
        a, b = sorted((node, other))
        fault = {"bad_cable": [{"a": a, "b": b, "rail": rail, "factor": FACTOR}]}
        return fault, {f"path:{a}-{b}:rail{rail}"}, background
    if kind == "slow_uplink":
        leaf = rng.choice(list(site.blocks))
        # as sim/prepare.py scales a site's factor: each flow through the leaf's uplinks gets FACTOR of a rail
        uplink_GBps = len(site.blocks[leaf]) * 8 * RAIL_GBPS
        fault = {"slow_uplink": [{"leaf": leaf, "factor": FACTOR * RAIL_GBPS / uplink_GBps}]}
        return fault, {f"uplink:{leaf}"}, background
    if kind == "straggler":
        return {"straggler": [{"node": node, "factor": FACTOR}]}, {f"straggler:{node}"}, background
    if kind == "transient":
        return {}, set(), 5 * background
    return {}, set(), background


def measure(
    fab: Fabric, site: Site, steps: list[Step], attempt: str, out: tuple[list[Verdict], list[dict[str, Any]]]
) -> None:
    """Each step's simulated result, judged as the run judges a step that printed it."""
    verdicts, rows = out
    size_B = site.nccl.max_bytes
    for i, step in enumerate(steps):
        rails = (step.rail,) if step.rail is not None else None
        per_node = 1 if step.kind == "pair" else site.node_type(step.nodes[0]).gpus
        bw = busbw_GBps(
            fab, step.collective, step.nodes, rails, size_B, ranks_per_node=per_node, attempt=attempt
        )
        vs, rs = judge_measured(site, step.meta(), [(size_B, bw)], f"raw/{attempt}#{i}")
        verdicts += vs
        rows += rs


def blamed(verdicts: list[Verdict]) -> set[str]:
    out: set[str] = set()
    for v in verdicts:
        if v.check == "nccl.localization" and v.outcome.value == "fail":
            out.update(c for c in str(v.labels.get("culprits", "")).split("|") if c)
    return out


def trial(
    site: Site, steps: list[Step], kind: str, seed: int, spread: float, given: dict[str, Any] | None = None
) -> dict[str, Any]:
    rng = random.Random(seed)
    faults, expected, p = inject(site, kind, rng, len(steps))
    if given is not None:  # the real command's trial: its faults, no noise
        faults, p = given, 0.0
    doc = fabric_doc(site, seed, spread=spread, transient={"probability": p, "factor": FACTOR})
    doc["faults"] = {**doc.get("faults", {}), **faults}
    fab = fabric_from_dict(doc, "blame")
    first: tuple[list[Verdict], list[dict[str, Any]]] = ([], [])
    measure(fab, site, steps, "1", first)
    verdicts = judge_rows(site, list(first[0]), first[1])
    job = confirmation_job(site, suspects_of(site, verdicts))
    extra_rounds = len(job.rounds) if job else 0
    if job is not None:
        measure(fab, site, [s for r in job.rounds for s in r.steps], "2", first)
        verdicts = judge_rows(site, first[0], first[1])
    got = blamed(verdicts)
    transients = sum(1 for v in verdicts if v.check == "nccl.localization" and v.labels.get("transient"))
    return {
        "transients": transients,
        "kind": kind,
        "exact": got == expected,
        "false": len(got - expected),
        "missed": len(expected - got),
        "extra_rounds": extra_rounds,
        "got": sorted(got),
        "expected": sorted(expected),
    }


def site_faults(faults: dict[str, Any]) -> list[dict[str, Any]]:
    """A trial's fabric faults as a site file's ``sim.faults`` (sim/prepare.py reads them back)."""
    out: list[dict[str, Any]] = []
    for kind, entries in faults.items():
        for f in entries:
            if kind == "bad_cable":
                out.append(
                    {"kind": kind, "nodes": [f["a"], f["b"]], "rail": f["rail"], "factor": f["factor"]}
                )
            elif kind == "slow_uplink":  # the site's factor: the share of a rail each flow still gets
                out.append({"kind": kind, "leaf": f["leaf"], "factor": FACTOR})
            else:
                out.append({"kind": kind, **f})
    return out


def real_trial(
    where: Path, site_path: Path, site: Site, kind: str, seed: int
) -> tuple[set[str], set[str], set[str]]:
    """One trial through the command users run (``pytest suites/ -m nccl``, the local executor: the
    simulated nccl-tests as a process per step, its text archived, parsed and judged), with no noise
    (without Slurm the steps have no job and step ids to draw it from); and the same fault judged
    in-process as the trials above. (blamed by the command, blamed in-process, injected)."""
    faults, expected, _ = inject(site, kind, random.Random(seed), 1)
    doc = yaml.safe_load(site_path.read_text())
    doc["name"] = f"real-{kind}"
    doc["sim"] = {"faults": site_faults(faults)}
    doc["env"] = {
        "CLUSTERACCEPT_HOST_PROFILE": str(where / kind / "hosts"),
        "CLUSTERACCEPT_FABRIC": str(where / kind / "fabric.json"),
    }
    doc["tools"] = {"nccl_tests_bin": str(where / kind / "nccl-tests")}
    path = where / f"real-{kind}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    reports = where / "reports"
    repo = Path(__file__).resolve().parents[1]
    argv = [sys.executable, "-m", "pytest", "suites/", f"--site={path}", "--executor=local"]
    argv += [f"--reports-dir={reports}", "-m", "nccl", "-q", "-p", "no:randomly"]
    subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=1800, check=False)
    from clusteraccept.judge import record

    (run,) = [
        p for p in (reports / doc["name"]).iterdir() if not p.is_symlink() and (p / "results.json").exists()
    ]
    by_command = {
        c
        for v in record.load(run)["verdicts"]
        if v["check"] == "nccl.localization" and v["outcome"] == "fail"
        for c in str(v.get("labels", {}).get("culprits", "")).split("|")
        if c
    }
    in_site = load_site(str(path), where)
    in_process = trial(in_site, list(make_plan(in_site, families=()).steps()), kind, seed, 0.0, faults)
    return by_command, set(in_process["got"]), expected


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--spread", type=float, default=0.02)
    ap.add_argument("--noise-x", type=float, default=2.0)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument(
        "--real", type=int, default=0, help="this many nodes (in 2 leaves) through the real command"
    )
    args = ap.parse_args(argv)
    kinds = args.kinds.split(",")
    if args.real:
        return real(args.real, [k for k in kinds if k != "transient"])
    table: Counter[tuple[str, str, str]] = Counter()
    totals = Counter[str]()
    rounds: Counter[tuple[str, int]] = Counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for baselines in (True, False):
            site = load_site(str(site_file(Path(tmp), args.nodes, args.block, baselines)), Path(tmp))
            site = replace(site, baselines=site.baselines if baselines else {})
            steps = list(make_plan(site, families=()).steps())
            label = "baselines" if baselines else "no baselines"
            for kind in kinds:
                for t in range(args.trials):
                    r = trial(site, steps, kind, 1000 * KINDS.index(kind) + t, args.spread * args.noise_x)
                    outcome = "exact" if r["exact"] else ("false blame" if r["false"] else "missed")
                    table[label, kind, outcome] += 1
                    totals["trials"] += 1
                    totals["exact"] += r["exact"]
                    totals["false_blames"] += r["false"]
                    totals["transient_blamed"] += r["false"] if kind == "transient" else 0
                    totals["transients"] += r["transients"]
                    rounds[kind, r["extra_rounds"]] += 1
                    if not r["exact"]:
                        print(
                            f"  {label} {kind} seed {t}: blamed {r['got']}, injected {r['expected']}",
                            file=sys.stderr,
                        )
    print(f"{'':14} {'kind':12} {'exact':>6} {'missed':>7} {'false blame':>12}")
    for label in ("baselines", "no baselines"):
        for kind in kinds:
            print(
                f"{label:14} {kind:12} {table[label, kind, 'exact']:6d} {table[label, kind, 'missed']:7d} "
                f"{table[label, kind, 'false blame']:12d}"
            )
    worst = {k: max((n for (kk, n) in rounds if kk == k), default=0) for k in kinds}
    print(
        "extra rounds (confirmation + bisection), worst per kind: "
        + ", ".join(f"{k} {v}" for k, v in worst.items())
    )
    print(
        f"blame: trials={totals['trials']} exact={totals['exact']} false_blames={totals['false_blames']} "
        f"transient_blamed={totals['transient_blamed']} transients_seen={totals['transients']} "
        f"nodes={args.nodes} "
        f"noise_sigma={args.spread * args.noise_x:g} "
        f"extra_rounds_max={max(worst.values(), default=0)} wall_s={time.monotonic() - started:.0f}"
    )
    return 0


def real(nodes: int, kinds: list[str]) -> int:
    """One trial per kind through the command users run, against the in-process judgement of the same."""
    agree = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp)
        site_path = site_file(where, nodes, nodes // 2, baselines=False)
        site = load_site(str(site_path), where)
        for kind in kinds:
            by_command, in_process, expected = real_trial(
                where, site_path, site, kind, 1000 * KINDS.index(kind)
            )
            same = by_command == in_process
            agree += same
            print(
                f"{kind:12} command {sorted(by_command)}  in-process {sorted(in_process)}  "
                f"injected {sorted(expected)}"
            )
    print(
        f"blame-real: trials={len(kinds)} agree={agree} nodes={nodes} wall_s={time.monotonic() - started:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
