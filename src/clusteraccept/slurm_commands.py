"""Slurm's own client commands beside submitit: ``sacct`` (a job's state) and ``scontrol`` (the blocks).

Every command goes through the process seam, ``runner.run``; submitit itself stays in submit.py.
"""

from __future__ import annotations

import os

from clusteraccept import runner
from clusteraccept.errors import ParseError, SubmitError
from clusteraccept.parsers import scontrol_topology
from clusteraccept.site import Site

# Slurm states after which a job will not produce more results (squeue/sacct JOB STATE CODES).
FINAL_STATES = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}


def sacct_state(job_id: str) -> str:
    """The allocation's own state (sacct -X: the job record, not its steps), e.g. TIMEOUT."""
    ev = runner.run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "State"], timeout_s=30, source="sacct")
    line = ev.stdout.strip().splitlines()[0] if ev.ok and ev.stdout.strip() else "UNKNOWN"
    return line.split()[0]  # "CANCELLED by 0" -> CANCELLED


def slurm_env() -> dict[str, str]:
    """Client environment for Slurm commands; SLURM_CONF must be set (else clients do DNS SRV look-ups)."""
    return {k: v for k, v in os.environ.items() if k == "SLURM_CONF"}


def slurm_blocks(site: Site) -> dict[str, tuple[str, ...]]:
    """The site's blocks as Slurm knows them (``blocks: slurm``): ``scontrol show topology`` (topology/tree
    leaf switches or topology/block blocks), restricted to the site's nodes; nodes in no block form "rest"."""
    ev = runner.run(["scontrol", "show", "topology"], timeout_s=30, source="scontrol-topology")
    if not ev.ok:
        why = (ev.stderr or "no output").strip()
        raise SubmitError(f"blocks: slurm needs `scontrol show topology`: {why}")
    try:
        topo = scontrol_topology.parse(ev.stdout)
    except ParseError as exc:
        raise SubmitError(f"scontrol show topology: {exc}") from None
    wanted = set(site.nodes)
    blocks = {name: tuple(n for n in nodes if n in wanted) for name, nodes in topo.blocks.items()}
    blocks = {name: nodes for name, nodes in blocks.items() if nodes}
    placed = {n for nodes in blocks.values() for n in nodes}
    rest = tuple(n for n in site.nodes if n not in placed)
    if rest:
        blocks["rest"] = rest
    return blocks
