"""Report generation at 4,096 nodes x 8 rails, from a synthetic results.json of that size.

The synthetic run (built here, not timed): 256 blocks of 16 nodes; every in-block pair on every rail
(245,760 pair x rail steps) plus one cross-block partner per node (16,384 steps), each step with its
nccl.launch and nccl.busbw verdicts (~524k pair verdicts); intra-node and block collectives at 4 sizes;
per-GPU topology and per-rail GPUDirect verdicts; localization verdicts for every node and block. Injected:
a slow rail (one node, rail 5), a bad cable (one pair, rail 2) and a slow leaf uplink, with the matching
culprits; raw/ evidence files for the failing steps only (the report reads those for its excerpts).

Measured (printed, never asserted): results.json size and load time; report generation from the loaded
document (history store, junit.xml, report.html) and each file's size. Goal: < 10 s, report.html < 20 MB.

Run:  .venv/bin/python benchmarks/report_scale.py [--nodes 4096] [--block 16] [--rails 8] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import zlib
from pathlib import Path
from typing import Any

SIZES = (1 << 30, 2 << 30, 4 << 30, 8 << 30)


def _size(b: int) -> str:
    return f"{b >> 30}GiB"


def _raw(run: Path, rel: str, a: str, b: str, rail: int, busbw: float) -> None:
    """A nccl-tests step's archived evidence (the real layout, nccl-tests v2.19.6)."""
    s, t_us = 1 << 30, (1 << 30) / busbw / 1e3  # the 1 GiB row the synthetic verdicts judge
    rows = (
        f"  {s:>10}  {s // 4:>12}     float     sum      -1  {t_us:8.1f}  {busbw:6.2f}  {busbw:6.2f}"
        f"       0  {t_us:8.1f}  {busbw:6.2f}  {busbw:6.2f}    N/A\n"
    )
    stdout = (
        "# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809\n"
        "# Collective test starting: sendrecv_perf\n#\n# Using devices\n"
        f"#  Rank  0 Group  0 Pid  4242 on {a:>10} device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
        f"#  Rank  1 Group  0 Pid  4243 on {b:>10} device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n#\n"
        "#                                                              out-of-place                       "
        "in-place\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   "
        "algbw   busbw  #wrong\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  "
        "(GB/s)  (GB/s)\n"
        + rows
        + f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:.4f}\n#\n"
    )
    path = run / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    ev = {
        "host": f"{a}-{b}:rail{rail}",
        "source": "nccl-tests",
        "argv": ["srun", "sendrecv_perf"],
        "path": "",
        "returncode": 0,
        "stdout": stdout,
        "stderr": "",
        "duration_s": 1.0,
        "meta": {"check": "nccl"},
    }
    path.write_text(json.dumps(ev))


def build(run: Path, nodes: int = 4096, block: int = 16, rails: int = 8) -> dict[str, Any]:
    """Write raw/ for the failures under ``run`` and return the synthetic results document."""
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    blocks = {f"su{j // block + 1:03d}": names[j : j + block] for j in range(0, nodes, block)}
    block_of = {n: b for b, members in blocks.items() for n in members}
    slow_rail = (names[min(122, nodes - 1)], min(5, rails - 1))
    base = nodes // 2 // block * block  # a pair inside one block
    cable = (names[base + 3], names[base + 4], min(2, rails - 1))
    uplink = list(blocks)[min(99, len(blocks) // 2)]
    verdicts: list[dict[str, Any]] = []
    ref, lower = 46.0, 46.0 * 0.92

    def pair(a: str, b: str, rail: int, scope: str) -> None:
        factor = 1.0 - (zlib.crc32(f"{a}{b}{rail}".encode()) % 40) / 1000  # deterministic noise
        if (a, rail) == slow_rail or (b, rail) == slow_rail:
            factor = 0.55
        if (a, b, rail) == cable:
            factor = 0.6
        if scope == "pair_cross_block" and uplink in (block_of[a], block_of[b]):
            factor = 0.7
        busbw = round(46.2 * factor, 2)
        subject = f"{a}-{b}:rail{rail}"
        key = f"nccl.busbw.sendrecv.{scope}.rail{rail}.1GiB"
        rel = f"raw/nccl/{a}-{b}_rail{rail}/sendrecv_{a}-{b}_rail{rail}.json"
        failed = busbw < lower
        if failed:
            _raw(run, rel, a, b, rail, busbw)
        verdicts.append(
            {
                "check": "nccl.launch",
                "family": "nccl",
                "subject": f"{subject}:sendrecv",
                "outcome": "pass",
                "message": "2 ranks on the intended hosts, exit 0, no #wrong",
                "value": None,
                "ref": None,
                "lower": None,
                "upper": None,
                "unit": "",
                "evidence": [rel],
                "labels": {"collective": "sendrecv", "scope": scope},
            }
        )
        msg = (
            f"busbw_GBps={busbw:.3g} GB/s is below {lower:.3g} (ref 46, {busbw / ref * 100 - 100:+.0f}%)"
            if failed
            else f"busbw_GBps={busbw:.3g} GB/s within [{lower:.3g}, inf] (ref 46)"
        )
        verdicts.append(
            {
                "check": "nccl.busbw",
                "family": "nccl",
                "subject": f"{subject}:sendrecv:1GiB",
                "outcome": "fail" if failed else "pass",
                "message": f"{msg} [pair {a}-{b}, rail {rail}, 1GiB]",
                "value": busbw,
                "ref": ref,
                "lower": lower,
                "upper": None,
                "unit": "GB/s",
                "evidence": [rel],
                "labels": {
                    "key": key,
                    "scope": scope,
                    "collective": "sendrecv",
                    "size_B": str(1 << 30),
                    "rail": str(rail),
                },
            }
        )

    for members in blocks.values():
        for i, a in enumerate(members):
            for b in members[i + 1 :]:
                for rail in range(rails):
                    pair(a, b, rail, "pair_in_block")
    for i in range(0, nodes - block, 2 * block):
        for k in range(block):
            for rail in range(rails):
                pair(names[i + k], names[i + block + k], rail, "pair_cross_block")
    for n in names:
        for g in range(rails):
            for check in ("topology.gpu_nic_affinity", "topology.pcie_link", "gpudirect.acs"):
                verdicts.append(
                    {
                        "check": check,
                        "family": check.split(".")[0],
                        "subject": f"{n}:gpu{g}",
                        "outcome": "pass",
                        "message": f"{n} gpu{g}: as expected",
                        "value": None,
                        "ref": None,
                        "lower": None,
                        "upper": None,
                        "unit": "",
                        "evidence": [],
                        "labels": {},
                    }
                )
            verdicts.append(
                {
                    "check": "gpudirect.write_bw",
                    "family": "gpudirect",
                    "subject": f"{n}:rail{g}",
                    "outcome": "pass",
                    "message": "write_bw_Gbps=391 Gb/s within [370, inf] (ref 390)",
                    "value": 391.0,
                    "ref": 390.0,
                    "lower": 370.5,
                    "upper": None,
                    "unit": "Gb/s",
                    "evidence": [],
                    "labels": {"key": f"gpudirect.write_bw.{n}.rail{g}"},
                }
            )
        for s in SIZES:
            verdicts.append(
                {
                    "check": "nccl.busbw",
                    "family": "nccl",
                    "subject": f"{n}:all_reduce:{_size(s)}",
                    "outcome": "pass",
                    "message": "busbw_GBps=412 GB/s within [331, inf] (ref 360)",
                    "value": 412.0,
                    "ref": 360.0,
                    "lower": 331.2,
                    "upper": None,
                    "unit": "GB/s",
                    "evidence": [],
                    "labels": {
                        "key": f"nccl.busbw.all_reduce.intra_node.{_size(s)}",
                        "scope": "intra_node",
                        "collective": "all_reduce",
                        "size_B": str(s),
                        "rail": "",
                    },
                }
            )
    for b in [*blocks, "all"]:
        for coll, bref in (("all_reduce", 45.0), ("alltoall", 40.0)):
            for s in SIZES:
                value = bref * (0.7 if b == uplink or b == "all" else 1.01) * (0.9 + s / (8 << 30) / 10)
                failed = value < bref * 0.9
                verdicts.append(
                    {
                        "check": "nccl.busbw",
                        "family": "nccl",
                        "subject": f"{b}:{coll}:{_size(s)}",
                        "outcome": "fail" if failed else "pass",
                        "message": f"busbw_GBps={value:.3g}",
                        "value": round(value, 2),
                        "ref": bref,
                        "lower": bref * 0.9,
                        "upper": None,
                        "unit": "GB/s",
                        "evidence": [],
                        "labels": {
                            "key": f"nccl.busbw.{coll}.{'all' if b == 'all' else 'block'}.{_size(s)}",
                            "scope": "all" if b == "all" else "block",
                            "collective": coll,
                            "size_B": str(s),
                            "rail": "",
                        },
                    }
                )
    culprits = {
        slow_rail[0]: f"rail:{slow_rail[0]}:rail{slow_rail[1]}",
        cable[0]: f"path:{cable[0]}-{cable[1]}:rail{cable[2]}",
        cable[1]: f"path:{cable[0]}-{cable[1]}:rail{cable[2]}",
    }
    for n in names:
        c = culprits.get(n)
        verdicts.append(
            {
                "check": "nccl.localization",
                "family": "nccl",
                "subject": n,
                "outcome": "fail" if c else "pass",
                "message": f"culprit: {c} [convicted by ...]" if c else "not blamed by localization",
                "value": None,
                "ref": None,
                "lower": None,
                "upper": None,
                "unit": "",
                "evidence": [],
                "labels": {"scope": "pairs", **({"culprits": c} if c else {})},
            }
        )
    for b in [*blocks, "all"]:
        c = f"uplink:{b}" if b == uplink else None
        verdicts.append(
            {
                "check": "nccl.localization",
                "family": "nccl",
                "subject": b,
                "outcome": "fail" if c else "pass",
                "message": f"culprit: every cross-block pair through {b} is slow" if c else "not blamed",
                "value": None,
                "ref": None,
                "lower": None,
                "upper": None,
                "unit": "",
                "evidence": [],
                "labels": {"scope": "block", **({"culprits": c} if c else {})},
            }
        )
    fp = {
        "gpu_driver": "570.133.20",
        "nccl": "2.28.9",
        "nccl_tests": "2.19.6",
        "kernel": "5.15.0-131-generic",
    }
    fps = {n: dict(fp) for n in names}
    fps[names[77]]["gpu_driver"] = "565.57.01"
    return {
        "schema": 1, "site": "scale", "site_file": "scale.yaml", "run_id": run.name,
        "started": "2026-11-29T02:00:00+00:00", "ended": "2026-11-29T04:10:00+00:00", "operator": "nightly",
        "suite_revision": "synthetic", "simulated": True, "dry_run": False, "executor": "slurm",
        "baselines_file": "scale.yaml", "baselines_sha256": "0" * 16, "nodes": names,
        "blocks": blocks, "subset": False, "plan": {"probe_jobs": [], "campaign_jobs": []},
        "jobs": [{"name": "probe-nodes", "job_id": str(1000 + i), "state": "COMPLETED", "missing": [],
                  "message": "", "evidence_count": 40} for i in range(nodes)],
        "fingerprint": {"nodes": fps, "differences": [f"{names[77]}: gpu_driver is '565.57.01', "
                                                      f"{nodes - 1} of {nodes} nodes have '570.133.20'"]},
        "verdicts": verdicts,
        "families": ["topology", "gpudirect", "roce", "sharp", "nccl"],
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=4096)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--rails", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None, help="keep the run here (default: a temporary dir)")
    args = ap.parse_args()
    from clusteraccept.report import write_reports
    from clusteraccept.rundir import read_json

    with tempfile.TemporaryDirectory() as tmp:
        run = (args.out or Path(tmp)) / "scale" / "20261129T020000Z-beef"
        run.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        doc = build(run, args.nodes, args.block, args.rails)
        (run / "results.json").write_text(json.dumps(doc, separators=(",", ":")))
        del doc
        t1 = time.perf_counter()
        results = read_json(run / "results.json")
        t2 = time.perf_counter()
        written = write_reports(run, results=results)
        t3 = time.perf_counter()
        pairs = sum(1 for v in results["verdicts"] if v["labels"].get("scope", "").startswith("pair"))
        print(
            f"synthetic run: {args.nodes} nodes x {args.rails} rails, {len(results['verdicts']):,} verdicts "
            f"({pairs:,} pair verdicts); built in {t1 - t0:.1f} s (not part of the report)"
        )
        print(
            f"results.json: {(run / 'results.json').stat().st_size / 1e6:.1f} MB, loaded in {t2 - t1:.2f} s"
        )
        print(
            f"report generation (history + junit.xml + report.html) from the loaded document: {t3 - t2:.2f} s"
        )
        for name, path in sorted(written.paths.items()):
            print(f"  {name}: {path.name} {path.stat().st_size / 1e6:.2f} MB")
        print(
            f"total, load included: {t3 - t1:.2f} s (goal < 10 s); report.html "
            f"{written.paths['html'].stat().st_size / 1e6:.2f} MB (goal < 20 MB)"
        )


if __name__ == "__main__":
    main()
