"""scontrol show topology parser (tests/data/scontrol-topology/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers import get
from clusteraccept.parsers.scontrol_topology import parse

DATA = Path(__file__).parents[2] / "data" / "scontrol-topology"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_block_crusoe_gb200_with_prompt_line() -> None:
    t = parse(load("block-10x18-gb200-crusoe.txt"))
    assert t.plugin == "block" and len(t.block_records) == 10 and t.switches == ()
    assert list(t.blocks) == [f"block{i:02d}" for i in range(1, 11)]
    assert t.blocks["block01"][0] == "slurm-compute-node-000" and len(t.blocks["block01"]) == 18
    assert t.blocks["block10"][-1] == "slurm-compute-node-179"
    b = t.block_records[9]
    assert (b.name, b.index, b.size, b.aggregated) == ("block10", 9, 18, False)
    assert t.block_of("slurm-compute-node-100") == "block06" and t.block_of("other") is None


def test_block_aggregated_is_not_a_base_block() -> None:
    t = parse(load("block-aggregated-synthetic.txt"))
    assert list(t.blocks) == ["b1", "b2"] and len(t.blocks["b2"]) == 14
    agg = t.block_records[2]
    assert (agg.name, agg.index, agg.size, agg.aggregated, len(agg.nodes)) == ("b[1-2]", 2, 32, True, 30)


def test_block_captured_on_slurm_24_11() -> None:
    t = parse(load("block-2x2-vcluster-24.11.txt"))
    assert t.blocks == {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}
    assert [(b.name, b.size, b.aggregated, b.nodes) for b in t.block_records][2] == (
        "leaf[1-2]",
        4,
        True,
        ("node1", "node2", "node3", "node4"),
    )


def test_tree_leaf_switches_are_the_blocks() -> None:
    t = parse(load("tree-2leaf-synthetic.txt"))
    assert t.plugin == "tree" and dict(t.blocks) == {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}
    spine = t.switches[2]
    assert (spine.level, spine.link_speed, spine.switches, len(spine.nodes)) == (1, 1, ("leaf1", "leaf2"), 4)


def test_ring() -> None:
    t = parse(load("ring-synthetic.txt"))
    assert (
        t.plugin == "ring" and t.blocks["r2"] == ("node5", "node6", "node7", "node8") and t.rings[0].size == 4
    )


def test_flat_is_empty() -> None:
    t = parse("\n")
    assert t.plugin is None and dict(t.blocks) == {} and t.switches == ()


def test_registered_tool() -> None:
    assert get("scontrol-topology") is parse


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("BlockName=b1 BlockIndex=0 Nodes=n[1-2] BlockSize=2\nnot a record\n", 2),
        ("SwitchName=s0 Level=x LinkSpeed=1 Nodes=n1\n", 1),
        ("SwitchName=s0 LinkSpeed=1 Nodes=n1\n", 1),
        ("BlockName=b1 BlockIndex=0 Nodes=n[1-2 BlockSize=2\n", 1),
        ("BlockName=b1 BlockIndex=0 Nodes=n1 BlockSize=1 Level=0\n", 1),
        ("SwitchName=s0 Level=0 LinkSpeed=1 Nodes=n1\nBlockName=b1 BlockIndex=0 Nodes=n2 BlockSize=1\n", 2),
        ("hello world\n", 0),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text(max_size=300))
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(
    truncations(FIXTURES),
    mutations(FIXTURES, max_cut=1, insert=st.text(alphabet="[]-,=0123456789 \nabx", max_size=8)),
)
def test_fuzz_mutated_fixtures(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
