"""Checking crontab text the way Slurm's ``scrontab`` reads it (pure), for sites and tests without scrontab.

What scrontab(1) accepts (slurm.schedmd.com/scrontab.html; SchedMD/slurm src/scrontab/scrontab.c and
parse.c, which this follows):
- blank lines; comments starting with ``#``; ``#SCRON <sbatch options>`` lines, whose options apply to the
  single following entry only (they are reset between entries);
- entries ``<min> <hour> <day-of-month> <month> <day-of-week> <command>`` where a field is ``*`` or
  numbers, ranges and lists (``1-5,7``), optionally ``/step`` (step >= 2), month and day-of-week may be a
  three-letter name (``jan``, ``mon``); or ``@yearly|@annually|@monthly|@weekly|@daily|@midnight|@hourly``
  then the command. Slurm 22.05 has no variable-setting lines (later versions added them): we emit none.
Debian 12's slurm-client (22.05.8) does not ship the scrontab binary, so the integration test submits the
file only where one exists; this check is what always runs.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

AT_SPECS = ("yearly", "annually", "monthly", "weekly", "daily", "midnight", "hourly")
# (name, lowest, highest) per field; day-of-week 7 is Sunday too (parse.c folds it onto 0).
FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
# sbatch(1) options (long and short forms) that a #SCRON line may carry here. scrontab accepts "most"
# sbatch options; these are the ones a nightly entry needs.
SBATCH_LONG = frozenset(
    [
        "account",
        "chdir",
        "comment",
        "constraint",
        "cpus-per-task",
        "error",
        "exclude",
        "exclusive",
        "gpus",
        "gres",
        "job-name",
        "mail-type",
        "mail-user",
        "mem",
        "mem-per-cpu",
        "nice",
        "nodelist",
        "nodes",
        "ntasks",
        "output",
        "partition",
        "qos",
        "reservation",
        "time",
        "time-min",
        "wckey",
    ]
)
SBATCH_SHORT = frozenset(["A", "D", "C", "c", "e", "J", "N", "n", "o", "p", "q", "t", "w", "x"])


class CronError(ValueError):
    def __init__(self, message: str, line_no: int = 0) -> None:
        super().__init__(f"line {line_no}: {message}" if line_no else message)
        self.line_no = line_no


@dataclass(frozen=True)
class Entry:
    spec: str
    command: str
    options: tuple[str, ...]  # the #SCRON options that apply to it
    line_no: int


def _field(text: str, name: str, lo: int, hi: int) -> None:
    base, _, step = text.partition("/")
    if step and (not step.isdigit() or not 2 <= int(step) <= hi):
        raise CronError(f"{name}: bad step {step!r} (expected 2..{hi})")
    if base == "*":
        return
    names = MONTHS if name == "month" else DAYS if name == "day-of-week" else ()
    if base[:3].lower() in names and len(base) == 3:
        return
    if not re.fullmatch(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*", base):
        raise CronError(f"{name}: expected '*', numbers, ranges or lists, got {base!r}")
    for part in base.split(","):
        a, _, b = part.partition("-")
        first, last = int(a), int(b or a)
        if not lo <= first <= last <= hi:
            raise CronError(f"{name}: {part!r} is outside {lo}-{hi}")


def check_spec(spec: str) -> None:
    """Raise CronError unless ``spec`` is a time spec scrontab (and cron) accept."""
    words = spec.split()
    if len(words) == 1 and words[0].startswith("@"):
        if words[0][1:].lower() not in AT_SPECS:
            raise CronError(f"unknown {words[0]!r} (expected one of {', '.join('@' + s for s in AT_SPECS)})")
        return
    if len(words) != 5:
        raise CronError(f"expected 5 time fields or an @word, got {len(words)} fields in {spec!r}")
    for word, (name, lo, hi) in zip(words, FIELDS, strict=True):
        _field(word, name, lo, hi)


def split_entry(line: str) -> tuple[str, str]:
    """``"0 2 * * * cmd args"`` -> (spec, command)."""
    words = line.split(None, 1 if line.lstrip().startswith("@") else 5)
    n = 1 if words and words[0].startswith("@") else 5
    if len(words) <= n:
        raise CronError("an entry needs its time spec and then a command")
    return " ".join(words[:n]), words[n]


def check_options(options: list[str]) -> None:
    """The options of a #SCRON line, as sbatch options."""
    i = 0
    while i < len(options):
        opt = options[i]
        if opt.startswith("--"):
            name = opt[2:].split("=", 1)[0]
            if name not in SBATCH_LONG:
                raise CronError(
                    f"#SCRON: {opt!r} is not an sbatch option known here ({', '.join(sorted(SBATCH_LONG))})"
                )
            if "=" not in opt and name != "exclusive":
                i += 1  # "--time 10": the value is the next word
        elif opt.startswith("-") and len(opt) >= 2:
            if opt[1] not in SBATCH_SHORT:
                raise CronError(f"#SCRON: {opt!r} is not an sbatch option known here")
            if len(opt) == 2:
                i += 1
        else:
            raise CronError(f"#SCRON: expected an option, got {opt!r}")
        i += 1


def parse_scrontab(text: str) -> list[Entry]:
    """The entries of a scrontab file, each with its #SCRON options; CronError (with the line) otherwise."""
    entries: list[Entry] = []
    options: list[str] = []
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#SCRON"):
            try:
                words = shlex.split(stripped[6:])
                check_options(words)
            except (CronError, ValueError) as exc:
                raise CronError(str(exc), no) from None
            options += words
            continue
        if stripped.startswith("#"):
            continue
        try:
            spec, command = split_entry(stripped)
            check_spec(spec)
        except CronError as exc:
            raise CronError(str(exc), no) from None
        entries.append(Entry(spec, command, tuple(options), no))
        options = []
    if options:
        raise CronError("#SCRON options at the end of the file apply to no entry", len(text.splitlines()))
    return entries
