"""``rdma link show`` parser: real fixture, old/new/-d/JSON layouts, errors with line numbers, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers import cli as parse_cli
from clusteraccept.parsers import rdma_link
from clusteraccept.parsers._ib import IbPort

DATA = Path(__file__).resolve().parents[2] / "data" / "rdma-link"
RHELAI = (DATA / "rdma-link-rhelai-h100-roce-6ports.txt").read_text()


def test_real_rhelai_six_ports() -> None:
    r = rdma_link.parse(RHELAI)
    assert [(p.device, p.state, p.phys_state, p.netdev) for p in r.ports] == [
        ("mlx5_0", "DOWN", "DISABLED", "eno2np0"),
        ("mlx5_1", "DOWN", "DISABLED", "eno3np1"),
        ("mlx5_2", "ACTIVE", "LINK_UP", "eno6np0"),
        ("mlx5_3", "ACTIVE", "LINK_UP", "eno5np0"),
        ("mlx5_4", "ACTIVE", "LINK_UP", "eno8np0"),
        ("mlx5_5", "ACTIVE", "LINK_UP", "eno7np0"),
    ]
    assert r.port("mlx5_5") == IbPort(
        device="mlx5_5", port=1, state="ACTIVE", phys_state="LINK_UP", netdev="eno7np0"
    )
    assert r.device_of("eno7np0") == ("mlx5_5", 1) and r.device_of("ib0") is None
    assert [p.is_up() for p in r.ports] == [False, False, True, True, True, True]
    assert all(p.rate_Gbps is None and p.link_layer is None for p in r.ports)  # not printed by `rdma link`


# iproute2 rdma/link.c: IB ports print subnet_prefix/lid/sm_lid/lmc; before commit b0a688a5 (2019) the
# line began "IDX/PORT: DEV/PORT: "; -d adds netdev_index and a "    caps: <...>" continuation line.
IB_DETAILS = (
    "link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state ACTIVE"
    " physical_state LINK_UP netdev ib0 netdev_index 4 \n    caps: <SM, CM, IP_BASED_GIDS>\n"
)


def test_ib_port_with_details() -> None:
    (p,) = rdma_link.parse(IB_DETAILS).ports
    assert (p.device, p.port, p.lid, p.sm_lid, p.netdev, p.state) == ("mlx5_0", 1, 13, 1, "ib0", "ACTIVE")


def test_old_layout_and_noise() -> None:
    text = "$ rdma link show\n1/1: mlx5_0/1: state ACTIVE physical_state LINK_UP netdev ens1f0 \n$\n"
    (p,) = rdma_link.parse(text).ports
    assert (p.device, p.port, p.state, p.netdev) == ("mlx5_0", 1, "ACTIVE", "ens1f0")


def test_iproute2_phys_state_names_are_normalised() -> None:
    # phys_state_str prints "ARMED" for 4 (PortConfigurationTraining) and "LINK_ERROR_RECOVER".
    text = (
        "link a/1 state INIT physical_state ARMED \nlink b/1 state DOWN physical_state LINK_ERROR_RECOVER \n"
    )
    assert [p.phys_state for p in rdma_link.parse(text).ports] == [
        "PORT_CONFIGURATION_TRAINING",
        "LINK_ERROR_RECOVERY",
    ]


def test_json_form() -> None:
    text = json.dumps(
        [
            {
                "ifindex": 0,
                "ifname": "mlx5_0",
                "port": 1,
                "state": "ACTIVE",
                "physical_state": "LINK_UP",
                "netdev": "ib0",
                "netdev_index": 4,
                "lid": 13,
                "sm_lid": 1,
            },
            {"ifindex": 1, "ifname": "mlx5_1", "port": 1, "state": "DOWN", "physical_state": "DISABLED"},
        ]
    )
    a, b = rdma_link.parse(text).ports
    assert (a.netdev, a.lid, b.state, b.netdev) == ("ib0", 13, "DOWN", None)


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_cli.main(["rdma-link", str(DATA / "rdma-link-rhelai-h100-roce-6ports.txt")]) == 0
    assert json.loads(capsys.readouterr().out)["ports"][5]["netdev"] == "eno7np0"


def test_errors_name_their_line() -> None:
    first = RHELAI.splitlines()[0] + "\n"
    for text, line_no in [
        (first + "link mlx5_1/1 state\n", 2),
        (first + "link mlx5_1/1 state ACTIVE physical_state WOBBLY netdev x \n", 2),
        (first + "link mlx5_1/1 state HAPPY physical_state LINK_UP \n", 2),
        (first + "link mlx5_1/1 netdev eth0 \n", 2),
        (first + "link mlx5_1 state ACTIVE\n", 2),
        (first + first, 2),
        ("link mlx5_0/1 state ACTIVE physical_state LINK_UP lid x \n", 1),
        ('[{"ifname": "mlx5_0"}]', 1),
        ("[1, 2", 1),
        ("[" * 100000, 1),
    ]:
        assert_parse_error_at(rdma_link.parse, text, line_no)


def test_garbage_and_empty() -> None:
    for text in ["", 'Unknown object "lnk"\n']:
        assert_parse_error_at(rdma_link.parse, text, 0)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(rdma_link.parse, text)


@FUZZ
@given(st.text(alphabet='link mlx5_0/1 state ACTIVE physical_state LINK_UP[]{}":,\n', max_size=80))
def test_fuzz_near_miss(text: str) -> None:
    parses_or_parse_error(rdma_link.parse, text)
    parses_or_parse_error(rdma_link.parse, "[" + text)


@FUZZ
@given(
    truncations([RHELAI, IB_DETAILS]),
    mutations([RHELAI, IB_DETAILS], max_cut=30, insert=st.text(max_size=20)),
)
def test_fuzz_truncations_and_mutations(truncated: str, mutated: str) -> None:
    parses_or_parse_error(rdma_link.parse, truncated, mutated)
