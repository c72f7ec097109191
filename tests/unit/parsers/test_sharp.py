"""sharp parser on real sharp_hello output and real NCCL SHARP/CollNet logs (tests/data/sharp/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers.sharp import CollNetConnection, SharpRank, SharpTree, parse

DATA = Path(__file__).parents[2] / "data" / "sharp"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_sharp_hello_passed() -> None:
    r = parse(load("sharp_hello-a100-cx6-passed.txt"))
    assert r.hello_passed is True and r.hello_reason is None and r.sharp_errors == ()
    assert r.trees == (SharpTree(job_id=41, tree_type="LLT", tree_idx=0, tree_id=18),)
    assert r.collnet_plugin is None and r.collnet_connections == () and not r.collnet_active


def test_sharp_hello_failed_no_resource() -> None:
    r = parse(load("synthetic-sharp_hello-failed-no-resource.txt"))
    assert r.hello_passed is False and r.hello_reason == "No resource"
    assert r.sharp_errors[0] == "Begin job id: 10883558421705822370 failed with status: No resource"
    assert r.sharp_errors[-1] == "SHArP Job init error: No resource" and len(r.sharp_errors) == 4


def test_truncated_sharp_hello_is_a_failure_not_a_pass() -> None:
    text = load("sharp_hello-a100-cx6-passed.txt").replace("Test Passed.\n", "")
    r = parse(text)
    assert r.hello_passed is False and r.hello_reason is None


def test_nccl_collnet_sharp_initialised() -> None:
    r = parse(load("nccl-2.23.4-collnet-sharp-hang-a100-issue311-excerpt.txt"))
    assert r.hello_passed is None and r.collnet_enable_env == 1 and not r.collnet_fallback
    assert len(r.collnet_connections) == 4
    assert r.collnet_connections[0] == CollNetConnection(0, 0, 0, "receive", "SHARP", 1, True)
    assert sorted(c.rank for c in r.collnet_connections) == [0, 2, 4, 6]
    assert r.trees == (SharpTree(36, "LLT", 0, 15), SharpTree(36, "SAT", 1, 47))
    assert r.sharp_ranks[0] == SharpRank(1, 4, "mlx5_4:1") and len(r.sharp_ranks) == 4
    assert r.unsupported_datatype and r.sharp_warnings == (
        "SHARP int8,uint8,bfloat16 Datatypes not supported",
    )
    assert r.collnet_active


def test_nccl_collnet_fallback_no_resource() -> None:
    r = parse(load("nccl-2.23.4-collnet-fallback-no-resource-a100-issue311-excerpt.txt"))
    assert r.collnet_fallback and not r.collnet_active
    assert r.sharp_warnings == ("NET/IB : SHARP coll init error: Cannot create SHARP job(-11)",)
    assert "SHArP Job init error: No resource" in r.sharp_errors
    assert r.collnet_channels == 3 and len(r.collnet_connections) == 4 and r.sharp_ranks == ()
    assert r.hello_passed is None  # libsharp lines inside an NCCL log do not make a sharp_hello verdict


def test_nccl_loaded_collnet_plugin() -> None:
    r = parse(load("nccl-2.26.2-loaded-collnet-plugin-sharp-v8-h100-issue319-excerpt.txt"))
    assert (r.collnet_plugin, r.collnet_plugin_api) == ("SHARP", "v8")
    assert r.collnet_connections == () and not r.collnet_active


def test_nccl_log_without_sharp() -> None:
    r = parse(load("nccl-allreduce-2node-h100-roce-no-sharp.txt"))
    assert r.collnet_plugin is None and r.sharp_devices == () and r.collnet_channels == 2
    assert r.hello_passed is None and not r.collnet_active and r.sharp_warnings == ()


def test_older_and_other_nccl_line_forms() -> None:
    text = "\n".join(
        [
            # NET/IB line of nccl-tests#311 (p2p_plugin.c marks SHARP-capable ports /SHARP)
            "gpu40:2900:2930 [1] NCCL INFO NET/IB : Using [0]mlx5_2:1/IB/SHARP [1]mlx5_0:1/IB/SHARP "
            "[2]mlx5_6:1/IB/SHARP [RO]; OOB ib0:10.159.0.40<0>",
            # NCCL 2.16-2.19 net.cc and 2.12 coll_net.cc formats
            "n1:1:2 [0] NCCL INFO NET/Plugin: Loaded coll plugin SHARP (v5)",
            "n1:1:2 [0] NCCL INFO CollNet 01 : 3 [send] via COLLNET/SHARP/2/GDRDMA",
            "n1:1:2 [0] NCCL INFO CollNet 02/1 : 3 [send] via COLLNET/SHARP/2/GDRDMA(PCI)",
            "n1:1:2 [0] NCCL INFO CollNet [send] : rank 3 collNetRank 1 collNetNranks 4 sent connect",
            "n1:1:2 [0] NCCL INFO Sharp rank 0/2 initialized on mlx5_5:1",
            "n1:1:2 [0] sharp_plugin.c:302 NCCL WARN SHARP group create: Streaming Tree lock failed (-18)",
            "n1:1:2 [0] init.cc:534 NCCL WARN Cannot initialize CollNet, using IB instead",
            "n1:1:2 [0] nvls.cc:1 NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory",
        ]
    )
    r = parse(text)
    assert r.sharp_devices == ("mlx5_2:1", "mlx5_0:1", "mlx5_6:1")
    assert (r.collnet_plugin, r.collnet_plugin_api) == ("SHARP", "v5")
    assert r.collnet_connections == (
        CollNetConnection(1, None, 3, "send", "SHARP", 2, True),
        CollNetConnection(2, 1, 3, "send", "SHARP", 2, True),
    )
    assert r.sharp_ranks == (SharpRank(0, 2, "mlx5_5:1"),) and r.collnet_fallback
    assert r.sharp_warnings == ("SHARP group create: Streaming Tree lock failed (-18)",)


def test_sharp_hello_and_nccl_concatenated() -> None:
    r = parse(
        load("sharp_hello-a100-cx6-passed.txt")
        + load("nccl-2.26.2-loaded-collnet-plugin-sharp-v8-h100-issue319-excerpt.txt")
    )
    assert r.hello_passed is True and r.collnet_plugin == "SHARP"


def test_hex_and_zero_padded_tree_ids() -> None:
    # nccl-rdma-sharp-plugins#151 prints "treeID:0x40"; a zero-padded decimal must not crash
    text = (
        "[C25L18:0:24972 - context.c:899] INFO sharp_job_id:12   tree_type:SAT tree_idx:1  "
        "treeID:0x40  caps:0x36\n"
        "[h:0:1 - c.c:1] INFO sharp_job_id:1 tree_type:LLT tree_idx:0 treeID:007 caps:0x5\n"
    )
    assert parse(text).trees == (SharpTree(12, "SAT", 1, 64), SharpTree(1, "LLT", 0, 7))


def test_launcher_prefixes_are_stripped() -> None:
    text = "".join(
        f"[1,0]<stdout>:{ln}\n" if i % 2 else f" 0: {ln}\n"
        for i, ln in enumerate(load("sharp_hello-a100-cx6-passed.txt").splitlines())
    )
    r = parse(text)
    assert r.hello_passed is True and r.trees == (SharpTree(41, "LLT", 0, 18),)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("hello world\n", 0),
        ("h:1:2 [0] NCCL INFO NET/Plugin: Loaded collnet plugin\n", 1),
        ("x\nh:1:2 [0] NCCL INFO CollNet 00/0 : x [receive] via COLLNET/SHARP/0/GDRDMA\n", 2),
        ("h:1:2 [0] NCCL INFO 3 coll channels, many collnet channels\n", 1),
        ("h:1:2 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to yes.\n", 1),
        ("h:1:2 [0] NCCL INFO SHARP rank zero initialized on mlx5_0:1\n", 1),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)
    parses_or_parse_error(parse, "h:1:2 [0] NCCL INFO " + text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
