"""Counter snapshot parser (probes/counters.py's sectioned text) and its per-rail delta. The ethtool part is
a real mlx5 listing (tests/data/ethtool-stats/SOURCES.md); the layout around it is this project's own."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept import parsers
from clusteraccept.parsers.counters import delta, parse

ETHTOOL = (
    Path(__file__).parents[2] / "data" / "ethtool-stats" / "mlx5_core-cx4-kernel4.15-ethq.txt"
).read_text()
IB = """## rail 0 hca mlx5_0 port 1 netdev -
### link_layer
InfiniBand
### ib-counters /sys/class/infiniband/mlx5_0/ports/1/counters
symbol_error: 0
link_downed: 1
port_rcv_errors: 3
port_xmit_data: 123456789
"""
ROCE = """## rail 3 hca mlx5_3 port 1 netdev eth3
### link_layer
Ethernet
### ib-counters /sys/class/infiniband/mlx5_3/ports/1/counters
port_rcv_errors: 0
### ethtool-stats rc=0
NIC statistics:
{ethtool}### hw-counters /sys/class/infiniband/mlx5_3/ports/1/hw_counters
np_cnp_sent: 12
### unreadable
/sys/class/infiniband/mlx5_3/ports/1/hw_counters/rp_cnp_handled: No such file or directory
""".replace("{ethtool}", "".join(f"     {ln.strip()}\n" for ln in ETHTOOL.splitlines()))


def test_registered() -> None:
    assert parsers.get("counters") is parse


def test_ib_and_roce_rails() -> None:
    snap = parse(IB + ROCE)
    ib, roce = snap.rails[0], snap.rails[3]
    assert (ib.hca, ib.port, ib.netdev, ib.link_layer) == ("mlx5_0", 1, None, "InfiniBand")
    assert ib.ib == {"symbol_error": 0, "link_downed": 1, "port_rcv_errors": 3, "port_xmit_data": 123456789}
    assert ib.ethtool is None and ib.hw == {} and ib.unreadable == ()
    assert (roce.netdev, roce.link_layer, roce.hw) == ("eth3", "Ethernet", {"np_cnp_sent": 12})
    assert roce.ethtool is not None and len(roce.ethtool.counters) == 751
    assert roce.ethtool.rx_prio_packets(0) == 845715962
    assert roce.unreadable == (
        "/sys/class/infiniband/mlx5_3/ports/1/hw_counters/rp_cnp_handled: No such file or directory",
    )


def test_delta_names_what_went_backwards() -> None:
    before = parse(IB).rails[0]
    after = parse(
        IB.replace("port_rcv_errors: 3", "port_rcv_errors: 9").replace("link_downed: 1", "link_downed: 0")
    )
    d = delta(before, after.rails[0])
    assert d.ib == {"symbol_error": 0, "port_rcv_errors": 6, "port_xmit_data": 0}
    assert d.went_backwards == ("link_downed",) and d.ethtool is None


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("symbol_error: 0\n", 1),
        ("## rail x hca mlx5_0 port 1 netdev -\n", 1),
        (IB.replace("### link_layer", "### what"), 2),
        (IB + "port_rcv_errors: 4\n", 9),
        (IB.replace("link_downed: 1", "link_downed: one"), 6),
        (IB + "### link_layer\n", 9),
        (IB + IB, 9),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


def test_ethtool_error_names_the_snapshot_line() -> None:
    text = ROCE.replace("rx_packets: 845320277", "rx_packets: many")
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "rx_packets: many" in ln)
    assert line > 6
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations([IB + ROCE]), mutations([IB + ROCE]))
def test_fuzz_truncated_and_mutated(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)


NVLINK_HEAD = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2e37c77d-9f00-a42d-bec1-d72b36af9983)\n"


def _nv(crc: int) -> str:
    lines = [f"\t Link {k}: {n}: {crc if (k, n) == (3, 'CRC Errors') else 0}"
             for k in range(4) for n in ("Replay Errors", "Recovery Errors", "CRC Errors")]  # fmt: skip
    rail = "## rail 0 hca mlx5_0 port 1 netdev -\n### link_layer\nInfiniBand\n"
    return rail + "## nvlink rc=0\n" + NVLINK_HEAD + "\n".join(lines) + "\n"


def test_nvlink_section_and_its_rise_between_two_snapshots() -> None:
    from clusteraccept.parsers.counters import nvlink_delta

    before, after = parse(_nv(2)), parse(_nv(9))
    assert 0 in before.rails and before.nvlink is not None and before.nvlink.report is not None
    assert before.nvlink.report.gpus[0].link(3).counter("CRC Errors") == 2  # type: ignore[union-attr]
    rise = nvlink_delta(before.nvlink, after.nvlink)
    assert rise is not None and rise[(0, 3)] == {"Replay Errors": 0, "Recovery Errors": 0, "CRC Errors": 7}
    assert rise[(0, 0)]["CRC Errors"] == 0
    failed = parse("## nvlink rc=9\nFailed to initialize NVML: Driver/library version mismatch\n")
    assert failed.rails == {} and failed.nvlink is not None and failed.nvlink.report is None
    assert "version mismatch" in failed.nvlink.error and nvlink_delta(failed.nvlink, after.nvlink) is None
    # a damaged nvidia-smi line is named by its line in the snapshot
    assert_parse_error_at(parse, _nv(1).replace("Link 2: CRC Errors: 0", "Link 2: CRC Errors: x"), 14)


def test_one_part_read_alone_is_the_same_as_in_the_whole() -> None:
    # a judge of one part (nvlink.errors: NVLink; nccl.link_errors, roce.counters: the NICs) reads only it
    whole = parse(_nv(2))
    nics, links = parse(_nv(2), nvlink=False), parse(_nv(2), rails=False)
    assert nics.rails == whole.rails and nics.nvlink is None
    assert links.rails == {} and links.nvlink == whole.nvlink
    # a damaged NVLink section is still named at its line when the NVLink part is read, and not read otherwise
    bad = _nv(1).replace("Link 2: CRC Errors: 0", "Link 2: CRC Errors: x")
    assert_parse_error_at(lambda t: parse(t, rails=False), bad, 14)
    assert parse(bad, nvlink=False).rails == whole.rails


def _line_by_line(text: str, **parts: bool) -> object:
    """What the line-by-line reading alone makes of ``text`` (its value, or the ParseError it raises)."""
    from clusteraccept.errors import ParseError
    from clusteraccept.parsers import counters

    clean, counters._clean_rails = counters._clean_rails, lambda text: None
    alone, counters._nvlink_only = counters._nvlink_only, lambda text: None
    try:
        return parse(text, **parts)
    except ParseError as exc:
        return ("ParseError", exc.line_no, exc.expected)
    finally:
        counters._clean_rails, counters._nvlink_only = clean, alone


CLEAN = (
    IB
    + IB.replace("rail 0 hca mlx5_0", "rail 1 hca mlx5_1").replace("port_xmit_data", "port_rcv_data")
    + "### hw-counters /sys/class/infiniband/mlx5_1/ports/1/hw_counters\nnp_cnp_sent: 4\n"
)


def test_the_one_pass_reading_of_clean_rails_is_the_line_by_line_one() -> None:
    """A snapshot of clean IB rails is read in one regex pass (a 1,024-node campaign takes ~170,000
    snapshots): what it gives is what the line-by-line reading gives, part by part."""
    from clusteraccept.parsers.counters import _clean_rails

    assert _clean_rails(CLEAN) is not None and _clean_rails(_nv(2)) is not None  # taken where it applies
    assert _clean_rails(ROCE) is None and _clean_rails(IB + ROCE) is None  # ethtool, unreadable: not it
    for text in (CLEAN, _nv(2), IB + ROCE, CLEAN.replace("link_downed: 1", "link_downed: 1 "), CLEAN[:-1]):
        for parts in ({}, {"nvlink": False}, {"rails": False}):
            assert parse(text, **parts) == _line_by_line(text, **parts), (text, parts)


@FUZZ
@given(
    mutations(
        [CLEAN, _nv(3)],
        insert=st.sampled_from(
            ["\n", "##", "#", " ", "\r", "\x85", "link_downed: 2\n", "## rail 0", "\n## nvlink rc=0\n"]
        ),
    )
)
def test_fuzz_the_one_pass_reading_agrees_with_the_line_by_line_one(text: str) -> None:
    from clusteraccept.errors import ParseError

    for parts in ({"nvlink": False}, {"rails": False}):  # the NICs' part alone, the NVLink part alone
        try:
            got: object = parse(text, **parts)
        except ParseError as exc:
            got = ("ParseError", exc.line_no, exc.expected)
        assert got == _line_by_line(text, **parts), parts


def test_the_nvlink_part_is_found_without_reading_the_rails_where_nothing_needs_naming() -> None:
    """``rails=False`` (nvlink.errors, ~85 snapshots a node) finds the NVLink section without splitting the
    rails' lines; anything the line-by-line reading would name (text before the first section, a bad
    ``## nvlink`` line, a line break other than "\\n") is left to it, and both agree."""
    from clusteraccept.errors import ParseError
    from clusteraccept.parsers.counters import Snapshot, _nvlink_only

    nv = _nv(2)
    assert _nvlink_only(nv) == Snapshot({}, parse(nv).nvlink)
    assert _nvlink_only(CLEAN) is not None and _nvlink_only(CLEAN).nvlink is None  # type: ignore[union-attr]
    damaged = {
        "text first": "junk\n" + nv,
        "no section": "\n\n",
        "bad rc": nv.replace("## nvlink rc=0", "## nvlink rc=zero"),
        "a lone CR": nv.replace("\n## nvlink", "\r## nvlink"),
        "not ASCII": nv.replace("NVIDIA", "NVIDIA\u00a0"),
    }
    for why, text in damaged.items():
        assert _nvlink_only(text) is None, why
    bad_line = nv.replace("Link 2: CRC Errors: 0", "Link 2: CRC Errors: x")
    for text in (nv, CLEAN, bad_line, "## nvlink rc=9\nFailed to initialize NVML\n", *damaged.values()):
        try:
            got: object = parse(text, rails=False)
        except ParseError as exc:
            got = ("ParseError", exc.line_no, exc.expected)
        assert got == _line_by_line(text, rails=False), text
