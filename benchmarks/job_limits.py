"""The job layer within Slurm's limits at N nodes, on the path a user runs: ``pytest suites/ --dry-run``.

For each ``--nodes`` size: the scale harness's site (benchmarks/scale_run.py: example-h100-ib.yaml widened
to N nodes in blocks of ``--block``, sendrecv + all_reduce pair collectives, one cross-block partner), with
the limits the site leaves to the cluster (none is asked here: a dry run on this machine finds no
slurm.conf), so the documented fallbacks apply: 40,000 steps per job, 256 concurrent steps, unpaced.
``pytest suites/ --site=<it> --dry-run`` runs as a subprocess; what it wrote to ``jobs/`` is then read
as a user reads it:

- the steps each job creates (the ``srun`` lines of its ``.steps.sh`` plus its counter snapshots: one
  before the first round and one after each, every one a step that MaxStepCount counts);
- the largest wave (the ``srun`` lines between two ``wait`` lines: what runs at once);
- the longest ``--time`` (``#SBATCH --time=`` of the ``.sbatch`` files), and how many jobs and shards.

One line per size, and a last summary line. Run:
    .venv/bin/python benchmarks/job_limits.py --nodes 1024 4096 16384
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_run import run_child, suite_argv, write_site


def read_jobs(jobs: Path) -> dict[str, int | str]:
    most_steps, most_steps_job, widest, longest = 0, "", 0, 0
    n_jobs = shards = 0
    for steps_file in sorted(jobs.glob("*.steps.sh")):
        n_jobs += 1
        shards += bool(re.search(r"-p\d+$", steps_file.name.removesuffix(".steps.sh")))
        steps = snaps = wave = 0
        with steps_file.open() as f:
            for line in f:
                if line.startswith("srun "):
                    steps += 1
                    wave += 1
                elif line.startswith("wait"):
                    widest, wave = max(widest, wave), 0
                elif line.startswith("# port counters"):
                    snaps += 1
        if steps + snaps > most_steps:
            most_steps, most_steps_job = steps + snaps, steps_file.name.removesuffix(".steps.sh")
    for sbatch in jobs.glob("*.sbatch"):
        m = re.search(r"^#SBATCH --time=(\d+)$", sbatch.read_text(), re.M)
        longest = max(longest, int(m[1])) if m else longest
    return {
        "jobs": n_jobs,
        "shards": shards,
        "max_steps": most_steps,
        "max_steps_job": most_steps_job,
        "max_wave": widest,
        "max_time_min": longest,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--block", type=int, default=32)
    args = ap.parse_args()
    lines = []
    for n in args.nodes:
        with tempfile.TemporaryDirectory(prefix=f"job-limits-{n}-") as tmp:
            root = Path(tmp)
            site_file = write_site(n, args.block, root)
            dry = run_child(
                suite_argv(site_file, "--dry-run", f"--reports-dir={root / 'dry'}"), root / "dry.log", root
            )
            if dry.rc != 0:
                print((root / "dry.log").read_text(errors="replace")[-3000:])
                return dry.rc
            (run,) = [p for p in (root / "dry" / f"scale{n}").iterdir() if not p.is_symlink()]
            got = read_jobs(run / "jobs")
        line = (
            f"nodes={n} dry_run_s={dry.wall_s:.1f} peak_rss_MB={dry.peak_rss_MB:.0f} jobs={got['jobs']} "
            f"shards={got['shards']} max_steps_per_job={got['max_steps']} ({got['max_steps_job']}) "
            f"max_wave={got['max_wave']} max_time_min={got['max_time_min']}"
        )
        print(line, flush=True)
        lines.append(line)
    print("job-limits: " + "; ".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
