"""Hostile site input, every case: the property test of tests/unit/test_hostile_schema.py over every string
field of the site schema times every hostile value (tests/unit/hostile.py), run as the command a developer
types (pytest in a subprocess) instead of the seeded sample of the unit tests.

    python benchmarks/hostile_input.py [--seed 20]

Last line: ``hostile input: <cases> (field, value) cases over <fields> fields x <values> values: <refused>
refused at load, <rendered> rendered and held, <broke> broke; <seconds> s``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=20)
    args = ap.parse_args()
    env = {**os.environ, "CLUSTERACCEPT_HOSTILE_CASES": "all", "CLUSTERACCEPT_HOSTILE_SEED": str(args.seed)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:randomly", "-p", "no:cacheprovider",
         "tests/unit/test_hostile_schema.py::test_hostile_values_are_refused_or_render_scripts_that_hold"],
        cwd=REPO, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    elapsed_s = time.monotonic() - t0
    summary = [ln for ln in proc.stdout.splitlines() if ln.lstrip(".F").startswith("hostile input:")]
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:] + proc.stderr[-2000:])
    line = summary[-1].lstrip(".F") if summary else "hostile input: no summary (the test did not run)"
    print(f"{line}; {elapsed_s:.0f} s")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
