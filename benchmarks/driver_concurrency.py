"""The campaign driver at thousands of concurrent steps: what the batch job runs (jobs/node_entry.py
``drive_campaign``), in a child process, on one round of N steps that all run at once.

Each step is ``sleep S`` (the driver's cost is what is measured, not a step's). The parent samples the
child's thread count (/proc/<pid>/status ``Threads``) every 20 ms and its peak RSS (getrusage of
children); the driver spools every step's evidence as on a cluster. Last line:
``driver: steps=N wall_s=... peak_threads=... peak_rss_MB=... overhead_s=...`` (overhead: wall - S).

Run:  .venv/bin/python benchmarks/driver_concurrency.py --steps 2000 --sleep 5
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import sys
from clusteraccept.jobs.node_entry import drive_campaign
from clusteraccept.plan.jobs import CampaignJob, Round, Step
n, sleep_s, spool = int(sys.argv[1]), sys.argv[2], sys.argv[3]
steps = tuple(
    Step("pair", "pair_in_block", "sendrecv", (f"a{i}", f"b{i}"), 0, f"a{i}-b{i}:rail0",
         shape=("sleep", sleep_s))
    for i in range(n)
)
job = CampaignJob("campaign-bench", "b", (), (Round(0, "all at once", steps),), max_concurrent=n)
evs = drive_campaign(job, 600.0, spool)
assert len(evs) == n and all(ev.returncode == 0 for ev in evs), [ev for ev in evs if ev.returncode][:1]
"""


def threads_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--sleep", type=float, default=5.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="driver-bench-") as tmp:
        t0 = time.perf_counter()
        argv = [sys.executable, "-c", CHILD, str(args.steps), str(args.sleep), str(Path(tmp) / "spool")]
        proc = subprocess.Popen(argv)
        peak_threads = 0
        while proc.poll() is None:
            peak_threads = max(peak_threads, threads_of(proc.pid))
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        rss_MB = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # the one child, reaped
    if proc.returncode:
        print(f"driver child failed: rc {proc.returncode}")
        return proc.returncode
    print(
        f"driver: steps={args.steps} wall_s={wall:.1f} peak_threads={peak_threads} "
        f"peak_rss_MB={rss_MB:.0f} overhead_s={wall - args.sleep:.1f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
