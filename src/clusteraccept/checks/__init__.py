"""Judges per check family: archived evidence -> parsed facts -> Verdicts. Pure (no I/O but reading the
evidence objects handed in)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from clusteraccept.evidence import Evidence
from clusteraccept.families import JUDGED
from clusteraccept.judge.verdicts import Verdict
from clusteraccept.parsers.stored import Stored
from clusteraccept.site.model import Site

# (Evidence, its archived path relative to the run dir)
Archived = tuple[Evidence, str]


def judge(
    family: str, site: Site, evidence: Sequence[Archived], nodes: Sequence[str], **stored: Stored
) -> list[Verdict]:
    """Verdicts of ``family`` over ``nodes`` from their archived evidence (nccl: and ``stored=``, its steps'
    stored parses, parsers/stored.py)."""
    if family not in JUDGED:
        raise ValueError(f"unknown check family {family!r}; known: {', '.join(JUDGED)}")
    module = importlib.import_module(f"clusteraccept.checks.{family}")
    verdicts: list[Verdict] = module.judge(site, evidence, nodes, **stored)
    return verdicts
