"""``/proc/<pid>/limits``: a process's resource limits (what ``ulimit`` sets), as the kernel prints them.

fs/proc/base.c proc_pid_limits(): a header, then one line per limit, its name, soft and hard limit (a
number or ``unlimited``) and, for most, its unit (tests/data/proc-limits/)::

    Limit                     Soft Limit           Hard Limit           Units
    Max locked memory         8388608              8388608              bytes

Read in a job, it is the job's own limits: Slurm's tasks inherit them from slurmd or, with
PropagateResourceLimits (slurm.conf), from the submitting shell. Refused: no header, a line that is not
a limit, a limit that is neither a number nor ``unlimited``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_HEADER = re.compile(r"Limit\s+Soft Limit\s+Hard Limit\s+Units\s*")
_LINE = re.compile(
    r"(?P<name>Max [a-z ]+?)\s+(?P<soft>unlimited|\d+)\s+(?P<hard>unlimited|\d+)(?:\s+(?P<unit>\S+))?\s*"
)


@dataclass(frozen=True)
class Limit:
    name: str  # "Max locked memory"
    soft: int | None  # None: unlimited
    hard: int | None
    unit: str | None  # "bytes", "seconds", ... (None where the kernel prints none)


@dataclass(frozen=True)
class Limits:
    limits: tuple[Limit, ...]

    def get(self, name: str) -> Limit | None:
        return next((lim for lim in self.limits if lim.name == name), None)


def _value(raw: str) -> int | None:
    return None if raw == "unlimited" else int(raw)


def parse(text: str) -> Limits:
    lines = [(no, ln) for no, ln in enumerate(text.splitlines(), start=1) if ln.strip()]
    if not lines or not _HEADER.fullmatch(lines[0][1]):
        no, got = lines[0] if lines else (0, "")
        raise ParseError(no, "the header 'Limit  Soft Limit  Hard Limit  Units'", got[:80])
    out = []
    for no, ln in lines[1:]:
        m = _LINE.fullmatch(ln)
        if m is None:
            raise ParseError(no, "'Max <limit>  <soft>  <hard>  <units>' (numbers or unlimited)", ln[:80])
        out.append(Limit(m["name"], _value(m["soft"]), _value(m["hard"]), m["unit"]))
    return Limits(tuple(out))
