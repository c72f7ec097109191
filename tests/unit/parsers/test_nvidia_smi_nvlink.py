"""nvidia-smi nvlink --status / -e parser on real captures (tests/data/nvidia-smi-nvlink/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given

from clusteraccept.parsers.nvidia_smi_nvlink import parse

DATA = Path(__file__).parents[2] / "data" / "nvidia-smi-nvlink"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_h100_18_links_at_26_562_tab_indent() -> None:
    r = parse(load("nvlink-status-h100-gpu0-18links-26.562-tab-indent-a3high.txt"))
    assert [g.index for g in r.gpus] == [0]
    g = r.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3" and g.uuid == "GPU-2e37c77d-9f00-a42d-bec1-d72b36af9983"
    assert [lk.index for lk in g.links] == list(range(18))
    assert {lk.speed_GBps for lk in g.links} == {26.562}
    assert not any(lk.inactive for lk in g.links) and g.note == "" and r.notes == () and not r.elided


def test_v100_inactive_links_spaces_elided_uuid_and_poster_noise() -> None:
    r = parse(load("azhpc-diagnostics-73-v100-inactive.txt"))
    g = r.gpu(3)
    assert g is not None and g.name == "Tesla V100-SXM2-32GB" and g.uuid == "..."
    assert [lk.index for lk in g.links if lk.inactive] == [3, 5]
    assert [lk.speed_GBps for lk in g.links if not lk.inactive] == [25.781] * 4
    assert g.link(3) is not None and g.link(3).speed_GBps is None  # type: ignore[union-attr]
    assert r.notes == ("nvidia-smi nvlink -s",) and r.elided  # the poster's command, and "...." elisions


def test_b200_all_links_inactive_is_nvml_s_line_under_the_gpu() -> None:
    g = parse(load("gpud-1085-b200-all-links-inactive.txt")).gpus[0]
    assert (g.index, g.name, g.links) == (2, "NVIDIA B200", ())
    assert g.all_inactive and g.note.startswith("NVML: Unable to retrieve NVLink information")


def test_error_counter_lines_one_counter_per_line() -> None:
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-x)\n" + "".join(
        f"\t Link {k}: {name}: {v}\n"
        for k in range(2)
        for name, v in (("Replay Errors", 0), ("CRC Errors", 7 * k))
    )
    g = parse(text).gpus[0]
    assert g.link(1).counter("CRC Errors") == 7  # type: ignore[union-attr]
    assert g.link(0).counters == (("Replay Errors", 0), ("CRC Errors", 0))  # type: ignore[union-attr]


def test_empty_output_is_no_gpu_and_text_alone_is_refused() -> None:
    assert parse("").gpus == () and parse("\n\n").gpus == ()
    err = assert_parse_error_at(parse, "Failed to initialize NVML: Driver/library version mismatch\n", 1)
    assert "GPU N" in err.expected


def test_damaged_outputs_are_refused_with_their_line() -> None:
    good = load("nvlink-status-h100-gpu0-18links-26.562-tab-indent-a3high.txt").splitlines()
    assert_parse_error_at(parse, "\n".join([*good[:3], "\t Link 2: fast", *good[3:]]), 4)
    assert_parse_error_at(parse, "\n".join([*good[:3], good[2]]), 4)  # link 1 twice
    assert_parse_error_at(parse, "\n".join([good[1], *good]), 1)  # a link before any GPU
    assert_parse_error_at(parse, "\n".join([*good, "garbage after the links"]), 20)
    assert_parse_error_at(parse, "\n".join([*good, good[0]]), 20)  # GPU 0 twice
    assert_parse_error_at(parse, "\n".join([good[0], "\t Link 0: CRC Errors: lots"]), 2)


@FUZZ
@given(truncations(FIXTURES))
def test_truncations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(mutations(FIXTURES))
def test_mutations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


def test_h100_error_counters_three_per_link_blank_lines_and_elision() -> None:
    r = parse(load("ml-engineering-h100-legacy-replay-recovery-crc.txt"))
    g = r.gpus[0]
    assert [lk.index for lk in g.links] == [0, 1, 17]  # links 2-16 elided by the author: "[...]"
    assert g.link(17).counters == (("Replay Errors", 0), ("Recovery Errors", 0), ("CRC Errors", 0))  # type: ignore[union-attr]
    assert r.elided and r.notes == ("$ nvidia-smi nvlink -e",)


def test_gb200_53_125_and_b200_50_without_decimals() -> None:
    r = parse(load("k8s-test-infra-371-gb200-53.125-elided.txt"))
    assert [g.name for g in r.gpus] == ["NVIDIA GB200"] * 2 and r.elided  # GPU 1 cut by the poster: "..."
    assert {lk.speed_GBps for lk in r.gpus[0].links} == {53.125} and len(r.gpus[0].links) == 18
    b200 = parse(load("nvbandwidth-44-b200-50gbs-truncated.txt")).gpus[0]
    assert {lk.speed_GBps for lk in b200.links} == {50.0} and len(b200.links) == 12
    h100 = parse(load("ml-engineering-h100-26.562-elided.txt")).gpus[0]
    assert [(lk.index, lk.speed_GBps) for lk in h100.links] == [(0, 26.562), (17, 26.562)]
