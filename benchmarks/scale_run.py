"""Scale harness: the path a user runs, ``pytest suites/ --site=... --rejudge RUN_DIR``, at N nodes.

1. A site file for N simulated nodes shaped like site-configs/example-h100-ib.yaml (8 GPUs / 8 NDR400 IB
   rails, SHARP, blocks of ``--block``, pair collectives sendrecv + all_reduce, one cross-block partner),
   one injected fault (rail 5 of one node at half speed) and baselines that fit the fabric model; written
   to a work dir (a temp dir, or ``--keep DIR``), with CLUSTERACCEPT_SITE_CONFIGS pointing there.
2. ``pytest suites/ --site=<yaml> --dry-run``: timed, and its record says which families a run selects.
3. A synthetic ARCHIVED run of those families in the real layout: scale_evidence.write_run (the plan,
   the simulator's nccl-tests output, counter snapshots and probe evidence, archived with the project's
   archive API as flow.execute does). Its time is printed apart: on a cluster the evidence comes from jobs.
4. ``pytest suites/ --site=<yaml> --rejudge <run_dir> --junitxml=<run_dir>/pytest-junit.xml``: wall time,
   peak RSS (wait4 on the child), the items of pytest's summary line, and where the time went inside it
   (this module is also a pytest plugin, ``-p scale_run``, active only when SCALE_RUN_TIMES names a file:
   it times flow.rejudge/flow.execute and report.write_reports and stamps collection and the tests' end).
   "archive + parse into the record" = the archive calls of step 3 (summed over the workers: flow.execute
   makes them in one process) + flow.rejudge (load raw/, parse, judge, write results.json).
5. Whether the injected culprit was found and anything else blamed (nccl.localization FAIL verdicts), then
   one last line: ``scale: nodes=N items=... wall_s=... peak_rss_MB=... raw_files=... raw_MB=... junit_MB=...
   html_MB=... culprits=...``.

``--skip-pytest``: no pytest at all; the record is made by flow.rejudge + report.write_reports in a child
process (its wall and RSS are printed; items=-), for sizes where the pytest runs take too long.
``--real`` (small N: every step is a process): also run the site for real on this machine (submitit's local
executor, the simulator's nccl-tests and host profiles) and compare every verdict's outcome with the
synthetic run's: the check that the synthetic evidence is judged like real evidence.

Run:  .venv/bin/python benchmarks/scale_run.py --nodes 256 [--block 32] [--keep DIR] [--skip-pytest]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import flow, hostio

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "site-configs" / "example-h100-ib.yaml"
TIMES_ENV = "SCALE_RUN_TIMES"


# ------------------------------------------------------------------------------------------------ site
def fault_node(nodes: int) -> str:
    return node_name(nodes // 3 + 1, nodes)


def node_name(i: int, nodes: int) -> str:
    return f"g{i:0{max(5, len(str(nodes)))}d}"


def site_doc(nodes: int, block: int, root: Path) -> dict[str, Any]:
    """example-h100-ib.yaml at N nodes, simulated, one slow rail, baselines fitting the fabric model."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    first, last = node_name(1, nodes), node_name(nodes, nodes)
    sim = root / "sim"
    span = [(b, min(b + block, nodes)) for b in range(0, nodes, block)]
    doc.update(
        name=f"scale{nodes}",
        description=f"scale harness: {nodes} simulated 8xH100 + 8x NDR400 nodes, blocks of {block}",
        simulated=True,
        nodes=f"g[{first[1:]}-{last[1:]}]",
        blocks={
            f"su{i + 1:03d}": f"g[{node_name(a + 1, nodes)[1:]}-{node_name(b, nodes)[1:]}]"
            for i, (a, b) in enumerate(span)
        },
        sim={"faults": [{"kind": "slow_rail", "node": fault_node(nodes), "rail": 5, "factor": 0.5}]},
    )
    doc["env"] = {
        **doc["env"],
        hostio.PROFILE_ENV: str(sim / "hosts"),
        "CLUSTERACCEPT_FABRIC": str(sim / "fabric.json"),
    }
    doc["tools"] = {**doc["tools"], "nccl_tests_bin": str(sim / "nccl-tests")}
    # this interpreter on the "nodes": the site also runs for real here (--executor=local, small N)
    doc["slurm"] = {**doc["slurm"], "python": sys.executable}
    doc["nccl"] = {**doc["nccl"], "pair_collectives": ["sendrecv", "all_reduce"], "cross_block_partners": 1}
    # The example's pair references fit the model (50 GB/s rails x 0.92 efficiency = 46 GB/s); its intra-node
    # and block ones are real H100 figures the model does not reach (NVLink 450 x 0.92, 8 ranks per 8 rails).
    doc["baselines"] = {
        **doc["baselines"],
        "nccl.busbw.all_reduce.intra_node.*": {"ref": 410.0, "lower": -0.08, "unit": "GB/s"},
        "nccl.busbw.all_reduce.block.*": {"ref": 45.0, "lower": -0.10, "unit": "GB/s"},
        "nccl.busbw.alltoall.block.*": {"ref": 45.0, "lower": -0.10, "unit": "GB/s"},
        "nccl.busbw.*.all.*": {"ref": 45.0, "lower": -0.10, "unit": "GB/s"},
    }
    return doc


def write_site(nodes: int, block: int, root: Path) -> Path:
    path = root / "site-configs" / f"scale{nodes}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(site_doc(nodes, block, root), sort_keys=False))
    return path


# ----------------------------------------------------- the timing plugin (in the pytest child, -p scale_run)
_T0 = time.perf_counter()
_TIMES: dict[str, float] = {}


def _timed(owner: Any, name: str) -> None:
    fn = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _TIMES[f"{name}_s"] = _TIMES.get(f"{name}_s", 0.0) + time.perf_counter() - t0

    setattr(owner, name, timed)


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(TIMES_ENV):
        import clusteraccept.report

        _timed(flow, "rejudge")
        _timed(flow, "execute")
        _timed(clusteraccept.report, "write_reports")


def pytest_collection_finish(session: pytest.Session) -> None:
    _TIMES["collected_at_s"] = time.perf_counter() - _T0


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _TIMES["tests_done_at_s"] = time.perf_counter() - _T0  # before the clusteraccept plugin's reports


def pytest_unconfigure(config: pytest.Config) -> None:
    out = os.environ.get(TIMES_ENV)
    if out:
        _TIMES["total_s"] = time.perf_counter() - _T0
        Path(out).write_text(json.dumps(_TIMES))


# ------------------------------------------------------------------------------------------- measuring
@dataclass
class Child:
    """One child process: its exit status, wall time, peak RSS, output (a log file) and timing figures."""

    rc: int
    wall_s: float
    peak_rss_MB: float
    log: Path
    times: dict[str, float]

    def summary(self) -> tuple[int | None, str]:
        """Items run (pytest's final "N failed, M passed, K skipped in ...s" line) and that line."""
        kinds = r"passed|failed|skipped|xfailed|xpassed|errors?"
        for line in reversed(self.log.read_text(errors="replace").splitlines()):
            if re.search(r"\bin [\d.]+s\b", line) and re.search(rf"\d+ ({kinds})\b", line):
                return sum(int(n) for n, _ in re.findall(rf"(\d+) ({kinds})\b", line)), line.strip("= ")
        return None, "(no pytest summary line)"

    def inside(self) -> str:
        """Where the time went, from the timing plugin."""
        t = self.times
        if not t:
            return "no timing figures"
        judge = t.get("rejudge_s", 0.0) + t.get("execute_s", 0.0)
        tests = t.get("tests_done_at_s", 0.0) - t.get("collected_at_s", 0.0) - judge
        return (
            f"interpreter + imports {self.wall_s - t['total_s']:.1f} s, collected at "
            f"{t.get('collected_at_s', 0.0):.1f} s, rejudge/execute {judge:.1f} s, tests {tests:.1f} s, "
            f"reports {t.get('write_reports_s', 0.0):.1f} s"
        )

    def line(self, what: str) -> str:
        _, summary = self.summary()
        return f"{what}: rc {self.rc}, {summary}; {self.wall_s:.1f} s, peak RSS {self.peak_rss_MB:.0f} MB"


def run_child(argv: list[str], log: Path, root: Path) -> Child:
    """Run ``argv`` in the repository, output to ``log``; wait4 gives this child's own peak RSS."""
    times_file = log.with_suffix(".times.json")
    times_file.unlink(missing_ok=True)
    path = os.pathsep.join(p for p in (str(REPO / "benchmarks"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "CLUSTERACCEPT_SITE_CONFIGS": str(root / "site-configs"), "PYTHONPATH": path}
    env[TIMES_ENV] = str(times_file)
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    times = json.loads(times_file.read_text()) if times_file.exists() else {}
    return Child(proc.returncode, wall, usage.ru_maxrss / 1024, log, times)  # ru_maxrss: KiB on Linux


def suite_argv(site_file: Path, *extra: str) -> list[str]:
    head = [sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider", "-p", "scale_run", "-q"]
    return [*head, f"--site={site_file}", *extra]


RECORD = """
import sys
from pathlib import Path
from clusteraccept import flow
from clusteraccept.report import write_reports
from clusteraccept.site.load import load_site
site, run = load_site(sys.argv[1], Path(sys.argv[1]).parent), Path(sys.argv[2])
flow.rejudge(site, run)
write_reports(run)
"""


def tree_size(path: Path) -> tuple[int, int]:
    """(files, bytes) under ``path``."""
    files = size = 0
    stack = [path]
    while stack:
        with os.scandir(stack.pop()) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    files, size = files + 1, size + e.stat(follow_symlinks=False).st_size
    return files, size


def verdicts(run_dir: Path, select: str = "all") -> list[dict[str, Any]]:
    """The run's verdicts, from its record (results.json + verdicts.sqlite)."""
    from clusteraccept.judge import record

    found: list[dict[str, Any]] = record.load(run_dir, select)["verdicts"]
    return found


def blamed(found: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The culprits of the nccl.localization FAIL verdicts, and those verdicts' subjects."""
    fails = [v for v in found if v["check"] == "nccl.localization" and v["outcome"] == "fail"]
    culprits = [c for v in fails for c in (v.get("labels") or {}).get("culprits", "").split("|") if c]
    return sorted(set(culprits)), sorted({v["subject"] for v in fails})


def refs(run_dir: Path) -> set[str]:
    """The reference (bundle#member) of every archived Evidence of a run."""
    from clusteraccept.jobs.archive import load_all

    return {ref for _, ref in load_all(run_dir)}


def compare_real(site_file: Path, root: Path, run_dir: Path) -> str:
    """The site run for real here (local executor): each verdict's outcome and the raw/ files against the
    synthetic run's."""
    reports = root / "real-reports"
    argv = suite_argv(site_file, "--executor=local", f"--reports-dir={reports}")
    real = run_child(argv, root / "logs" / "real.log", root)
    run = next(p for p in (reports / site_file.stem).iterdir() if p.is_dir() and not p.is_symlink())
    mine = {(v["check"], v["subject"]): v["outcome"] for v in verdicts(run_dir)}
    theirs = {(v["check"], v["subject"]): v["outcome"] for v in verdicts(run)}
    differ = sorted(k for k in mine.keys() & theirs.keys() if mine[k] != theirs[k])
    only = len(mine.keys() ^ theirs.keys())
    files = [refs(r) for r in (run, run_dir)]
    return (
        f"{real.line('real run (--executor=local)')}; verdicts {len(theirs)} real / {len(mine)} synthetic, "
        f"{len(differ)} outcomes differ {differ[:5]}, {only} in one run only; raw evidence "
        f"{len(files[0])} real / {len(files[1])} synthetic, {len(files[0] ^ files[1])} in one run only"
    )


def mb(n: float) -> str:
    return f"{n / 2**20:.1f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep it all (default: a temp dir)")
    ap.add_argument("--skip-pytest", action="store_true", help="no pytest: flow.rejudge + reports only")
    ap.add_argument("--real", action="store_true", help="also run the site for real and compare (small N)")
    ap.add_argument("--workers", type=int, default=max(1, min(os.cpu_count() or 1, 8)))
    args = ap.parse_args(argv)
    root = args.keep or Path(tempfile.mkdtemp(prefix="scale_run-"))
    if args.keep and root.exists():
        shutil.rmtree(root)
    (root / "logs").mkdir(parents=True)
    try:
        return measure(args.nodes, args.block, root, args.skip_pytest, args.workers, args.real)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


def measure(nodes: int, block: int, root: Path, skip_pytest: bool, workers: int, real: bool) -> int:
    from scale_evidence import FAMILIES, write_run  # not in the pytest child that loads this as a plugin

    from clusteraccept.rundir import make_run_dir, new_run_id
    from clusteraccept.site.load import load_site

    site_file = write_site(nodes, block, root)
    site = load_site(str(site_file), site_file.parent)
    logs = root / "logs"
    families = FAMILIES
    if not skip_pytest:
        dry = run_child(
            suite_argv(site_file, "--dry-run", f"--reports-dir={root / 'dry'}"), logs / "dry.log", root
        )
        print(f"{dry.line('pytest --dry-run')}\n  inside: {dry.inside()}")
        record = root / "dry" / site.name / "latest" / flow.RESULTS
        if not record.exists():
            print(f"the dry run wrote no {flow.RESULTS}; the end of {dry.log}:")
            print(dry.log.read_text(errors="replace")[-3000:])
            return dry.rc or 1
        selected = json.loads(record.read_text())["families"]
        families = tuple(f for f in selected if f != "nccl")  # what a run of suites/ selects
    run_dir = make_run_dir(root / "reports", site.name, new_run_id())
    gen = write_run(site, run_dir, families=families, workers=workers)
    raw_files, raw_B = tree_size(run_dir / "raw")
    print(
        f"generation of the archived run ({', '.join(families)}, nccl): {gen.wall_s:.1f} s wall, {workers} "
        f"workers (setup {gen.setup_s:.1f} s; summed over the workers: simulate {gen.simulate_s:.1f} s, "
        f"archive {gen.archive_s:.1f} s); {gen.evidence} evidence in {raw_files} raw files, {mb(raw_B)} MB"
    )
    if skip_pytest:
        main_run = run_child(
            [sys.executable, "-c", RECORD, str(site_file), str(run_dir)], logs / "record.log", root
        )
        print(f"record, no pytest (flow.rejudge + write_reports): {main_run.line('child')}")
        items: int | None = None
        judge_s = main_run.wall_s
    else:
        extra = ("--rejudge", str(run_dir), f"--junitxml={run_dir / 'pytest-junit.xml'}")
        main_run = run_child(suite_argv(site_file, *extra), logs / "rejudge.log", root)
        items, _ = main_run.summary()
        print(f"{main_run.line('pytest --rejudge')}\n  inside: {main_run.inside()}")
        judge_s = main_run.times.get("rejudge_s", main_run.wall_s)
    print(
        f"archive + parse into the record: {gen.archive_s + judge_s:.1f} s = the archive calls "
        f"{gen.archive_s:.1f} s + flow.rejudge {judge_s:.1f} s"
    )
    if main_run.rc not in (0, 1) or not (run_dir / flow.RESULTS).exists():
        print(f"the run failed (rc {main_run.rc}); the end of {main_run.log}:")
        print(main_run.log.read_text(errors="replace")[-3000:])
        return main_run.rc or 1
    found = verdicts(run_dir, "bad")
    culprits, subjects = blamed(found)
    injected, node = f"rail:{fault_node(nodes)}:rail5", fault_node(nodes)
    false = [c for c in culprits if c != injected] + [s for s in subjects if s != node]
    if real:
        print(compare_real(site_file, root, run_dir))
    print(
        f"injected culprit {injected} found: {'yes' if injected in culprits else 'NO'}; "
        f"false blame: {', '.join(false) if false else 'none'}"
    )
    size = {
        f: (run_dir / f).stat().st_size if (run_dir / f).exists() else 0 for f in ("junit.xml", "report.html")
    }
    print(
        f"scale: nodes={nodes} items={'-' if items is None else items} wall_s={main_run.wall_s:.1f} "
        f"peak_rss_MB={main_run.peak_rss_MB:.0f} raw_files={raw_files} raw_MB={mb(raw_B)} "
        f"junit_MB={mb(size['junit.xml'])} html_MB={mb(size['report.html'])} "
        f"culprits={','.join(culprits) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
