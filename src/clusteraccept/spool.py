"""What a campaign leaves when Slurm ends its job early: the spool read back, killed steps marked.

The campaign driver (driver.py) writes each finished step and each port counter snapshot to its spool on
the shared filesystem at once; when the job's own result never comes back, the submit host reads them here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clusteraccept.evidence import Evidence


def mark_killed(evidence: list[Evidence], state: str) -> list[Evidence]:
    """Steps that did not exit 0 in a campaign Slurm ended early (NODE_FAIL, TIMEOUT, PREEMPTED, CANCELLED,
    our own WAIT_TIMEOUT...) carry ``killed_with_job=<state>``: their failure says what happened to the job,
    not to the hardware, so the judge reports them as not tested (ERROR) and ``--resume`` reruns them."""
    if state.split(" ")[0] in ("COMPLETED", "FINISHED", "DONE"):
        return evidence
    return [
        replace(ev, meta={**ev.meta, "killed_with_job": state.split(" ")[0]})
        if "collective" in ev.meta and ev.returncode != 0
        else ev
        for ev in evidence
    ]


def read_spool(spool: Path | None) -> list[Evidence]:
    """What a killed campaign left: its finished steps and its counter snapshots (driver.py)."""
    if spool is None or not spool.is_dir():
        return []
    files = [*sorted(spool.glob("*.json")), *sorted((spool / "counters").glob("*.json"))]
    return [Evidence.from_dict(json.loads(f.read_text())) for f in files]
