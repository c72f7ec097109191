"""NCCL_DEBUG=INFO log parser: real logs and excerpts, forms from NCCL's source, errors, fuzzing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.parsers import cli as parse_cli
from clusteraccept.parsers import nccl_debug
from clusteraccept.parsers._nccl_debug_lines import NcclNetDevice
from clusteraccept.parsers.nccl_debug import NcclSocketIf, parse

DATA = Path(__file__).resolve().parents[2] / "data" / "nccl-debug"
H200 = (DATA / "allreduce-1node-2xh200-p2p-socket-noib.txt").read_text()
ROCE = (DATA / "allreduce-2node-h100-roce-mlx5_5-gdr0.txt").read_text()


def _read(name: str) -> nccl_debug.NcclDebug:
    return nccl_debug.parse((DATA / name).read_text())


def test_real_h200_single_node_p2p_socket() -> None:
    r = nccl_debug.parse(H200)
    assert (r.nccl_version, r.nccl_version_full, r.cuda_driver_version) == (
        "2.28.9",
        "2.28.9+cuda13.0",
        13000,
    )
    assert r.hosts == ("vm",)
    assert r.networks == ("Socket",) and r.network() == "Socket"
    assert r.ib_no_device and r.net_devices == () and r.link_layers() == frozenset()
    assert r.socket_interfaces == (NcclSocketIf("vm", "Socket", 0, "eth0", "192.0.2.2<0>"),)
    assert len(r.connections) == 48
    assert r.transports() == frozenset({"P2P/direct pointer"}) and r.families() == frozenset({"P2P"})
    c = r.connections[0]
    assert (c.line_no, c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction) == (
        272,
        0,
        0,
        1,
        0,
        None,
    )
    assert {c.channel for c in r.connections} == set(range(24))
    assert r.uses_gdrdma() is None and r.net_channels() == ()
    assert r.ring_gdr == (1, 1)
    assert not r.collnet_used() and not r.nvls_used() and r.nvls_channels == 0
    assert r.env == (("NCCL_NVLS_ENABLE", "0"),)
    assert r.warnings == () and r.dmabuf_gpus == ()


def test_real_h100_roce_two_nodes_gdr_off() -> None:
    r = nccl_debug.parse(ROCE)
    assert (r.nccl_version, r.nccl_version_full, r.cuda_driver_version) == ("2.26.2", "2.26.2+cuda.", 12040)
    assert r.network() == "IB" and not r.ib_no_device
    assert r.net_devices == (NcclNetDevice("MOC-R4PCC04U37", "IB", 0, "mlx5_5", 1, "RoCE"),)
    assert r.link_layers() == frozenset({"RoCE"}) and r.relaxed_ordering is True
    assert r.oob_interfaces == ("eno7np0",) and r.bootstrap_interfaces == ("eno7np0",)
    assert r.transports() == frozenset({"NET/IB"})
    net = r.net_channels()
    assert (
        len(net) == 4
        and {c.net_dev for c in net} == {1}
        and {c.direction for c in net} == {"send", "receive"}
    )
    assert [(c.src_rank, c.dst_rank) for c in net] == [(1, 0), (1, 0), (0, 1), (0, 1)]
    assert r.uses_gdrdma() is False and r.ring_gdr == (0,)
    assert r.dmabuf_gpus == ("MOC-R4PCC04U37:0",)
    assert dict(r.env)["NCCL_IB_HCA"] == "mlx5_5" and dict(r.env)["NCCL_IB_GID_INDEX"] == "3"
    assert not r.collnet_used()


def test_excerpt_nccl247_ipoib_socket_name_is_not_infiniband() -> None:
    r = _read("excerpt-nccl2.4.7-ipoib-socket-ib0-horovod1523.txt")
    assert r.nccl_version_full == "2.4.7+cuda10.0"  # the bare, unprefixed version line
    assert r.hosts == ("master_node", "secondary_node")
    assert {s.name for s in r.socket_interfaces} == {"ib0"} and len(r.socket_interfaces) == 2
    assert r.net_devices == (NcclNetDevice("master_node", "IB", 0, "mlx5_0", 1, "IB"),)
    assert r.relaxed_ordering is False and r.oob_interfaces == ("ib0",)


def test_excerpt_ibext_sharp_devices() -> None:
    r = _read("excerpt-nccl2.12.9-ibext-sharp-nccl988.txt")
    assert r.network() == "IBext" and r.nccl_version == "2.12.9"
    assert [d.device for d in r.net_devices] == [f"mlx5_{i}" for i in range(8)]
    assert all(d.link_layer == "IB" and d.sharp and d.net == "IB" for d in r.net_devices)
    assert r.bootstrap_interfaces == ("eth0",) and r.connections == ()


def test_excerpt_busid_brackets_all_gdrdma() -> None:
    r = _read("excerpt-nccl2.7-busid-gdrdma-nccl707.txt")
    assert len(r.connections) == 11 and r.uses_gdrdma() is True
    c = r.connections[2]
    assert (c.channel, c.conn_index, c.src_rank, c.dst_rank, c.direction, c.net_dev) == (
        1,
        None,
        3,
        2,
        "send",
        2,
    )
    assert {c.net_dev for c in r.net_channels()} == {0, 2, 4, 5}


def test_excerpt_plugin_net_name_without_gdrdma() -> None:
    r = _read("excerpt-ibext-v8-no-gdrdma-nccl1814.txt")
    assert r.transports() == frozenset({"NET/IBext_v8"}) and r.uses_gdrdma() is False
    assert {c.net for c in r.connections} == {"IBext_v8"} and {c.net_dev for c in r.connections} == {1, 2}


def test_excerpt_empty_hostname_prefix() -> None:
    r = _read("excerpt-empty-host-net-ib-gdr0-meshplugin56.txt")
    assert r.hosts == () and len(r.net_channels()) == 16 and r.uses_gdrdma() is False
    assert r.ring_gdr == (0,) and r.connections[0].host is None


# Synthetic (see tests/data/nccl-debug/SOURCES.md): one line per documented message form.
SYNTHETIC = (DATA / "synthetic-documented-forms.txt").read_text()


def test_synthetic_documented_forms() -> None:
    r = nccl_debug.parse(SYNTHETIC)
    assert r.nccl_version == "2.21.5" and r.hosts == ("node1",)
    roce = [d for d in r.net_devices if d.link_layer == "RoCE"]
    assert [(d.index, d.device, d.group) for d in roce] == [(0, "mlx5_0", 0), (1, "mlx5_1", 0)]
    assert [(d.device, d.rail, d.plane) for d in r.net_devices if d.link_layer == "IB"] == [
        ("mlx5_2", 3, None),
        ("mlx5_3", None, 2),
    ]
    assert r.link_layers() == frozenset({"IB", "RoCE"})
    assert [s.name for s in r.socket_interfaces] == ["ibs3", "eth0"]
    assert r.socket_interfaces[1].address == "fe80::1%eth0<0>"
    assert r.transports() == frozenset({"P2P/IPC", "P2P/CUMEM", "SHM", "NET/IB", "COLLNET/SHARP"})
    assert r.families() == frozenset({"P2P", "SHM", "NET", "COLLNET"})
    net = r.net_channels()[0]
    assert (net.proxy_rank, net.gdrdma, net.conn_index, net.net_dev) == (1, True, 1, 0)
    coll = r.connections[-1]
    assert (coll.transport, coll.dst_rank, coll.direction, coll.net) == (
        "COLLNET/SHARP",
        None,
        "send",
        "SHARP",
    )
    assert r.uses_gdrdma() is True and r.collnet_used() and r.nvls_used()
    assert (r.nvls_support, r.nvls_channels, r.nvls_connected) == (True, 16, True)
    assert [(g.enabled, g.hca, g.gpu, g.method) for g in r.gdr] == [
        (True, "mlx5_0", None, None),
        (False, "mlx5_2", None, None),
        (True, "mlx5_3", None, "nvidia-peermem"),
        (False, "0", "1b000", None),
    ]
    assert r.ring_gdr == ()  # "Connected all rings" without PXN/GDR (NCCL < 2.24)


def test_socket_only_with_ibs_interface_is_never_infiniband() -> None:
    text = (
        "h:1:2 [0] NCCL INFO NET/IB : No device found.\n"
        "h:1:2 [0] NCCL INFO NET/Socket : Using [0]ibs3:10.0.0.1<0>\n"
        "h:1:2 [0] NCCL INFO Using network Socket\n"
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    r = nccl_debug.parse(text)
    assert r.ib_no_device and r.net_devices == () and r.link_layers() == frozenset()
    assert r.transports() == frozenset({"NET/Socket"}) and r.uses_gdrdma() is False


def test_collnet_fallback_warning_and_launcher_prefixes() -> None:
    text = (
        "[1,0]<stdout>:n1:5:6 [0] NCCL INFO CollNet 00/0 : 0 [send] via COLLNET/SHARP/0\n"
        "0: n1:5:6 [0] transport.cc:464 NCCL WARN Cannot initialize CollNet, "
        "using point-to-point network instead\n"
    )
    r = nccl_debug.parse(text)
    assert r.collnet_init_failed and not r.collnet_used() and r.hosts == ("n1",)
    assert r.warnings == ("Cannot initialize CollNet, using point-to-point network instead",)


def test_cli_prints_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_cli.main(["nccl-debug", str(DATA / "allreduce-2node-h100-roce-mlx5_5-gdr0.txt")]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["net_devices"][0]["link_layer"] == "RoCE" and out["connections"][0]["via"] == "NET/IB/1"


def test_errors_name_their_line() -> None:
    head = "h:1:2 [0] NCCL INFO Using network IB\n"
    for bad in [
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/dir",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/1/GDR",
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [send] via COLLNET/SHARP/0",
        "h:1:2 [0] NCCL INFO Channel 00/0 : zero -> 1 via SHM/direct/direct",
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1 [RO]; OOB eth0:10.0.0.1<0>",
        "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/Ethernet; OOB eth0:10.0.0.1<0>",
        "h:1:2 [0] NCCL INFO NET/Socket : Using [0]eth0",
        "h:1:2 [0] NCCL INFO Using network ",
        "h:1:2 [0] NCCL INFO NCCL version two",
        "h:1:2 [0] NCCL INFO Connected all rings, use ring PXN 0 GDR x",
        "h:1:2 [0] NCCL INFO cudaDriverVersion abc",
    ]:
        assert_parse_error_at(nccl_debug.parse, head + bad + "\n# trailing table line\n", 2)


def test_no_nccl_line_at_all() -> None:
    table = "\n".join(line for line in H200.splitlines() if "NCCL" not in line)
    for text in ["", "hello\n", table]:
        assert_parse_error_at(nccl_debug.parse, text, 0)


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(nccl_debug.parse, text)


@FUZZ
@given(
    st.text(alphabet="h:1 [0]NCCL INFOWARN Channel/via NET/IB P2P SHM GDRDMA ->Using;OOB{}=\n", max_size=120)
)
def test_fuzz_near_miss(text: str) -> None:
    parses_or_parse_error(nccl_debug.parse, "h:1:2 [0] NCCL INFO " + text)


@FUZZ
@given(truncations([H200, ROCE, SYNTHETIC]), mutations([H200, ROCE, SYNTHETIC], insert=st.text(max_size=20)))
def test_fuzz_truncations_and_mutations(truncated: str, mutated: str) -> None:
    parses_or_parse_error(nccl_debug.parse, truncated, mutated)


def test_real_graph_lines_of_a_one_gpu_vm_nccl_2_28_9() -> None:
    """INIT,GRAPH,NET,ENV,TUNING on one H200 (tests/data/nccl-debug/SOURCES.md): the graphs the topology
    search found, 64 one-rank ring orders, a Trees line NCCL cut at its buffer's end, the socket network."""
    r = _read("h200-1gpu-vm-1rank-nccl2.28.9-topo-graph-env-socket.txt")
    assert [(g.kind, g.nchannels, g.type_intra, g.type_inter) for g in r.graphs] == [
        ("ring", 32, "LOC", "PIX"),
        ("tree", 32, "LOC", "PIX"),
    ]
    assert r.graphs[0].bw_intra_GBps == 60.0 and r.graphs[0].cross_nic == 0
    assert len(r.rings) == 64 and r.rings[0] == nccl_debug.NcclRing("vm", 0, 64, (0,))
    assert r.tree_channels == 47  # the line stops at "[47] -1/-1/-1->": the cut entry is not counted
    assert r.coll_channels == 64 and r.nvls_channels == 0 and not r.nvls_used()
    assert r.ib_no_device and r.networks == ("Socket",) and ("NCCL_NVLS_ENABLE", "0") in r.env


def test_real_intra_node_p2p_ipc_and_socket_across_nodes_nccl952() -> None:
    r = _read("2node-16rank-p2p-ipc-read-plus-net-socket-no-ib-nvidia-nccl952.txt")
    assert r.transports() == {"P2P/IPC", "NET/Socket"}
    socket = [c for c in r.connections if c.transport == "NET/Socket"]
    assert [(c.src_rank, c.dst_rank, c.direction, c.net_dev, c.channel) for c in socket] == [
        (15, 6, "send", 3, 3),
        (15, 6, "send", 3, 7),
    ]
    assert r.hosts == ()  # the poster redacted the host names to "<cluster_name>"


def test_real_shm_fallback_h800_nccl1609() -> None:
    r = _read("h800-4rank-shm-direct-direct-connected-all-rings-nvidia-nccl1609.txt")
    assert r.families() == {"SHM"} and r.hosts == ("tj5-sc-ai-h800r-dev01",)
    assert {(c.src_rank, c.dst_rank) for c in r.connections} == {(2, 3), (3, 2)}
    assert r.uses_gdrdma() is None  # nothing went over a network


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("Channel 00/24 : 0 x 1", "ring order"),
        ("Trees [0] 1/-1/-1->0->-1 [1] garbage", "tree entries"),
        ("Pattern 4, crossNic 0, nChannels twelve, bw 1/1, type NVL/PIX, sameChannels 1", "Pattern P"),
        ("Ring 00 : 0 -> x -> 1", "prev -> me -> next"),
    ],
)
def test_garbage_graph_lines_are_refused_at_their_line(line: str, expected: str) -> None:
    with pytest.raises(nccl_debug.ParseError) as exc:
        nccl_debug.parse(f"h:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda12.9\nh:1:1 [0] NCCL INFO {line}\n")
    assert exc.value.line_no == 2 and expected in exc.value.expected


def test_aws_ofi_nccl_1_4_on_p4d_selected_efa_network_aws_libfabric() -> None:
    d = parse((DATA / "p4d-ofi1.4.0aws-selected-provider-efa-no-nic-count-nvidia-nccl527.txt").read_text())
    assert d.networks == ("AWS Libfabric",) and d.of_host("ofi_providers", "ip-10-216-179-87") == ("efa",)
    assert d.ofi_versions == (("ip-10-216-179-87", "1.4.0aws"),) and d.ofi_nics is None  # 1.4: no count
    assert not d.ofi_no_provider and not d.ofi_init_failed
    assert set(d.hosts) == {"ip-10-216-178-255", "ip-10-216-179-87"}


def test_aws_ofi_nccl_without_efa_falls_back_to_sockets() -> None:
    d = parse((DATA / "eks-g6e-ofi1.16.2-no-eligible-providers-fallback-net-socket.txt").read_text())
    host = "llama-3-8b-node-0-0"
    assert d.net_plugins == ((host, "Libfabric"),) and d.of_host("ofi_versions", host) == ("1.16.2",)
    assert d.ofi_providers == () and d.ofi_no_provider == (host,) and d.ofi_init_failed == (host,)
    assert d.networks == ("Socket",) and d.transports() == frozenset({"NET/Socket"})
    assert d.ib_no_device and d.nccl_version == "2.27.3"


def test_ofi_selected_provider_with_nic_count_and_a_plugin_name_with_a_space() -> None:
    # the forms of aws-ofi-nccl 1.14+ ("Selected provider is %s, fabric is %s (found %d nics)",
    # src/nccl_ofi_net.cpp) and 1.6-1.13; NCCL's channel line with 1.12's name (src/transport/net.cc)
    pre = "ip-10-1-2-3:100:200 [0] NCCL INFO"
    text = "\n".join(
        [
            f"{pre} NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)",
            f"{pre} NET/OFI Selected Provider is efa (found 4 nics)",
            f"{pre} Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/3/GDRDMA",
        ]
    )
    d = parse(text)
    assert d.ofi_providers == (("ip-10-1-2-3", "efa"),) and d.ofi_nics == 4
    (c,) = d.connections
    assert (c.transport, c.net, c.net_dev, c.gdrdma) == ("NET/AWS Libfabric", "AWS Libfabric", 3, True)
    assert_parse_error_at(parse, f"{pre} NET/OFI Selected Provider is\n", 1)


def test_tcpx_and_fastrak_networks() -> None:
    d = parse((DATA / "a3mega-tcpxo-using-network-fastrak-16-ranks.txt").read_text())
    assert d.networks == ("FasTrak",) and set(d.hosts) == {"tcpxo-wb-0", "tcpxo-wb-1"}
    d = parse((DATA / "a3high-tcpx-v3.1.12-plugin-init-banner-rank-prefix-only.txt").read_text())
    assert d.networks == ("GPUDirectTCPX_v7",) and d.hosts == ()


def test_p5en_sixteen_nics_and_the_pci_devices_of_a_nic_group() -> None:
    d = parse((DATA / "excerpt-p5en-ofi-found-16-nics-nic-groups-nccl1597.txt").read_text())
    assert d.ofi_providers == (("8h200-3", "efa"),) and d.ofi_nics == 16 and d.networks == ("Libfabric",)
    assert d.ofi_nic_groups == (("8h200-3", 0, "0000:56:00.0"), ("8h200-3", 0, "0000:55:00.0"))
    bad = "8h200-3:6310:6318 [0] NCCL INFO NET/OFI NIC group 0 device #1 somewhere\n"
    assert_parse_error_at(parse, bad, 1)


def test_net_plugin_not_found_in_its_three_forms() -> None:
    # NCCL 2.25 / 2.26 / later, as real logs print them (the search index: NVIDIA/nccl issues and repos)
    pre = "node:12225:12255 [0] NCCL INFO"
    for tail in (". Using internal network plugin.", ". Using internal net plugin.", ""):
        d = parse(f"{pre} NET/Plugin: Could not find: libnccl-net.so{tail}\n{pre} Using network Socket\n")
        assert d.net_plugin_missing == (("node", "libnccl-net.so"),) and d.networks == ("Socket",)
