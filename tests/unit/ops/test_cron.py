"""The scrontab/crontab checker follows scrontab's parser (src/scrontab/parse.c, scrontab.c)."""

from __future__ import annotations

import pytest

from clusteraccept.site.cron import CronError, check_spec, parse_scrontab


@pytest.mark.parametrize(
    "spec",
    ["0 2 * * *", "*/15 * * * *", "30 1-5,22 1 jan mon", "0 0 * * 7", "@daily", "@Midnight", "@hourly"],
)
def test_accepted_specs(spec: str) -> None:
    check_spec(spec)


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("60 2 * * *", "minute: '60' is outside 0-59"),
        ("0 24 * * *", "hour"),
        ("0 2 0 * *", "day-of-month"),
        ("0 2 * 13 *", "month"),
        ("0 2 * * 8", "day-of-week"),
        ("*/1 * * * *", "bad step"),
        ("0 2 * *", "expected 5 time fields"),
        ("@nightly", "unknown '@nightly'"),
        ("0 2 * * x", "day-of-week: expected"),
    ],
)
def test_refused_specs(spec: str, why: str) -> None:
    with pytest.raises(CronError, match=why.replace("*", r"\*")):
        check_spec(spec)


def test_scron_options_belong_to_the_next_entry_only() -> None:
    text = (
        "# comment\n\n#SCRON --partition=service\n#SCRON -t 60 --job-name=a\n0 2 * * * run a\n"
        "@daily run b --with args\n"
    )
    a, b = parse_scrontab(text)
    assert (a.spec, a.command, a.options, a.line_no) == (
        "0 2 * * *",
        "run a",
        ("--partition=service", "-t", "60", "--job-name=a"),
        5,
    )
    assert (b.spec, b.command, b.options) == ("@daily", "run b --with args", ())


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("#SCRON --frobnicate=1\n0 2 * * * x\n", 1, "not an sbatch option"),
        ("0 2 * * *\n", 1, "needs its time spec and then a command"),
        ("0 2 * * * x\n#SCRON -p a\n", 2, "apply to no entry"),
        ("FOO=bar\n", 1, "time spec and then a command"),  # no variable lines in Slurm 22.05
    ],
)
def test_refused_files_name_the_line(text: str, line: int, why: str) -> None:
    with pytest.raises(CronError, match=why) as info:
        parse_scrontab(text)
    assert info.value.line_no == line
