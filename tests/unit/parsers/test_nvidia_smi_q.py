"""nvidia-smi -q parser (driver, GPUs, their Fabric section) on real captures (tests/data/nvidia-smi-q/)."""

from __future__ import annotations

from pathlib import Path

from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given

from clusteraccept.parsers.nvidia_smi_q import fabric_section, parse

DATA = Path(__file__).parents[2] / "data" / "nvidia-smi-q"
WHOLE = DATA / "h200-1gpu-vm-driver580-fabric-na.txt"
EXCERPTS = sorted(p for p in DATA.glob("*.txt") if p != WHOLE)


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_h200_vm_whole_output_fabric_na() -> None:
    q = parse(WHOLE.read_text())
    assert q.driver_version == "580.159.04"
    assert [(g.bus_id, g.product, g.uuid) for g in q.gpus] == [
        ("00000000:00:06.0", "NVIDIA H200", "GPU-e78d2413-faeb-610a-17b5-e3af1bc13846")
    ]
    f = q.gpus[0].fabric
    assert f is not None and (f.state, f.status, f.clique_id, f.cluster_uuid) == ("N/A",) * 4
    assert dict(f.health)["Summary"] == "N/A" and len(f.health) == 7  # Health's sub-section, not the GPU's


def test_excerpts_insufficient_resources_gb200_unhealthy_in_progress() -> None:
    f = fabric_section(load("azhpc-images-506-insufficient-resources.txt"))  # "Fabric" at column 0
    assert (f.state, f.status, f.clique_id) == ("Completed", "Insufficient Resources", "0")
    assert f.cluster_uuid == "00000000-0000-0000-0000-000000000000" and f.health == ()
    f = fabric_section(load("dra-driver-626-gb200-unhealthy-grep-C3.txt"))  # '# command' and grep's '--'
    assert (f.state, f.status, f.clique_id) == ("Completed", "Success", "2")
    assert f.cluster_uuid == "dc6e40c4-d722-4357-9ba6-5291dd461278"
    assert f.health == (("Summary", "Unhealthy"), ("Bandwidth", "Full"))
    f = fabric_section(load("thamada-a40-r550-fabric-na-health-bandwidth-only.txt"))  # r550, then Processes
    assert (f.state, f.status, f.health) == ("N/A", "N/A", (("Bandwidth", "N/A"),))
    f = fabric_section(load("gpu-operator-2511-in-progress-r580.txt"))
    assert (f.state, f.status) == ("In Progress", "N/A") and dict(f.health)["Route Unhealthy"] == "N/A"


def test_a_cut_output_is_refused() -> None:
    lines = WHOLE.read_text().splitlines()
    two = "\n".join(lines).replace(
        "Attached GPUs                                          : 1", "Attached GPUs : 2"
    )
    err = assert_parse_error_at(parse, two, max(i for i, ln in enumerate(lines, 1) if ln.strip()))
    assert "2 GPU blocks" in err.expected
    assert_parse_error_at(parse, "Timestamp : now\n", 1)  # no banner: not nvidia-smi -q
    assert_parse_error_at(parse, "", 0)


def test_a_damaged_fabric_section_names_its_line() -> None:
    lines = WHOLE.read_text().splitlines()
    at = lines.index("        State                                          : N/A")
    bad = [*lines[:at], "        State is broken", *lines[at + 1 :]]
    assert_parse_error_at(parse, "\n".join(bad), at + 1)
    no_state = [*lines[:at], *lines[at + 1 :]]
    err = assert_parse_error_at(parse, "\n".join(no_state), at)  # the Fabric heading's line (1-based)
    assert "State" in err.expected
    assert_parse_error_at(fabric_section, "State : Completed\n", 1)


@FUZZ
@given(truncations([WHOLE.read_text()]))
def test_truncations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(mutations([WHOLE.read_text(), *(p.read_text() for p in EXCERPTS)]))
def test_mutations_parse_or_raise_parse_error(text: str) -> None:
    parses_or_parse_error(parse, text)
    parses_or_parse_error(fabric_section, text)


def test_other_sections_are_passed_over_but_an_indented_line_before_any_gpu_is_refused() -> None:
    """The lines of sections the parser does not read (~90% of a GPU's ~250) are skipped before any
    pattern is tried; that skip must not swallow a line no section can hold."""
    lines = WHOLE.read_text().splitlines()
    gpu = next(i for i, ln in enumerate(lines) if ln.startswith("GPU "))
    clocks = next(i for i, ln in enumerate(lines) if i > gpu and ln.startswith("        ") and ":" in ln)
    odd = [*lines[: clocks + 1], "        anything at all, no colon", *lines[clocks + 1 :]]
    assert parse("\n".join(odd)) == parse("\n".join(lines))  # another section's line: not read
    early = [*lines[:gpu], "        Product Name : before any GPU", *lines[gpu:]]
    err = assert_parse_error_at(parse, "\n".join(early), gpu + 1)
    assert "before an indented line" in err.expected
