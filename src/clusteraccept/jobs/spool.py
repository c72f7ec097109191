"""What a campaign leaves when Slurm ends its job early: the spool read back, killed steps marked.

The campaign driver (node_entry.py) writes each finished step and each port counter snapshot to its spool on
the shared filesystem at once; when the job's own result never comes back, the submit host reads them here.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clusteraccept.evidence import Evidence


def mark_killed(evidence: list[Evidence], state: str) -> list[Evidence]:
    """The spool of a campaign whose result never came back (Slurm ended it: NODE_FAIL, TIMEOUT,
    PREEMPTED, CANCELLED, our own WAIT_TIMEOUT...): the steps of its LAST spooled round (or wave: a round
    over the concurrency cap runs as waves) that did not exit 0 carry ``killed_with_job=<state>``. They
    ran while the job was dying (a node going down fails its steps, the round ends, then Slurm ends the
    job), so their failure says what happened to the job, not to the hardware: the judge reports them as
    not tested (ERROR) and ``--resume`` reruns them. So do the failed steps the driver itself marked
    ``job_ending`` (SIGTERM reached it while they ran: node_entry.JobEnding), whichever wave they were in.
    Failures of earlier rounds and waves are results and stay failures."""
    if state.split(" ")[0] in ("COMPLETED", "FINISHED", "DONE"):
        return evidence
    waves = [w for w in map(_wave_of, evidence) if w is not None]
    last = max(waves) if waves else None
    return [
        replace(ev, meta={**ev.meta, "killed_with_job": state.split(" ")[0]})
        if "collective" in ev.meta
        and ev.returncode != 0
        and (_wave_of(ev) == last or "job_ending" in ev.meta)
        else ev
        for ev in evidence
    ]


def _wave_of(ev: Evidence) -> tuple[int, int] | None:
    """(round, wave) of a step: a round over the concurrency cap runs as waves (meta ``wave``: "2/5")."""
    if not ev.meta.get("round_index", "").isdigit():
        return None
    return int(ev.meta["round_index"]), int(ev.meta.get("wave", "1/1").split("/")[0])


def _load(path: Path) -> Evidence | None:
    try:
        return Evidence.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # half written when the job died (the driver replaces files whole; older spools)


def read_spool(spool: Path | None) -> list[Evidence]:
    """What a killed campaign left: its finished steps and its counter snapshots (node_entry.py)."""
    if spool is None or not spool.is_dir():
        return []
    files = [*sorted(spool.glob("*.json")), *sorted((spool / "counters").glob("*.json"))]
    return [ev for ev in map(_load, files) if ev is not None]
