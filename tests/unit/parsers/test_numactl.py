"""numactl -H parser on real captured outputs (tests/data/numactl/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.numactl import parse

DATA = Path(__file__).parents[2] / "data" / "numactl"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_two_nodes_sixteen_cpus_each() -> None:
    h = parse(load("numactl-H-2node-32cpu-locuaz.txt"))
    assert h.node_ids == (0, 1)
    assert h.cpus(0) == frozenset(range(16)) and h.cpus(1) == frozenset(range(16, 32))
    assert h.node(0).size_MB == 256924 and h.node(0).free_MB == 249438
    assert h.node(1).size_MB == 257999 and h.node(1).free_MB == 256694
    assert h.distances == ((10, 11), (11, 10))
    assert h.distance(0, 1) == 11 and h.distance(1, 1) == 10
    assert h.node_of_cpu(17) == 1 and h.node_of_cpu(99) is None


def test_aurora_hbm_memory_only_nodes_trailing_spaces() -> None:
    h = parse(load("numactl-hardware-aurora-xeonmax-4node-hbm-memonly-alcf.txt"))  # prompt line first
    assert h.node_ids == (0, 1, 2, 3)
    assert h.cpus(0) == frozenset(range(52)) | frozenset(range(104, 156))
    assert h.cpus(1) == frozenset(range(52, 104)) | frozenset(range(156, 208))
    assert h.node(2).cpus == () and h.node(3).cpus == ()
    assert (h.node(2).size_MB, h.node(2).free_MB) == (65536, 63977)
    assert h.node(3).free_MB == 64146 and h.node(0).size_MB == 515489
    assert h.distances[2] == (13, 23, 10, 23)
    assert h.distance(0, 2) == 13 and h.distance(1, 3) == 13 and h.distance(0, 3) == 23


def test_cpu_compress_and_node_id_holes() -> None:
    # Layout of numactl.c print_node_cpus() with --cpu-compress and hardware() with a node-id hole.
    text = (
        "available: 2 nodes (0,2)\n"
        "node 0 cpus: 0-15, 32-47 (32)\nnode 0 size: 1000 MB\nnode 0 free: <not available>\n"
        "node 2 cpus:\nnode 2 size: 0 MB\nnode 2 free: 0 MB\n"
        "No distance information available.\n"
    )
    h = parse(text)
    assert h.node_ids == (0, 2) and len(h.node(0).cpus) == 32 and h.node(0).free_MB is None
    assert h.distances == () and h.distance(0, 2) is None


def test_no_numa() -> None:
    assert parse("No NUMA available on this system\n").nodes == ()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("garbage\n", 0),
        ("available: 2 nodes (0-1)\nnode 0 cpus: 0 1\nnode 0 size: 10 MB\nnode 0 free: 5 MB\n", 5),
        ("available: 1 nodes (0)\nnode 0 cpus: 0 x\nnode 0 size: 10 MB\nnode 0 free: 5 MB\n", 2),
        ("available: 1 nodes (0)\nnode 0 cpus: 0\nnode 0 size: 10 GB\nnode 0 free: 5 MB\n", 3),
        ("available: 3 nodes (0-1)\n", 1),
        (
            "available: 1 nodes (0)\nnode 0 cpus: 0\nnode 0 size: 1 MB\nnode 0 free: 1 MB\n"
            "node distances:\nnode   0\n  0:  10  11\n",
            7,
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
def test_fuzz_truncated_and_mutated_real_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
