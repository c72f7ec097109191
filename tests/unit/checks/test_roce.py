"""RoCE checks end to end in-process: simulated host profiles (real captures) -> probes -> archive -> judge.

Every injected fault must fail exactly its check on exactly its subjects, with an engineer's message; healthy
rails pass; a site or host without RoCE skips with the reason.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks, flow
from clusteraccept.checks import roce
from clusteraccept.evidence import Evidence
from clusteraccept.jobs import node_entry
from clusteraccept.jobs.archive import archive_job, read
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.plan.subjects import rail_subject, subjects
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim import hosts as sim_hosts
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.sim.profile_roce import ethtool_text
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

CONFIGS = REPO_ROOT / "site-configs"
DATA = REPO_ROOT / "tests" / "data"
TWO_NODES: dict[str, Any] = {"nodes": "node[1-2]", "blocks": {"leaf1": "node[1-2]"}}
Archived = tuple[Evidence, str]


def site_with(**changes: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo-roce.yaml").read_text())
    data.update(changes)
    return parse_site(CONFIGS / "demo-roce.yaml", data)


def collect(
    site: Site,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    edit: Callable[[Path], None] | None = None,
    profile: bool = True,
    demo: bool = False,
) -> list[Archived]:
    """Build the site's host profiles, run the roce probe on each node, archive like flow.execute.

    ``demo``: every family's part of the profiles, as the demo builds them, and the evidence really archived;
    else only the roce part and archive paths named without writing them (this machine's disk is slow).
    """
    hosts = tmp_path / "hosts"
    if not demo:
        monkeypatch.setattr(sim_hosts, "PARTS", ("roce",))
    if profile:
        build_profiles(site, hosts)
        monkeypatch.setenv("CLUSTERACCEPT_HOST_PROFILE", str(hosts))
    else:
        monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)
    if edit is not None:
        edit(hosts)
    out: list[Archived] = []
    options = flow.probe_options(site)
    for node in site.nodes:
        monkeypatch.setenv("CLUSTERACCEPT_HOSTNAME", node)
        evs = [e for e in node_entry.collect_node(("roce",), options) if e.meta["check"] == "roce"]
        if demo:
            out += archive_job(tmp_path, "probe-nodes", evs)
        else:
            out += [(ev, f"raw/roce/{node}/{i}.json") for i, ev in enumerate(evs)]
    return out


def judged(site: Site, archived: list[Archived]) -> list[Verdict]:
    return checks.judge("roce", site, archived, site.nodes)


def by_outcome(verdicts: list[Verdict], outcome: Outcome) -> set[tuple[str, str]]:
    return {(v.check, v.subject) for v in verdicts if v.outcome is outcome}


def one(verdicts: list[Verdict], check: str, subject: str) -> Verdict:
    [v] = [v for v in verdicts if v.check == check and v.subject == subject]
    return v


def assert_complete(site: Site, verdicts: list[Verdict]) -> None:
    """Exactly one verdict per check and subject, subjects exactly as plan/subjects.py builds them."""
    got = [(v.check, v.subject) for v in verdicts]
    want = [(c, n) for n in subjects(site, "node") for c in roce.NODE_CHECKS]
    want += [(c, s) for s in subjects(site, "rail") for c in roce.RAIL_CHECKS]
    assert sorted(got) == sorted(want)


def rails(node: str, *indices: int) -> set[str]:
    return {rail_subject(node, k) for k in (indices or range(8))}


def test_demo_roce_each_fault_fails_exactly_its_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = site_with()
    verdicts = judged(site, collect(site, tmp_path, monkeypatch, demo=True))
    assert_complete(site, verdicts)
    expected = {("roce.trust", s) for s in rails("node1")} | {("roce.pfc", s) for s in rails("node2")}
    expected |= {("roce.ecn", s) for s in rails("node3")} | {("roce.mtu", "node4:rail5")}
    assert by_outcome(verdicts, Outcome.FAIL) == expected
    assert by_outcome(verdicts, Outcome.ERROR) == set()
    assert one(verdicts, "roce.trust", "node1:rail3").message == (
        "node1 rail3 (eth3): trust pcp, expected dscp (site roce.trust)"
    )
    assert one(verdicts, "roce.pfc", "node2:rail3").message == (
        "node2 rail3 (eth3): PFC enabled on priorities [4], expected exactly [3] (the lossless priority)"
    )
    assert one(verdicts, "roce.ecn", "node3:rail0").message == (
        "node3 rail0 (eth0): ECN on priority 3: reaction point (roce_rp) disabled, notification point "
        "(roce_np) enabled; expected both enabled"
    )
    mtu = one(verdicts, "roce.mtu", "node4:rail5")
    assert mtu.message == "node4 rail5 (eth5): MTU 1500, expected 4200 (site roce.mtu)" and mtu.value == 1500
    # the one root cause is reported once: with trust pcp the DSCP map is not in effect, so it skips
    dscp = one(verdicts, "roce.dscp_map", "node1:rail3")
    assert dscp.outcome is Outcome.SKIP and "see roce.trust" in dscp.message
    # healthy subjects of the faulted checks pass, with the evidence they were judged from
    assert one(verdicts, "roce.trust", "node2:rail0").outcome is Outcome.PASS
    assert one(verdicts, "roce.mtu", "node4:rail4").outcome is Outcome.PASS
    ecn_ok = one(verdicts, "roce.ecn", "node4:rail5")
    assert (
        ecn_ok.outcome is Outcome.PASS and ecn_ok.evidence and all(read(tmp_path, p) for p in ecn_ok.evidence)
    )


def test_healthy_site_passes_and_counters_skip_honestly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = site_with(sim={"faults": []})
    verdicts = judged(site, collect(site, tmp_path, monkeypatch))
    assert_complete(site, verdicts)
    counters = [v for v in verdicts if v.check == "roce.counters"]
    assert all(v.outcome is Outcome.PASS for v in verdicts if v.check != "roce.counters")
    # the probe's snapshot pair brackets no traffic: never a PASS, a SKIP saying so
    assert all(
        v.outcome is Outcome.SKIP
        and v.message.startswith("no traffic test in this run (select the nccl campaign with it")
        and "idle" in v.message
        for v in counters
    )
    v = one(verdicts, "roce.dscp_map", "node2:rail6")
    assert v.message == (
        "node2 rail6 (eth6): DSCP 26 (site roce_dscp; RDMA-CM default_roce_tos 106 >> 2) "
        "maps to priority 3 (the lossless priority)"
    )
    assert one(verdicts, "roce.gid", "node3:rail2").message == (
        "node3 rail2 (eth2): RoCE v2 GID index 3 (10.98.0.3) on mlx5_2 port 1"
    )
    assert (
        one(verdicts, "roce.cnp", "node1:rail0").message == "node1 rail0 (eth0): CNP DSCP 48, CNP priority 6"
    )
    assert one(verdicts, "roce.netdevs", "node4").value == 8


def test_fault_limited_to_one_rail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    faults = [
        {"kind": "pfc_wrong_prio", "node": "node2", "rail": 3},
        {"kind": "ecn_rp_off", "node": "node1", "rail": 0},
    ]
    site = site_with(**TWO_NODES, sim={"faults": faults})
    verdicts = judged(site, collect(site, tmp_path, monkeypatch))
    assert by_outcome(verdicts, Outcome.FAIL) == {("roce.pfc", "node2:rail3"), ("roce.ecn", "node1:rail0")}


def test_infiniband_only_site_skips_everything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    site = parse_site(CONFIGS / "demo.yaml", data)
    archived = collect(site, tmp_path, monkeypatch)
    assert archived == []  # the probe runs nothing on a site without a roce section
    verdicts = judged(site, archived)
    assert_complete(site, verdicts)
    assert {v.outcome for v in verdicts} == {Outcome.SKIP}
    assert {v.message for v in verdicts} == {"InfiniBand-only site: no roce section in the site file"}


def test_dcb_fallback_without_mlnx_qos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No mlnx_qos on the host: the probe asks iproute2 dcb; PFC and the APP table are judged from it."""
    synthetic = (DATA / "dcb-pfc" / "synthetic-pfc-stats-and-app-table.txt").read_text().splitlines()
    man_pfc = (DATA / "dcb-pfc" / "man-dcb-pfc8-example.txt").read_text()

    def no_mlnx_qos(hosts: Path) -> None:
        for node_dir in hosts.iterdir():
            (node_dir / "dcb-pfc.txt").write_text(
                man_pfc if node_dir.name == "node2" else "\n".join(synthetic[:4]) + "\n"
            )
            (node_dir / "dcb-app.txt").write_text("\n".join(synthetic[4:]) + "\n")
            index = json.loads((node_dir / "commands.json").read_text())
            index = [e for e in index if not e["match"].startswith("mlnx_qos")]
            index += [
                {"match": "dcb -N pfc show dev *", "stdout": "dcb-pfc.txt"},
                {"match": "dcb -N app show dev *", "stdout": "dcb-app.txt"},
            ]
            (node_dir / "commands.json").write_text(json.dumps(index))

    site = site_with(**TWO_NODES, sim={"faults": []})
    archived = collect(site, tmp_path, monkeypatch, edit=no_mlnx_qos)
    assert {ev.source for ev, _ in archived} >= {"mlnx_qos", "dcb-pfc"}
    verdicts = judged(site, archived)
    assert by_outcome(verdicts, Outcome.FAIL) == {("roce.pfc", s) for s in rails("node2")}
    assert one(verdicts, "roce.pfc", "node2:rail1").message == (
        "node2 rail1 (eth1): PFC enabled on priorities [6, 7], expected exactly [3] (the lossless priority)"
    )
    trust = one(verdicts, "roce.trust", "node1:rail1")
    assert trust.outcome is Outcome.PASS and "dcb" in trust.message
    assert one(verdicts, "roce.dscp_map", "node1:rail1").outcome is Outcome.PASS  # AF31 (26) -> 3


def test_unparsable_mlnx_qos_is_an_error_of_its_checks_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def garble(hosts: Path) -> None:
        node_dir = hosts / "node2"
        for e in json.loads((node_dir / "commands.json").read_text()):
            if e["match"] == "mlnx_qos -i eth2":
                text = (node_dir / e["stdout"]).read_text().replace("enabled     0", "enabled     x")
                (node_dir / e["stdout"]).write_text(text)

    site = site_with(**TWO_NODES, sim={"faults": []})
    verdicts = judged(site, collect(site, tmp_path, monkeypatch, edit=garble))
    errors = by_outcome(verdicts, Outcome.ERROR)
    assert errors == {(c, "node2:rail2") for c in ("roce.trust", "roce.pfc", "roce.dscp_map")}
    msg = one(verdicts, "roce.pfc", "node2:rail2").message
    assert msg.startswith("could not parse mlnx_qos output (raw/roce/node2/")
    assert msg.endswith(".json): line 16: expected PFC enabled value in 0..1, got 'x'")
    assert by_outcome(verdicts, Outcome.FAIL) == set()


def test_real_host_without_roce_netdev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No host profile: the probe runs on this machine for real; with no RoCE port the rail checks SKIP."""
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this machine has RDMA devices")
    site = site_with(nodes="node1", blocks={"all": "node1"}, sim={"faults": []})
    verdicts = judged(site, collect(site, tmp_path, monkeypatch, profile=False))
    assert_complete(site, verdicts)
    rail = [v for v in verdicts if v.subject != "node1"]
    assert {v.outcome for v in rail} == {Outcome.SKIP}
    assert one(verdicts, "roce.mtu", "node1:rail3").message.startswith(
        "node1 rail3 (eth3): no RoCE netdev: mlx5_3 port 1 absent (/sys/class/infiniband/mlx5_3/ports/1/"
    )
    # the site declares 8 Ethernet rails on this node: their absence is the node's finding
    node = one(verdicts, "roce.netdevs", "node1")
    assert node.outcome is Outcome.FAIL and node.message.startswith("node1: rail0: no RoCE netdev: mlx5_0")


def snapshot_text(ethtool: str, rail: int = 3, hca: str = "mlx5_3", netdev: str = "eth3") -> str:
    """A node's counter snapshot as probes/counters.py writes it, one RoCE rail."""
    return (
        f"## rail {rail} hca {hca} port 1 netdev {netdev}\n### link_layer\nEthernet\n"
        f"### ethtool-stats rc=0\n{ethtool.rstrip()}\n"
    )


def _counter_pair(before: str, after: str, window: str) -> list[Archived]:
    return [
        (
            Evidence(
                "node1",
                "counters",
                path="/sys/class/infiniband",
                stdout=snapshot_text(text),
                meta={"role": "counters", "window": window, "campaign": "c", "seq": seq, "t_s": t},
            ),
            f"raw/nccl/node1/counters_c-s00{seq}.json",
        )
        for seq, text, t in (("0", before, "10.0"), ("1", after, "12.5"))
    ]


def _counters(site: Site, evidence: list[Archived]) -> Verdict:
    rail = next(r for r in site.node_type("node1").rails if r.index == 3)
    r = roce._Rail("node1", rail, {"counters": evidence}, [])
    return roce.check_counters(site.roce, site, r, "node1:rail3")  # type: ignore[arg-type]


def test_counter_deltas_around_traffic() -> None:
    site = site_with()
    before = (DATA / "ethtool-stats" / "synthetic-mlx5-pfc-prio3-before.txt").read_text()
    after = (DATA / "ethtool-stats" / "synthetic-mlx5-pfc-prio3-after.txt").read_text()
    v = _counters(site, _counter_pair(before, after, "traffic"))
    assert v.outcome is Outcome.FAIL and v.message == (
        "node1 rail3 (eth3): discards on the lossless priority 3: +2 in 1 of 1 intervals | rx_discards_phy "
        "(the port dropped for lack of buffers): +2 in 1 of 1 intervals in the 2.5 s traffic window, "
        "expected none"
    )
    quiet = after.replace("rx_prio3_discards: 2", "rx_prio3_discards: 0").replace(
        "rx_discards_phy: 2", "rx_discards_phy: 0"
    )
    v = _counters(site, _counter_pair(before, quiet, "traffic"))
    assert v.outcome is Outcome.PASS and "pause on priority 3: +1332345" in v.message  # rx 41927 + tx 1290418
    # PFC frames on a priority that is not the lossless one fail, even in an idle window
    two = ethtool_text({3, 4})
    v = _counters(site, _counter_pair(two, two.replace("tx_prio4_pause: 0", "tx_prio4_pause: 12"), "idle"))
    assert v.outcome is Outcome.FAIL and v.message.startswith(
        "node1 rail3 (eth3): pause frames on priority 4 (not the lossless 3): +12 in 1 of 1 intervals in the "
        "2.5 s idle window"
    )
    v = _counters(site, _counter_pair(two, two, "idle"))
    assert v.outcome is Outcome.SKIP and "idle 2.5 s window clean" in v.message
    v = _counters(site, _counter_pair(two, two, "idle")[:1])
    assert v.outcome is Outcome.SKIP and v.message.startswith("no traffic test in this run")
    v = _counters(site, _counter_pair(after, before, "traffic"))
    assert v.outcome is Outcome.ERROR and "went backwards" in v.message
