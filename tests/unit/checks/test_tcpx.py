"""GPUDirect-TCPX/TCPXO checks end to end in-process: simulated A3 Mega hosts -> probe -> archive -> judge;
the site keys that declare a TCPX(O) fabric (A3 High's NICs shared by two GPUs); the NCCL transport, the
plugin's version, failure and device lines judged on the real captures and on lines in the forms the
plugins' sources print (docs/fabrics-research.md part 2).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import checks
from clusteraccept.checks import jobenv
from clusteraccept.checks.hostfacts import NodeEvidence
from clusteraccept.checks.launch import step_findings
from clusteraccept.checks.tcpx import incomplete
from clusteraccept.errors import ParseError, SiteConfigError
from clusteraccept.evidence import Evidence
from clusteraccept.hostio import ENVIRON
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import nccl_debug, nccl_tests
from clusteraccept.plan.jobs import pair_steps, rail_hcas
from clusteraccept.plan.subjects import not_applicable
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site, parse_site
from clusteraccept.site.model import Site

from .test_slingshot import failing
from .test_topology import CONFIGS, collect, edited

DATA = REPO_ROOT / "tests" / "data" / "nccl-debug"
TCPX_REAL = "a3high-tcpx-v3.1.12-plugin-init-banner-rank-prefix-only.txt"
TCPXO_REAL = "a3mega-tcpxo-using-network-fastrak-16-ranks.txt"
# A3 High (cluster-toolkit a3high blueprint, gpu_rxq_configuration.textproto): each GPU NIC serves two GPUs
A3_HIGH_RAILS = {
    f"gpu{k}": {"netdev": nic, "rate_Gbps": 200}
    for k, nic in enumerate(
        ["enp6s0", "enp6s0", "enp12s0", "enp12s0", "enp134s0", "enp134s0", "enp140s0", "enp140s0"]
    )
}


def site(faults: list[dict[str, Any]], **top: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
    data["sim"]["faults"] = faults
    data.update(top)
    return parse_site(CONFIGS / "demo-tcpxo.yaml", data)


def profile_env(s: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the site's profile gives every job: in a real run the job's environment, here this process's."""
    for nt in s.node_types:
        for name, value in nt.tcp.env if nt.tcp else ():
            monkeypatch.setenv(name, value)


def test_healthy_nodes_pass_and_a_nic_down_and_a_lost_variable_fail_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site(
        [
            {"kind": "tcpx_nic_down", "node": "a3m001", "gpu": 3},
            {"kind": "tcpx_env_missing", "node": "a3m006", "setting": "NCCL_FASTRAK_NUM_FLOWS"},
        ]
    )
    profile_env(s, monkeypatch)
    probe = collect(s, ("tcpx", "topology", "gpudirect"), tmp_path)
    verdicts = checks.judge("tcpx", s, probe["tcpx"], s.nodes)
    assert len(verdicts) == 3 * 8
    bad = failing(verdicts)
    assert set(bad) == {("tcpx.devices", "a3m001"), ("tcpx.env", "a3m006")}
    assert bad["tcpx.devices", "a3m001"].message == "a3m001: GPU NIC enp14s0 (GPU3) link is down, expected up"
    assert bad["tcpx.env", "a3m006"].message.startswith(
        "a3m006: the job's environment lacks the site's TCPXO settings: unset: NCCL_FASTRAK_NUM_FLOWS"
    )
    ok = {(v.check, v.subject): v for v in verdicts}
    assert ok["tcpx.devices", "a3m002"].message == (
        "a3m002: 8 GPU NICs (enp6s0, enp7s0, enp13s0, enp14s0, enp134s0, enp135s0, enp141s0, enp142s0): "
        "each a PCI device, its link up"
    )
    assert ok["tcpx.env", "a3m002"].message == "a3m002: the job gets all 9 required variables"
    assert (
        ok["tcpx.rxdm", "a3m002"].message
        == "a3m002: the RxDM listens on @rxdm_uds_nic_mapping (/proc/net/unix)"
    )
    assert set(incomplete(s, probe["tcpx"])) == {"a3m001"}  # its nccl steps are not judged
    # topology reads the GPU NICs' PCI devices through /sys/class/net; ibstat has no port of them
    topo = {(v.check, v.subject): v for v in checks.judge("topology", s, probe["topology"], s.nodes)}
    assert topo["topology.gpu_nic_affinity", "a3m002:gpu5"].outcome is Outcome.PASS
    assert "enp135s0" in topo["topology.gpu_nic_affinity", "a3m002:gpu5"].message
    assert {v.outcome for (c, _), v in topo.items() if c == "topology.nic_port"} == {Outcome.SKIP}
    assert "judged by tcpx.devices" in topo["topology.nic_port", "a3m002:rail0"].message
    # gpudirect: ACS judged on the GPU <-> GPU NIC path; the ibverbs checks say why they do not apply
    gd = {(v.check, v.subject): v for v in checks.judge("gpudirect", s, probe["gpudirect"], s.nodes)}
    assert gd["gpudirect.acs", "a3m002:gpu1"].outcome is Outcome.PASS
    assert gd["gpudirect.peermem", "a3m002"].outcome is Outcome.SKIP
    assert "a GPU NIC is no ibverbs device" in gd["gpudirect.peermem", "a3m002"].message
    assert gd["gpudirect.write_bw", "a3m002:rail0"].outcome is Outcome.SKIP


def test_a_gpu_nic_missing_not_pci_or_unread_and_a_state_that_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site([])
    profile_env(s, monkeypatch)
    probe = collect(s, ("tcpx",), tmp_path)["tcpx"]

    def state_of(nic: str) -> Any:
        return lambda e: e.path == f"/sys/class/net/{nic}/operstate"

    gone = edited(probe, "a3m002", state_of("enp7s0"), lambda e: replace(e, returncode=1, stdout=""))
    odd = edited(gone, "a3m003", state_of("enp6s0"), lambda e: replace(e, stdout="unknown\n"))
    virtual = edited(
        odd,
        "a3m004",
        lambda e: e.path == "/sys/class/net/enp13s0/device",
        lambda e: replace(e, returncode=1, stdout=""),
    )
    unread = [
        a for a in virtual if not (a[0].host == "a3m005" and a[0].path == "/sys/class/net/enp6s0/operstate")
    ]
    bad = failing(checks.judge("tcpx", s, unread, s.nodes))
    assert bad["tcpx.devices", "a3m002"].outcome is Outcome.FAIL
    assert bad["tcpx.devices", "a3m002"].message == (
        "a3m002: GPU NIC enp7s0 (GPU1): no such network device in /sys/class/net"
    )
    assert bad["tcpx.devices", "a3m003"].outcome is Outcome.ERROR  # "unknown" says nothing of the link
    assert "operstate 'unknown' says nothing of its link" in bad["tcpx.devices", "a3m003"].message
    assert bad["tcpx.devices", "a3m004"].message == (
        "a3m004: GPU NIC enp13s0 (GPU2) is no PCI device (/sys/class/net/enp13s0/device leads nowhere)"
    )
    assert bad["tcpx.devices", "a3m005"].outcome is Outcome.ERROR
    assert set(incomplete(s, unread)) == {"a3m002", "a3m004"}  # the unknown ones are not findings
    assert len(bad) == 4


def test_a3_high_rails_share_a_nic_and_tcpx_keys_are_validated() -> None:
    data = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
    nt = data["node_types"]["a3-mega"]
    nt.update(fabric="tcpx", rails=A3_HIGH_RAILS, tcpx={"plugin_version": "3.1.9"})
    del nt["tcpxo"]
    high = parse_site(CONFIGS / "demo-tcpxo.yaml", data).node_types[0]
    assert high.family == "tcpx" and not high.verbs and high.tcp is not None
    assert high.tcp.plugin_version == "3.1.9" and high.tcp.env == ()
    assert [r.devices for r in high.rails[:3]] == [("enp6s0",), ("enp6s0",), ("enp12s0",)]
    assert high.rail_line_Gbps(high.rails[0]) == 100  # two GPUs share each 200 Gb/s NIC

    def refused(edit: dict[str, Any], key: str, expected: str) -> None:
        d = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
        d["node_types"]["a3-mega"].update(edit)
        with pytest.raises(SiteConfigError) as err:
            parse_site(CONFIGS / "demo-tcpxo.yaml", d)
        assert key in str(err.value) and expected in str(err.value), str(err.value)

    refused({"rails": {"gpu0": {"hca": "mlx5_0"}}}, "rails.gpu0.hca", "no 'hca' on a tcpxo rail")
    refused({"rails": {"gpu0": {"rate_Gbps": 200}}}, "rails.gpu0.netdev", "the GPU NIC's network interface")
    refused({"tcpx": {"env": {}}}, "node_types.a3-mega.tcpx", "no tcpx section unless fabric: tcpx")
    refused({"tcpxo": {"plugin_version": "v1"}}, "tcpxo.plugin_version", "a version like '1.0.17'")
    refused({"link_layer": "Ethernet"}, "link_layer", "no link_layer with fabric: tcpxo")
    ib = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    ib["node_types"]["h100"]["tcpxo"] = {}
    with pytest.raises(SiteConfigError, match=r"tcpxo: expected no tcpxo section unless fabric: tcpxo"):
        parse_site(CONFIGS / "demo.yaml", ib)


def test_sites_without_tcpx_have_no_items_and_tcpx_rails_pin_no_hca() -> None:
    assert not_applicable(load_site("demo", CONFIGS), "tcpx") == (
        "demo has no GPUDirect-TCPX(O) node type (node_types.<type>.fabric: tcpx or tcpxo)"
    )
    ex = load_site("example-tcpxo", CONFIGS)
    assert not_applicable(ex, "tcpx") is None and not_applicable(ex, "slingshot") is not None
    steps = pair_steps(ex, ex.nodes[0], ex.nodes[1], "pair_in_block", "sendrecv")
    assert [dict(st.env) for st in steps[:2]] == [
        {"CUDA_VISIBLE_DEVICES": "0"},
        {"CUDA_VISIBLE_DEVICES": "1"},
    ]
    assert rail_hcas(ex, (ex.nodes[0],)) == {}


def test_real_tcpx_and_tcpxo_captures_parse() -> None:
    high = nccl_debug.parse((DATA / TCPX_REAL).read_text())
    assert high.networks == ("GPUDirectTCPX_v7",) and high.hosts == ()  # "[rank]" prefix only
    assert high.tcp_plugin_failures == () and high.tcp_plugin_versions == ()
    mega = nccl_debug.parse((DATA / TCPXO_REAL).read_text())
    assert mega.networks == ("FasTrak",) and mega.hosts == ("tcpxo-wb-0", "tcpxo-wb-1")


def _findings(s: Site, text: str, nodes: str, check: str) -> dict[str, Any]:
    meta = {"subject": f"{nodes.replace(',', '-')}:rail0", "collective": "sendrecv", "nodes": nodes}
    meta.update(kind="pair", rail="0")
    found = step_findings(s, meta, [], [], nccl_debug.parse(text), None)
    return {f.node: f for f in found if f.check == check}


# Lines in the forms the plugins print (format strings: docs/fabrics-research.md part 2; tcpxo's absl sink
# prefixes "NET/FasTrak <absl::FormatTime>: ")
T = "2026-12-05T10:00:00.123456+00:00"


def _fastrak(host: str, msg: str, level: str = "INFO") -> str:
    return f"{host}:7:7 [0] NCCL {level} NET/FasTrak {T}: {msg}\n"


def _good(host: str, version: str = "1.0.17", dev: int = 0, nic: str = "enp6s0") -> str:
    return (
        _fastrak(host, f"Initializing network FasTrak, version: {version}")
        + _fastrak(host, "RxDM ready")
        + _fastrak(
            host,
            "Initialized shim for GPU with CUDA index 0, FasTrak index 0, and pci_path: 0000:04:00.0, the "
            f"corresponding closest net device is: {dev} ({nic})",
        )
        + f"{host}:7:7 [0] NCCL INFO Using network FasTrak\n"
        + f"{host}:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/FasTrak/{dev}/GDRDMA\n"
    )


def test_transport_and_nic_on_tcpxo() -> None:
    s = site([], nodes="a,b", blocks={"g": "a,b"})
    f = _findings(s, _good("a") + _good("b"), "a,b", "nccl.transport")
    assert f["a"].ok is True and f["a"].message == "over NET/FasTrak"
    nic = _findings(s, _good("a") + _good("b", dev=4, nic="enp134s0"), "a,b", "launch.nic")
    assert nic["a"].ok is True and nic["a"].message == "used enp6s0"
    assert nic["b"].ok is False and nic["b"].message == "used enp134s0, not rail 0's GPU NIC enp6s0: enp134s0"
    # another plugin build than the site's
    old = _findings(s, _good("a", version="1.0.15") + _good("b"), "a,b", "nccl.transport")["a"]
    assert old.ok is False and old.message == "FasTrak plugin version 1.0.15, the site expects 1.0.17"
    # the receive-datapath manager down: FasTrak warns, then aborts the process (no fallback)
    down = (
        _fastrak("a", "Initializing network FasTrak, version: 1.0.17")
        + _fastrak("a", "Timeout: RxDM not ready on a after 30 seconds: UNAVAILABLE: x", "WARN")
        + _fastrak("a", "Plug-in core initialization failed (DEADLINE_EXCEEDED: x), aborting...", "WARN")
    )
    f = _findings(s, down, "a,b", "nccl.transport")["a"]
    assert f.ok is False and f.message.startswith(
        "the net plugin stopped the step: 'Timeout: RxDM not ready on a after 30 seconds: UNAVAILABLE: x': "
        "its receive-datapath manager (RxDM"
    )
    # what the step's output says when nothing but NCCL's own lines came out of it
    result = nccl_tests.parse(down)
    assert (
        result.failure
        == f"NCCL WARN NET/FasTrak {T}: Timeout: RxDM not ready on a after 30 seconds: UNAVAILABLE: x"
    )
    # no plugin on the library path: sockets, and why
    sock = (
        "a:7:7 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
        "a:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    f = _findings(s, sock, "a,b", "nccl.transport")["a"]
    assert f.ok is False and f.message == (
        "NET/Socket: NCCL fell back to TCP sockets: no net plugin loaded (NET/Plugin: could not find "
        "libnccl-net.so): Google's libnccl-net.so is not on the job's library path"
    )


def test_transport_and_nic_on_tcpx() -> None:
    data = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
    nt = data["node_types"]["a3-mega"]
    nt.update(fabric="tcpx", rails=A3_HIGH_RAILS, tcpx={"plugin_version": "3.1.9"})
    del nt["tcpxo"]
    data.update(nodes="a,b", blocks={"g": "a,b"})
    data["sim"]["faults"] = []
    s = parse_site(CONFIGS / "demo-tcpxo.yaml", data)
    # TCPX numbers its NICs by name (enp12s0 < enp134s0 < enp140s0 < enp6s0): GPU0's enp6s0 is device 3
    using = " [0]enp12s0:10.1.0.1<0> [1]enp134s0:10.2.0.1<0> [2]enp140s0:10.3.0.1<0> [3]enp6s0:10.4.0.1<0>"
    log = "".join(
        f"{h}:7:7 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.9.\n"
        f"{h}:7:7 [0] NCCL INFO NET/GPUDirectTCPX : Using{using}\n"
        f"{h}:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/GPUDirectTCPX_v7/{d}/GDRDMA\n"
        for h, d in (("a", 3), ("b", 0))
    )
    nic = _findings(s, log, "a,b", "launch.nic")
    assert nic["a"].ok is True and nic["a"].message == "used enp6s0"
    assert nic["b"].ok is False and nic["b"].message == "used enp12s0, not rail 0's GPU NIC enp6s0: enp12s0"
    assert _findings(s, log, "a,b", "nccl.transport")["a"].message == "over NET/GPUDirectTCPX_v7"
    # the RxDM's gpumem socket not there when the receiver imports its buffers (tcpx src/gpu/rx_pool.cu)
    where = "CuIpcMemfdHandle* GpumemImport(CUcontext, const char*, const char*):71"
    bad = (
        log + f"b:7:7 [0] {where} NCCL WARN unix client /tmp/get_gpu_fd_0000:04:00.0, gpumem fd client "
        "connect failed x\n"
    )
    f = _findings(s, bad, "a,b", "nccl.transport")["b"]
    assert f.ok is False and "receive-datapath manager (RxDM" in f.message
    assert "unix client /tmp/get_gpu_fd_0000:04:00.0" in f.message


def test_rxdm_on_tcpx_a_one_node_probe_job_and_unreadable_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TCPX's RxDM sockets are files in the job's prefix directory (the plugin's default /tmp where unset);
    a one-node probe job gets no RxDM from slurm-gcp's prolog: SKIP; grep failing is ERROR, not a finding."""
    data = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
    nt = data["node_types"]["a3-mega"]
    nt.update(fabric="tcpx", rails=A3_HIGH_RAILS, tcpx={})
    del nt["tcpxo"]
    data["sim"]["faults"] = [{"kind": "rxdm_down", "node": "a3m004"}]
    high = parse_site(CONFIGS / "demo-tcpxo.yaml", data)
    probe = collect(high, ("tcpx",), tmp_path / "high")["tcpx"]
    got = {(v.check, v.subject): v for v in checks.judge("tcpx", high, probe, high.nodes)}
    assert (
        got["tcpx.rxdm", "a3m001"].message == "a3m001: the RxDM's sockets are in /tmp (rx_rule_manager, ...)"
    )
    assert got["tcpx.rxdm", "a3m004"].outcome is Outcome.FAIL
    assert got["tcpx.rxdm", "a3m004"].message.startswith(
        "a3m004: no RxDM socket (rx_rule_manager) in /tmp (NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX unset: "
        "the plugin's default)"
    )
    # TCPXO: a probe job of one node, and grep that could not read /proc/net/unix
    s = site([])
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "1")
    one = collect(s, ("tcpx",), tmp_path / "one")["tcpx"]
    assert {v.outcome for v in checks.judge("tcpx", s, one, s.nodes) if v.check == "tcpx.rxdm"} == {
        Outcome.SKIP
    }
    monkeypatch.delenv("SLURM_JOB_NUM_NODES")
    probe = collect(s, ("tcpx",), tmp_path / "mega")["tcpx"]

    broken = edited(
        probe,
        "a3m003",
        lambda e: e.source == "rxdm-socket",
        lambda e: replace(e, returncode=2, stdout="", stderr="grep: /proc/net/unix: Permission denied"),
    )
    got = {(v.check, v.subject): v for v in checks.judge("tcpx", s, broken, s.nodes)}
    assert got["tcpx.rxdm", "a3m003"].outcome is Outcome.ERROR
    assert "Permission denied" in got["tcpx.rxdm", "a3m003"].message


def test_a_variable_any_value_will_do_and_the_a3_high_template() -> None:
    """``*``: set, any value (TCPX's /run/tcpx-<job id> differs per job); unset or empty fails."""
    wanted = (("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", "*"), ("NCCL_NET", "GPUDirectTCPX_v7"))

    def judged(lines: str) -> Verdict:
        ev = Evidence("n1", "job-env", path=ENVIRON, returncode=0, stdout=lines)
        return jobenv.verdict(
            "tcpx.env", "tcpx", "n1", wanted, NodeEvidence([(ev, "raw#x")]), "TCPX settings", "h"
        )

    ok = judged("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=/run/tcpx-4242\nNCCL_NET=GPUDirectTCPX_v7\n")
    assert ok.outcome is Outcome.PASS
    empty = judged("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX=\nNCCL_NET=Socket\n")
    assert empty.outcome is Outcome.FAIL and empty.message == (
        "n1: the job's environment lacks the site's TCPX settings: unset: "
        "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX; "
        "NCCL_NET=Socket (expected GPUDirectTCPX_v7) (h)"
    )
    ex = load_site("example-tcpx", CONFIGS)
    nt = ex.node_types[0]
    assert nt.fabric == "tcpx" and nt.tcp is not None and nt.tcp.plugin_version == "3.1.9"
    assert nt.tcp.env == ()  # cluster-toolkit's A3 High jobs set their own: nothing the site gives
    assert [r.netdev for r in nt.rails] == ["enp6s0"] * 2 + ["enp12s0"] * 2 + ["enp134s0"] * 2 + [
        "enp140s0"
    ] * 2
    assert set(dict(ex.nccl.accept_env)) == {"NCCL_ALGO", "NCCL_PROTO"}


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (f"h:1:1 [0] NCCL INFO NET/FasTrak {T}: Initializing network FasTrak, version:", "version: X.Y.Z"),
        (
            f"h:1:1 [0] NCCL INFO NET/FasTrak {T}: Initialized shim for GPU with CUDA index 0, FasTrak "
            "index 0, and pci_path: p, the corresponding closest net device is: two (enp6s0)",
            "closest net device is: D (NAME)",
        ),
        ("h:1:1 [0] NCCL INFO NET/GPUDirectTCPX ver.", "ver. X.Y.Z."),
        ("h:1:1 [0] NCCL INFO NET/GPUDirectTCPX : Using [0]enp12s0", "Using [0]IFNAME:ADDR"),
    ],
)
def test_a_damaged_plugin_version_or_device_line_is_refused_with_its_line_number(
    line: str, expected: str
) -> None:
    text = "h:1:1 [0] NCCL INFO NCCL version 2.28.7+cuda12.9\n" + line + "\n"
    with pytest.raises(ParseError) as err:
        nccl_debug.parse(text)
    assert "line 2" in str(err.value) and expected in str(err.value)
    # the control NIC's line and the default's are not device lists (tcpx src/connect.cc:902, 928)
    ok = "h:1:1 [0] NCCL INFO NET/GPUDirectTCPX : Using ctrl [ctrl]enp0s12:10.0.0.1<0>\n"
    ok += "h:1:1 [0] NCCL INFO NET/GPUDirectTCPX : Using default ctrl sockets\n"
    assert nccl_debug.parse(ok).tcp_net_devices == ()


def _high(nodes: str = "a,b") -> Site:
    data = yaml.safe_load((CONFIGS / "demo-tcpxo.yaml").read_text())
    nt = data["node_types"]["a3-mega"]
    nt.update(fabric="tcpx", rails=A3_HIGH_RAILS, tcpx={"plugin_version": "3.1.9"})
    del nt["tcpxo"]
    data.update(nodes=nodes, blocks={"g": nodes})
    data["sim"]["faults"] = []
    return parse_site(CONFIGS / "demo-tcpxo.yaml", data)


def test_tcpx_flow_steering_failure_blames_the_receiver_not_its_sender() -> None:
    """TCPX's init never asks its RxDM: the receiving node's flow-steering rule fails at the first
    connection (tcpx src/connect.cc), and its sender's connection fails with it; the receiver is the finding.
    WARN lines carry TCPX's __PRETTY_FUNCTION__ where NCCL's carry file:line (src/adapter/nccl/debug.h)."""
    s = _high()
    # the locations are the functions that print them (tcpx src/connect.cc:581, :416; src/net_tcpx.cc:675)
    steer = "ConnectionState UpdateFlowSteerRule(int, FlowSteerRuleOp, void*):581"
    where = "tcpxResult_t ConnectSocketWithRetryInternal(int*, int, socketAddress*, socketAddress*, int, "
    where += "sockCondFn, sockCondCtx*):416"
    text = (
        "a:7:7 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.9.\n"
        "b:7:7 [0] NCCL INFO NET/GPUDirectTCPX ver. 3.1.9.\n"
        "a:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/GPUDirectTCPX_v7/3/GDRDMA\n"
        f"b:7:7 [0] {steer} NCCL WARN update flow steering rule: local 10.4.0.2<38821> <- remote "
        "10.4.0.1<41342>, failed against receive-datapath-manager: UNAVAILABLE: x\n"
        f"a:7:7 [0] {where} NCCL WARN NET/GPUDirectTCPX failed to connect socket\n"
    )
    f = _findings(s, text, "a,b", "nccl.transport")
    assert f["b"].ok is False and "failed against receive-datapath-manager" in f["b"].message
    assert "its receive-datapath manager (RxDM" in f["b"].message
    assert f["a"].ok is None and f["a"].message == (
        "its connection failed because b's receive-datapath manager did not answer"
    )
    # the step's output of nothing but NCCL's lines: the first WARN, whatever its location's form
    assert nccl_tests.parse(text).failure is not None
    assert nccl_tests.parse(text).failure.startswith("NCCL WARN update flow steering rule")
    # NCCL_NET=GPUDirectTCPX_v7 (cluster-toolkit sets it) with no plugin: init fails, named
    gone = (
        "a:7:7 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
        "a:7:7 [0] net.cc:626 NCCL WARN Error: network GPUDirectTCPX_v7 not found.\n"
    )
    f = _findings(s, gone, "a,b", "nccl.transport")["a"]
    assert f.ok is False and f.message == (
        "NCCL_NET asks for network 'GPUDirectTCPX_v7', which NCCL did not find (the step failed at init): "
        "no net plugin loaded (NET/Plugin: could not find libnccl-net.so): Google's libnccl-net.so is not on "
        "the job's library path"
    )
    # with NCCL_GPUDIRECTTCPX_REPORT_LIFECYCLE=1 the plugin asks at init and says so (src/net_tcpx.cc)
    reg = (
        f"a:7:7 [0] {where} NCCL WARN NET/GPUDirectTCPX register failed against receive_datapath_manager, x\n"
    )
    assert "receive-datapath manager (RxDM" in _findings(s, reg, "a,b", "nccl.transport")["a"].message


def test_a_pinned_plugin_version_unlogged_or_mixed_and_a_rail_alignment_swap() -> None:
    s = site([], nodes="a,b", blocks={"g": "a,b"})
    unversioned = "".join(line for line in _good("a").splitlines(True) if "version:" not in line)
    f = _findings(s, unversioned + _good("b"), "a,b", "nccl.transport")["a"]
    assert f.ok is None and f.message == (
        "the site pins plugin version 1.0.17, and this node's log has no version line (NET subsystem)"
    )
    mixed = _good("a") + _fastrak("a", "Initializing network FasTrak, version: 1.0.15") + _good("b")
    f = _findings(s, mixed, "a,b", "nccl.transport")["a"]
    assert f.ok is False and f.message == "FasTrak plugin version 1.0.17, 1.0.15, the site expects 1.0.17"
    # FasTrak moved the connection to another NIC to keep rails aligned: the NIC it used is judged
    swap = _fastrak(
        "a",
        "Use netdev 4 (enp134s0) instead of 0 (enp6s0) to enforce rail alignment for connection for GPU with "
        "local FasTrak index [0] to remote FasTrak index [4]",
    )
    nic = _findings(s, _good("a") + swap + _good("b"), "a,b", "launch.nic")["a"]
    assert nic.ok is False and nic.message == "used enp134s0, enp6s0, not rail 0's GPU NIC enp6s0: enp134s0"


def test_evidence_missing_is_not_a_finding_and_topology_leaves_an_absent_nic_to_tcpx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site([])
    profile_env(s, monkeypatch)
    probe = collect(s, ("tcpx", "topology"), tmp_path)
    tcpx = [
        a
        for a in probe["tcpx"]
        if not (a[0].host == "a3m002" and a[0].path == "/sys/class/net/enp7s0/device")
        and not (a[0].host == "a3m003" and a[0].source == "job-env")
    ]
    got = {(v.check, v.subject): v for v in checks.judge("tcpx", s, tcpx, s.nodes)}
    assert got["tcpx.devices", "a3m002"].outcome is Outcome.ERROR  # a link never collected: unknown
    assert "enp7s0/device was not read" in got["tcpx.devices", "a3m002"].message
    assert got["tcpx.env", "a3m003"].outcome is Outcome.ERROR
    high = _high(",".join(s.nodes))
    probe_high = collect(high, ("tcpx",), tmp_path / "high")["tcpx"]
    no_env = [a for a in probe_high if not (a[0].host == "a3m004" and a[0].source == "job-env")]
    got = {(v.check, v.subject): v for v in checks.judge("tcpx", high, no_env, high.nodes)}
    assert got["tcpx.rxdm", "a3m004"].outcome is Outcome.ERROR  # its prefix is the job's own setting
    # topology: a GPU NIC gone is tcpx.devices' finding, not topology's too
    gone = [
        a
        for a in probe["topology"]
        if not (a[0].host == "a3m001" and a[0].path and a[0].path.startswith("/sys/class/net/enp14s0"))
    ]
    topo = {(v.check, v.subject): v for v in checks.judge("topology", s, gone, s.nodes)}
    assert topo["topology.nic_pcie_link", "a3m001:rail3"].outcome is Outcome.SKIP
    assert topo["topology.nic_pcie_link", "a3m001:rail3"].message == (
        "not judged: tcpx.devices on a3m001: GPU NIC enp14s0 absent"
    )


def test_the_loader_refuses_a_required_variable_the_site_file_sets_and_faults_of_another_fabric() -> None:
    data = yaml.safe_load((CONFIGS / "example-tcpxo.yaml").read_text())
    data["node_types"]["a3-mega"]["tcpxo"]["env"]["NCCL_FASTRAK_IFNAME"] = "enp6s0"
    with pytest.raises(SiteConfigError) as err:
        parse_site(CONFIGS / "example-tcpxo.yaml", data)
    assert str(err.value).endswith(
        "node_types.a3-mega.tcpxo.env.NCCL_FASTRAK_IFNAME: expected a variable the site's own profile or "
        "prolog gives jobs, not one this file sets, got set by setup[2] (the check would judge the suite's "
        "own setting)"
    )
    data = yaml.safe_load((CONFIGS / "example-tcpxo.yaml").read_text())
    data["env"] = {"NCCL_CROSS_NIC": "0"}
    with pytest.raises(SiteConfigError, match=r"tcpxo\.env\.NCCL_CROSS_NIC: .* got set by env "):
        parse_site(CONFIGS / "example-tcpxo.yaml", data)
    demo = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    demo["sim"]["faults"] = [{"kind": "net_plugin_missing", "node": "node1"}]
    with pytest.raises(SiteConfigError, match=r"sim\.faults\[0\]\.kind: expected a fault of a efa or"):
        parse_site(CONFIGS / "demo.yaml", demo)
