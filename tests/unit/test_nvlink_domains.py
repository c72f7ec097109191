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
