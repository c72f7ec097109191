"""ibv_devinfo parser: MLNX_OFED and rdma-core layouts, -v, errors with line numbers, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers import cli as parse_cli
from clusteraccept.parsers import ibv_devinfo

DATA = Path(__file__).resolve().parents[2] / "data" / "ibv_devinfo"
MLX4 = (DATA / "mlx4-cx3-2hca-2port-ib-tabs-device-ports.txt").read_text()
BOND = (DATA / "mlx5-bond-cx6dx-roce-rdmacore-vv-tabs.txt").read_text()
CX4 = (DATA / "mlx5-cx4lx-eth-mlnxofed-v-spaces-device-ports.txt").read_text()


def test_mlnx_ofed_tabs_two_hcas() -> None:
    r = ibv_devinfo.parse(MLX4)
    assert [d.hca_id for d in r.devices] == ["mlx4_1", "mlx4_0"]
    d = r.devices[0]
    assert (d.transport, d.fw_version, d.vendor_id, d.vendor_part_id) == (
        "InfiniBand",
        "2.42.5000",
        0x02C9,
        4099,
    )
    assert (d.node_guid, d.sys_image_guid) == ("0x7cfe900300a595c0", "0x7cfe900300a595c3")
    assert (d.board_id, d.hw_ver, d.phys_port_cnt) == ("MT_1090120019", "0x1", 2)
    p1, p2 = d.ports
    assert (p1.port, p1.state, p1.link_layer, p1.lid, p1.sm_lid, p1.active_mtu_B) == (
        1,
        "ACTIVE",
        "InfiniBand",
        22,
        1,
        4096,
    )
    assert (p2.port, p2.state, p2.lid) == (2, "DOWN", 0)
    assert p1.rate_Gbps is None and p1.phys_state is None  # only printed with -v
    assert p1.fw_version == "2.42.5000"
    other = r.port("mlx4_0", 1)
    assert other is not None and (other.lid, other.sm_lid) == (32, 18)
    assert len(r.ports()) == 4


def test_rdma_core_verbose_layout() -> None:
    r = ibv_devinfo.parse(BOND)
    (d,) = r.devices
    assert (d.hca_id, d.fw_version, d.vendor_part_id, d.board_id) == (
        "mlx5_bond_0",
        "22.36.1010",
        4125,
        "MT_0000000359",
    )
    (p,) = d.ports
    assert (p.state, p.phys_state, p.link_layer, p.rate_Gbps, p.active_mtu_B) == (
        "ACTIVE",
        "LINK_UP",
        "Ethernet",
        100.0,
        4096,
    )
    assert p.is_up()


def test_mlnx_ofed_verbose_spaces() -> None:
    r = ibv_devinfo.parse(CX4)
    (d,) = r.devices
    assert (d.hca_id, d.fw_version, d.vendor_part_id, d.node_guid) == (
        "mlx5_0",
        "14.27.1016",
        4117,
        "0x08c0eb0300408f1a",
    )
    (p,) = d.ports
    assert (p.state, p.phys_state, p.link_layer, p.rate_Gbps, p.active_mtu_B) == (
        "DOWN",
        "DISABLED",
        "Ethernet",
        40.0,
        1024,
    )


def test_effective_speed_wins_and_noise_around() -> None:
    # devinfo.c (rdma-core 691953d8): "effective_speed:\t%.1f Gbps" when ibv_query_port_speed succeeds.
    text = BOND.replace("\t\t\tphys_state:", "\t\t\teffective_speed:\t400.0 Gbps\n\t\t\tphys_state:")
    r = ibv_devinfo.parse("$ ibv_devinfo -v\n" + text + "\n$ \n")
    assert r.ports()[0].rate_Gbps == 400.0


def test_device_ports_header_is_optional() -> None:
    assert ibv_devinfo.parse(MLX4.replace("\tDevice ports:\n", "")) == ibv_devinfo.parse(MLX4)


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_cli.main(["ibv_devinfo", str(DATA / "mlx4-cx3-2hca-2port-ib-tabs-device-ports.txt")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["devices"][1]["hca_id"] == "mlx4_0"


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    return [i for i, line in enumerate(text.splitlines(), start=1) if needle in line][nth]


def test_truncated_port_block() -> None:
    cut = MLX4[: MLX4.index("\t\t\tport_lmc", MLX4.index("hca_id:\tmlx4_0"))]
    assert_parse_error_at(ibv_devinfo.parse, cut, _line_of(MLX4, "port:\t1", 1))


def test_truncated_before_ports() -> None:
    cut = MLX4[: MLX4.index("\tDevice ports:", MLX4.index("hca_id:\tmlx4_0"))]
    assert_parse_error_at(ibv_devinfo.parse, cut, _line_of(MLX4, "hca_id:\tmlx4_0"))


def test_bad_values_name_their_line() -> None:
    for old, new, needle in [
        ("PORT_ACTIVE (4)", "PORT_SLEEPY (9)", "PORT_SLEEPY"),
        ("PORT_ACTIVE (4)", "PORT_ACTIVE", "state:\t\t\tPORT_ACTIVE"),
        ("link_layer:\t\tInfiniBand", "link_layer:\t\tFDDI", "FDDI"),
        ("active_mtu:\t\t4096 (5)", "active_mtu:\t\tbig (5)", "big (5)"),
        ("node_guid:\t\t\t7cfe:9003:00a5:95c0", "node_guid:\t\t\tnope", "nope"),
    ]:
        bad = MLX4.replace(old, new, 1)
        assert_parse_error_at(ibv_devinfo.parse, bad, _line_of(bad, needle))


def test_garbage_in_a_port_block() -> None:
    bad = MLX4.replace("\t\t\tsm_lid:\t\t\t1\n", "\t\t\tsm_lid garbage here\n", 1)
    assert_parse_error_at(ibv_devinfo.parse, bad, _line_of(bad, "garbage"))


def test_garbage_and_empty() -> None:
    for text in ["", "No IB devices found\n", "2 HCAs found:\n\tmlx4_1\n\tmlx4_0\n"]:
        assert_parse_error_at(ibv_devinfo.parse, text, 0)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(ibv_devinfo.parse, text)


@FUZZ
@given(truncations([MLX4, BOND, CX4]))
def test_fuzz_truncations(truncated: str) -> None:
    parses_or_parse_error(ibv_devinfo.parse, truncated)


@FUZZ
@given(mutations([MLX4, BOND, CX4], insert=st.text(max_size=20)))
def test_fuzz_mutations(mutated: str) -> None:
    parses_or_parse_error(ibv_devinfo.parse, mutated)
