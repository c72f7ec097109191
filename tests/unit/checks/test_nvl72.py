"""A GB200 NVL72 tray and rack (site-configs/example-gb200-nvl72.yaml), judged from simulated host evidence:
the Grace tray's GPU/NIC affinity (NODE, not PIX/PXB), and the rack as an NVLink domain (one clique and
cluster UUID, IMEX up everywhere; the MNNVL all_reduce not judged where either is not)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks
from clusteraccept.checks.nvlink_domain import judge_mnnvl
from clusteraccept.errors import SiteConfigError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import nvidia_smi_topo
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim import profile_topology
from clusteraccept.sim.prepare import fabric_of, simulate_step
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

from .test_topology import CONFIGS, collect, edited

EXAMPLE = CONFIGS / "example-gb200-nvl72.yaml"


def nvl72(faults: list[dict[str, Any]], trays: int = 2, **tray: Any) -> Site:
    """The example cut to two racks of ``trays`` trays (gb001... rack1 first), ``faults`` injected."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["nodes"] = f"gb[001-{2 * trays:03d}]"
    data["blocks"] = {"rack1": f"gb[001-{trays:03d}]", "rack2": f"gb[{trays + 1:03d}-{2 * trays:03d}]"}
    data["sim"]["faults"] = faults
    data["node_types"]["gb200-tray"].update(tray)
    return parse_site(EXAMPLE, data)


def by_key(verdicts: list[Verdict]) -> dict[tuple[str, str], Verdict]:
    return {(v.check, v.subject): v for v in verdicts}


def test_the_grace_tray_matrix_puts_each_nic_at_node_on_its_socket_and_sys_across() -> None:
    s = nvl72([])
    slots = profile_topology.layout("gb001", s, [])
    topo = nvidia_smi_topo.parse(profile_topology.grace_topo_text(slots, 18))
    assert topo.gpus == ("GPU0", "GPU1", "GPU2", "GPU3")
    assert topo.nics == ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
    assert [topo.link(0, n) for n in topo.nics] == ["NODE", "NODE", "SYS", "SYS"]
    assert [topo.link(3, n) for n in topo.nics] == ["SYS", "SYS", "NODE", "NODE"]
    assert topo.link(0, "GPU1") == "NV18" and topo.cpus(2) == frozenset(range(72, 144))
    moved = profile_topology.layout("gb001", s, [{"kind": "nic_wrong_numa", "gpu": 1}])
    topo = nvidia_smi_topo.parse(profile_topology.grace_topo_text(moved, 18))
    assert [topo.link(1, n) for n in topo.nics] == ["NODE", "SYS", "SYS", "SYS"]
    assert [topo.link(2, n) for n in topo.nics] == ["SYS", "NODE", "NODE", "NODE"]


def test_a_healthy_tray_passes_topology_at_node_and_a_nic_on_the_other_grace_fails(tmp_path: Path) -> None:
    s = nvl72([{"kind": "nic_wrong_numa", "node": "gb003", "gpu": 1}])
    probe = collect(s, ("topology",), tmp_path)["topology"]
    got = by_key(checks.judge("topology", s, probe, s.nodes))
    bad = {k: v for k, v in got.items() if v.outcome is not Outcome.PASS}
    assert set(bad) == {("topology.gpu_nic_affinity", "gb003:gpu1")}
    assert bad["topology.gpu_nic_affinity", "gb003:gpu1"].message == (
        "gb003 gpu1: rail NIC mlx5_1 is on NUMA node 1, GPU1 on NUMA node 0 "
        "(nvidia-smi topo: SYS, expected NODE)"
    )
    ok = got["topology.gpu_nic_affinity", "gb001:gpu3"]
    assert ok.message.startswith("gb001 gpu3: rail NIC mlx5_3 is NODE to GPU3 (its closest NIC), both on")
    assert got["topology.gpu_inventory", "gb002"].outcome is Outcome.PASS


def test_the_hgx_expectation_on_a_grace_tray_fails_every_gpu_saying_what_it_saw(tmp_path: Path) -> None:
    s = nvl72([], gpu_nic_path=["PIX", "PXB"])
    probe = collect(s, ("topology",), tmp_path)["topology"]
    verdicts = checks.judge("topology", s, probe, s.nodes)
    affinity = [v for v in verdicts if v.check == "topology.gpu_nic_affinity"]
    assert len(affinity) == 16 and {v.outcome for v in affinity} == {Outcome.FAIL}
    assert all("nvidia-smi topo: NODE, expected PIX or PXB" in v.message for v in affinity)


@pytest.mark.parametrize("value", [["PIX", "NEAR"], [], "node"])
def test_gpu_nic_path_is_refused_naming_the_key(value: object) -> None:
    with pytest.raises(SiteConfigError) as err:
        nvl72([], gpu_nic_path=value)
    assert "node_types.gb200-tray.gpu_nic_path" in str(err.value)
    assert "PIX, PXB, PHB, NODE, SYS" in str(err.value)


def test_a_tray_in_another_clique_and_imex_down_fail_their_racks_and_block_the_mnnvl_verdict(
    tmp_path: Path,
) -> None:
    s = nvl72([{"kind": "wrong_clique", "node": "gb002"}, {"kind": "imex_down", "node": "gb004"}], trays=3)
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    got = by_key(checks.judge("nvlink", s, probe, s.nodes))
    bad = {k for k, v in got.items() if v.outcome in (Outcome.FAIL, Outcome.ERROR)}
    assert bad == {("nvlink.clique", "rack1"), ("nvlink.imex", "rack2")}
    assert "gb002" in got["nvlink.clique", "rack1"].message
    # what the drain reads (ops/drain.py): the odd tray and the tray without IMEX, never the rack
    assert got["nvlink.clique", "rack1"].labels == {"culprits": "node:gb002"}
    assert got["nvlink.imex", "rack2"].labels == {"culprits": "node:gb004"}
    # the tray whose IMEX is down is the cause; the others' views of it are one line, not one per tray
    assert got["nvlink.imex", "rack2"].message.startswith(
        "IMEX domain rack2 not up: nvidia-imex inactive on gb004; 2 nodes (gb005, gb006) see Domain State "
        "DEGRADED: Node #"
    )
    for rack, cause in (("rack1", "nvlink.clique[rack1]"), ("rack2", "nvlink.imex[rack2]")):
        mnnvl = got["nvlink.mnnvl", rack]
        assert mnnvl.outcome is Outcome.SKIP and mnnvl.message.startswith(f"not judged: {cause}")
    assert got["nvlink.clique", "rack2"].outcome is Outcome.PASS
    assert got["nvlink.imex", "rack1"].outcome is Outcome.PASS
    # a tray has no fabric manager of its own: its probe does not ask for one
    assert not [e for e, _ in probe if e.source == "systemctl" and e.argv[-1] == "nvidia-fabricmanager"]


def test_two_trays_in_two_cliques_fail_the_rack_but_blame_neither(tmp_path: Path) -> None:
    s = nvl72([{"kind": "wrong_clique", "node": "gb002"}])
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    clique = by_key(checks.judge("nvlink", s, probe, s.nodes))["nvlink.clique", "rack1"]
    assert clique.outcome is Outcome.FAIL and clique.labels == {}  # 1 against 1: no odd one to drain


def test_a_rack_whose_fabric_did_not_register_a_tray_blames_the_switch_trays_not_a_local_service(
    tmp_path: Path,
) -> None:
    s = nvl72([{"kind": "fabric_manager_down", "node": "gb003"}])
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]
    fabric = by_key(checks.judge("nvlink", s, probe, s.nodes))["nvlink.fabric", "gb003"]
    assert fabric.outcome is Outcome.FAIL
    assert "the rack's NVLink fabric has not registered these GPUs" in fabric.message
    assert "nvidia-fabricmanager" not in fabric.message


def _domain_run(s: Site, rack: str) -> tuple[Evidence, str]:
    """The rack's MNNVL all_reduce as the simulated nccl-tests prints it (NCCL INFO on, the site's env)."""
    step = next(x for x in make_plan(s).steps() if x.kind == "domain" and x.subject == rack)
    ev = simulate_step(fabric_of(s, 0), step, dict(s.env))
    return replace(ev, meta={**ev.meta, "kind": "domain", "subject": rack}), f"raw/campaign-{rack}#r001"


def test_the_mnnvl_all_reduce_with_no_baseline_is_held_to_nvlink_not_only_to_the_network() -> None:
    s = nvl72([], trays=3)
    run = _domain_run(s, "rack1")
    ok = judge_mnnvl(s, "rack1", run, None)
    assert ok.outcome is Outcome.PASS and ok.value is not None and ok.value > 0.5 * 900
    assert "via P2P/MNNVL, at least 50% of NVLink and above the network's 50 GB/s" in ok.message
    # the same result where the site says NVLink carries twice as much: below half of it, named
    wider = nvl72([], trays=3, nvlink={"links_per_gpu": 40, "link_GBps": 53.125, "domain_nodes": 18})
    slow = judge_mnnvl(wider, "rack1", run, None)
    assert slow.outcome is Outcome.FAIL
    assert "below 50% of NVLink's 2000 GB/s (nccl.line_rate_floor.intra_node)" in slow.message


def test_a_tray_in_another_clique_makes_the_forced_mnnvl_all_reduce_fail_as_nccl_does() -> None:
    s = nvl72([{"kind": "wrong_clique", "node": "gb002"}], trays=3)
    v = judge_mnnvl(s, "rack1", _domain_run(s, "rack1"), None)
    assert v.outcome is Outcome.FAIL and "the domain all_reduce with NCCL_MNNVL_ENABLE=1 failed" in v.message
    assert judge_mnnvl(s, "rack1", None, None).outcome is Outcome.SKIP  # no campaign ran: said, not passed


def test_a_probe_that_could_not_run_is_an_error_and_blames_no_tray(tmp_path: Path) -> None:
    """systemctl not found, nvidia-smi -q unreadable: nothing is known about the tray, so the rack's verdict
    is ERROR naming why, and no tray is a culprit (a drain on it would take a healthy tray out)."""
    s = nvl72([], trays=3)
    probe = collect(s, ("nvlink",), tmp_path)["nvlink"]

    def gone(ev: Evidence) -> Evidence:
        return replace(ev, returncode=127, stdout="", stderr="bash: systemctl: command not found")

    probe = edited(probe, "gb002", lambda e: e.source == "systemctl", gone)
    probe = edited(
        probe, "gb005", lambda e: e.source == "nvidia-smi-q", lambda e: replace(e, stdout="garbage\n")
    )
    got = by_key(checks.judge("nvlink", s, probe, s.nodes))
    imex, clique = got["nvlink.imex", "rack1"], got["nvlink.clique", "rack2"]
    assert imex.outcome is Outcome.ERROR and imex.labels == {}
    assert "gb002 (systemctl is-active nvidia-imex not found or not executable" in imex.message
    assert (
        clique.outcome is Outcome.ERROR
        and clique.labels == {}
        and "gb005 (nvidia-smi -q unreadable" in (clique.message)
    )


def test_a_tray_with_no_evidence_is_not_tested_and_its_rack_judged_on_the_others(tmp_path: Path) -> None:
    s = nvl72([], trays=3)
    probe = [(e, p) for e, p in collect(s, ("nvlink",), tmp_path)["nvlink"] if e.host != "gb003"]
    got = by_key(checks.judge("nvlink", s, probe, s.nodes))
    for check in ("nvlink.clique", "nvlink.imex"):
        assert got[check, "rack1"].outcome is Outcome.PASS
        assert got[check, "rack1"].message.endswith("; not tested: gb003 (no evidence came back)")
    # judged for the nodes selected: a rack none of whose trays was selected has no verdicts at all
    mine = checks.judge("nvlink", s, probe, ("gb004", "gb005", "gb006"))
    assert {v.subject for v in mine if v.check.startswith(("nvlink.clique", "nvlink.imex"))} == {"rack2"}


def test_named_racks_split_across_slurm_blocks_are_refused_once_slurm_says(tmp_path: Path) -> None:
    s = nvl72([], trays=3)
    named = replace(s, nvlink_domains={"r1": ("gb001", "gb002", "gb003"), "r2": ("gb004", "gb005", "gb006")})
    with pytest.raises(SiteConfigError, match=r"nvlink_domains\.r1: expected nodes of one block"):
        named.with_slurm_blocks({"b1": ("gb001", "gb002"), "b2": ("gb003", "gb004", "gb005", "gb006")})


def test_the_sharp_runs_inside_a_rack_measure_the_network() -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["sharp"] = {"enabled": True, "hello": ["sharp_hello"]}
    s = parse_site(EXAMPLE, data)
    sharp = [x for x in make_plan(s, families=("sharp",)).steps() if x.family == "sharp"]
    assert sharp and all(dict(x.env).get("NCCL_MNNVL_ENABLE") == "0" for x in sharp)
