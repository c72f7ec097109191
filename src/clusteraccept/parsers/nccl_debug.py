"""``NCCL_DEBUG=INFO`` logs: network chosen, NET/IB devices and link layers, per-channel transports, GDR.

Lines are ``host:pid:tid [cudaDev] NCCL INFO <msg>`` (NCCL src/debug.cc; WARN lines put ``file:line
(func)`` before ``NCCL WARN``; a ``[%F %T] `` timestamp or a launcher tag may come first; at
NCCL_DEBUG=VERSION the ``NCCL version`` line is bare). Other lines (nccl-tests tables) are ignored.
Message forms from github.com/NVIDIA/nccl v2.4.8..v2.30 (HEAD 5067397c): src/transport/{net,p2p,shm,
coll_net,generic}.cc, src/transport/net_ib/init.cc, src/transport/net_socket.cc, src/transport.cc,
src/init.cc, src/graph/topo.cc; and Mellanox/nccl-rdma-sharp-plugins src/p2p_plugin.c (IBext_vN)::

    Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1/GDRDMA
        also NET/<net>/<dev>(<proxy>), (PCI), /Shared; 2.7-2.17 print busIds: 0[1b000] -> 1[1c000]
    Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
        also P2P/IPC, P2P/CUMEM, P2P/MNNVL, P2P/indirect/2[2], with /read or /CE
    Channel 00 : 0[0] -> 1[1] via SHM/direct/direct        (SHM/direct 2.29+; "direct shared memory" <= 2.13)
    CollNet 00/0 : 0 [send] via COLLNET/SHARP/0/GDRDMA
    Ring 00 : 0 -> 1 [send] via NET/IB/0/GDRDMA            (NCCL <= 2.6)
    NET/IB : Using [0]mlx5_5:1/RoCE [RO]; OOB eno7np0:169.254.103.56<0>
        entries [i]dev:port[:rail][:plane]/IB|RoCE|UNSPECIFIED[/SHARP]; 2.20-2.23 [g]={[0] mlx5_0:1/IB, ...}
    NET/Socket : Using [0]ibs3:10.0.0.1<0>                 (socket interfaces: the name never means IB)
    NET/IB : Made virtual device [0] name=mlx5_0 speed=400000 ndevs=1  (2.21+, NET: what NET/IB/<n> means)
    Using network IB | Socket | IBext_v8 | ...
    Connected all rings, use ring PXN 0 GDR 1
    Channel 00/24 : 0 1                                    (a channel's ring order)
    Ring 00 : 3 -> 0 -> 1                                  (prev -> me -> next, 2.2x GRAPH)
    Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1            (down/down/down->me->up per channel)
    Pattern 4, crossNic 0, nChannels 12, bw 30.000000/30.000000, type NVL/PIX, sameChannels 1  (GRAPH)
    NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'    (and the per-GPU and plugin forms)

The link layer comes only from the /IB or /RoCE tag of a NET device entry, never from an interface name.

A net plugin (NCCL src/plugin/net.cc; the lines of 2.18-2.27 in tests/data/nccl-debug/SOURCES.md) and the
aws-ofi-nccl plugin's own lines (aws/aws-ofi-nccl src/nccl_ofi_net.c, nccl_ofi_api.c)::

    NET/Plugin: Loaded net plugin Libfabric (v10)          (the plugin's name: "AWS Libfabric" before 1.13)
    NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.   (2.25: "network plugin")
    NET/Plugin: Could not find: ofi libnccl-net-ofi.so. Using internal network plugin.  (NCCL_NET_PLUGIN=ofi)
    NET/Plugin : dlerror=libnccl-net.so: cannot open ... No plugin found (libnccl-net.so), using internal
    implementation                                         (2.19; 2.21: "NET/Plugin: No plugin found (...)")
    WARN Error: network AWS Libfabric not found.           (NCCL_NET names a network none offers: init fails)
    NET/OFI Initializing aws-ofi-nccl 1.16.2               ("Using aws-ofi-nccl 1.4.0aws" in 1.4)
    NET/OFI Selected Provider is efa (found 4 nics)         (1.4: without the nic count)
    NET/OFI Selected provider is efa, fabric is efa-direct (found 4 nics)   (1.14+)
    NET/OFI NIC group 0 device #1 0000:55:00.0              (the PCI devices behind NCCL's net device 0)
    NET/OFI No eligible providers were found               (then WARN "aws-ofi-nccl initialization failed")
    Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA   (a plugin name may hold a space)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from clusteraccept.errors import ParseError
from clusteraccept.parsers._nccl_debug_lines import NcclConnection as NcclConnection
from clusteraccept.parsers._nccl_debug_lines import NcclGraph as NcclGraph
from clusteraccept.parsers._nccl_debug_lines import NcclNetDevice as NcclNetDevice
from clusteraccept.parsers._nccl_debug_lines import NcclRing as NcclRing
from clusteraccept.parsers._nccl_debug_lines import (
    connection,
    entries,
    graph,
    net_devices,
    ring_neighbours,
    ring_order,
    to_int,
    trees,
)


@dataclass(frozen=True)
class NcclSocketIf:
    """One interface of a socket-style ``NET/<net> : Using [0]eth0:10.0.0.1<0>`` line."""

    host: str | None
    net: str  # "Socket" (or a socket-style plugin)
    index: int
    name: str  # interface name, e.g. "ibs3": an IPoIB name says nothing about the NCCL transport
    address: str


@dataclass(frozen=True)
class NcclGdr:
    """A ``GPU Direct RDMA Enabled/Disabled ...`` capability line."""

    line_no: int
    host: str | None
    enabled: bool
    hca: str | None  # HCA name when printed ('mlx5_0'), else its index
    gpu: str | None  # the per-GPU forms (NCCL <= 2.26 INFO) name the GPU
    method: str | None  # plugin forms: "nvidia-peermem" | "DMABUF"


@dataclass(frozen=True)
class NcclVirtualDevice:
    """``NET/IB : Made virtual device [1] name=mlx5_0+mlx5_1 speed=800000 ndevs=2`` (NCCL >= 2.21, NET
    subsystem): the device index the channel lines' ``NET/IB/<n>`` names, and the HCAs behind it."""

    host: str | None
    net: str
    index: int
    name: str  # "mlx5_0", or merged "mlx5_0+mlx5_1"
    ndevs: int


@dataclass(frozen=True)
class NcclDebug:
    nccl_version: str | None  # "2.28.9"
    nccl_version_full: str | None  # "2.28.9+cuda13.0"
    cuda_driver_version: int | None  # 13000
    hosts: tuple[str, ...]
    host_versions: tuple[tuple[str, str], ...]  # (host, "2.28.9+cuda12.9") of every prefixed version line
    networks: tuple[str, ...]  # "Using network X", distinct, first seen first
    ib_no_device: bool  # "NET/IB : No device found."
    net_devices: tuple[NcclNetDevice, ...]  # distinct per host
    virtual_devices: tuple[NcclVirtualDevice, ...]  # distinct per host
    socket_interfaces: tuple[NcclSocketIf, ...]
    oob_interfaces: tuple[str, ...]  # "; OOB <if>" of the NET/IB line
    bootstrap_interfaces: tuple[str, ...]
    relaxed_ordering: bool | None  # "[RO]" on the NET/IB line
    connections: tuple[NcclConnection, ...]
    ring_gdr: tuple[int, ...]  # GDR N of every "Connected all rings, use ring PXN x GDR N" line
    gdr: tuple[NcclGdr, ...]
    dmabuf_gpus: tuple[str, ...]  # "host:cudaDev" of "DMA-BUF is available on GPU device N"
    nvls_support: bool | None  # "NVLS multicast support is [not ]available"
    nvls_channels: int | None  # max "N nvls channels"
    nvls_connected: bool  # "Connected NVLS tree"
    collnet_connected: bool  # "rank N Connected CollNet" / "Connected Collnet Chains"
    collnet_init_failed: bool  # WARN "Cannot initialize CollNet, using ... instead"
    env: tuple[tuple[str, str], ...]  # "NCCL_X set [by environment] to V", first value per name
    rings: tuple[NcclRing, ...]  # "Channel 00/24 : 0 1 ..." ring orders, per host
    graphs: tuple[NcclGraph, ...]  # "Pattern 4, crossNic 0, nChannels 12, ..." (GRAPH), distinct per host
    tree_channels: int  # max channels of a "Trees [0] a/b/c->me->up ..." line
    coll_channels: int | None  # max "N coll channels"
    warnings: tuple[str, ...]  # NCCL WARN messages
    # per host (None: lines without a host prefix), distinct, first seen first:
    net_plugins: tuple[tuple[str | None, str], ...] = ()  # "Loaded net plugin Libfabric (v10)": Libfabric
    ofi_versions: tuple[tuple[str | None, str], ...] = ()  # aws-ofi-nccl's: "1.16.2", "1.4.0aws"
    ofi_providers: tuple[tuple[str | None, str], ...] = ()  # "Selected Provider is efa": its provider
    ofi_nics: int | None = None  # the most "(found N nics)" of any rank
    # "NIC group G device #D 0000:55:00.0": (host, group, PCI address); group G is NCCL's net device G
    ofi_nic_groups: tuple[tuple[str | None, int, str], ...] = ()
    ofi_no_provider: tuple[str | None, ...] = ()  # hosts that logged "No eligible providers were found"
    # "NET/Plugin: Could not find: libnccl-net.so[. Using internal net plugin.]": (host, library)
    net_plugin_missing: tuple[tuple[str | None, str], ...] = ()
    ofi_init_failed: tuple[str | None, ...] = ()  # hosts whose WARN says "NET/OFI ... initialization failed"
    # WARN "Error: network AWS Libfabric not found.": (host, the network NCCL_NET named), which fails the
    # communicator's init (NCCL src/net.cc; a real Alps capture in eth-cscs/cscs-docs nccl.md)
    net_not_found: tuple[tuple[str | None, str], ...] = ()
    # Google's GPUDirect-TCPX/TCPXO plugins: (host, version) of "NET/GPUDirectTCPX ver. 3.1.9." and
    # "NET/FasTrak <time>: Initializing network FasTrak, version: 1.0.17" (tcpx src/net_tcpx.cc; tcpxo
    # fastrak_offload/init.cc: an absl sink printing "NET/FasTrak %s: %s")
    tcp_plugin_versions: tuple[tuple[str | None, str], ...] = ()
    # (host, what the plugin said) where it failed: TCPXO "Timeout: RxDM not ready on <host> after N
    # seconds: <status>" (a WARN; then "Plug-in core initialization failed (...), aborting...": the
    # process aborts, tcpxo fastrak_offload/init.cc and fastrak_plugin.cc); TCPX, whose init does not ask
    # its RxDM, on the receiving node at the first connection: "update flow steering rule: local A <-
    # remote B, failed against receive-datapath-manager: ..." (retried; then "NET/GPUDirectTCPX failed
    # to connect socket" on both sides, tcpx src/connect.cc), "unix client <path>, gpumem fd client
    # connect failed ..." (then TCPXASSERT's exit(1), src/gpu/rx_pool.cu) or, with
    # NCCL_GPUDIRECTTCPX_REPORT_LIFECYCLE=1, "NET/GPUDirectTCPX register failed against
    # receive_datapath_manager, ..." at init (src/net_tcpx.cc)
    tcp_plugin_failures: tuple[tuple[str | None, str], ...] = ()
    # (host, NIC NCCL chose, NIC used) where FasTrak swaps a connection's NIC: "Use netdev D (NAME)
    # instead of D (NAME) to enforce rail alignment ..." (tcpxo nccl_shim.cc)
    tcp_rail_swaps: tuple[tuple[str | None, str, str], ...] = ()
    # (host, NCCL net device, GPU NIC) as the plugin names them: TCPX "NET/GPUDirectTCPX : Using
    # [0]enp12s0:<ip><port> [1]..." (its devices sorted by name: the index NCCL's channels print, tcpx
    # src/connect.cc, src/misc/socket_utils.cc); TCPXO "Initialized shim for GPU with CUDA index C,
    # FasTrak index F, and pci_path: P, the corresponding closest net device is: D (enp6s0)" (tcpxo
    # nccl_shim.cc; D indexes the devices getProperties reports)
    tcp_net_devices: tuple[tuple[str | None, int, str], ...] = ()

    def network(self) -> str | None:
        """The network chosen when every communicator agrees, else None."""
        return self.networks[0] if len(self.networks) == 1 else None

    def transports(self) -> frozenset[str]:
        """Distinct ``NcclConnection.transport`` values ("NET/IB", "P2P/CUMEM", "SHM", ...)."""
        return frozenset(c.transport for c in self.connections)

    def families(self) -> frozenset[str]:
        """Distinct transport families: "NET", "COLLNET", "P2P", "SHM"."""
        return frozenset(c.family for c in self.connections)

    def net_channels(self) -> tuple[NcclConnection, ...]:
        """The connections that go over a network (NET family)."""
        return tuple(c for c in self.connections if c.family == "NET")

    def uses_gdrdma(self) -> bool | None:
        """True when every NET/COLLNET connection line says /GDRDMA, False when one does not,
        None when the log has no network connection line (single node, or connections not logged)."""
        over_net = [c for c in self.connections if c.family in ("NET", "COLLNET")]
        if not over_net:
            return None
        return all(c.gdrdma for c in over_net)

    def collnet_used(self) -> bool:
        """True when CollNet (SHARP) connections were set up and it did not fall back."""
        if self.collnet_init_failed:
            return False
        return self.collnet_connected or any(c.family == "COLLNET" for c in self.connections)

    def nvls_used(self) -> bool:
        return self.nvls_connected or (self.nvls_channels or 0) > 0

    def net_device_names(self, host: str | None, index: int) -> tuple[str, ...] | None:
        """The HCAs behind ``NET/<net>/<index>`` on ``host``: the virtual device of that index where the
        log has "Made virtual device" lines (NCCL >= 2.21 numbers its devices so), else the device listed
        at that index; None when the log does not say (NET lines not logged, an index not listed)."""
        vdevs = [v for v in self.virtual_devices if v.host == host]
        if vdevs:
            hit = next((v for v in vdevs if v.index == index), None)
            return None if hit is None else tuple(hit.name.split("+"))
        dev = next((d for d in self.net_devices if d.host == host and d.index == index), None)
        return None if dev is None else (dev.device,)

    def of_host(self, field: str, host: str | None) -> tuple[str, ...]:
        """The values of a per-host field (``net_plugins``, ``ofi_versions``, ``ofi_providers``) on
        ``host``."""
        return tuple(v for h, v in getattr(self, field) if h == host)

    def link_layers(self) -> frozenset[str]:
        """Link layers ("IB", "RoCE") of the NET devices NCCL listed."""
        return frozenset(d.link_layer for d in self.net_devices)


_LEVEL = re.compile(r"NCCL (INFO|WARN|TRACE)(?: |$)")
_PREFIX = re.compile(r"(?P<host>[\w.\-]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>-?\d+)\]")
_BARE_VERSION = re.compile(r"^\s*(NCCL version .*)$")

_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?P<suffix>\S*)\s*$")
_SOCK_ONE = re.compile(r"\s*\[(?P<i>\d+)\](?P<name>[^\s:\[\]]+):(?P<addr>\S+)")
_GDR = re.compile(
    r"(?:NET/(?P<net>.+?) ?: )?GPU Direct RDMA (?:\((?P<method>[^)]*)\) )?"
    r"(?P<state>[Ee]nabled|[Dd]isabled)\b(?P<rest>.*)"
)
_GDR_HCA = re.compile(r"HCA (?P<idx>[0-9a-fA-F]+)(?: '(?P<name>[^'\s]+))?")
_GDR_GPU = re.compile(r"for GPU (?P<gpu>\S+) /")
_RINGS_GDR = re.compile(r"Connected all rings.*?\bGDR (?P<gdr>\S+)")
_CHANNELS = re.compile(
    r"(?P<coll>\d+) coll channels, (?:\d+ collnet channels, )?(?:(?P<nvls>\d+) nvls channels, )?"
)
_ENV = re.compile(r"(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to (?P<value>.*?)\.?\s*")
_VDEV = re.compile(
    r"NET/(?P<net>\S+?) ?: Made virtual device \[(?P<d>\d+)\] name=(?P<name>\S+)"
    r" speed=\d+ ndevs=(?P<n>\d+)\s*"
)
_PLUGIN = re.compile(r"NET/Plugin ?: Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?\s*")
_PLUGIN_MISSING = re.compile(
    r"NET/Plugin ?: (?:Could not find:? ?(?:\S+ )?(?P<lib>[^\s]+?)\.?(?: Using internal .*)?"
    r"|.*No plugin found \((?P<old>[^)\s]+)\)(?:, using internal implementation)?)\s*"
)
_OFI_VERSION = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl (?P<v>\S+)\s*")
_OFI_PROVIDER = re.compile(
    r"NET/OFI Selected [Pp]rovider is (?P<p>[^\s,]+)(?:, fabric is (?P<f>\S+))?"
    r"(?: \(found (?P<n>\d+) nics?\))?\s*"
)
_OFI_NIC = re.compile(
    r"NET/OFI NIC group (?P<g>\d+) device #(?P<d>\d+)"
    r" (?P<bdf>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s*"
)
# MAJOR.MINOR.PATCH "." TCPX_SUFFIX (tcpx src/config.h.in): a trailing dot where the suffix is empty
_TCPX_VERSION = re.compile(r"NET/GPUDirectTCPX ver\. (?P<v>\S+?)\.?\s*")
_FASTRAK = re.compile(r"NET/FasTrak (?P<time>.*?): (?P<msg>.*)")
_FASTRAK_VERSION = re.compile(r"Initializing network FasTrak, version: (?P<v>\S+?)\s*")
_TCP_FAILED = re.compile(
    r"(?:NET/GPUDirectTCPX register failed against receive_datapath_manager.*"
    r"|unix client \S+, gpumem fd client connect failed.*"
    r"|update flow steering rule: .*failed against receive-datapath-manager.*"
    r"|NET/GPUDirectTCPX failed to connect socket.*"
    r"|Timeout: RxDM not ready.*|Plug-in core initialization failed.*)"
)
_FASTRAK_SWAP = re.compile(
    r"Use netdev \d+ \((?P<to>[^)\s]+)\) instead of \d+ \((?P<was>[^)\s]+)\) to enforce rail alignment.*"
)
_TCPX_USING = re.compile(r"NET/GPUDirectTCPX : Using(?P<devs>(?: \[\d+\][^\s:\[\]]+:\S+)+)\s*")
_FASTRAK_SHIM = re.compile(
    r"Initialized shim for GPU with CUDA index \d+, FasTrak index \d+, and pci_path: \S*, the "
    r"corresponding closest net device is: (?P<d>\d+) \((?P<name>[^)\s]+)\)\s*"
)
# What every message _tcp_plugin reads starts with (its branches and _TCP_FAILED's alternatives): the
# other messages, all but a handful of a log, skip it
_TCP_STARTS = (
    "NET/FasTrak ",
    "NET/GPUDirectTCPX",
    "unix client ",
    "update flow steering rule: ",
    "Timeout: RxDM not ready",
    "Plug-in core initialization failed",
)
_NET_NOT_FOUND = re.compile(r"Error: network (?P<net>.+?) not found\.?\s*")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?:\[\d+\])?(?P<if>[^\s:\[\]]+):")


def _add(seq: dict[Any, None], item: Any) -> None:
    """Keep the first of equal items, in order: an ordered set (a list's ``in`` was quadratic: a step's
    log lists every rank's rings and graphs, 38 million comparisons at 256 nodes)."""
    seq.setdefault(item)


_TUPLES = (
    "hosts",
    "host_versions",
    "networks",
    "net_devices",
    "virtual_devices",
    "socket_interfaces",
    "oob_interfaces",
    "bootstrap_interfaces",
    "connections",
    "ring_gdr",
    "gdr",
    "dmabuf_gpus",
    "warnings",
    "rings",
    "graphs",
    "net_plugins",
    "ofi_versions",
    "ofi_providers",
    "ofi_nic_groups",
    "ofi_no_provider",
    "ofi_init_failed",
    "net_plugin_missing",
    "net_not_found",
    "tcp_plugin_versions",
    "tcp_plugin_failures",
    "tcp_net_devices",
    "tcp_rail_swaps",
)


_TUPLE_SET = frozenset(_TUPLES)  # asked per field per log: a tuple's ``in`` was 13 us of a 120-us parse
_KEPT_ALL = ("connections", "gdr", "ring_gdr", "warnings")  # every line, repeats too (the others: _add)


def _message(acc: dict[str, Any], msg: str, host: str | None, line_no: int) -> None:
    """Fold one INFO message into ``acc`` (field name -> value or list of values of NcclDebug)."""
    if msg.startswith("NCCL version"):
        if not (m := _VERSION.match(msg)):
            raise ParseError(line_no, "'NCCL version X.Y.Z+cudaA.B'", msg)
        acc["nccl_version"] = acc["nccl_version"] or m["v"]
        acc["nccl_version_full"] = acc["nccl_version_full"] or m["v"] + m["suffix"]
        if host is not None:
            _add(acc["host_versions"], (host, m["v"] + m["suffix"]))
    elif msg.startswith("NET/OFI ") or msg.startswith("NET/Plugin"):
        _plugin(acc, msg, host, line_no)
    elif msg.startswith("cudaDriverVersion "):
        value = msg.split(" ", 1)[1].strip()
        if not value.isdecimal():
            raise ParseError(line_no, "'cudaDriverVersion N'", msg)
        acc["cuda_driver_version"] = to_int(value, line_no)
    elif msg.startswith("Using network"):
        if not (name := msg[len("Using network") :].strip()):
            raise ParseError(line_no, "'Using network NAME'", msg)
        _add(acc["networks"], name)
    elif msg.startswith(("Channel ", "Ring ", "CollNet ", "Coll ")) and " via " in msg:
        acc["connections"].append(connection(msg, host, line_no))
    elif msg.startswith("Channel ") and "/" in msg.split(":", 1)[0]:
        _add(acc["rings"], ring_order(msg, host, line_no))
    elif msg.startswith("Ring ") and " -> " in msg:
        ring_neighbours(msg, line_no)
    elif msg.startswith("Trees "):
        acc["tree_channels"] = max(acc["tree_channels"], trees(msg, line_no))
    elif msg.startswith("Pattern "):
        _add(acc["graphs"], graph(msg, host, line_no))
    elif msg.startswith("NET/") and " : Using" in msg and "; OOB" in msg:
        head, _, oob = msg.rpartition("; OOB")
        net, _, listing = head[4:].partition(" : Using")
        listing = listing.strip()
        ro = listing.endswith("[RO]")
        acc["relaxed_ordering"] = ro or bool(acc["relaxed_ordering"])
        for d in net_devices(host, net.strip(), listing[:-4] if ro else listing, line_no):
            _add(acc["net_devices"], d)
        if oob_if := oob.strip().split(":", 1)[0]:
            _add(acc["oob_interfaces"], oob_if)
    elif msg.startswith("NET/") and " : Using [" in msg:
        net, _, listing = msg[4:].partition(" : Using")
        for m in entries(_SOCK_ONE, listing, line_no, "socket interfaces like [0]eth0:10.0.0.1<0>"):
            sock = NcclSocketIf(host, net.strip(), to_int(m["i"], line_no), m["name"], m["addr"])
            _add(acc["socket_interfaces"], sock)
    elif " : Made virtual device " in msg and msg.startswith("NET/"):
        if (m := _VDEV.fullmatch(msg)) is None:
            raise ParseError(line_no, "'NET/IB : Made virtual device [N] name=X speed=S ndevs=K'", msg)
        vdev = NcclVirtualDevice(host, m["net"], to_int(m["d"], line_no), m["name"], to_int(m["n"], line_no))
        _add(acc["virtual_devices"], vdev)
    elif msg.startswith("NET/IB") and "No device found" in msg:
        acc["ib_no_device"] = True
    elif (m := _GDR.match(msg)) is not None:
        hca, gpu = _GDR_HCA.search(m["rest"]), _GDR_GPU.search(m["rest"])
        enabled = m["state"].lower() == "enabled"
        hca_name = (hca["name"] or hca["idx"]) if hca else None
        acc["gdr"].append(NcclGdr(line_no, host, enabled, hca_name, gpu["gpu"] if gpu else None, m["method"]))
    elif msg.startswith("DMA-BUF is available on GPU device"):
        _add(acc["dmabuf_gpus"], f"{host or ''}:{msg.rsplit(' ', 1)[-1]}")
    elif msg.startswith("Connected all rings") and (m := _RINGS_GDR.match(msg)) is not None:
        if not m["gdr"].isdecimal():
            raise ParseError(line_no, "'GDR 0' or 'GDR 1'", msg)
        acc["ring_gdr"].append(to_int(m["gdr"], line_no))
    elif msg.startswith("NVLS multicast support is"):
        acc["nvls_support"] = bool(acc["nvls_support"]) or not msg.startswith("NVLS multicast support is not")
    elif msg.startswith("Connected NVLS tree"):
        acc["nvls_connected"] = True
    elif "Connected CollNet" in msg or msg.startswith("Connected Collnet Chains"):
        acc["collnet_connected"] = True
    elif (m := _CHANNELS.match(msg)) is not None:
        acc["coll_channels"] = max(acc["coll_channels"] or 0, to_int(m["coll"], line_no))
        if m["nvls"] is not None:
            acc["nvls_channels"] = max(acc["nvls_channels"] or 0, to_int(m["nvls"], line_no))
    elif (m := _ENV.fullmatch(msg)) is not None:
        acc["env"].setdefault(m["name"], m["value"])
    elif (m := _BOOTSTRAP.match(msg)) is not None:
        _add(acc["bootstrap_interfaces"], m["if"])


def _plugin(acc: dict[str, Any], msg: str, host: str | None, line_no: int) -> None:
    """A net plugin's loading line, or one of aws-ofi-nccl's own."""
    if m := _PLUGIN.fullmatch(msg):
        _add(acc["net_plugins"], (host, m["name"]))
    elif m := _PLUGIN_MISSING.fullmatch(msg):
        _add(acc["net_plugin_missing"], (host, m["lib"] or m["old"]))
    elif m := _OFI_VERSION.fullmatch(msg):
        _add(acc["ofi_versions"], (host, m["v"]))
    elif msg.startswith("NET/OFI Selected"):
        if (m := _OFI_PROVIDER.fullmatch(msg)) is None:
            raise ParseError(line_no, "'NET/OFI Selected Provider is NAME [(found N nics)]'", msg)
        _add(acc["ofi_providers"], (host, m["p"]))
        if m["n"] is not None:
            acc["ofi_nics"] = max(acc["ofi_nics"] or 0, to_int(m["n"], line_no))
    elif m := _OFI_NIC.fullmatch(msg):
        _add(acc["ofi_nic_groups"], (host, to_int(m["g"], line_no), m["bdf"].lower()))
    elif msg.startswith("NET/OFI NIC group"):
        raise ParseError(line_no, "'NET/OFI NIC group G device #D 0000:55:00.0'", msg)
    elif msg.startswith("NET/OFI No eligible providers"):
        _add(acc["ofi_no_provider"], host)


def _tcp_plugin(acc: dict[str, Any], msg: str, host: str | None, line_no: int) -> None:
    """A GPUDirect-TCPX/TCPXO plugin's own line, at whatever level it logged it. A version or device line
    that does not read as its format string says is refused with its line number: what it would name
    (the plugin's version, which NIC a net device is) is judged."""
    if msg.startswith("NET/FasTrak ") and (m := _FASTRAK.fullmatch(msg)) is not None:
        msg = m["msg"]
        if msg.startswith("Initializing network FasTrak"):
            if (v := _FASTRAK_VERSION.fullmatch(msg)) is None:
                raise ParseError(line_no, "'Initializing network FasTrak, version: X.Y.Z'", msg)
            _add(acc["tcp_plugin_versions"], (host, v["v"]))
        elif msg.startswith("Initialized shim for GPU"):
            if (d := _FASTRAK_SHIM.fullmatch(msg)) is None:
                want = "'Initialized shim for GPU ..., the corresponding closest net device is: D (NAME)'"
                raise ParseError(line_no, want, msg)
            _add(acc["tcp_net_devices"], (host, int(d["d"]), d["name"]))
        elif (w := _FASTRAK_SWAP.fullmatch(msg)) is not None:
            _add(acc["tcp_rail_swaps"], (host, w["was"], w["to"]))
    elif msg.startswith("NET/GPUDirectTCPX ver."):
        if (v := _TCPX_VERSION.fullmatch(msg)) is None:
            raise ParseError(line_no, "'NET/GPUDirectTCPX ver. X.Y.Z.'", msg)
        _add(acc["tcp_plugin_versions"], (host, v["v"]))
    elif msg.startswith("NET/GPUDirectTCPX : Using ["):
        if (u := _TCPX_USING.fullmatch(msg)) is None:
            raise ParseError(line_no, "'NET/GPUDirectTCPX : Using [0]IFNAME:ADDR [1]...'", msg)
        for one in _SOCK_ONE.finditer(u["devs"]):
            _add(acc["tcp_net_devices"], (host, int(one["i"]), one["name"]))
    if _TCP_FAILED.fullmatch(msg):
        _add(acc["tcp_plugin_failures"], (host, msg.strip()))


def parse(text: str) -> NcclDebug:
    """Parse an NCCL_DEBUG=INFO log (possibly mixed with other output)."""
    acc: dict[str, Any] = {name: [] if name in _KEPT_ALL else {} for name in _TUPLES}
    acc.update(
        nccl_version=None,
        nccl_version_full=None,
        cuda_driver_version=None,
        ib_no_device=False,
        relaxed_ordering=None,
        nvls_support=None,
        nvls_channels=None,
        nvls_connected=False,
        collnet_connected=False,
        collnet_init_failed=False,
        env={},
        tree_channels=0,
        coll_channels=None,
        ofi_nics=None,
    )
    nccl_lines = 0
    for line_no, line in enumerate(text.splitlines(), start=1):
        if "NCCL" not in line:  # neither an NCCL log line nor a bare version line: nccl-tests' own half
            continue
        lm = _LEVEL.search(line)
        host: str | None = None
        if lm is None:
            if (bare := _BARE_VERSION.match(line)) is None:
                continue
            level, msg = "INFO", bare.group(1)
        else:
            level, msg = lm.group(1), line[lm.end() :].rstrip()
            if (pm := _PREFIX.search(line, 0, lm.start())) is not None:
                host = pm["host"]
                _add(acc["hosts"], host)
        nccl_lines += 1
        if msg.startswith(_TCP_STARTS):
            _tcp_plugin(acc, msg, host, line_no)
        if level == "WARN":
            acc["warnings"].append(msg)
            if msg.startswith(("Cannot initialize CollNet", "CollNet is not supported")):
                acc["collnet_init_failed"] = True
            if msg.startswith("NET/OFI") and "failed" in msg:  # "aws-ofi-nccl initialization failed"
                _add(acc["ofi_init_failed"], host)
            if (m := _NET_NOT_FOUND.fullmatch(msg)) is not None:
                _add(acc["net_not_found"], (host, m["net"]))
        elif level == "INFO":
            _message(acc, msg, host, line_no)
    if nccl_lines == 0:
        raise ParseError(0, "NCCL_DEBUG log lines ('host:pid:tid [dev] NCCL INFO ...')", text[:80])
    acc["env"] = tuple(acc["env"].items())
    fields: dict[str, Any] = {k: tuple(v) if k in _TUPLE_SET else v for k, v in acc.items()}
    return NcclDebug(**fields)
