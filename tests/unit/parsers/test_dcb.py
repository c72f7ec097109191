"""dcb pfc / dcb app parser on the iproute2 man-page examples and a source-rendered file
(tests/data/dcb-pfc/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept import parsers
from clusteraccept.parsers.dcb import parse

DATA = Path(__file__).parents[2] / "data" / "dcb-pfc"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_registered_as_dcb_pfc() -> None:
    assert parsers.get("dcb-pfc") is parse


def test_man_pfc_example() -> None:
    d = parse(load("man-dcb-pfc8-example.txt"))
    assert (d.pfc_cap, d.macsec_bypass, d.pfc_delay) == (8, False, 4096)
    assert d.pfc_enabled == (False,) * 6 + (True, True) and d.pfc_priorities() == (6, 7)
    assert d.pfc_requests is None and d.dscp_prio == () and d.default_prio == ()


def test_man_app_examples_names_and_numeric_agree() -> None:
    named = parse(load("man-dcb-app8-example-dscp-names.txt"))
    numeric = parse(load("man-dcb-app8-example-dscp-numeric.txt"))
    assert named.dscp_prio == numeric.dscp_prio == ((0, 0), (24, 2), (24, 3), (48, 6))
    assert named.prios_for_dscp(24) == (2, 3) and named.prios_for_dscp(26) == ()
    assert named.pfc_enabled is None and named.pfc_priorities() == ()
    assert parse(load("man-dcb-app8-example-pcp.txt")).pcp_prio == (("1nd", 1), ("2de", 2))


def test_synthetic_pfc_stats_and_app_table() -> None:
    d = parse(load("synthetic-pfc-stats-and-app-table.txt"))
    assert d.pfc_priorities() == (3,) and d.pfc_delay == 7
    assert d.pfc_requests == (0, 0, 0, 1290418, 0, 0, 0, 0)
    assert d.pfc_indications == (0, 0, 0, 41927, 0, 0, 0, 0)
    assert d.default_prio == (0,) and d.dscp_prio == ((26, 3), (48, 6)) and d.prios_for_dscp(26) == (3,)
    assert d.ethtype_prio == ((0x8906, 3),) and d.dgram_port_prio == ((4791, 3),)
    assert d.stream_port_prio == () and d.port_prio == ()


def test_both_outputs_concatenated_with_prompt_noise_and_one_line_mix() -> None:
    text = (
        "$ dcb pfc show dev ens1f0np0\n"
        + load("man-dcb-pfc8-example.txt")
        + load("man-dcb-app8-example-dscp-numeric.txt")
    )
    d = parse(text)
    assert d.pfc_priorities() == (6, 7) and d.prios_for_dscp(48) == (6,)
    # keywords given to "show" come one per line; any grouping of keyword + values is accepted
    one = parse("pfc-cap 8 prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off delay 0\n")
    assert (one.pfc_cap, one.pfc_delay, one.pfc_priorities()) == (8, 0, (3,))
    split = parse("pfc-cap 8 \nmacsec-bypass on \ndelay 0 \n")
    assert split.macsec_bypass is True


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("hello\nworld\n", 0),
        ("prio-pfc 0:off 1:off 2:off 3:on\n", 1),  # truncated array
        ("prio-pfc 0:off 1:off 2:off 3:maybe 4:off 5:off 6:off 7:off\n", 1),
        ("pfc-cap 8 macsec-bypass off delay\n", 1),
        ("pfc-cap eight\n", 1),
        ("pfc-cap 8\nunexpected line\n", 2),
        ("dscp-prio 26:9\n", 1),
        ("dscp-prio FOO:3\n", 1),  # a site-specific rt_dsfield name: needs dcb -N
        ("dscp-prio 64:3\n", 1),
        ("dscp-prio 26\n", 1),
        ("default-prio\n", 1),
        ("ethtype-prio zz:3\n", 1),
        ("pcp-prio 9xx:1\n", 1),
        ("pfc-cap 8\nrequests 0:1 1:2 2:3 3:4 4:5 5:6 6:7 7:-8\n", 2),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(
    st.lists(st.sampled_from(["pfc-cap", "delay", "prio-pfc", "dscp-prio", "0:on", "CS3:3", "7", "x:", ":"]))
)
def test_fuzz_keyword_soup(tokens: list[str]) -> None:
    parses_or_parse_error(parse, " ".join(tokens))


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
