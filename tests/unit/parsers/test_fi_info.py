"""fi_info parser on real captures (tests/data/fi_info/)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given

from clusteraccept.parsers import get
from clusteraccept.parsers.fi_info import parse

DATA = Path(__file__).parents[2] / "data" / "fi_info"
ALL = sorted(DATA.glob("*.txt"))
EFA = "efa-2020-rdm-dgrm-plus-ofi_rxd-libfabric5689.txt"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_efa_one_device_as_rdm_and_dgram_domains_and_the_rxd_utility_layer() -> None:
    info = parse(load(EFA))
    assert [(e.provider, e.domain, e.ep_type, e.protocol) for e in info.entries] == [
        ("efa", "efa_0-rdm", "FI_EP_RDM", "FI_PROTO_EFA"),
        ("efa", "efa_0-dgrm", "FI_EP_DGRAM", "FI_PROTO_EFA"),
        ("efa;ofi_rxd", "efa_0-dgrm", "FI_EP_RDM", "FI_PROTO_RXD"),
    ]
    assert info.providers() == ("efa",)
    assert info.devices("efa") == ("efa_0",)  # one device, offered twice; the rxd layer not counted
    assert info.entries[0].fabric == "EFA-fe80::39:beff:fe6e:c23" and info.entries[2].version == "1.0"


def test_slingshot_cxi_single_entry() -> None:
    info = get("fi_info")(load("cxi-slingshot-cscs-working-single-entry.txt"))
    assert info.providers() == ("cxi",) and info.devices("cxi") == ("cxi0",)
    assert info.entries[0].version == "0.1" and info.entries[0].ep_type == "FI_EP_RDM"


def test_many_devices_counted_once_each() -> None:
    one = load(EFA).split("provider: efa;ofi_rxd")[0]
    text = "".join(one.replace("efa_0", f"rdmap{16 + i}s27") for i in range(4))
    assert parse(text).devices("efa") == ("rdmap16s27", "rdmap17s27", "rdmap18s27", "rdmap19s27")


def test_damaged_output_is_refused_with_its_line_number() -> None:
    lines = load(EFA).splitlines()
    assert_parse_error_at(parse, "\n".join([*lines[:3], "    domain efa_0-rdm", *lines[4:]]), 4)
    assert_parse_error_at(parse, "\n".join(["    fabric: x", *lines]), 1)  # before any provider
    assert_parse_error_at(parse, "\n".join([lines[0], lines[1], *lines[6:]]), 1)  # an entry with no domain
    assert_parse_error_at(parse, "fi_getinfo: -61 (No data available)\n", 1)
    assert_parse_error_at(parse, "", 0)


@FUZZ
@given(truncations([p.read_text() for p in ALL]))
def test_truncations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(mutations([p.read_text() for p in ALL]))
def test_mutations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)
