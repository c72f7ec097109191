"""lspci -vvv parser on real captured outputs (tests/data/lspci/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.errors import ParseError
from clusteraccept.parsers.lspci import normalize_bdf, parse

DATA = Path(__file__).parents[2] / "data" / "lspci"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("lspci-vvv-*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_downstream_port_with_acs_redirect_on() -> None:
    r = parse(load("lspci-vvv-s-amd-matisse-dsp-acs-on-kvm2023.txt"))
    assert len(r.devices) == 1
    d = r.device("03:02.0")
    assert d is not None and d is r.device("0000:03:02.0")
    assert d.bdf == "0000:03:02.0" and d.device_class == "PCI bridge"
    assert d.description.startswith("Advanced Micro Devices, Inc. [AMD] Matisse PCIe GPP Bridge")
    assert d.port_type == "Downstream Port" and not d.caps_access_denied
    assert (d.link_cap_GTps, d.link_cap_width, d.link_GTps, d.link_width) == (16.0, 4, 8.0, 4)
    assert d.acs_cap is not None and dict(d.acs_cap)["DirectTrans"] is True
    assert d.acs_enabled() == ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")
    assert d.acs_blocks_p2p() == ("SrcValid", "ReqRedir", "CmpltRedir")
    assert d.driver == "pcieport"


def test_without_root_capabilities_are_access_denied() -> None:
    r = parse(load("lspci-vvv-s-amd-matisse-dsp-access-denied-kvm2023.txt"))
    d = r.device("0000:03:05.0")
    assert d is not None and d.caps_access_denied
    assert d.acs_ctl is None and d.acs_enabled() == () and d.port_type is None
    assert d.link_GTps is None and d.driver == "pcieport"


def test_tree_output_is_not_vvv() -> None:
    with pytest.raises(ParseError) as e:
        parse(load("asus-esc8000a-e12-4xrtx6000ada-2xcx7.txt"))
    assert e.value.line_no == 1


def test_several_devices_noise_and_numeric_forms() -> None:
    # Synthetic: the real ACS-on block twice (second with ACS cleared as `setpci ... ECAP_ACS+0x6.w=0000`
    # leaves it: pciutils cap_acs() prints every flag '-'), a -D domain, a -nn class code and shell noise.
    real = load("lspci-vvv-s-amd-matisse-dsp-acs-on-kvm2023.txt")
    off = real.replace("03:02.0 PCI bridge:", "0000:17:01.0 PCI bridge [0604]:").replace(
        "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+",
        "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-",
    )
    r = parse("$ sudo lspci -vvv\n" + real + "\n### next\n" + off)
    assert [d.bdf for d in r.devices] == ["0000:03:02.0", "0000:17:01.0"]
    second = r.devices[1]
    assert second.device_class == "PCI bridge" and second.acs_enabled() == () and second.acs_ctl is not None


def test_empty_is_no_device_and_normalize() -> None:
    assert parse("").devices == () and parse("\n \n").devices == ()
    assert normalize_bdf("00000000:1B:00.0") == "0000:1b:00.0"
    assert normalize_bdf("1b:00.0") == "0000:1b:00.0"


def test_strict_about_content() -> None:
    real = load("lspci-vvv-s-amd-matisse-dsp-acs-on-kvm2023.txt")
    lines = real.split("\n")
    acs = next(i for i, ln in enumerate(lines) if "ACSCtl:" in ln)
    with pytest.raises(ParseError) as e:
        parse(real.replace("ACSCtl:\tSrcValid+ TransBlk-", "ACSCtl:\tSrcValid? TransBlk-"))
    assert e.value.line_no == acs + 1
    with pytest.raises(ParseError):
        parse(real.replace("LnkSta:\tSpeed 8GT/s (downgraded), Width x4", "LnkSta:\tfast"))
    with pytest.raises(ParseError):
        parse(real.replace("\tLatency: 0", "Latency: 0"))  # unindented line inside a device
    with pytest.raises(ParseError):
        parse(real + real)  # the same device twice
    with pytest.raises(ParseError):
        parse("lspci: -s: Invalid slot number\n")


@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_real_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
