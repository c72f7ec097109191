"""mlnx_qos parser on real and source-rendered outputs (tests/data/mlnx_qos/SOURCES.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.mlnx_qos import TrafficClass, parse

DATA = Path(__file__).parents[2] / "data" / "mlnx_qos"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]
IDENTITY_DSCP = tuple(d // 8 for d in range(64))  # the default "prio:N dscp:8N+7..8N" table


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_ofed4_no_buffer_row() -> None:
    q = parse(load("cx5-eth4-dscp-pfc3-ofed4-no-buffer-row.txt"))
    assert (q.dcbx_mode, q.trust, q.cable_len_m) == ("os", "dscp", 7)
    assert q.dscp2prio == IDENTITY_DSCP and q.prio_for_dscp(26) == 3
    assert q.dscps_for_prio(3) == tuple(range(24, 32))
    assert q.pfc_priorities() == (3,) and q.pfc_buffer is None and q.receive_buffer_size_B is None
    assert q.max_buffer_size_B is None and q.total_size_B is None and q.default_priority == ()
    assert q.traffic_classes[0] == TrafficClass(0, None, "vendor", None, (1,))
    assert q.traffic_classes[1] == TrafficClass(1, None, "vendor", None, (0,))
    assert [t.tc for t in q.traffic_classes] == list(range(8))
    assert q.tc_for_prio(3) == 3 and q.tc_for_prio(0) == 1 and q.notices == ()


def test_newer_pcp_with_max_buffer_size_and_buffer_row() -> None:
    q = parse(
        load("mlnx-tools-b8c08c5-pcp-max_buffer_size-buffer-row.txt")
    )  # "$mlnx_qos -i eth2" noise first
    assert q.trust == "pcp" and q.dscp2prio == (None,) * 64 and q.prio_for_dscp(26) is None
    assert q.default_priority == ()  # "default priority:" printed with no entry
    assert q.receive_buffer_size_B == (0, 187200, 0, 0, 0, 0, 0, 0)
    assert q.max_buffer_size_B == 2044224 and q.total_size_B is None
    assert q.pfc_enabled == (False,) * 8 and q.pfc_priorities() == ()
    assert q.pfc_buffer == (1,) * 8
    assert len(q.traffic_classes) == 8 and all(t.tsa == "vendor" for t in q.traffic_classes)


def test_newer_dscp_buffer_row_and_unsorted_tcs() -> None:
    q = parse(load("mlnx-tools-d477a17-dscp-rxbuf-buffer-row-tc-unsorted.txt"))
    assert q.dscp2prio == IDENTITY_DSCP
    assert q.receive_buffer_size_B == (32768, 229120, 0, 0, 0, 0, 0, 0) and q.max_buffer_size_B is None
    assert q.pfc_priorities() == (1, 2, 3, 4, 5)
    assert q.pfc_buffer == (0, 1, 1, 1, 1, 1, 0, 0)
    assert [t.tc for t in q.traffic_classes] == [1, 0, 2, 3, 4, 5, 6, 7]  # printed unsorted (python3 bug)
    assert q.tc_for_prio(0) == 1 and q.tc_for_prio(1) == 0


def test_community_doc_ets_and_strict_with_collapsed_whitespace() -> None:
    q = parse(load("mellanox-community-doc2792-ofed4.2-ets-strict.txt"))
    assert q.cable_len_m == 10 and q.pfc_priorities() == (0, 2, 6, 7)
    tcs = {t.tc: t for t in q.traffic_classes}
    assert tcs[0] == TrafficClass(0, None, "ets", 10, (1,))
    assert tcs[6] == TrafficClass(6, None, "strict", None, (6,))
    assert tcs[7].bw_pct == 40 and sum(t.bw_pct or 0 for t in q.traffic_classes) == 100


def test_synthetic_2023_wrapped_dscp_default_prio_total_size_ratelimit() -> None:
    q = parse(load("synthetic-2023-dscp-wrapped-defaultprio-total_size-ets-ratelimit.txt"))
    assert q.dcbx_mode == "firmware"
    assert q.prio_for_dscp(26) == 3 and q.prio_for_dscp(48) == 6 and q.prio_for_dscp(63) == 0
    assert q.dscps_for_prio(3) == (26,) and len(q.dscps_for_prio(0)) == 62
    assert q.default_priority == (0,)
    assert q.receive_buffer_size_B == (130944, 130944, 0, 0, 0, 0, 0, 0) and q.total_size_B == 262016
    assert q.pfc_priorities() == (3,) and q.pfc_buffer == (0, 0, 0, 1, 0, 0, 0, 0)
    assert q.traffic_classes == (
        TrafficClass(0, 25.0, "ets", 50, (0, 1, 2, 4, 5, 7)),
        TrafficClass(3, None, "ets", 50, (3,)),
        TrafficClass(6, None, "strict", None, (6,)),
    )


def test_synthetic_unsupported_features_bare_tsa_lines() -> None:
    q = parse(load("synthetic-no-ratelimit-no-trust-no-buffers-bare-tsa.txt"))
    assert q.trust == "none" and len(q.notices) == 3
    assert q.notices[0] == "Rate limit is not supported on your system!"
    assert [t.priorities for t in q.traffic_classes] == [(1,), (0,), (2,), (3,), (4,), (5,), (6,), (7,)]
    assert all(t.tc is None and t.tsa == "vendor" for t in q.traffic_classes)
    assert q.tc_for_prio(3) is None


def test_synthetic_2017_trust_mode_without_dcbx_line() -> None:
    q = parse(load("synthetic-2017-5c00758-trust-mode-no-dcbx.txt"))
    assert q.dcbx_mode is None and q.trust == "both" and q.cable_len_m is None
    assert q.pfc_priorities() == (3,) and q.tc_for_prio(0) == 1 and len(q.traffic_classes) == 8
    first = parse(PFC + "\tenabled     1 0 0 0 0 0 0 0\n")  # the June 2017 layout starts here
    assert first.trust is None and first.pfc_priorities() == (0,) and first.traffic_classes == ()


def test_trailing_noise_after_tc_blocks_is_ignored() -> None:
    text = load("cx5-eth4-dscp-pfc3-ofed4-no-buffer-row.txt") + "+ sudo sh -c ' echo 106 > x'\n106\n"
    assert parse(text).pfc_priorities() == (3,)


def test_cli_prints_json() -> None:
    path = DATA / "mlnx-tools-b8c08c5-pcp-max_buffer_size-buffer-row.txt"
    out = subprocess.run(
        [sys.executable, "-m", "clusteraccept.parsers", "mlnx_qos", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    data = json.loads(out)
    assert data["max_buffer_size_B"] == 2044224 and data["pfc_buffer"] == [1] * 8


PFC = "PFC configuration:\n\tpriority    0   1   2   3   4   5   6   7\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("no mlnx_qos here\n", 0),
        ("DCBX mode: sometimes\n", 1),
        ("DCBX mode: OS controlled\nPriority trust state: maybe\n", 2),
        ("DCBX mode: OS controlled\n" + PFC, 3),  # no enabled row: truncated
        ("DCBX mode: OS controlled\n" + PFC + "\tenabled     0 0 0 1 0 0 0\n", 4),
        ("DCBX mode: OS controlled\n" + PFC + "\tenabled     0 0 0 2 0 0 0 0\n", 4),
        ("DCBX mode: OS controlled\nCable len: x\n", 2),
        ("DCBX mode: OS controlled\nPriority trust state: dscp\ndscp2prio mapping:\n\tprio:0 dscp:64,\n", 4),
        ("DCBX mode: OS controlled\nReceive buffer size (bytes): 1,2,3,\n", 2),
        ("DCBX mode: OS controlled\nsomething else\n", 2),
        (
            "DCBX mode: OS controlled\n" + PFC + "\tenabled     0 0 0 1 0 0 0 0\ntc: 0 ratelimit: unlimited, "
            "tsa: ets, bw: 150%\n",
            5,
        ),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
