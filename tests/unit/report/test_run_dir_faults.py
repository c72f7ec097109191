"""The fault matrix's rows that need no cluster (docs/faults.md): the reports filesystem fills while the
run archives (ENOSPC), and an archived bundle that was cut off. Each ends with one line naming the path; no
half-written file stays; what was archived before stays readable."""

from __future__ import annotations

import errno
import gzip
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import PytestRunner

from clusteraccept.errors import ArchiveError
from clusteraccept.jobs import archive
from clusteraccept.judge import record
from clusteraccept.parsers import stored
from clusteraccept.sim.injected import check, pytest_errors, summary
from clusteraccept.site.load import load_site

from .conftest import DemoRun, demo_site


class FullDisk:
    """archive.py's ``gzip`` with a disk that fills after ``allowed`` bundles: the next write gets ENOSPC
    after some bytes reached the file, as on a real full filesystem."""

    open = staticmethod(gzip.open)
    decompress = staticmethod(gzip.decompress)

    def __init__(self, allowed: int) -> None:
        self.left = allowed

    def GzipFile(self, *args: Any, **kwargs: Any) -> gzip.GzipFile:  # gzip's own name
        self.left -= 1
        if self.left < 0:
            kwargs["fileobj"].write(b"\x1f\x8b\x08")  # the start of a gzip header, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return gzip.GzipFile(*args, **kwargs)


def test_a_full_disk_while_archiving_ends_the_run_incomplete_naming_the_path(
    run_pytest: PytestRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = demo_site(tmp_path / "demo.yaml", {})
    monkeypatch.setattr(archive, "gzip", FullDisk(allowed=3))
    proc = run_pytest(
        "suites/", f"--site={site}", "--executor=local", f"--reports-dir={tmp_path / 'r'}", "-m", "nccl"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    (run,) = [p for p in (tmp_path / "r" / "demo").iterdir() if not p.is_symlink()]
    assert f"{run}/raw/" in out and "could not archive evidence: No space left on device" in out, out[-3000:]
    assert "is INCOMPLETE: what was archived before stays" in out
    assert not (run / "results.json").exists()  # never half-written: not written
    assert not [p for p in run.rglob("*.tmp")], list(run.rglob("*.tmp"))
    kept = sorted(run.glob("raw/*/*.jsonl.gz"))
    assert len(kept) == 3 and len(list(archive.load_all(run))) > 0  # the three bundles before, whole


def test_a_bundle_cut_off_is_named_never_read_as_complete(
    demo_run: DemoRun, run_pytest: PytestRunner, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run, symlinks=True)
    cut = run / "raw" / "campaign-leaf1" / "r001.jsonl.gz"
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ArchiveError) as exc:
        list(archive.load_all(run))
    msg = str(exc.value)
    assert msg.startswith(f"{cut}: evidence bundle cut off or corrupt") and "\n" not in msg
    assert msg.endswith("round 1 of campaign-leaf1's evidence is incomplete, not read"), msg
    proc = run_pytest("suites/", f"--site={demo_run.site}", f"--rejudge={run}", "-m", "nccl")
    assert proc.returncode == 2 and f"{cut}: evidence bundle cut off" in proc.stdout + proc.stderr


def test_stored_parses_cut_off_stale_or_gone_cost_only_a_parse(
    demo_run: DemoRun, run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """parsed/ is derived data (parsers/stored.py): a file cut off, one of other parsers, one deleted are
    each read as nothing, the rejudge judges exactly what it judged from them, and stores them anew."""
    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run, symlinks=True)
    files = sorted(run.glob(f"{archive.PARSED}/*/*.jsonl.gz"))
    assert len(files) >= 3, files
    bundles = [f"raw/{f.relative_to(run / archive.PARSED)}" for f in files]
    assert all(archive.parsed_bundle(run, stored.VERSION, b) for b in bundles)
    args = ("suites/", f"--site={demo_run.site}", f"--rejudge={run}")
    assert run_pytest(*args).returncode == 1  # the demo's injected faults
    before = sorted(map(str, record.load(run)["verdicts"]))  # judged from every step's stored parse
    cut, stale, gone = files[:3]
    cut.write_bytes(cut.read_bytes()[:40])
    lines = gzip.decompress(stale.read_bytes()).decode().splitlines()
    stale.write_bytes(gzip.compress("\n".join(['{"parser": "another"}', *lines[1:]]).encode()))
    gone.unlink()
    assert [archive.parsed_bundle(run, stored.VERSION, b) for b in bundles[:3]] == [{}, {}, {}]
    assert archive.parsed_bundle(run, stored.VERSION, "elsewhere/x.jsonl.gz") == {}  # not a raw/ bundle
    proc = run_pytest(*args)
    assert proc.returncode == 1, proc.stdout[-2000:]
    after = sorted(map(str, record.load(run)["verdicts"]))
    assert after == before
    assert all(archive.parsed_bundle(run, stored.VERSION, b) for b in bundles)


def test_stored_parses_that_cannot_be_written_do_not_fail_the_rejudge(
    demo_run: DemoRun, run_pytest: PytestRunner, tmp_path: Path
) -> None:
    """parsed/ is only a saving: where it cannot be written (here a file stands in its place), the rejudge
    judges from raw/ and writes its record all the same."""
    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run, symlinks=True)
    shutil.rmtree(run / archive.PARSED)
    (run / archive.PARSED).write_text("not a directory\n")
    proc = run_pytest("suites/", f"--site={demo_run.site}", f"--rejudge={run}")
    assert proc.returncode == 1, proc.stdout[-2000:]  # the demo's injected faults
    assert "rejudged" in record.load(run)
    assert (run / archive.PARSED).read_text() == "not a directory\n"


def test_two_runs_of_one_site_at_once_each_find_exactly_the_injected_faults(tmp_path: Path) -> None:
    """The nightly and a manual run of the same (simulated) site at the same time: each run has its own
    directory, both land in the site's history, and neither pulls the simulated nodes from under the other
    (sim/hosts.write_profile swaps a changed profile in, leaves an unchanged one alone)."""
    site = demo_site(tmp_path / "demo.yaml", {})
    reports = tmp_path / "reports"

    def start(i: int) -> subprocess.Popen[str]:
        argv = [sys.executable, "-m", "pytest", "suites/", f"--site={site}", "--executor=local", "-q",
                "-p", "no:randomly", "-p", "no:cacheprovider", f"--reports-dir={reports}",
                f"--junitxml={tmp_path / f'pytest-{i}.xml'}",
                f"--basetemp={tmp_path / f'bt{i}'}"]  # fmt: skip
        cwd = Path(__file__).resolve().parents[3]
        return subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    procs = [start(1), start(2)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [1, 1], [o[-2000:] for o in outs]  # the demo's faults fail
    runs = sorted(p for p in (reports / "demo").iterdir() if p.is_dir() and not p.is_symlink())
    assert len(runs) == 2
    loaded = load_site(str(site), Path(__file__).resolve().parents[3] / "site-configs")
    for run in runs:
        finding = check(loaded, record.load(run))
        assert finding.exact and len(finding.found) == 6, summary(finding)
    for i in (1, 2):
        assert pytest_errors(tmp_path / f"pytest-{i}.xml") == ()
    with sqlite3.connect(reports / "demo" / "history.sqlite") as con:
        assert con.execute("SELECT COUNT(*) FROM runs").fetchone() == (2,)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"member": "x1", "host": "node1"}', "member 'x1': expected an archived evidence (host, source,"),
        (
            '{"member": "x2", "host": "node1", "source": "s", "colour": 1}',
            "got keys ['colour', 'host', 'source']",
        ),
        (
            '{"member": "x3", "host": "node1", "source": "s", "meta": 5}',
            "member 'x3': expected an archived evidence",
        ),
        (
            '["not", "an", "object"]',
            "line 2: expected an archived evidence (a JSON object with 'member'), got a list",
        ),
        (
            '{"host": "node1", "source": "s"}',
            "line 2: expected an archived evidence (a JSON object with 'member')",
        ),
        # not JSON: the bundle is read as one JSON array, and the line found again one by one
        ('{"member": "x4", "host": ', "evidence bundle cut off or corrupt (line 2: Expecting value"),
        ('{"member": "x5"},{"member": "x6"}', "evidence bundle cut off or corrupt (line 2: Extra data"),
        ("", "evidence bundle cut off or corrupt (line 2: Expecting value"),
    ],
)
def test_a_bundle_line_that_is_no_evidence_is_one_line_naming_bundle_and_member(
    demo_run: DemoRun, tmp_path: Path, line: str, expected: str
) -> None:
    """A bundle whose lines were edited or written by something else: one line naming the bundle, the member
    (or line) and what was expected, never a TypeError or KeyError from inside the reader."""
    run = tmp_path / "run"
    shutil.copytree(demo_run.run, run, symlinks=True)
    bundle = run / "raw" / "campaign-leaf1" / "r001.jsonl.gz"
    lines = gzip.decompress(bundle.read_bytes()).decode().splitlines()
    bundle.write_bytes(gzip.compress("\n".join([lines[0], line, *lines[1:]]).encode()))
    with pytest.raises(ArchiveError) as exc:
        list(archive.load_all(run))
    msg = str(exc.value)
    assert msg.startswith(f"{bundle}: ") and "\n" not in msg and expected in msg, msg
    unread = "is incomplete, not read" if "cut off or corrupt" in expected else "not read"
    assert msg.endswith(f"round 1 of campaign-leaf1's evidence {unread}"), msg
