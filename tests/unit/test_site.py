"""Site files: the examples load; every kind of bad input is ONE line naming file, key, expected, got."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import PytestRunner

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.load import load_site, parse_site

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "site-configs"
GOOD = (CONFIGS / "example-h100-ib.yaml").read_text()


def test_examples_load() -> None:
    site = load_site("example-h100-ib", CONFIGS)
    assert len(site.nodes) == 32 and site.nodes[0] == "gpu001" and site.nodes[-1] == "gpu032"
    assert site.blocks["su2"][0] == "gpu017"
    nt = site.node_type("gpu005")
    assert nt.gpus == 8 and nt.rails[3].hca == "mlx5_5" and nt.rails[3].netdev == "ibp94s0"
    assert site.slurm.reservation == "bringup" and site.nccl.min_bytes == 1 << 30
    ref = site.baselines["nccl.busbw.sendrecv.pair_in_block.*"]
    assert (ref.ref, ref.lower, ref.upper, ref.unit) == (48.0, -0.08, None, "GB/s")
    roce = load_site("example-roce", CONFIGS).roce
    assert roce is not None and (roce.lossless_priority, roce.roce_dscp, roce.cnp_dscp, roce.mtu) == (
        3,
        26,
        48,
        4200,
    )


def _error(tmp_path: Path, text: str) -> str:
    f = tmp_path / "a.yaml"
    f.write_text(text)
    with pytest.raises(SiteConfigError) as exc:
        load_site(str(f), CONFIGS)
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith(f"{f}: "), msg
    return msg


def test_wrong_type_names_key_expected_got(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("gpu3: {hca: mlx5_5,", "gpu3: {hca: 7,"))
    assert "node_types.dgx-h100.rails.gpu3.hca: expected a string like 'mlx5_3', got 7" in msg


def test_misspelt_key_did_you_mean(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("  partition: gpu", "  partiton: gpu"))
    assert "slurm.partiton" in msg and "did you mean 'partition'?" in msg


def test_unknown_top_key(tmp_path: Path) -> None:
    assert "unknown key 'colour'" in _error(tmp_path, GOOD + "colour: red\n")


def test_bad_hostlist(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace('nodes: "gpu[001-032]"', 'nodes: "gpu[001-032"'))
    assert "nodes: expected a hostlist like 'node[001-128]', got 'gpu[001-032'" in msg


def test_yaml_syntax_error_has_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, "name: x\nslurm: [unclosed\n")
    assert "line " in msg and "expected valid YAML" in msg


def test_empty_file(tmp_path: Path) -> None:
    assert "got an empty file" in _error(tmp_path, "")


def test_block_node_not_in_nodes(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace('su2: "gpu[017-032]"', 'su2: "gpu[017-033]"'))
    assert "blocks.su2: expected nodes listed in 'nodes', got 'gpu033'" in msg


def test_node_type_node_not_in_nodes(tmp_path: Path) -> None:
    text = GOOD.replace("  dgx-h100:\n    gpus: 8\n", '  dgx-h100:\n    nodes: "gpu[001-033]"\n    gpus: 8\n')
    msg = _error(tmp_path, text)
    assert "node_types.dgx-h100.nodes: expected nodes listed in 'nodes', got 'gpu033'" in msg


def test_block_named_like_a_node(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace('su2: "gpu[017-032]"', 'gpu017: "gpu[017-032]"'))
    assert "blocks.gpu017: expected a block name that is not a node's, got 'gpu017'" in msg


def test_rail_gpu_out_of_range(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("gpu7: {hca: mlx5_11", "gpu9: {hca: mlx5_11"))
    assert "rails.gpu9: expected a GPU index below gpus=8, got 9" in msg


def test_boolean_is_not_a_number(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("step_timeout_s: 600", "step_timeout_s: yes"))
    assert "slurm.step_timeout_s: expected seconds >= 1, got True" in msg


def test_sbatch_time_is_refused_as_suite_managed(tmp_path: Path) -> None:
    bad = GOOD.replace('comment: "clusteraccept acceptance run"', 'time: "04:00:00"')
    msg = _error(tmp_path, bad)
    assert "slurm.sbatch_options.time: expected an option the suite does not set itself" in msg
    assert "got --time='04:00:00' (the plan sets each job's --time; cap it with slurm.time_limit_min)" in msg


def test_step_rate_must_be_positive(tmp_path: Path) -> None:
    msg = _error(tmp_path, GOOD.replace("step_timeout_s: 600", "step_timeout_s: 600\n  step_rate_per_s: 0"))
    assert "slurm.step_rate_per_s: expected a number of steps per second > 0, got 0" in msg


def test_unknown_site_lists_available() -> None:
    with pytest.raises(SiteConfigError) as exc:
        load_site("clusterZ", CONFIGS)
    assert "demo" in str(exc.value) and "example-roce" in str(exc.value)


def test_top_level_not_mapping() -> None:
    with pytest.raises(SiteConfigError, match="expected a mapping, got a list"):
        parse_site(Path("x.yaml"), [1, 2])


@pytest.mark.parametrize(
    ("site", "needle"),
    [
        ("nosuchsite", "expected a site among: demo"),
        (
            "{bad}",
            "slurm.partiton: expected a known key, got unknown key 'partiton' (did you mean 'partition'?)",
        ),
        ("{empty}", "got an empty file"),
    ],
)
def test_pytest_usage_error_exit_4(run_pytest: PytestRunner, tmp_path: Path, site: str, needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("  partition: gpu", "  partiton: gpu"))
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    site = site.replace("{bad}", str(bad)).replace("{empty}", str(empty))
    proc = run_pytest(str(REPO / "suites"), f"--site={site}", "-p", "no:xdist")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
