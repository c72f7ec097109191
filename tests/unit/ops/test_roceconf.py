"""The ``roce:`` section init writes (ops/roceconf.py): on the demo-roce simulated hosts through the command
(their roce faults are single nodes or rails: the majority is the site's own section), and the questions when
no majority decides."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clusteraccept.__main__ import main
from clusteraccept.ops.roceconf import RailRoce, section_lines
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.site.load import load_site, parse_site


def test_init_on_the_roce_demo_writes_its_roce_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = load_site("demo-roce", REPO_ROOT / "site-configs")
    build_profiles(demo, tmp_path / "hosts")
    monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)
    out = tmp_path / "roce-init.yaml"
    argv = ["init", "--executor", "local", "--nodes", "node[1-4]", "--out", str(out), "--reports-dir"]
    assert (
        main([*argv, str(tmp_path / "r"), "--env", f"CLUSTERACCEPT_HOST_PROFILE={tmp_path / 'hosts'}"]) == 0
    )
    text = out.read_text()
    site = parse_site(out, yaml.safe_load(text))
    assert site.roce == demo.roce  # lossless 3, trust dscp, DSCP 26, ECN, CNP 48/6, MTU 4200
    assert "  mtu: 4200  # 31 of 32 rails\n" in text  # node4's rail with MTU 1500 (the demo's mtu_1500)
    assert "  trust: dscp  # 24 of 32 rails\n" in text  # node1 trusts PCP (trust_pcp)
    ((nt,),) = (site.node_types,)
    assert nt.link_layer == "Ethernet"
    ((want,),) = (demo.node_types,)
    assert [(r.hca, r.netdev) for r in nt.rails] == [(r.hca, r.netdev) for r in want.rails]  # mlx5_k, ethk


def _rail(**kw: object) -> RailRoce:
    base: dict[str, object] = {
        "where": "n1 rail0", "trust": "dscp", "pfc": (3,), "roce_dscp": 26, "roce_dscp_prios": (3,),
        "ecn": (None, None, None, True, None, None, None, None), "cnp_dscp": 48, "cnp_priority": 6,
        "mtu": 4200,
    }  # fmt: skip
    return RailRoce(**{**base, **kw})  # type: ignore[arg-type]


def test_pfc_on_no_single_priority_is_asked_and_the_section_left_commented() -> None:
    lines = section_lines([_rail(pfc=(3, 4)), _rail(pfc=(3, 4)), _rail()])
    assert lines[0].startswith("# roce:") and all(line.startswith("#") for line in lines)
    assert "# decide: roce.lossless_priority: PFC is enabled on [3, 4] (2 of 3 rails): which one?" in lines


def test_roce_dscp_not_mapped_to_the_lossless_priority_is_asked() -> None:
    lines = section_lines([_rail(roce_dscp=0, roce_dscp_prios=(0,))] * 2)
    assert lines[0].startswith("# roce:")
    assert (
        "# decide: roce.roce_dscp: RDMA-CM's default DSCP 0 maps to priority [0], not the lossless 3: which "
        "DSCP does RoCE traffic carry (NCCL_IB_TC)?" in lines
    )


def test_a_decided_section_loads() -> None:
    lines = section_lines([_rail(), _rail(), _rail(mtu=1500)])
    assert lines[0].startswith("roce:") and "  mtu: 4200  # 2 of 3 rails" in lines
    doc = yaml.safe_load("\n".join(lines))
    assert doc["roce"] == {"lossless_priority": 3, "trust": "dscp", "roce_dscp": 26, "ecn": True,
                           "cnp_dscp": 48, "cnp_priority": 6, "mtu": 4200}  # fmt: skip
