"""/proc/<pid>/limits parser on a real capture (tests/data/proc-limits/)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given

from clusteraccept.parsers import get
from clusteraccept.parsers.proc_limits import parse

DATA = Path(__file__).parents[2] / "data" / "proc-limits"
ALL = sorted(DATA.glob("*.txt"))
TEXT = (DATA / "debian12-root-shell-memlock-8MiB.txt").read_text()


def test_the_real_limits_read_as_printed() -> None:
    lim = get("proc-limits")(TEXT)
    lock = lim.get("Max locked memory")
    assert lock is not None and lock.unit == "bytes" and lock.soft == lock.hard and lock.soft > 0
    cpu = lim.get("Max cpu time")
    assert cpu is not None and (cpu.soft, cpu.hard, cpu.unit) == (None, None, "seconds")
    assert len(lim.limits) == 16  # every limit the kernel lists (fs/proc/base.c lnames[])


def test_unlimited_memlock_and_damaged_lines() -> None:
    text = TEXT.replace(
        next(ln for ln in TEXT.splitlines() if ln.startswith("Max locked memory")),
        "Max locked memory         unlimited            unlimited            bytes     ",
    )
    lock = parse(text).get("Max locked memory")
    assert lock is not None and lock.soft is None and lock.hard is None
    lines = TEXT.splitlines()
    assert_parse_error_at(parse, "\n".join([*lines[:3], "Max locked memory  lots  bytes", *lines[3:]]), 4)
    assert_parse_error_at(parse, "\n".join(lines[1:]), 1)  # no header
    assert_parse_error_at(parse, "", 0)


@FUZZ
@given(truncations([p.read_text() for p in ALL]))
def test_truncations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(mutations([p.read_text() for p in ALL]))
def test_mutations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)
