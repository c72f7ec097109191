"""ethtool -S parser and delta on a real mlx5 listing and a synthetic PFC pair
(tests/data/ethtool-stats/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept import parsers
from clusteraccept.parsers.ethtool_stats import EthtoolStats, delta, parse

DATA = Path(__file__).parents[2] / "data" / "ethtool-stats"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_registered_as_ethtool_stats() -> None:
    assert parsers.get("ethtool-stats") is parse


def test_real_mlx5_listing_without_header() -> None:
    s = parse(load("mlx5_core-cx4-kernel4.15-ethq.txt"))
    assert len(s.counters) == 751
    assert s.get("rx_packets") == 845320277 and s.get("tx_bytes_phy") == 2662454044895
    assert s.rx_discards_phy == 0 and s.rx_out_of_buffer == 0
    assert s.rx_prio_packets(0) == 845715962 and s.tx_prio_packets(0) == 896117891
    assert s.rx_prio_packets(3) == 0
    # PFC is off on this host: mlx5 prints no per-priority pause counters, and no ECN/CNP counters here
    assert s.pause_priorities() == () and s.rx_prio_pause(3) is None and s.tx_prio_pause(3) is None
    assert s.rx_ecn_mark is None and s.np_cnp_sent is None and s.rp_cnp_handled is None
    assert s.get("tx_pci_signal_integrity") == 34
    assert s.drop_counters()["rx_out_of_buffer"] == 0 and "tx_queue_dropped" in s.drop_counters()


def test_synthetic_pfc_pair_delta() -> None:
    before = parse(load("synthetic-mlx5-pfc-prio3-before.txt"))
    after = parse(load("synthetic-mlx5-pfc-prio3-after.txt"))
    assert after.pause_priorities() == (3,) and after.rx_prio_pause(3) == 41932
    d = delta(before, after)
    assert d.rx_prio_pause(3) == 41927 and d.tx_prio_pause(3) == 1290418
    assert d.rx_prio_discards(3) == 2 and d.rx_discards_phy == 2 and d.rx_out_of_buffer == 0
    assert d.rx_ecn_mark == 4311 and d.get("tx_prio3_pause_duration") == 2914772
    assert d.rx_prio_pause(0) is None and d.went_backwards == () and d.only_before == () == d.only_after


def test_delta_reset_and_new_counters() -> None:
    before = EthtoolStats({"rx_packets": 100, "rx_discards_phy": 5})
    after = parse("NIC statistics:\n     rx_packets: 40\n     rx_discards_phy: 9\n     rx_prio3_pause: 3\n")
    d = delta(before, after)
    assert d.counters == {"rx_discards_phy": 4}
    assert d.went_backwards == ("rx_packets",) and d.only_after == ("rx_prio3_pause",)
    assert d.rx_prio_pause(3) is None  # appeared between the snapshots: no baseline, no delta


def test_names_with_colons_and_noise_before_header() -> None:
    text = "$ ethtool -S eth0\nNIC statistics:\n     [0]: rx_bytes: 209487403324\n     rxq0: rx_pkts: 3\n"
    s = parse(text)
    assert s.counters == {"[0]: rx_bytes": 209487403324, "rxq0: rx_pkts": 3}


def test_rdma_congestion_counters_if_merged() -> None:
    s = parse("np_cnp_sent: 12884\nrp_cnp_handled: 12701\nrx_ecn_mark: 441882\n")
    assert (s.np_cnp_sent, s.rp_cnp_handled, s.rx_ecn_mark) == (12884, 12701, 441882)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("NIC statistics:\n", 0),
        ("NIC statistics:\n     rx_packets: 1\n     rx_prio3_pa", 3),  # truncated mid-line
        ("NIC statistics:\n     rx_packets: -1\n", 2),
        ("NIC statistics:\n     rx_packets: 1\n     rx_packets: 2\n", 3),
        ("NIC statistics:\n     rx_packets: 18446744073709551616\n", 2),
        ("random words\n", 1),
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
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 2**64 - 1)),
    st.dictionaries(st.text(min_size=1, max_size=8), st.integers(0, 2**64 - 1)),
)
def test_fuzz_delta_is_total(before: dict[str, int], after: dict[str, int]) -> None:
    d = delta(EthtoolStats(before), EthtoolStats(after))
    assert all(v >= 0 for v in d.counters.values())
    assert set(d.counters) | set(d.went_backwards) == set(before) & set(after)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
