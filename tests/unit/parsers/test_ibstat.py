"""ibstat parser: real fixture values, other documented layouts, errors with line numbers, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.errors import ParseError
from clusteraccept.parsers import _ib, ibstat
from clusteraccept.parsers import cli as parse_cli

DATA = Path(__file__).resolve().parents[2] / "data" / "ibstat"
H100 = DATA / "h100-8xcx7-ndr400-ib-plus-cx6dx-eth-mooncake2039.txt"
TEXT = H100.read_text()


def test_real_h100_cas_in_lexicographic_order() -> None:
    r = ibstat.parse(TEXT)
    assert [c.name for c in r.cas] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_10",
        "mlx5_11",
        "mlx5_2",
        "mlx5_3",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
    ]
    assert len(r.ports()) == 12
    assert all(c.num_ports == 1 and c.node_type == "CA" for c in r.cas)


def test_real_h100_ndr_ib_port() -> None:
    r = ibstat.parse(TEXT)
    ca = r.ca("mlx5_0")
    assert ca is not None
    assert (ca.ca_type, ca.fw_version, ca.hw_version) == ("MT4129", "28.41.1000", "0")
    assert ca.node_guid == "0x58a2e103001b2576"
    assert r.port("mlx5_0") == _ib.IbPort(
        device="mlx5_0",
        port=1,
        state="ACTIVE",
        phys_state="LINK_UP",
        rate_Gbps=400.0,
        link_layer="InfiniBand",
        fw_version="28.41.1000",
        lid=287,
        sm_lid=1024,
        port_guid="0x58a2e103001b2576",
    )
    p9 = r.port("mlx5_9")
    assert p9 is not None and p9.lid == 457 and p9.is_up()


def test_real_h100_ethernet_ports() -> None:
    r = ibstat.parse(TEXT)
    down = r.port("mlx5_1")
    assert down is not None
    assert (down.state, down.phys_state, down.rate_Gbps, down.link_layer) == (
        "DOWN",
        "DISABLED",
        40.0,
        "Ethernet",
    )
    assert down.fw_version == "22.38.1002" and down.port_guid == "0x0000000000000000" and not down.is_up()
    up = r.port("mlx5_8")
    assert up is not None and (up.state, up.rate_Gbps, up.link_layer, up.sm_lid) == (
        "ACTIVE",
        100.0,
        "Ethernet",
        0,
    )
    ca8 = r.ca("mlx5_8")
    assert ca8 is not None and ca8.sys_image_guid == "0x58a2e1030059282c"


def test_real_h100_summary() -> None:
    ports = ibstat.parse(TEXT).ports()
    ib = [p for p in ports if p.link_layer == "InfiniBand"]
    eth = [p for p in ports if p.link_layer == "Ethernet"]
    assert len(ib) == 8 and all(p.rate_Gbps == 400.0 and p.is_up() for p in ib)
    assert sorted(p.device for p in eth) == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert [p.device for p in ports if not p.is_up()] == ["mlx5_1", "mlx5_2"]


def test_tabs_noise_and_trailing_spaces_give_the_same_result() -> None:
    tabbed = TEXT.replace("        ", "\t").replace("\n", "  \n")
    noisy = "[root@node01 ~]# ibstat\n" + tabbed + "[root@node01 ~]# \n"
    assert ibstat.parse(noisy) == ibstat.parse(TEXT)


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_cli.main(["ibstat", str(H100)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cas"][2]["name"] == "mlx5_10"
    assert out["cas"][0]["ports"][0]["rate_Gbps"] == 400.0


# Layouts from rdma-core infiniband-diags/ibstat.c (port_dump): "Rate: 2.5" for 1x SDR,
# "Rate: %d (FDR10)", "Effective speed: %g"; ``ibstat CA PORT`` prints "CA: 'x'" and an unindented port.
SINGLE_PORT = """CA: 'mlx5_3'
Port 1:
State: Initializing
Physical state: LinkUp
Rate: 40 (FDR10)
Effective speed: 40
Base lid: 0
LMC: 0
SM lid: 0
Capability mask: 0x2651e848
Port GUID: 0x0002c903000e0b72
Link layer: InfiniBand
"""


def test_single_port_form_and_fdr10_rate() -> None:
    r = ibstat.parse(SINGLE_PORT)
    assert len(r.cas) == 1 and r.cas[0].fw_version is None
    p = r.port("mlx5_3")
    assert p is not None and (p.state, p.rate_Gbps, p.port_guid) == ("INIT", 40.0, "0x0002c903000e0b72")


def test_sdr_rate_and_short_form() -> None:
    sdr = TEXT.split("CA 'mlx5_1'")[0].replace("Rate: 400", "Rate: 2.5")
    assert ibstat.parse(sdr).ports()[0].rate_Gbps == 2.5
    short = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.41.1000\n"
    r = ibstat.parse(short)
    assert r.cas[0].fw_version == "28.41.1000" and r.ports() == ()


def _line_of(text: str, needle: str, nth: int = 0) -> int:
    hits = [i for i, line in enumerate(text.splitlines(), start=1) if needle in line]
    return hits[nth]


def test_truncated_in_a_port_block_names_the_port_line() -> None:
    cut = TEXT[: TEXT.index("Link layer: InfiniBand", TEXT.index("CA 'mlx5_9'"))]
    with pytest.raises(ParseError) as err:
        ibstat.parse(cut)
    assert err.value.line_no == _line_of(TEXT, "Port 1:", 11)
    assert "Link layer" in err.value.expected


def test_truncated_in_a_ca_header() -> None:
    assert_parse_error_at(ibstat.parse, "CA 'mlx5_0'\n\tCA type: MT4129\n", 1)


def test_bad_values_name_their_line() -> None:
    for old, new, needle in [
        ("State: Active", "State: Sleeping", "State: Sleeping"),
        ("Rate: 400", "Rate: fast", "Rate: fast"),
        ("Link layer: InfiniBand", "Link layer: Token Ring", "Token Ring"),
        ("Base lid: 287", "Base lid: x", "Base lid: x"),
    ]:
        bad = TEXT.replace(old, new, 1)
        assert_parse_error_at(ibstat.parse, bad, _line_of(bad, needle))


def test_indented_garbage_inside_a_block() -> None:
    bad = TEXT.replace("        LMC: 0\n", "        ##### garbage #####\n", 1)
    assert_parse_error_at(ibstat.parse, bad, _line_of(bad, "garbage"))


def test_garbage_and_empty() -> None:
    for text in ["", "hello\nworld\n", "ibstat: command not found\n"]:
        assert_parse_error_at(ibstat.parse, text, 0)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(ibstat.parse, text)


@FUZZ
@given(truncations([TEXT]))
def test_fuzz_truncations(truncated: str) -> None:
    parses_or_parse_error(ibstat.parse, truncated)


@FUZZ
@given(mutations([TEXT], insert=st.text(max_size=20)))
def test_fuzz_mutations(mutated: str) -> None:
    parses_or_parse_error(ibstat.parse, mutated)
