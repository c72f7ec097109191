"""Slingshot checks end to end in-process: simulated Slingshot hosts (the real `fi_info -p cxi` capture) ->
probe -> archive -> judge; the site keys that declare a Slingshot fabric; the NCCL transport and the
plugin's failures judged on real Slingshot logs (ALCF Polaris, CSCS Alps).

Each injected fault fails exactly its check and subject, naming the cause; everything else passes; missing
or damaged evidence is ERROR; a site with no Slingshot node type has no slingshot items.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks
from clusteraccept.checks.launch import step_findings
from clusteraccept.checks.slingshot import incomplete
from clusteraccept.errors import SiteConfigError
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import fi_info, nccl_debug
from clusteraccept.plan.jobs import pair_steps, rail_hcas
from clusteraccept.plan.subjects import not_applicable
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site, parse_site
from clusteraccept.site.model import Site

from .test_topology import CONFIGS, collect, edited

DATA = REPO_ROOT / "tests" / "data"
POLARIS = "polaris-2node-8rank-ofi1.9.1-aws-selected-provider-cxi-4nics-gdrdma-torn-line.txt"
FALLBACK = "polaris-2node-8rank-nccl2.20.5-no-plugin-fallback-net-socket-bond0-hsn.txt"
NOT_FOUND = "alps-net-plugin-ofi-could-not-find-network-aws-libfabric-not-found-cscs-docs.txt"


def site(faults: list[dict[str, Any]], **top: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo-slingshot.yaml").read_text())
    data["sim"]["faults"] = faults
    data.update(top)
    return parse_site(CONFIGS / "demo-slingshot.yaml", data)


def module_env(s: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the site's module gives every job: in a real run the job's environment, here this process's."""
    for nt in s.node_types:
        for name, value in nt.slingshot.env if nt.slingshot else ():
            monkeypatch.setenv(name, value)


def failing(verdicts: list[Verdict]) -> dict[tuple[str, str], Verdict]:
    return {(v.check, v.subject): v for v in verdicts if v.outcome is not Outcome.PASS}


def test_healthy_nodes_pass_and_a_missing_nic_a_link_down_and_a_lost_variable_fail_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site(
        [
            {"kind": "cxi_device_missing", "node": "nid001", "gpu": 2},
            {"kind": "slingshot_link_down", "node": "nid004", "gpu": 3},
            {"kind": "slingshot_env_missing", "node": "nid006", "setting": "FI_CXI_RX_MATCH_MODE"},
        ]
    )
    module_env(s, monkeypatch)
    probe = collect(s, ("slingshot", "topology", "gpudirect"), tmp_path)
    verdicts = checks.judge("slingshot", s, probe["slingshot"], s.nodes)
    assert len(verdicts) == 2 * 8
    bad = failing(verdicts)
    assert set(bad) == {
        ("slingshot.devices", "nid001"),
        ("slingshot.devices", "nid004"),
        ("slingshot.env", "nid006"),
    }
    assert bad["slingshot.devices", "nid001"].message == (
        "nid001: fi_info -p cxi offers 3 cxi devices, node type gh-4gpu has 4; rail 2 (GPU2)'s cxi2 absent"
    )
    assert bad["slingshot.devices", "nid004"].message == (
        "nid004: rail 3's hsn3 (cxi3) link is down, expected up"
    )
    assert bad["slingshot.env", "nid006"].message.startswith(
        "nid006: the job's environment lacks the site's Slingshot settings: unset: FI_CXI_RX_MATCH_MODE"
    )
    ok = {(v.check, v.subject): v for v in verdicts}
    assert ok["slingshot.devices", "nid002"].message == (
        "nid002: 4 cxi devices (cxi0, cxi1, cxi2, cxi3) offered by libfabric, every rail's among them, "
        "every rail's link up"
    )
    assert ok["slingshot.env", "nid002"].message == "nid002: the job gets all 8 required variables"
    # the nccl steps of nid001 and nid004 are not judged: the NIC short, the link down, are the finding
    assert set(incomplete(s, probe["slingshot"])) == {"nid001", "nid004"}
    # topology reads the cxi class, leaves the missing NIC to slingshot.devices and ibstat out
    topo = {(v.check, v.subject): v for v in checks.judge("topology", s, probe["topology"], s.nodes)}
    assert topo["topology.gpu_nic_affinity", "nid001:gpu2"].message == (
        "not judged: slingshot.devices on nid001: Slingshot NIC cxi2 absent"
    )
    assert topo["topology.gpu_nic_affinity", "nid002:gpu0"].message == (
        "nid002 gpu0: rail NIC cxi0 is NODE to GPU0 (its closest NIC), both on NUMA node 0"
    )
    assert {v.outcome for (c, _), v in topo.items() if c == "topology.nic_port"} == {Outcome.SKIP}
    assert {
        v.outcome for (c, s_), v in topo.items() if c == "topology.nic_pcie_link" and "nid001" not in s_
    } == {Outcome.PASS}
    # gpudirect: ACS judged on the GPU <-> cxi NIC path; the ibverbs checks say why they do not apply
    gd = {(v.check, v.subject): v for v in checks.judge("gpudirect", s, probe["gpudirect"], s.nodes)}
    assert gd["gpudirect.acs", "nid002:gpu1"].outcome is Outcome.PASS
    assert "between GPU1 and cxi1" in gd["gpudirect.acs", "nid002:gpu1"].message
    assert gd["gpudirect.peermem", "nid002"].outcome is Outcome.SKIP
    assert gd["gpudirect.write_bw", "nid002:rail0"].outcome is Outcome.SKIP
    assert "ibverbs" in gd["gpudirect.write_bw", "nid002:rail0"].message


def test_topology_judges_numa_alone_where_nvidia_smi_lists_no_cxi_nic(tmp_path: Path) -> None:
    s = site([{"kind": "nic_wrong_numa", "node": "nid005", "gpu": 1}])
    probe = collect(s, ("topology",), tmp_path)["topology"]

    def unlisted(text: str) -> str:  # the matrix with its NIC columns and legend renamed away
        return text.replace("cxi", "mlx5_")

    gone = edited(
        probe,
        "nid002",
        lambda e: e.source == "nvidia-smi-topo",
        lambda e: replace(e, stdout=unlisted(e.stdout)),
    )
    gone = edited(
        gone,
        "nid005",
        lambda e: e.source == "nvidia-smi-topo",
        lambda e: replace(e, stdout=unlisted(e.stdout)),
    )
    topo = {(v.check, v.subject): v for v in checks.judge("topology", s, gone, s.nodes)}
    v = topo["topology.gpu_nic_affinity", "nid002:gpu0"]
    assert v.outcome is Outcome.PASS and v.message == (
        "nid002 gpu0: rail NIC cxi0: both on NUMA node 0 (nvidia-smi topo -m does not list it, so its PCIe "
        "closeness is not judged)"
    )
    v = topo["topology.gpu_nic_affinity", "nid005:gpu1"]
    assert v.outcome is Outcome.FAIL and v.message == (
        "nid005 gpu1: rail NIC cxi1 is on NUMA node 1, GPU1 on NUMA node 0"
    )


def test_no_cxi_provider_and_broken_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = site([])
    module_env(s, monkeypatch)
    probe = collect(s, ("slingshot",), tmp_path)["slingshot"]

    def fi(ev: Any) -> bool:
        return bool(ev.source == "fi_info")

    real = (DATA / "fi_info" / "cxi-slingshot-cscs-not-working-fi_getinfo-61-enodata.txt").read_text()
    none = edited(probe, "nid002", fi, lambda e: replace(e, returncode=1, stdout="", stderr=real))
    lost = edited(
        none, "nid003", fi, lambda e: replace(e, returncode=127, stdout="", stderr="fi_info: not found")
    )
    mangled = edited(lost, "nid004", fi, lambda e: replace(e, stdout="provider: cxi\nnonsense\n"))
    gone = [a for a in mangled if not (a[0].host == "nid007" and a[0].source == "job-env")]
    bad = failing(checks.judge("slingshot", s, gone, s.nodes))
    assert set(incomplete(s, gone)) == {"nid002"}  # no provider (nid003/4: unknown)
    assert bad["slingshot.devices", "nid002"].outcome is Outcome.FAIL
    assert bad["slingshot.devices", "nid002"].message == (
        "nid002: libfabric offers no cxi provider (fi_info -p cxi: fi_getinfo: -61 (No data available))"
    )
    assert bad["slingshot.devices", "nid003"].outcome is Outcome.ERROR  # nothing was measured
    assert bad["slingshot.devices", "nid004"].outcome is Outcome.ERROR
    assert "line 2" in bad["slingshot.devices", "nid004"].message
    assert bad["slingshot.env", "nid007"].outcome is Outcome.ERROR
    assert len(bad) == 4


def test_real_fi_info_cxi_capture_parses() -> None:
    info = fi_info.parse((DATA / "fi_info" / "cxi-slingshot-cscs-working-single-entry.txt").read_text())
    assert info.providers() == ("cxi",) and info.devices("cxi") == ("cxi0",)
    assert info.entries[0].fabric == "cxi" and info.entries[0].protocol == "FI_PROTO_CXI"


def test_sites_without_slingshot_have_no_items_and_slingshot_rails_pin_no_hca() -> None:
    demo = load_site("demo", CONFIGS)
    assert not_applicable(demo, "slingshot") == (
        "demo has no Slingshot node type (node_types.<type>.fabric: slingshot)"
    )
    ex = load_site("example-slingshot", CONFIGS)
    assert not_applicable(ex, "slingshot") is None and not_applicable(ex, "efa") is not None
    nt = ex.node_types[0]
    assert nt.provider == "cxi" and nt.rails[3].nics == ("cxi3",) and nt.rails[3].netdev == "hsn3"
    assert nt.slingshot is not None and dict(nt.slingshot.env)["FI_CXI_RX_MATCH_MODE"] == "hybrid"
    steps = pair_steps(ex, ex.nodes[0], ex.nodes[1], "pair_in_block", "sendrecv")
    assert [dict(st.env) for st in steps[:2]] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    assert rail_hcas(ex, (ex.nodes[0],)) == {}


@pytest.mark.parametrize(
    ("edit", "key", "expected"),
    [
        ({"link_layer": "Ethernet"}, "node_types.gh-4gpu.link_layer", "no link_layer with fabric: slingshot"),
        ({"slingshot": None}, "node_types.gh-4gpu.slingshot.devices", "a value (required key)"),
        ({"slingshot": {"devices": 2}}, "node_types.gh-4gpu.slingshot.devices", "at least the 4 cxi devices"),
        (
            {"slingshot": {"devices": 4, "env": {"FI CXI": "1"}}},
            "node_types.gh-4gpu.slingshot.env",
            "a mapping of variable names to values",
        ),
        (
            {"rails": {"gpu0": {"hca": "cxi0"}}},
            "node_types.gh-4gpu.rails.gpu0.hca",
            "no 'hca' on a Slingshot",
        ),
        ({"efa": {"devices": 4}}, "node_types.gh-4gpu.efa", "no efa section unless fabric: efa"),
    ],
)
def test_slingshot_node_type_keys_are_validated(edit: dict[str, Any], key: str, expected: str) -> None:
    data = yaml.safe_load((CONFIGS / "demo-slingshot.yaml").read_text())
    data["node_types"]["gh-4gpu"].update(edit)
    with pytest.raises(SiteConfigError) as err:
        parse_site(CONFIGS / "demo-slingshot.yaml", data)
    assert key in str(err.value) and expected in str(err.value)
    ib = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    ib["node_types"]["h100"]["slingshot"] = {"devices": 8}
    with pytest.raises(SiteConfigError, match=r"slingshot: expected no slingshot section unless fabric"):
        parse_site(CONFIGS / "demo.yaml", ib)


def _findings(s: Site, text: str, nodes: str, check: str) -> dict[str, Any]:
    meta = {"subject": f"{nodes.replace(',', '-')}:rail0", "collective": "sendrecv", "nodes": nodes}
    meta["kind"] = "pair"
    found = step_findings(s, meta, [], [], nccl_debug.parse(text), None)
    return {f.node: f for f in found if f.check == check}


def _two(a: str, b: str) -> Site:
    return site([], nodes=f"{a},{b}", blocks={"g": f"{a},{b}"})


def test_transport_on_slingshot_from_the_real_polaris_and_alps_logs() -> None:
    debug = nccl_debug.parse((DATA / "nccl-debug" / POLARIS).read_text())
    assert debug.networks == ("AWS Libfabric",) and debug.ofi_nics == 4
    assert debug.of_host("ofi_providers", "x3200c0s19b0n0") == ("cxi",)
    s = _two("x3200c0s13b0n0", "x3200c0s19b0n0")
    f = _findings(
        s, (DATA / "nccl-debug" / POLARIS).read_text(), "x3200c0s13b0n0,x3200c0s19b0n0", "nccl.transport"
    )
    assert f["x3200c0s19b0n0"].ok is True
    assert f["x3200c0s19b0n0"].message.startswith("over NET/AWS Libfabric")
    # aws-ofi-nccl 1.9 prints no NIC group lines: which NIC a channel used cannot be said, not guessed
    nic = _findings(
        s, (DATA / "nccl-debug" / POLARIS).read_text(), "x3200c0s13b0n0,x3200c0s19b0n0", "launch.nic"
    )
    assert nic["x3200c0s19b0n0"].ok is None and "no NET/OFI NIC group lines" in nic["x3200c0s19b0n0"].message
    # the same job pair without the plugin: sockets, and why
    s = _two("x3006c0s19b1n0", "x3006c0s1b0n0")
    text = (DATA / "nccl-debug" / FALLBACK).read_text()
    f = _findings(s, text, "x3006c0s19b1n0,x3006c0s1b0n0", "nccl.transport")["x3006c0s1b0n0"]
    assert f.ok is False and f.message == (
        "NET/Socket: NCCL fell back to TCP sockets: no net plugin loaded (NET/Plugin: could not find "
        "libnccl-net.so): aws-ofi-nccl's libnccl-net.so is not on the job's library path"
    )
    # Alps with NCCL_NET set and the plugin not found: no fallback, the step fails at init
    s = _two("nid006365", "nid006366")
    text = (DATA / "nccl-debug" / NOT_FOUND).read_text()
    f = _findings(s, text, "nid006365,nid006366", "nccl.transport")
    assert f["nid006365"].ok is False and f["nid006365"].message == (
        "NCCL_NET asks for network 'AWS Libfabric', which NCCL did not find (the step failed at init): "
        "no net plugin loaded (NET/Plugin: could not find libnccl-net-ofi.so): aws-ofi-nccl's "
        "libnccl-net-ofi.so is not on the job's library path"
    )
    assert f["nid006366"].ok is None  # no line of that node's in this log
    # a provider other than cxi selected
    pre = "nid006366:1:1 [0] NCCL INFO"
    tcp = f"{pre} NET/OFI Selected provider is tcp, fabric is tcp (found 1 nics)\n"
    tcp += f"{pre} Channel 00/0 : 0[0] -> 1[0] [send] via NET/Libfabric/0\n"
    f = _findings(s, tcp, "nid006365,nid006366", "nccl.transport")["nid006366"]
    assert f.ok is False and f.message == "aws-ofi-nccl selected libfabric provider tcp, not cxi"


def test_a_netdev_that_is_not_its_nics_and_a_link_state_that_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site([])
    module_env(s, monkeypatch)
    probe = collect(s, ("slingshot",), tmp_path)["slingshot"]
    # nid002's rail map says hsn1 for cxi1, but hsn1 is cxi0's function (as a swapped map would read)
    swapped = edited(
        probe,
        "nid002",
        lambda e: e.path == "/sys/class/net/hsn1/device",
        lambda e: replace(
            e,
            stdout=next(
                x.stdout for x, _ in probe if x.host == "nid002" and x.path == "/sys/class/net/hsn0/device"
            ),
        ),
    )
    vague = edited(
        swapped,
        "nid003",
        lambda e: e.path == "/sys/class/net/hsn0/operstate",
        lambda e: replace(e, stdout="unknown\n"),
    )
    unread = [
        a for a in vague if not (a[0].host == "nid004" and a[0].path == "/sys/class/net/hsn2/operstate")
    ]
    bad = failing(checks.judge("slingshot", s, unread, s.nodes))
    assert set(bad) == {("slingshot.devices", n) for n in ("nid002", "nid003", "nid004")}
    v = bad["slingshot.devices", "nid002"]
    assert v.outcome is Outcome.FAIL and "rail 1's hsn1 is not cxi1's network device (PCI" in v.message
    assert bad["slingshot.devices", "nid003"].outcome is Outcome.ERROR
    assert "operstate 'unknown' says nothing of its link" in bad["slingshot.devices", "nid003"].message
    assert bad["slingshot.devices", "nid004"].outcome is Outcome.ERROR
    assert "its operstate was not read" in bad["slingshot.devices", "nid004"].message
    assert set(incomplete(s, unread)) == {"nid002"}  # only a finding un-judges a node's steps


def test_a_slingshot_rail_needs_its_netdev() -> None:
    data = yaml.safe_load((CONFIGS / "demo-slingshot.yaml").read_text())
    data["node_types"]["gh-4gpu"]["rails"]["gpu1"] = {"nics": ["cxi1"], "rate_Gbps": 200}
    with pytest.raises(
        SiteConfigError, match=r"rails\.gpu1\.netdev: expected the NIC's network device, like hsn0"
    ):
        parse_site(CONFIGS / "demo-slingshot.yaml", data)
