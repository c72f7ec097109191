"""show_gids parser on a real TAB-separated output (tests/data/show_gids/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.show_gids import GidEntry, parse

DATA = Path(__file__).parents[2] / "data" / "show_gids"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]
HEADER = (
    "DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n"
    "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n"
)


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_real_bond_tabs() -> None:
    g = parse(load("mlx5_bond_0-roce-ipv4-tabs.txt"))
    assert g.n_gids_found == 4 and len(g.entries) == 4
    assert g.entries[0] == GidEntry(
        "mlx5_bond_0", 1, 0, "fe80:0000:0000:0000:0e42:a1ff:fead:479a", None, "v1", "bond0"
    )
    assert g.entries[3] == GidEntry(
        "mlx5_bond_0", 1, 3, "0000:0000:0000:0000:0000:ffff:0a60:531a", "10.96.83.26", "v2", "bond0"
    )
    assert [e.roce_version for e in g.entries] == ["v1", "v2", "v1", "v2"]
    assert g.rocev2_ipv4_index("mlx5_bond_0", 1) == 3
    assert g.rocev2_ipv4_index("mlx5_bond_0", 2) is None and g.rocev2_ipv4_index("mlx5_0", 1) is None


def test_rocev2_ipv4_index_is_not_always_3_and_spaces_parse() -> None:
    # Two ports, a VLAN netdev, an IPv6 GID and a GID without type/ndev, pasted with spaces instead of tabs.
    text = (
        "DEV     PORT    INDEX   GID                                     IPv4            VER     DEV\n"
        "---     ----    -----   ---                                     ------------    ---     ---\n"
        "mlx5_0  1       0       fe80:0000:0000:0000:ba3f:d2ff:fe1c:0a10                 v1      ens1f0np0\n"
        "mlx5_0  1       1       fe80:0000:0000:0000:ba3f:d2ff:fe1c:0a10                 v2      ens1f0np0\n"
        "mlx5_0  1       2       fd00:0000:0000:0001:0000:0000:0000:0010                 v1      ens1f0np0\n"
        "mlx5_0  1       3       fd00:0000:0000:0001:0000:0000:0000:0010                 v2      ens1f0np0\n"
        "mlx5_0  1       4       0000:0000:0000:0000:0000:ffff:c0a8:0a05 192.168.10.5 v1      ens1f0np0.100\n"
        "mlx5_0  1       5       0000:0000:0000:0000:0000:ffff:c0a8:0a05 192.168.10.5 v2      ens1f0np0.100\n"
        "mlx5_1  1       0       FE80:0000:0000:0000:BA3F:D2FF:FE1C:0A11\n"
        "n_gids_found=7\n"
    )
    g = parse(text)
    assert g.rocev2_ipv4_index("mlx5_0", 1) == 5
    assert g.for_port("mlx5_0", 1)[5].netdev == "ens1f0np0.100"
    assert g.entries[-1] == GidEntry(
        "mlx5_1", 1, 0, "fe80:0000:0000:0000:ba3f:d2ff:fe1c:0a11", None, None, None
    )


def test_noise_before_header_and_after_trailer() -> None:
    text = "$ show_gids\n" + load("mlx5_bond_0-roce-ipv4-tabs.txt") + "$ echo done\n"
    assert parse(text).n_gids_found == 4


def test_empty_table() -> None:
    g = parse(HEADER + "n_gids_found=0\n")
    assert g.entries == () and g.rocev2_ipv4_index("mlx5_0", 1) is None


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("nothing\n", 0),
        (HEADER + "mlx5_0\t1\t0\tfe80::1\t\t\tv2\teth0\n", 3),
        (HEADER + "mlx5_0\tone\t0\tfe80:0000:0000:0000:0000:0000:0000:0001\t\t\tv2\teth0\n", 3),
        (HEADER + "mlx5_0\t1\t2\t0000:0000:0000:0000:0000:ffff:0a60:531a\t10.96.83.999  \tv2\tbond0\n", 3),
        (HEADER + "mlx5_0\t1\t0\tfe80:0000:0000:0000:0000:0000:0000:0001\t\t\tv2\teth0\textra\n", 3),
        (HEADER + "mlx5_0\t1\t0\tfe80:0000:0000:0000:0000:0000:0000:0001\t\t\tv2\teth0\n", 3),  # no trailer
        (HEADER + "mlx5_0\t1\t0\tfe80:0000:0000:0000:0000:0000:0000:0001\t\t\tv2\teth0\nn_gids_found=2\n", 4),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, HEADER + text)
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
