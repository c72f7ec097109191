"""nvidia-imex-ctl -N parser on real captures (tests/data/nvidia-imex-ctl/)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given

from clusteraccept.parsers.nvidia_imex_ctl import parse

DATA = Path(__file__).parents[2] / "data" / "nvidia-imex-ctl"
ALL = sorted(DATA.glob("*.txt"))


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_18_gb200_nodes_ready_connected_with_versions() -> None:
    d = parse(load("imex-N-18node-gb200-570.172-aws-pcs.txt"))
    assert d.state == "UP" and len(d.nodes) == 18
    assert (d.nodes[0].index, d.nodes[0].address, d.nodes[0].status) == (0, "172.31.48.81", "READY")
    assert d.nodes[17].address == "172.31.56.47" and {n.version for n in d.nodes} == {"570.172"}
    assert len(d.matrix) == 18 and all(len(r) == 18 for r in d.matrix) and d.not_connected() == []


def test_gh200_two_and_one_node_no_version_column_wrapper_lines_passed_over() -> None:
    d = parse(load("imex-N-2node-gh200-570.00-jpsnips.txt"))  # a wrapper's READY before, the log after
    assert [(n.address, n.status, n.version) for n in d.nodes] == [
        ("10.136.206.47", "READY", None),
        ("10.136.206.48", "READY", None),
    ]
    assert d.matrix == (("C", "C"), ("C", "C")) and d.state == "UP"
    d = parse(load("imex-N-1node-gh200-570.00-jpsnips.txt"))
    assert len(d.nodes) == 1 and d.matrix == (("C",),)


def test_a_node_down_and_a_lost_link_are_read_as_printed() -> None:
    text = load("imex-N-2node-gh200-570.00-jpsnips.txt")
    text = text.replace("10.136.206.48   - READY", "10.136.206.48   - UNAVAILABLE")
    text = text.replace("       1        C  C", "       1        D  I").replace(
        "Domain State: UP", "Domain State: DEGRADED"
    )
    d = parse(text)
    assert d.nodes[1].status == "UNAVAILABLE" and d.state == "DEGRADED"
    assert d.not_connected() == [(1, 0, "D"), (1, 1, "I")]


def test_damaged_lines_are_refused_with_their_line_number() -> None:
    lines = load("imex-N-2node-gh200-570.00-jpsnips.txt").splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("Node #1"))
    assert_parse_error_at(parse, "\n".join([*lines[:at], "Node #1 broken", *lines[at + 1 :]]), at + 1)
    row = next(i for i, ln in enumerate(lines) if ln.strip().startswith("1 ") and "C" in ln)
    assert_parse_error_at(parse, "\n".join([*lines[:row], "       1        C", *lines[row + 1 :]]), row + 1)
    assert_parse_error_at(parse, "\n".join(lines[: row + 1]), 0)  # cut before Domain State
    assert_parse_error_at(parse, "Failed to connect to IMEX daemon\n", 0)


@FUZZ
@given(truncations([p.read_text() for p in ALL]))
def test_truncations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(mutations([p.read_text() for p in ALL]))
def test_mutations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)
