"""Counter judging at scale: one block campaign's snapshots for every node of a 4,096-node IB site.

A campaign snapshots every node before its first round and after each (32-node blocks: 31 pair rounds +
intra + 2 block collectives = 34 rounds, 35 snapshots per node). Measures (printed, never asserted) the time
to parse them and judge ``nccl.link_errors`` for every node x rail, with one injected erroring port.

Run:  .venv/bin/python benchmarks/counters_scale.py [--nodes 4096] [--snapshots 35]
"""

from __future__ import annotations

import argparse
import time

from clusteraccept.checks import counters
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome
from clusteraccept.probes.counters import IB_DATA, IB_ERRORS


def snapshot_text(seq: int, bad: bool) -> str:
    lines = []
    for k in range(8):
        lines += [f"## rail {k} hca mlx5_{k} port 1 netdev -", "### link_layer", "InfiniBand"]
        lines.append(f"### ib-counters /sys/class/infiniband/mlx5_{k}/ports/1/counters")
        lines += [f"{n}: {seq * 3 if bad and k == 5 and n == 'symbol_error' else 0}" for n in IB_ERRORS]
        lines += [f"{n}: {seq * 17179869184}" for n in IB_DATA]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--snapshots", type=int, default=35)
    args = ap.parse_args()
    texts = {(seq, bad): snapshot_text(seq, bad) for seq in range(args.snapshots) for bad in (False, True)}
    t0 = time.perf_counter()
    fails = []
    for i in range(args.nodes):
        node, bad = f"g{i:04d}", i == args.nodes // 3
        snaps = [
            (
                Evidence(node, "counters", stdout=texts[seq, bad], meta={"campaign": "c", "seq": str(seq)}),
                f"raw/nccl/{node}/counters_c-s{seq:03d}.json",
            )
            for seq in range(args.snapshots)
        ]
        ivs, problems = counters.intervals(snaps)
        for k in range(8):
            v = counters.link_errors(f"{node} rail{k}", k, f"{node}:rail{k}", ivs, problems)
            if v.outcome is not Outcome.PASS:
                fails.append(v.subject)
    dt = time.perf_counter() - t0
    total = args.nodes * args.snapshots
    print(f"{args.nodes} nodes x {args.snapshots} snapshots = {total:,}; {args.nodes * 8:,} verdicts")
    print(f"parse + judge {dt:.1f} s ({1e6 * dt / total:.0f} us per snapshot); not PASS: {fails}")


if __name__ == "__main__":
    main()
