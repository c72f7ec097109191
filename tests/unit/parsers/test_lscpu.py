"""lscpu parser (NUMA section) on real captured outputs (tests/data/lscpu/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.lscpu import parse

DATA = Path(__file__).parents[2] / "data" / "lscpu"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_new_grouped_layout_with_memory_only_nodes() -> None:
    c = parse(load("aurora-xeonmax-4node-hbm-empty-nodes-alcf.txt"))  # prompt and "..." lines inside
    assert c.numa_nodes == 4 and [n.node for n in c.nodes] == [0, 1, 2, 3]
    assert c.cpus(0) == frozenset(range(52)) | frozenset(range(104, 156))
    assert c.cpus(1) == frozenset(range(52, 104)) | frozenset(range(156, 208))
    assert c.cpus(2) == frozenset() and c.cpus(3) == frozenset()
    assert c.cpus_total == 208 and c.online_cpus == tuple(range(208))
    assert (c.sockets, c.cores_per_socket, c.threads_per_core) == (2, 52, 2)
    assert c.model_name == "Intel(R) Xeon(R) CPU Max 9470C" and c.architecture == "x86_64"
    assert c.node_of_cpu(156) == 1 and c.node_of_cpu(500) is None


def test_old_flat_layout() -> None:
    c = parse(load("e5-2687w-2node-flat-old-cppfun.txt"))
    assert c.numa_nodes == 2
    assert c.cpus(0) == frozenset(range(12)) and c.cpus(1) == frozenset(range(12, 24))
    assert (c.cpus_total, c.sockets, c.cores_per_socket, c.threads_per_core) == (24, 2, 12, 1)
    assert c.model_name == "Intel(R) Xeon(R) CPU E5-2687W v4 @ 3.00GHz"


def test_no_numa_section_and_dash_count() -> None:
    # lscpu.c leaves the NUMA section out when nnodes is 0 and prints "-" for an unknown socket count.
    c = parse("Architecture:          aarch64\nCPU(s):                4\nSocket(s):             -\n")
    assert c.numa_nodes == 0 and c.nodes == () and c.sockets is None and c.cpus_total == 4
    with pytest.raises(KeyError):
        c.cpus(0)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("random words\nno colon here\n", 0),
        ("NUMA node(s):          2\nNUMA node0 CPU(s):     0-15\n", 2),  # node1 line missing
        ("NUMA node(s):          1\nNUMA node0 CPU(s):     0-15,x\n", 2),
        ("CPU(s):                many\n", 1),
        ("NUMA node(s):          1\nNUMA node0 CPU(s):     0\nNUMA node0 CPU(s):     1\n", 3),
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
