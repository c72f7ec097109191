"""ibdev2netdev parser: short and -v forms, errors with line numbers, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers import cli as parse_cli
from clusteraccept.parsers import ibdev2netdev
from clusteraccept.parsers._ib import IbPort

DATA = Path(__file__).resolve().parents[2] / "data" / "ibdev2netdev"
DGX1 = (DATA / "dgx1-4x-ib-up.txt").read_text()
VERBOSE = (DATA / "v-8dev-mixed-ib-eth-pci-vpd.txt").read_text()


def test_dgx1_short_form() -> None:
    r = ibdev2netdev.parse(DGX1)
    assert [(p.device, p.port, p.netdev, p.netdev_state) for p in r.ports] == [
        ("mlx5_0", 1, "ib0", "Up"),
        ("mlx5_1", 1, "ib1", "Up"),
        ("mlx5_2", 1, "ib2", "Up"),
        ("mlx5_3", 1, "ib3", "Up"),
    ]
    # The short form says nothing about the RDMA port state: (Up) is the netdev carrier.
    assert all(p.state is None and p.fw_version is None for p in r.ports)
    assert r.details == ()
    assert r.netdev_of("mlx5_2") == "ib2" and r.device_of("ib3") == ("mlx5_3", 1)
    assert r.netdev_of("mlx5_9") is None and r.device_of("eth0") is None


def test_verbose_form() -> None:
    r = ibdev2netdev.parse(VERBOSE)
    assert len(r.ports) == 8
    assert r.ports[5] == IbPort(
        device="mlx5_5", port=1, state="ACTIVE", fw_version="20.30.1004", netdev="ib0", netdev_state="Up"
    )
    assert (r.ports[0].state, r.ports[0].netdev, r.ports[0].netdev_state) == ("DOWN", "ens4f0", "Down")
    d5 = r.details[5]
    assert (d5.pci_address, d5.device_id, d5.part_number) == ("0000:b1:00.0", "MT4123", "MCX654105A-HCAT")
    assert d5.description == (
        "ConnectX-6 VPI adapter card, HDR IB (200Gb/s) and 200GbE, single-port QSFP56, Socket Direct"
    )
    vf = r.details[6]
    assert (vf.device, vf.part_number, vf.description) == ("mlx5_6", "NA", "")
    assert [p.device for p in r.ports if p.state == "ACTIVE"] == ["mlx5_2", "mlx5_3", "mlx5_5"]


def test_down_na_noise_and_trailing_spaces() -> None:
    text = "$ ibdev2netdev\nmlx5_0 port 1 ==> ib0 (Down)  \nmlx5_1 port 2 ==> eth3 (NA)\n$ \n"
    r = ibdev2netdev.parse(text)
    assert [(p.device, p.port, p.netdev_state) for p in r.ports] == [
        ("mlx5_0", 1, "Down"),
        ("mlx5_1", 2, "NA"),
    ]


def test_verbose_without_pci_address() -> None:
    r = ibdev2netdev.parse((DATA / "v-mlx4-no-pci-address.txt").read_text())
    assert r.ports[0].state == "ACTIVE" and r.ports[0].fw_version == "2.9.1000"
    assert r.details[0].pci_address is None and r.details[0].description == "KESTREL        QDR"


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_cli.main(["ibdev2netdev", str(DATA / "dgx1-4x-ib-up.txt")]) == 0
    assert json.loads(capsys.readouterr().out)["ports"][3]["netdev"] == "ib3"


def test_errors_name_their_line() -> None:
    for text, line_no in [
        ("mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==> ib1 (Sideways)\n", 2),
        ("mlx5_0 port 1 ==> ib0 (Up)\nmlx5_1 port 1 ==>\n", 2),
        ("mlx5_0 port 1 ==> ib0 (Up)\nmlx5_0 port 1 ==> ib0 (Up)\n", 2),
        ("mlx5_0 port 0 ==> ib0 (Up)\n", 1),
        (VERBOSE.replace("(ACTIVE)", "(SHINY)", 1), 3),
    ]:
        assert_parse_error_at(ibdev2netdev.parse, text, line_no)


def test_garbage_and_empty() -> None:
    for text in ["", "ibdev2netdev: command not found\n"]:
        assert_parse_error_at(ibdev2netdev.parse, text, 0)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(ibdev2netdev.parse, text)


@FUZZ
@given(st.text(alphabet="mlx5_0 port1=>ib()UpDown-:.\n", max_size=80))
def test_fuzz_near_miss_lines(text: str) -> None:
    parses_or_parse_error(ibdev2netdev.parse, text)


@FUZZ
@given(truncations([DGX1, VERBOSE]), mutations([DGX1, VERBOSE], max_cut=30, insert=st.text(max_size=20)))
def test_fuzz_truncations_and_mutations(truncated: str, mutated: str) -> None:
    parses_or_parse_error(ibdev2netdev.parse, truncated, mutated)
