"""Campaign scale on the simulator: 4,096 nodes x 8 rails (128 blocks of 32 nodes under their own leaves).

Measures (printed; never asserted as a timed test):
- rounds per block campaign (goal: n - 1 per pair collective) and sbatch submissions (goal: <= 1 per block,
  plus one cross-block/whole-set job and one probe job);
- wall time to plan, to judge every pair x rail result against its baseline, and to localize one injected
  fault (goal: plan + judge + localize < 10 s). The busbw values come from the fabric model in-process
  (sim.fabric.busbw_GBps): generating them is reported separately, since on a cluster they come from the jobs.

Run:  .venv/bin/python benchmarks/campaign_scale.py [--nodes 4096] [--block 32]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from clusteraccept.checks.localize import localize
from clusteraccept.checks.nccl import judge_frame
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim.fabric import busbw_GBps
from clusteraccept.sim.prepare import fabric_of
from clusteraccept.site.load import parse_site


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--block", type=int, default=32)
    args = ap.parse_args()
    n, b = args.nodes, args.block
    fault = {"kind": "slow_rail", "node": f"g{n // 3:04d}", "rail": 5, "factor": 0.5}
    site = parse_site(
        Path("scale.yaml"),
        {
            "name": "scale",
            "simulated": True,
            "nodes": f"g[0001-{n:04d}]",
            "blocks": {f"su{i:03d}": f"g[{i * b + 1:04d}-{i * b + b:04d}]" for i in range(n // b)},
            "node_types": {
                "t": {
                    "gpus": 8,
                    "rails": {f"gpu{k}": {"hca": f"mlx5_{k}", "rate_Gbps": 400} for k in range(8)},
                }
            },
            "tools": {"nccl_tests_bin": "/shared/nccl-tests/build"},
            "nccl": {
                "pair_collectives": ["sendrecv"],
                "min_bytes": "8G",
                "max_bytes": "8G",
                "cross_block_partners": 1,
                "seed": 1,
            },
            "baselines": {"nccl.busbw.sendrecv.*": {"ref": 46.0, "lower": -0.08, "unit": "GB/s"}},
            "sim": {"faults": [fault]},
        },
    )
    t0 = time.perf_counter()
    plan = make_plan(site)
    t_plan = time.perf_counter() - t0
    pair_steps = [s for s in plan.steps() if s.kind == "pair"]
    in_block = [j for j in plan.campaign_jobs if j.block != "cross"]
    pair_rounds = max(sum(1 for r in j.rounds if "pairs" in r.label) for j in in_block)
    sbatch = len(plan.probe_jobs) + len(plan.campaign_jobs)

    t0 = time.perf_counter()
    fabric = fabric_of(site)
    rows = [
        (
            s.nodes[0],
            s.nodes[1],
            s.rail,
            s.collective,
            s.scope,
            8 << 30,
            busbw_GBps(fabric, s.collective, s.nodes, (s.rail,), 8 << 30, ranks_per_node=1),
        )
        for s in pair_steps
    ]
    frame = pd.DataFrame(rows, columns=["a", "b", "rail", "collective", "scope", "size_B", "busbw_GBps"])
    t_sim = time.perf_counter() - t0

    t0 = time.perf_counter()
    judged = judge_frame(site, frame)
    judged["block_a"] = judged["a"].map(site.block_of)
    judged["block_b"] = judged["b"].map(site.block_of)
    t_judge = time.perf_counter() - t0
    t0 = time.perf_counter()
    culprits = localize(judged)
    t_loc = time.perf_counter() - t0

    print(f"nodes {n}, blocks {n // b} of {b}, rails 8, pair x rail results {len(frame):,}")
    print(f"sbatch submissions: {sbatch} ({len(in_block)} block campaigns + cross-block + probe job)")
    print(f"pair rounds per block campaign: {pair_rounds} (n - 1 = {b - 1})")
    print(
        f"plan {t_plan:.2f} s, judge {t_judge:.2f} s, localize {t_loc:.2f} s: "
        f"total {t_plan + t_judge + t_loc:.2f} s (goal < 10 s); simulated values {t_sim:.2f} s"
    )
    print(
        f"slow results: {int(judged['slow'].sum())}; culprits: {[c.subject for c in culprits]} "
        f"(injected: {fault['node']}:rail{fault['rail']})"
    )


if __name__ == "__main__":
    main()
