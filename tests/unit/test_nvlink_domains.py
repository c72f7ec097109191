"""NVLink domains across nodes (issue 21): the site's nvlink_domains, and what the plan does with them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusteraccept.errors import SiteConfigError
from clusteraccept.plan.jobs import MNNVL, make_plan
from clusteraccept.site.load import load_site

REPO = Path(__file__).parents[2]
CONFIGS = REPO / "site-configs"


def _site(tmp_path: Path, **changes: object) -> Path:
    doc = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    doc["node_types"]["h100"]["nvlink"]["domain_nodes"] = 2
    doc["nvlink_domains"] = "blocks"
    doc.pop("sim")
    doc.update(changes)
    f = tmp_path / "racks.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_blocks_as_racks_plan_a_domain_collective_and_keep_network_steps_off_nvlink(tmp_path: Path) -> None:
    site = load_site(str(_site(tmp_path)), CONFIGS)
    assert site.nvlink_domains == {"leaf1": ("node1", "node2"), "leaf2": ("node3", "node4")}
    steps = make_plan(site).steps()
    domain = [s for s in steps if s.kind == "domain"]
    assert [(s.subject, s.nodes, s.family, dict(s.env)) for s in domain] == [
        ("leaf1", ("node1", "node2"), "nvlink", {MNNVL: "1"}),
        ("leaf2", ("node3", "node4"), "nvlink", {MNNVL: "1"}),
    ]
    for s in steps:
        if s.kind in ("pair", "block") and s.family == "nccl":
            inside = len({site.domain_of(n) for n in s.nodes}) < len(s.nodes)
            assert (dict(s.env).get(MNNVL) == "0") == inside, s.subject
            assert (f"{MNNVL}=0" in s.argv) == inside


def test_bad_domains_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SiteConfigError, match=r"nvlink_domains: expected every node of a .*'node3' in none"):
        load_site(str(_site(tmp_path, nvlink_domains={"rack1": "node[1-2]"})), CONFIGS)
    with pytest.raises(SiteConfigError, match=r"nvlink_domains\.rack1: expected nodes of one block"):
        load_site(
            str(_site(tmp_path, nvlink_domains={"rack1": "node[2-3]", "r2": "node1", "r3": "node4"})), CONFIGS
        )
    with pytest.raises(SiteConfigError, match=r"at most nvlink\.domain_nodes=2"):
        load_site(str(_site(tmp_path, nvlink_domains={"rack1": "node[1-3]", "rack2": "node4"})), CONFIGS)


# --- nvlink_domains: blocks with blocks: slurm (topology/block, a block per rack) ----------------------
CRUSOE = REPO / "tests" / "data" / "scontrol-topology" / "block-10x18-gb200-crusoe.txt"  # real, SOURCES.md


def _slurm_racks(tmp_path: Path, nodes: str) -> Path:
    doc = yaml.safe_load((CONFIGS / "example-gb200-nvl72.yaml").read_text())
    doc.update(nodes=nodes, blocks="slurm", nvlink_domains="blocks", simulated=False)
    for key in ("sim", "env", "tools"):
        doc.pop(key)
    f = tmp_path / "nvl72-slurm.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_slurm_blocks_are_the_racks_once_read(fake_slurm: object, tmp_path: Path) -> None:
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    fake_slurm.answer("scontrol", CRUSOE.read_text())  # type: ignore[attr-defined]
    site = load_site(str(_slurm_racks(tmp_path, "slurm-compute-node-[000-071]")), CONFIGS)
    assert site.nvlink_domains == {} and site.domains_are_slurm_blocks  # not known before Slurm says
    site = site.with_slurm_blocks(slurm_blocks(site))
    assert list(site.nvlink_domains) == ["block01", "block02", "block03", "block04"]
    assert site.nvlink_domains["block02"] == tuple(f"slurm-compute-node-{i:03d}" for i in range(18, 36))
    assert site.domain_of("slurm-compute-node-040") == "block03"
    domain = [s for s in make_plan(site).steps() if s.kind == "domain"]
    assert [(s.subject, len(s.nodes), dict(s.env)) for s in domain] == [
        (f"block0{i}", 18, {MNNVL: "1"}) for i in range(1, 5)
    ]


def test_a_tray_in_no_slurm_block_is_refused_not_guessed(fake_slurm: object, tmp_path: Path) -> None:
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    fake_slurm.answer("scontrol", CRUSOE.read_text())  # type: ignore[attr-defined]
    site = load_site(str(_slurm_racks(tmp_path, "slurm-compute-node-[000-017],gb-spare01")), CONFIGS)
    with pytest.raises(SiteConfigError) as err:
        site.with_slurm_blocks(slurm_blocks(site))
    assert str(err.value).startswith(f"{site.file}: nvlink_domains (blocks from scontrol show topology)")
    assert "every multi-node NVLink node in a block" in str(err.value) and "'gb-spare01' in none" in str(
        err.value
    )


def test_slurm_leaves_wider_than_a_rack_are_refused_as_domains(fake_slurm: object, tmp_path: Path) -> None:
    from clusteraccept.jobs.slurm_clients import slurm_blocks

    # topology/tree: a leaf of 36 trays is a network block, not an NVLink domain of 18
    fake_slurm.answer("scontrol", "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=gb[001-036]\n")  # type: ignore[attr-defined]
    site = load_site(str(_slurm_racks(tmp_path, "gb[001-036]")), CONFIGS)
    with pytest.raises(
        SiteConfigError, match=r"leaf1: expected at most nvlink\.domain_nodes=18 nodes, got 36"
    ):
        site.with_slurm_blocks(slurm_blocks(site))
