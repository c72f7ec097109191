"""``--propose-baselines FILE``: a reviewable baselines file from a good run (never edits the site file).

Per baseline key (``nccl.busbw.<collective>.<scope>[.rail<k>].<size>``), the reference is a low quantile
(p05 by default) of the values measured under that key, so one good-but-lucky pair does not set the bar;
the file's header records the run and the fingerprint (driver, CUDA/NCCL, OFED, firmware) it was measured on.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

SMALL_BELOW_B = 64 << 20  # below this, collectives are latency-bound: busbw varies run to run


def propose(
    results: dict[str, Any],
    quantile: float = 0.05,
    lower: float = -0.08,
    small_lower: float | None = None,
    min_ref: float | None = None,
) -> dict[str, dict[str, Any]]:
    """``small_lower``: the tolerance for sizes below 64 MiB (None: ``lower`` too). On one 2x H200 VM the
    busbw of the same size in four nccl-tests runs spread by up to 67% below 64 MiB, 7% above
    (docs/examples/h200x2/). ``min_ref``: keys whose reference is below it get no baseline (nccl-tests
    prints busbw to 0.01 GB/s: below 0.1 the number has one significant digit and cannot be judged)."""
    values: dict[str, list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    small: set[str] = set()
    for v in results.get("verdicts", []):
        labels = v.get("labels", {})
        key = labels.get("key")
        # healthy results only: a slow one (FAIL: against a baseline, or its peers and the line rate on a
        # first run with none) must not set the bar; a confirmation step measured other sets of nodes
        if (
            key
            and isinstance(v.get("value"), int | float)
            and v["outcome"] in ("pass", "skip")
            and not labels.get("attempt")
        ):
            values[key].append(float(v["value"]))
            units[key] = v.get("unit") or "GB/s"
            if str(labels.get("size_B", "")).isdigit() and int(labels["size_B"]) < SMALL_BELOW_B:
                small.add(key)
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(values):
        ref = float(pd.Series(values[key]).quantile(quantile))
        if min_ref is not None and ref < min_ref:
            continue
        tol = small_lower if small_lower is not None and key in small else lower
        out[key] = {"ref": round(ref, 2), "lower": tol, "upper": None, "unit": units[key]}
    return out


def write_proposal(
    results: dict[str, Any],
    path: Path,
    quantile: float = 0.05,
    lower: float = -0.08,
    small_lower: float | None = None,
    min_ref: float | None = None,
) -> int:
    proposal = propose(results, quantile, lower, small_lower, min_ref)
    fp = results.get("fingerprint", {}).get("nodes", {})
    versions = sorted({f"{k}={v}" for node in fp.values() for k, v in node.items()})
    header = [
        f"# Baselines proposed by clusteraccept from run {results.get('run_id')} "
        f"of site {results.get('site')}",
        f"# ({results.get('started')}, suite {results.get('suite_revision')}): "
        f"ref = p{int(quantile * 100):02d} of the values per key, lower {lower:+.0%}.",
        *(
            [f"# Sizes below {SMALL_BELOW_B >> 20} MiB (latency-bound, noisier): lower {small_lower:+.0%}."]
            if small_lower is not None
            else []
        ),
        *([f"# Keys whose reference is below {min_ref:g} are left out (not judged)."] if min_ref else []),
        "# Review before use; point the site's `baselines:` at this file. Measured on:",
        *[f"#   {line}" for line in versions[:40]],
    ]
    if results.get("simulated"):
        header.insert(1, "# SIMULATED HARDWARE: these numbers come from the simulator, not from a cluster.")
    path.write_text("\n".join(header) + "\n" + yaml.safe_dump(proposal, sort_keys=True))
    return len(proposal)


def main(argv: list[str] | None = None) -> int:
    """``python -m clusteraccept.judge.propose RUN_DIR/results.json FILE [--small-lower -0.5]``: a proposal
    from an archived run (the same as ``--propose-baselines``, with the latency-bound sizes' tolerance)."""
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m clusteraccept.judge.propose", description=main.__doc__)
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--quantile", type=float, default=0.05)
    p.add_argument("--lower", type=float, default=-0.08)
    p.add_argument("--small-lower", type=float, default=None, help="tolerance for sizes below 64 MiB")
    p.add_argument("--min-ref", type=float, default=None, help="no baseline for keys whose ref is below")
    a = p.parse_args(argv)
    results = json.loads(a.results.read_text())
    n = write_proposal(results, a.out, a.quantile, a.lower, a.small_lower, a.min_ref)
    print(f"{n} baseline keys proposed in {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
