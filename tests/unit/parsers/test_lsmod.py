"""lsmod parser on real captured outputs (tests/data/lsmod/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.lsmod import parse

DATA = Path(__file__).parents[2] / "data" / "lsmod"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_grep_mlx_rhelai_no_peermem() -> None:
    m = parse(load("lsmod-grep-mlx-rhelai-h100-roce.txt"))
    assert not m.has_header and len(m.modules) == 8
    assert [x.name for x in m.modules][:4] == ["mlx5_ib", "ib_uverbs", "ib_core", "mlx5_core"]
    core = m.module("ib_core")
    assert core is not None and core.size_B == 528384 and core.use_count == 2
    assert core.used_by == ("ib_uverbs", "mlx5_ib")
    assert m.holders("mlx5_core") == ("mlx5_ib",)
    assert m.loaded("mlx5_core") and m.loaded("mlx5_ib")
    assert not m.loaded("nvidia_peermem") and not m.loaded("nv_peer_mem") and m.module("nvidia") is None


def test_grep_nv_peer_holder_only_modules_count_as_loaded() -> None:
    m = parse(load("lsmod-grep-nv_peer-mofed52-ucx6327.txt"))
    peer = m.module("nv_peer_mem")
    assert peer is not None and peer.size_B == 13163 and peer.use_count == 0 and peer.used_by == ()
    nvidia = m.module("nvidia")
    assert nvidia is not None and nvidia.size_B == 19683928 and nvidia.use_count == 4
    assert len(m.holders("ib_core")) == 9
    # gdrdrv and mlx5_ib have no line of their own: only named as holders.
    assert m.module("gdrdrv") is None and m.loaded("gdrdrv") and m.loaded("mlx5_ib")
    assert m.loaded("nv-peer-mem")  # '-' and '_' are the same module name
    assert not m.loaded("nvidia_peermem")


def test_header_and_old_formats() -> None:
    # Shapes seen in public lsmod captures: busybox taint header, "[permanent]" after the count
    # (2.6 kernels) and inside the holder list (Jetson nvgpu), trailing space after a bare count.
    text = (
        "Module                  Size  Used by    Tainted: G  \n"
        "nvgpu                2560000  0 [permanent]\n"
        "nvmap                 192512  1 nvgpu,[permanent]\n"
        "sd_mod                 23428  8 \n"
    )
    m = parse(text)
    assert m.has_header and [x.name for x in m.modules] == ["nvgpu", "nvmap", "sd_mod"]
    nvgpu, nvmap = m.module("nvgpu"), m.module("nvmap")
    assert nvgpu is not None and nvgpu.permanent and nvgpu.used_by == () and nvgpu.use_count == 0
    assert nvmap is not None and nvmap.permanent and nvmap.used_by == ("nvgpu",)
    assert m.holders("sd_mod") == ()
    assert parse("Module                  Size  Used by    Not tainted\n").has_header


def test_empty_grep_output_is_empty() -> None:
    assert parse("").modules == () and not parse("\n").loaded("mlx5_core")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("mlx5_ib 495616 0\nthis is not lsmod\n", 2),
        ("mlx5_core 2469888\n", 1),
        ("mlx5_core 2469888 1 mlx5_ib\nModule                  Size  Used by\n", 2),
        ("a 1 0\nb 2 1 a,/bad\n", 2),
        ("a 1 0\na 1 0\n", 0),
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
def test_fuzz_truncated_and_mutated_real_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
