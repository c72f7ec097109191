#!/usr/bin/env python3
"""Fidelity of the suite's nccl measurements on one GPU host: does measuring through the suite change them?

In ONE run, for each intra-node collective of the site (8 B - 8 GiB by default, the site's flags):
  1. standalone: the nccl-tests binary run directly (``<bin>/<coll>_perf ... -g <gpus>``);
  2. suite: the same binary launched by the suite (plan -> local executor -> campaign driver -> hostio);
  3. fallback: the suite with no nccl-tests binaries and ``nccl.fallback: torch`` (probes/torch_nccl.py).
It reports busbw per size, the ratios suite / standalone and fallback / standalone (goal: 1.00 +- 0.02 at
>= 64 MiB), and busbw / the NVLink line rate ``nvidia-smi nvlink -s`` reports (GPU 0: the sum of its
links' rates). The suite figure is the out-of-place busbw it judges; torch's all_reduce runs in place,
so it is compared with nccl-tests' in-place figure.

    PYTHONPATH=src python3 benchmarks/fidelity.py --site local-gpu --out docs/examples/h200x2/fidelity.md
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from clusteraccept.errors import ParseError  # noqa: E402
from clusteraccept.flow import Request, execute  # noqa: E402
from clusteraccept.jobs.archive import load  # noqa: E402
from clusteraccept.parsers import nccl_tests, torch_nccl  # noqa: E402
from clusteraccept.parsers.nccl_tests_result import nccl_version_of  # noqa: E402
from clusteraccept.site.load import load_site  # noqa: E402
from clusteraccept.site.model import Site  # noqa: E402
from clusteraccept.site.schema import format_size  # noqa: E402

GOAL, TOL, BIG_B = 1.00, 0.02, 64 << 20
Values = dict[str, dict[int, dict[str, float]]]  # collective -> size_B -> {"oop": x, "ip": y}


def nvlink_GBps() -> tuple[float | None, str]:
    """GPU 0's NVLink line rate: the sum of the per-link rates of ``nvidia-smi nvlink -s`` (nvidia-smi(1))."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "nvlink", "-s"], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, str(exc)
    rates: list[float] = []
    for line in out.splitlines():
        if re.match(r"GPU \d+:", line.strip()) and rates:
            break  # only GPU 0's links
        m = re.search(r"Link \d+: ([0-9.]+) GB/s", line)
        if m:
            rates.append(float(m.group(1)))
    if not rates:
        return None, out.strip()[:200]
    return sum(rates), f"{len(rates)} links x {rates[0]:g} GB/s (nvidia-smi nvlink -s, GPU 0)"


def standalone(
    site: Site, collective: str, gpus: int, log: Path, repeat: int
) -> tuple[dict[int, dict[str, float]], str]:
    n = site.nccl
    binary = f"{site.tools.nccl_tests_bin}/{collective}_perf"
    argv = [
        binary,
        "-b",
        str(n.min_bytes),
        "-e",
        str(n.max_bytes),
        "-f",
        str(n.step_factor),
        "-g",
        str(gpus),
        "-n",
        str(n.iters),
        "-w",
        str(n.warmup_iters),
        "-c",
        "1",
    ]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=site.slurm.step_timeout_s,
        env={**os.environ, **site.env},
        check=False,
    )
    (log / f"standalone-{repeat + 1}-{collective}.txt").write_text(proc.stdout + proc.stderr)
    result = nccl_tests.parse(proc.stdout)
    rows: dict[int, dict[str, float]] = {}
    for r in result.rows:
        if r.size_B and r.size_B not in rows:
            rows[r.size_B] = {k: m.busbw_GBps for k, m in (("oop", r.out_of_place), ("ip", r.in_place)) if m}
    head = re.search(r"nccl-headers=(\d+) nccl-library=(\d+)", proc.stdout)
    built = f" (built against {nccl_version_of(int(head[1]))})" if head else ""
    return rows, f"nccl-tests {result.version} with NCCL {result.nccl_version}{built}"


def through_suite(site: Site, run_dir: Path) -> tuple[Values, list[str]]:
    (run_dir / "raw").mkdir(parents=True, exist_ok=True)
    results = execute(Request(site=site, run_dir=run_dir, families=(), nccl=True))
    values: Values = {}
    problems = []
    for v in results["verdicts"]:
        labels = v.get("labels", {})
        if v["check"] == "nccl.launch" and v["outcome"] != "pass":
            problems.append(f"{v['subject']}: {v['outcome']}: {v['message']}")
        if v["check"] != "nccl.busbw" or not isinstance(v.get("value"), int | float):
            continue
        size = int(labels["size_B"])
        values.setdefault(labels["collective"], {}).setdefault(size, {"value": float(v["value"])})
    return values, problems


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b and b > 0 else None


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "n/a" if x is None else format(x, fmt)


def tables(data: dict[str, Any]) -> str:
    line = data["nvlink_GBps"]
    head = "| collective | size | standalone busbw (GB/s) | suite | suite / standalone | standalone spread "
    head += "| torch | torch / standalone | standalone / NVLink |\n|---|---|---|---|---|---|---|---|---|"
    out = [
        "# Fidelity: nccl busbw measured through the suite vs standalone nccl-tests",
        "",
        f"{data['when']} on `{data['host']}` ({data['gpus']} GPUs), site `{data['site']}`; "
        f"{data['versions']}; torch fallback: {data.get('torch', 'n/a')}. NVLink line rate {_f(line)} GB/s "
        f"per direction ({data['nvlink_note']}). Flags: `{data['flags']}`. "
        "NCCL_NVLS_ENABLE=0 (NVLink multicast off).",
        "",
        f"standalone and suite: the median of {data['repeats']} runs each, alternating (standalone, suite, "
        "standalone, ...); suite = nccl-tests launched by the suite (out-of-place busbw, the figure it "
        "judges); standalone spread = (max - min) / median of the standalone runs, the noise floor; torch = "
        "one run of the PyTorch NCCL fallback through the suite (all_reduce in place, so against nccl-tests' "
        f"in-place figure). Goal: suite / standalone = {GOAL:.2f} +- {TOL:.2f} at >= 64 MiB.",
        "",
        head,
    ]
    for c, rows in data["rows"].items():
        for r in rows:
            if r["size_B"] in (1 << 30, 8 << 30):
                out.append(_row_md(c, r, line))
    out += [
        "",
        "## Worst ratio at >= 64 MiB",
        "",
        "| collective | suite / standalone (min - max) | within goal | standalone spread (max) "
        "| torch / standalone (min - max) |",
        "|---|---|---|---|---|",
    ]
    for c, s in data["summary"].items():
        out.append(
            f"| {c} | {_f(s['suite_min'], '.3f')} - {_f(s['suite_max'], '.3f')} | "
            f"{'yes' if s['suite_ok'] else 'NO'} | {_f(s['noise_max'], '.3f')} | "
            f"{_f(s['torch_min'], '.3f')} - {_f(s['torch_max'], '.3f')} |"
        )
    out += [
        "",
        "## Every size",
        "",
        head,
    ]
    out += [_row_md(c, r, line) for c, rows in data["rows"].items() for r in rows]
    if data["problems"]:
        out += ["", "## Launch problems", "", *[f"- {p}" for p in data["problems"]]]
    return "\n".join(out) + "\n"


def _row_md(c: str, r: dict[str, Any], line: float | None) -> str:
    return (
        f"| {c} | {format_size(r['size_B'])} | {_f(r['standalone'])} | {_f(r['suite'])} | "
        f"{_f(r['suite_ratio'], '.3f')} | {_f(r['noise'], '.3f')} | {_f(r['torch'])} | "
        f"{_f(r['torch_ratio'], '.3f')} | "
        f"{_f(_ratio(r['standalone'], line), '.3f')} |"
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--site", default="local-gpu")
    p.add_argument("--work", type=Path, default=REPO / "reports" / "fidelity")
    p.add_argument("--out", type=Path, default=REPO / "docs" / "examples" / "h200x2" / "fidelity.md")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch fallback measurement")
    p.add_argument("--repeats", type=int, default=3, help="standalone/suite pairs, alternating (medians)")
    args = p.parse_args()
    site = load_site(args.site, REPO / "site-configs")
    os.environ.update(site.env)  # NVLink multicast off (NCCL_NVLS_ENABLE=0...) in every process below
    host = site.nodes[0]
    gpus = site.node_type(host).gpus
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    work = args.work / stamp
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    alone: list[Values] = []  # one per repeat; standalone and suite alternate, so drift hits both
    suite: list[Values] = []
    problems: list[str] = []
    versions = ""
    for i in range(args.repeats):
        alone.append({})
        for c in site.nccl.intra_collectives:
            alone[i][c], versions = standalone(site, c, gpus, work, i)
        print(f"repeat {i + 1}: standalone done ({time.monotonic() - t0:.0f} s)", flush=True)
        values, more = through_suite(site, work / f"suite-{i + 1}")
        suite.append(values)
        problems += more
        print(f"repeat {i + 1}: suite (nccl-tests) done ({time.monotonic() - t0:.0f} s)", flush=True)
    torch: Values = {}
    if not args.no_torch:
        fb = replace(
            site, tools=replace(site.tools, nccl_tests_bin=None), nccl=replace(site.nccl, fallback="torch")
        )
        torch, more = through_suite(fb, work / "torch")
        problems += [f"torch fallback: {m}" for m in more]
        print(f"suite (torch fallback): done ({time.monotonic() - t0:.0f} s)", flush=True)
    line, note = nvlink_GBps()
    data: dict[str, Any] = {
        "when": stamp,
        "host": host,
        "gpus": gpus,
        "site": site.name,
        "versions": versions,
        "repeats": args.repeats,
        "nvlink_GBps": line,
        "nvlink_note": note,
        "problems": problems,
        "rows": {},
        "summary": {},
        "wall_s": round(time.monotonic() - t0, 1),
        "flags": f"-b {site.nccl.min_bytes} -e {site.nccl.max_bytes} -f {site.nccl.step_factor} "
        f"-g {gpus} -n {site.nccl.iters} -w {site.nccl.warmup_iters} -c 1",
    }
    for c in site.nccl.intra_collectives:
        out = []
        for size in sorted(alone[0].get(c, {})):
            oop = [a[c][size]["oop"] for a in alone if "oop" in a.get(c, {}).get(size, {})]
            ip = [a[c][size]["ip"] for a in alone if "ip" in a.get(c, {}).get(size, {})]
            sv = [x[c][size]["value"] for x in suite if size in x.get(c, {})]
            st, s_med = _median(oop), _median(sv)
            t = torch.get(c, {}).get(size, {}).get("value")
            out.append(
                {
                    "size_B": size,
                    "standalone": st,
                    "standalone_ip": _median(ip),
                    "standalone_runs": oop,
                    "noise": (max(oop) - min(oop)) / st if st and len(oop) > 1 else None,
                    "suite": s_med,
                    "suite_runs": sv,
                    "suite_ratio": _ratio(s_med, st),
                    "torch": t,
                    "torch_ratio": _ratio(t, _median(ip) if c == "all_reduce" else st),
                }
            )
        data["rows"][c] = out
        big = [r for r in out if r["size_B"] >= BIG_B]
        sr = [r["suite_ratio"] for r in big if r["suite_ratio"] is not None]
        tr = [r["torch_ratio"] for r in big if r["torch_ratio"] is not None]
        data["summary"][c] = {
            "suite_min": min(sr, default=None),
            "suite_max": max(sr, default=None),
            "suite_ok": bool(sr) and all(abs(x - GOAL) <= TOL for x in sr),
            "noise_max": max((r["noise"] for r in big if r["noise"] is not None), default=None),
            "torch_min": min(tr, default=None),
            "torch_max": max(tr, default=None),
        }
    for f in sorted((work / "torch" / "raw" / "nccl").rglob("*.json")):
        with contextlib.suppress(ParseError):
            fb_result = torch_nccl.parse(load(f).stdout)
            if fb_result.torch_version:
                data["torch"] = f"torch {fb_result.torch_version}, NCCL {fb_result.nccl_version}"
                break
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(tables(data))
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=1))
    print(tables(data).split("## Every size")[0])
    print(f"wrote {args.out} and {args.out.with_suffix('.json')} ({data['wall_s']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
