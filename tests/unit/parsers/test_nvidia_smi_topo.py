"""nvidia-smi topo -m parser on real captured outputs (tests/data/nvidia-smi-topo/SOURCES.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.errors import ParseError
from clusteraccept.parsers.nvidia_smi_topo import link_rank, parse

DATA = Path(__file__).parents[2] / "data" / "nvidia-smi-topo"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt")) if "mangled" not in p.name]


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_h200_vm_two_gpus_nv18_numa_na() -> None:
    t = parse(load("h200x2-vm-nv18-numa-na.txt"))  # tabs + ANSI underline in the header
    assert t.gpus == ("GPU0", "GPU1")
    assert t.nics == () and t.nic_labels == ()
    assert t.link("GPU0", "GPU1") == "NV18" and t.link(1, 0) == "NV18" and t.link(0, 0) == "X"
    assert t.nvlinks(0, 1) == 18
    assert t.columns == ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
    assert t.cpus("GPU0") == frozenset(range(32))
    assert t.numa(0) == 0 and t.numa("GPU1") == 0
    assert t.gpu_numa_id == (None, None)
    assert t.closest_nics(0) == ()


def test_h100_8nic_one_pix_nic_per_gpu() -> None:
    t = parse(load("h100-8nic-sglang30401.txt"))
    assert len(t.gpus) == 8 and t.nic_labels == tuple(f"NIC{i}" for i in range(8))
    assert t.nics == tuple(f"mlx5_{i}" for i in range(8))
    for g in range(8):
        assert t.closest_nics(g) == (f"mlx5_{g}",)
        assert t.link(g, f"NIC{g}") == "PIX" and t.link(f"mlx5_{g}", g) == "PIX"
    assert all(t.link(a, b) == "NV18" for a in range(8) for b in range(8) if a != b)
    assert t.link("GPU0", "NIC4") == "SYS" and t.link("NIC0", "NIC1") == "NODE"
    assert t.cpus(0) == frozenset(range(48)) | frozenset(range(96, 144))
    assert t.cpus(7) == frozenset(range(48, 96)) | frozenset(range(144, 192))
    assert [t.numa(g) for g in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert t.gpu_numa_id == (None,) * 8
    assert t.nic_device("NIC5") == "mlx5_5"


def test_dgx1_old_format_mlx5_columns_cpu_affinity_only() -> None:
    t = parse(load("dgx1-v100-mlx5cols-cpuaffinity-only.txt"))
    assert t.nic_labels == t.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert t.columns == ("CPU Affinity",)
    assert t.numa_affinity == (None,) * 8 and t.numa(0) is None
    assert t.link("GPU0", "GPU3") == "NV2" and t.link("GPU0", "GPU1") == "NV1"
    assert t.link("GPU0", "GPU5") == "SYS" and t.nvlinks(0, 5) == 0
    assert t.closest_nics(0) == ("mlx5_0",) and t.closest_nics("GPU2") == ("mlx5_1",)
    assert t.closest_nics(4) == ("mlx5_2",) and t.closest_nics(7) == ("mlx5_3",)
    assert t.link("mlx5_0", "mlx5_1") == "PHB"
    assert t.cpus(0) == frozenset(range(20)) | frozenset(range(40, 60))
    assert t.cpus("GPU4") == frozenset(range(20, 40)) | frozenset(range(60, 80))


def test_rtx6000_no_pix_closest_is_node_pair() -> None:
    t = parse(load("4x-rtx6000ada-2xcx7-4nic-asus.txt"))
    assert t.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert t.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert t.closest_nics(0) == ("mlx5_0", "mlx5_1")  # both NODE: two ports of one card
    assert t.closest_nics(3) == ("mlx5_2", "mlx5_3")
    assert t.link("NIC0", "NIC1") == "PIX" and t.link("NIC0", "NIC2") == "SYS"
    assert t.cpus(2) == frozenset(range(32, 64)) and t.numa(2) == 1 and t.numa(1) == 0


def test_h100_12nic_two_digit_nics_cpu_lists_three_pix_nics() -> None:
    t = parse(load("h100-12nic-cpulist-mooncake2039.txt"))  # "NVIDIA Topology: " noise line first
    assert t.nic_labels[-2:] == ("NIC10", "NIC11") and t.nics[-2:] == ("mlx5_10", "mlx5_11")
    assert t.closest_nics(0) == ("mlx5_0", "mlx5_1", "mlx5_2")
    assert t.closest_nics(4) == ("mlx5_6", "mlx5_7", "mlx5_8")
    assert t.closest_nics(7) == ("mlx5_11",)
    assert t.link("NIC11", "GPU7") == "PIX" and t.link("mlx5_11", "mlx5_11") == "X"
    assert t.cpu_affinity[0] == "4,6,8,10,12" and t.cpus(0) == frozenset({4, 6, 8, 10, 12})
    assert t.cpus(5) == frozenset({1, 3, 5, 7, 9, 11}) and t.numa(5) == 1


def test_h100_12nic_real_tabs_empty_nic_cells_numa_off() -> None:
    t = parse(load("h100-12nic-tabs-numaoff-slurmv4.txt"))  # shell prompt line first
    assert len(t.nics) == 12 and t.nics[10] == "mlx5_10"
    assert t.closest_nics(3) == ("mlx5_5",) and t.closest_nics(5) == ("mlx5_7",)
    assert t.closest_nics(7) == ("mlx5_11",)
    assert t.link("NIC3", "NIC4") == "PIX" and t.link("NIC9", "NIC10") == "PIX"
    assert all(t.cpus(g) == frozenset(range(192)) for g in range(8))
    assert {t.numa(g) for g in range(8)} == {0}


def test_mangled_real_paste_is_rejected_with_line() -> None:
    with pytest.raises(ParseError) as exc:
        parse(load("h100-12nic-tabs-mangled-paste-slurmv4.txt"))
    assert exc.value.line_no == 8 and exc.value.got == "PIXNODE"


def test_link_rank_order() -> None:
    order = ["X", "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"]
    assert [link_rank(x) for x in order] == sorted(link_rank(x) for x in order)
    assert link_rank("NV18") == link_rank("NV1") and link_rank("SOC") == link_rank("SYS")


def test_unknown_names_raise_keyerror() -> None:
    t = parse(load("h100-8nic-sglang30401.txt"))
    with pytest.raises(KeyError):
        t.link("GPU8", "GPU0")
    with pytest.raises(KeyError):
        t.cpus("NIC0")


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("hello\nworld\n", 0),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-31\n", 3),  # GPU1 row missing
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV18\t0-31\nGPU1\tNV18\t X \tzz\n", 3),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFOO\t0-31\n", 2),
        ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\tNV18\t X \t0-31\n", 2),  # X off the diagonal
        ("\tGPU0\tNIC0\nGPU0\t X \tPIX\nNIC0\tPIX\t X \n", 4),  # no NIC Legend
        ("\tGPU0\tCPU Affinity\tBOGUS\n", 1),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


def test_cli_prints_json() -> None:
    path = str(DATA / "h100-8nic-sglang30401.txt")
    out = subprocess.run(
        [sys.executable, "-m", "clusteraccept.parsers", "nvidia-smi-topo", path],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    d = json.loads(out)
    assert d["nics"][3] == "mlx5_3" and d["links"][0][8] == "PIX"


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_real_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
