"""The demo's exit status (tools/demo, sim/injected.py): exact when the run found its injected faults and
nothing else, and says which failure or fault is off when not."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from clusteraccept.sim.injected import check, summary
from clusteraccept.site.load import load_site

from .conftest import REPO, DemoRun


def test_the_demo_run_found_exactly_its_injected_faults(demo_run: DemoRun) -> None:
    site = load_site(str(demo_run.site), REPO / "site-configs")
    finding = check(site, demo_run.results)
    assert finding.exact and len(finding.found) == len(site.sim_faults) == 6, summary(finding)
    proc = subprocess.run(
        [sys.executable, "-m", "clusteraccept.sim.injected", "--site", str(demo_run.site), str(demo_run.run)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("as injected: 6 injected fault(s) found"), proc


def test_a_failure_no_fault_explains_and_a_fault_not_found_are_named(demo_run: DemoRun) -> None:
    site = load_site(str(demo_run.site), REPO / "site-configs")
    slow = next(f for f in site.sim_faults if f["kind"] == "slow_rail")
    # as if node3's slow rail had not been injected: its failures are unexplained
    without = check(
        replace(site, sim_faults=tuple(f for f in site.sim_faults if f is not slow)), demo_run.results
    )
    assert not without.exact and "nccl.localization[node3] (fail)" in without.unexplained
    # as if a fault on node4's rail 2 had been injected too: nothing failed on it
    extra = {"kind": "slow_rail", "node": "node4", "rail": 2, "factor": 0.5}
    more = check(replace(site, sim_faults=(*site.sim_faults, extra)), demo_run.results)
    assert more.missed == ("{kind: slow_rail, node: node4, rail: 2, factor: 0.5}",), summary(more)
    assert summary(more).startswith("NOT as injected: 1 injected fault(s) not found: {kind: slow_rail")
    # an ERROR verdict is never explained
    errored = dict(demo_run.results)
    errored["verdicts"] = [*errored["verdicts"], {"check": "nccl.launch", "subject": "node3-node4:rail5",
                                                  "family": "nccl", "outcome": "error"}]  # fmt: skip
    assert "nccl.launch[node3-node4:rail5] (error)" in check(site, errored).unexplained
