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


def propose(
    results: dict[str, Any], quantile: float = 0.05, lower: float = -0.08
) -> dict[str, dict[str, Any]]:
    values: dict[str, list[float]] = defaultdict(list)
    units: dict[str, str] = {}
    for v in results.get("verdicts", []):
        key = v.get("labels", {}).get("key")
        if key and isinstance(v.get("value"), int | float) and v["outcome"] in ("pass", "fail", "skip"):
            values[key].append(float(v["value"]))
            units[key] = v.get("unit") or "GB/s"
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(values):
        ref = float(pd.Series(values[key]).quantile(quantile))
        out[key] = {"ref": round(ref, 2), "lower": lower, "upper": None, "unit": units[key]}
    return out


def write_proposal(results: dict[str, Any], path: Path, quantile: float = 0.05, lower: float = -0.08) -> int:
    proposal = propose(results, quantile, lower)
    fp = results.get("fingerprint", {}).get("nodes", {})
    versions = sorted({f"{k}={v}" for node in fp.values() for k, v in node.items()})
    header = [
        f"# Baselines proposed by clusteraccept from run {results.get('run_id')} "
        f"of site {results.get('site')}",
        f"# ({results.get('started')}, suite {results.get('suite_revision')}): "
        f"ref = p{int(quantile * 100):02d} of the values per key, lower {lower:+.0%}.",
        "# Review before use; point the site's `baselines:` at this file. Measured on:",
        *[f"#   {line}" for line in versions[:40]],
    ]
    if results.get("simulated"):
        header.insert(1, "# SIMULATED HARDWARE: these numbers come from the simulator, not from a cluster.")
    path.write_text("\n".join(header) + "\n" + yaml.safe_dump(proposal, sort_keys=True))
    return len(proposal)
