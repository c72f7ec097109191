"""EFA checks end to end in-process: simulated EFA hosts (real fi_info and /proc/<pid>/limits captures) ->
probe -> archive -> judge; the site keys that declare an EFA fabric; the NCCL transport judged on
aws-ofi-nccl's real log lines.

Each injected fault fails exactly its check and subject, naming the cause; everything else passes; missing
or damaged evidence is ERROR; a site with no EFA node type has no efa items.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks
from clusteraccept.checks.efa import incomplete
from clusteraccept.checks.launch import step_findings
from clusteraccept.errors import SiteConfigError
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import nccl_debug
from clusteraccept.plan.jobs import pair_steps, rail_hcas
from clusteraccept.plan.subjects import not_applicable
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site, parse_site
from clusteraccept.site.model import Site

from .test_topology import CONFIGS, collect, edited

NCCL_DEBUG = REPO_ROOT / "tests" / "data" / "nccl-debug"


def site(faults: list[dict[str, Any]]) -> Site:
    data = yaml.safe_load((CONFIGS / "demo-efa.yaml").read_text())
    data["sim"]["faults"] = faults
    return parse_site(CONFIGS / "demo-efa.yaml", data)


def failing(verdicts: list[Verdict]) -> dict[tuple[str, str], Verdict]:
    return {(v.check, v.subject): v for v in verdicts if v.outcome is not Outcome.PASS}


def test_healthy_efa_nodes_pass_and_a_missing_device_and_memlock_fail_exactly(tmp_path: Path) -> None:
    s = site(
        [
            {"kind": "efa_device_missing", "node": "node1", "gpu": 3},
            {"kind": "memlock_limited", "node": "node6"},
        ]
    )
    probe = collect(s, ("efa", "topology"), tmp_path)
    verdicts = checks.judge("efa", s, probe["efa"], s.nodes)
    assert len(verdicts) == 2 * 8
    bad = failing(verdicts)
    assert set(bad) == {("efa.devices", "node1"), ("efa.memlock", "node6")}
    assert bad["efa.devices", "node1"].message == (
        "node1: fi_info -p efa offers 7 EFA devices, node type efa-8gpu has 8; "
        "rail 3 (GPU3)'s rdmap92s0 absent"
    )
    assert "8388608 bytes (soft)" in bad["efa.memlock", "node6"].message
    ok = next(v for v in verdicts if (v.check, v.subject) == ("efa.devices", "node2"))
    assert ok.message.startswith("node2: 8 EFA devices (rdmap24s0, rdmap40s0, rdmap83s0, rdmap92s0, ...)")
    # the nccl steps of node1 are not judged: its missing device is the finding
    assert set(incomplete(s, probe["efa"])) == {"node1"}
    # topology leaves the missing device to efa.devices, and judges the rest as on any node
    topo = {(v.check, v.subject): v for v in checks.judge("topology", s, probe["topology"], s.nodes)}
    assert topo["topology.gpu_nic_affinity", "node1:gpu3"].outcome is Outcome.SKIP
    assert topo["topology.gpu_nic_affinity", "node1:gpu3"].message.startswith(
        "not judged: efa.devices on node1"
    )
    assert topo["topology.gpu_nic_affinity", "node1:gpu2"].outcome is Outcome.PASS
    assert {v.outcome for (c, _), v in topo.items() if c == "topology.nic_port"} == {Outcome.SKIP}


def test_no_efa_provider_a_port_down_and_broken_evidence(tmp_path: Path) -> None:
    s = site([])
    probe = collect(s, ("efa",), tmp_path)["efa"]

    def fi(ev: Any) -> bool:
        return bool(ev.source == "fi_info")

    none = edited(
        probe, "node2", fi, lambda e: replace(e, returncode=1, stdout="", stderr="fi_getinfo: -61\n")
    )
    lost = edited(
        none, "node3", fi, lambda e: replace(e, returncode=127, stdout="", stderr="fi_info: not found")
    )
    mangled = edited(lost, "node4", fi, lambda e: replace(e, stdout="provider: efa\nnonsense\n"))
    down = edited(
        mangled,
        "node5",
        lambda e: e.path == "/sys/class/infiniband/rdmap173s0/ports/1/state",
        lambda e: replace(e, stdout="1: DOWN\n"),
    )
    gone = [a for a in down if not (a[0].host == "node7" and a[0].source == "proc-limits")]
    bad = failing(checks.judge("efa", s, gone, s.nodes))
    assert set(incomplete(s, gone)) == {"node2", "node5"}  # no provider, a port down (node3/4: unknown)
    assert bad["efa.devices", "node2"].outcome is Outcome.FAIL
    assert (
        "libfabric offers no EFA provider (fi_info -p efa: fi_getinfo: -61)"
        in bad["efa.devices", "node2"].message
    )
    assert bad["efa.devices", "node3"].outcome is Outcome.ERROR  # nothing was measured
    assert (
        bad["efa.devices", "node4"].outcome is Outcome.ERROR
        and "line 2" in bad["efa.devices", "node4"].message
    )
    assert bad["efa.devices", "node5"].message == "node5: rdmap173s0 port 1 is 1: DOWN, expected ACTIVE"
    assert bad["efa.memlock", "node7"].outcome is Outcome.ERROR
    assert len(bad) == 5


def test_sites_without_efa_have_no_efa_items_and_efa_sites_pin_no_hca() -> None:
    demo = load_site("demo", CONFIGS)
    assert not_applicable(demo, "efa") == "demo has no EFA node type (node_types.<type>.fabric: efa)"
    efa = load_site("example-efa", CONFIGS)
    assert not_applicable(efa, "efa") is None
    assert efa.node_types[0].rails[0].nics == ("rdmap79s0", "rdmap80s0", "rdmap81s0", "rdmap82s0")
    assert efa.node_types[0].rail_line_Gbps(efa.node_types[0].rails[0]) == 400.0
    steps = pair_steps(efa, "p5-001", "p5-002", "pair_in_block", "sendrecv")
    assert [dict(st.env) for st in steps[:2]] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    assert rail_hcas(efa, ("p5-001",)) == {}


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        ({"link_layer": "InfiniBand"}, "node_types.efa-8gpu.link_layer", "no link_layer with fabric: efa"),
        # an EFA rail map under fabric: tcpxo: its rails name GPU NICs as netdevs, never devices
        ({"fabric": "tcpxo"}, "node_types.efa-8gpu.rails.gpu0.nics", "no 'nics' on a tcpxo rail"),
        ({"efa": None}, "node_types.efa-8gpu.efa.devices", "a value (required key)"),
        ({"efa": {"devices": 4}}, "node_types.efa-8gpu.efa.devices", "at least the 8 EFA devices"),
        (
            {"rails": {"gpu0": {"hca": "rdmap24s0"}}},
            "node_types.efa-8gpu.rails.gpu0.hca",
            "no 'hca' on an EFA",
        ),
        ({"rails": {"gpu0": {"nics": ["a", "a"]}}}, "node_types.efa-8gpu.rails.gpu0.nics", "distinct"),
    ],
)
def test_efa_node_type_keys_are_validated(edit: dict[str, Any], key: str, expected: str) -> None:
    data = yaml.safe_load((CONFIGS / "demo-efa.yaml").read_text())
    data["node_types"]["efa-8gpu"].update(edit)
    with pytest.raises(SiteConfigError) as err:
        parse_site(CONFIGS / "demo-efa.yaml", data)
    assert key in str(err.value) and expected in str(err.value)


def test_roce_and_sharp_refused_on_an_efa_only_site_and_hca_on_an_ib_rail() -> None:
    data = yaml.safe_load((CONFIGS / "demo-efa.yaml").read_text())
    with pytest.raises(SiteConfigError, match=r"sharp\.enabled: expected false: SHARP needs"):
        parse_site(CONFIGS / "demo-efa.yaml", {**data, "sharp": {"enabled": True}})
    roce = yaml.safe_load((CONFIGS / "demo-roce.yaml").read_text())["roce"]
    with pytest.raises(SiteConfigError, match=r"roce: expected no roce section"):
        parse_site(CONFIGS / "demo-efa.yaml", {**data, "roce": roce})
    ib = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    ib["node_types"]["h100"]["rails"]["gpu0"] = {"nics": ["mlx5_0"]}
    with pytest.raises(SiteConfigError, match=r"rails\.gpu0\.nics: expected no 'nics' on a infiniband rail"):
        parse_site(CONFIGS / "demo.yaml", ib)
    ib = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    ib["node_types"]["h100"]["fabric"] = "roce"  # while link_layer says InfiniBand
    with pytest.raises(SiteConfigError, match=r"link_layer: expected the link layer of fabric roce"):
        parse_site(CONFIGS / "demo.yaml", ib)


def _transport(s: Site, text: str, nodes: str) -> dict[str, Any]:
    meta = {
        "subject": f"{nodes.replace(',', '-')}:rail0",
        "collective": "sendrecv",
        "nodes": nodes,
        "kind": "pair",
    }
    found = step_findings(s, meta, [], [], nccl_debug.parse(text), None)
    return {f.node: f for f in found if f.check == "nccl.transport"}


def test_transport_on_efa_names_why_nccl_took_sockets_from_the_real_fallback_log() -> None:
    text = (NCCL_DEBUG / "eks-g6e-ofi1.16.2-no-eligible-providers-fallback-net-socket.txt").read_text()
    data = yaml.safe_load((CONFIGS / "demo-efa.yaml").read_text())
    data["nodes"] = "llama-3-8b-node-0-0,node2"
    data["blocks"] = {"b": "llama-3-8b-node-0-0,node2"}
    data["sim"]["faults"] = []
    s = parse_site(CONFIGS / "demo-efa.yaml", data)
    f = _transport(s, text, "llama-3-8b-node-0-0,node2")["llama-3-8b-node-0-0"]
    assert f.ok is False and f.message == (
        "NET/Socket: NCCL fell back to TCP sockets: aws-ofi-nccl 1.16.2 found no EFA provider (NET/OFI 'No "
        "eligible providers were found'; the job's libfabric, e.g. a container's, may lack the efa provider)"
    )
    pre = "node2:1:1 [0] NCCL INFO"
    sock = f"{pre} Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    missing = f"{pre} NET/Plugin: Could not find: libnccl-net.so.\n{sock}"
    f = _transport(s, missing, "llama-3-8b-node-0-0,node2")["node2"]
    assert f.ok is False and "no net plugin loaded (NET/Plugin: could not find libnccl-net.so)" in f.message
    ib = f"{pre} Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0/GDRDMA\n"
    assert _transport(s, ib, "llama-3-8b-node-0-0,node2")["node2"].message == (
        "NET/IB, not aws-ofi-nccl (NET/Libfabric)"
    )
    ofi = f"{pre} NET/OFI Selected provider is efa, fabric is efa (found 8 nics)\n" + ib.replace(
        "IB/0", "Libfabric/0"
    )
    f = _transport(s, ofi, "llama-3-8b-node-0-0,node2")["node2"]
    assert f.ok is True and f.message == "over NET/Libfabric"
    tcp = ofi.replace("provider is efa,", "provider is tcp,")
    f = _transport(s, tcp, "llama-3-8b-node-0-0,node2")["node2"]
    assert f.ok is False and f.message == "aws-ofi-nccl selected libfabric provider tcp, not efa"


def test_nic_of_an_efa_rail_step_read_from_aws_ofi_nccl_nic_groups() -> None:
    s = site([])
    pre = "node2:1:1 [0] NCCL INFO"
    text = (
        f"{pre} NET/OFI NIC group 0 device #0 0000:18:00.0\n"
        f"{pre} NET/OFI NIC group 1 device #0 0000:28:00.0\n"
        f"{pre} Channel 00/0 : 0[3] -> 1[3] [send] via NET/Libfabric/1/GDRDMA\n"
    )
    pci = {"node2": {"0000:18:00.0": "rdmap24s0", "0000:28:00.0": "rdmap40s0"}}
    meta = {"subject": "node1-node2:rail1", "collective": "sendrecv", "nodes": "node1,node2", "kind": "pair"}
    meta["rail"] = "1"
    found = step_findings(s, meta, [], [], nccl_debug.parse(text), None, pci)
    nic = {f.node: f for f in found if f.check == "launch.nic"}
    assert nic["node2"].ok is True and nic["node2"].message == "used rdmap40s0"
    assert nic["node1"].ok is None  # no line of node1's in this log
    meta["rail"], meta["subject"] = "0", "node1-node2:rail0"  # rail 0's step went through rail 1's device
    nic = {
        f.node: f
        for f in step_findings(s, meta, [], [], nccl_debug.parse(text), None, pci)
        if f.check == "launch.nic"
    }
    assert (
        nic["node2"].ok is False
        and nic["node2"].message == "used rdmap40s0, not rail 0's device rdmap24s0: rdmap40s0"
    )
    nic = {
        f.node: f
        for f in step_findings(s, meta, [], [], nccl_debug.parse(text), None, {})
        if f.check == "launch.nic"
    }
    assert (
        nic["node2"].ok is None and "PCI addresses of this node's devices are unknown" in nic["node2"].message
    )
