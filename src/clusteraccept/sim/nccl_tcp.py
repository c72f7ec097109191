"""NCCL INFO lines of Google's GPUDirect-TCPX/TCPXO net plugins for the simulated nccl-tests (net "tcpx"
or "tcpxo": sim/fabric.py), in the forms their sources print (docs/fabrics-research.md, Part 2):

- NCCL core: "NET/Plugin: Loaded net plugin <name> (v7)", "Using network <name>" and the channels "via
  NET/<name>/<dev>" (nccl src/init.cc, src/transport/net.cc; tcpx src/nccl_plugin.cc and tcpxo
  fastrak_plugin.cc name the plugins GPUDirectTCPX_v7 and FasTrak); the one real capture of each
  (tests/data/nccl-debug/a3high-tcpx-..., a3mega-tcpxo-...) shows "Using network" in this form;
- TCPX: "NET/GPUDirectTCPX ver. 3.1.9." and "NET/GPUDirectTCPX : Using [0]<ifname>:<ip><port> ..." (its
  data NICs sorted by name: that index is NCCL's net device; tcpx src/net_tcpx.cc, src/connect.cc);
- TCPXO: every line through its absl log sink, "NET/FasTrak <time>: <message>" (tcpxo
  fastrak_offload/init.cc): "Initializing network FasTrak, version: 1.0.17", "RxDM ready", and per GPU
  "Initialized shim for GPU with CUDA index C, FasTrak index F, and pci_path: P, the corresponding closest
  net device is: D (<ifname>)" (nccl_shim.cc); where the receive-datapath manager does not answer
  (``rxdm_down``) "Timeout: RxDM not ready on <host> after 30 seconds: <status>" (a WARN), then
  "Plug-in core initialization failed (<status>), aborting..." and the process aborts (no fallback).

The timestamps and status texts are model values (absl::FormatTime's RFC 3339 form; a status string).
"""

from __future__ import annotations

from clusteraccept.sim.fabric import Fabric
from clusteraccept.site.nodes import TCP_PLUGIN

TCPX_VERSION = "3.1.9"  # tcpx CMakeLists project(net-tcpx VERSION 3.1.9)
FASTRAK_VERSION = "1.0.17"  # tcpxo fastrak_plugin_version.h at v1.0.17
TIME = "2026-01-01T00:00:00.000000+00:00"  # model value
RXDM_TIMEOUT_S = 30  # NCCL_FASTRAK_RXDM_INIT_TIMEOUT's default (tcpxo const_params.h)
ABORT_RC = 134  # a process that aborts (SIGABRT), as a shell reports it: 128 + 6


def devices(fab: Fabric, host: str) -> list[str]:
    """The node's GPU NICs in the order the plugin numbers them (NCCL's net device index): TCPX sorts its
    interfaces by name, TCPXO by PCI address (the rails' order on the simulated node)."""
    nics = list(dict.fromkeys(fab.node(host).rails))
    return sorted(nics) if fab.net == "tcpx" else nics


def fastrak(pre: str, message: str) -> str:
    return f"{pre} NET/FasTrak {TIME}: {message}"


def lines(fab: Fabric, host: str, pre: str, rank: int, gpu: int, bus_id: str) -> list[str]:
    """A rank's plugin lines on a TCPX(O) node (a multi-node run; a ``ofi_plugin_missing`` node finds no
    plugin and NCCL takes sockets)."""
    name = TCP_PLUGIN[fab.net]
    if host in fab.faults.ofi_plugin_missing:
        return [
            f"{pre} NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
            f"{pre} NET/IB : No device found.",
            f"{pre} NET/Socket : Using [0]enp0s12:10.0.0.{rank + 1}<0>",
            f"{pre} Using network Socket",
        ]
    nics = devices(fab, host)
    out = [f"{pre} NET/Plugin: Loaded net plugin {name} (v7)"]
    if fab.net == "tcpx":
        using = "".join(f" [{i}]{n}:10.{i + 1}.0.{rank + 1}<0>" for i, n in enumerate(nics))
        out += [f"{pre} NET/GPUDirectTCPX ver. {TCPX_VERSION}.", f"{pre} NET/GPUDirectTCPX : Using{using}"]
    else:
        mine = fab.node(host).rails[gpu] if gpu < len(fab.node(host).rails) else nics[0]
        out += [
            fastrak(pre, f"Initializing network FasTrak, version: {FASTRAK_VERSION}"),
            fastrak(pre, "RxDM ready"),
            fastrak(
                pre,
                f"Initialized shim for GPU with CUDA index {gpu}, FasTrak index {gpu}, and pci_path: "
                f"{bus_id}, the corresponding closest net device is: {nics.index(mine)} ({mine})",
            ),
        ]
    return [*out, f"{pre} Using network {name}"]


def channel_dev(fab: Fabric, host: str, gpu: int) -> int:
    """NCCL's net device of GPU ``gpu``'s channels: its rail NIC's index among the plugin's devices."""
    rails = fab.node(host).rails
    return devices(fab, host).index(rails[min(gpu, len(rails) - 1)])


def rxdm_abort(fab: Fabric, hosts: list[str]) -> tuple[str, int] | None:
    """A TCPXO run with a node whose RxDM does not answer: FasTrak's init waits, warns and aborts the
    process (tcpxo fastrak_plugin.cc: "to prevent silent fallback to stock net socket plug-in")."""
    down = [h for h in dict.fromkeys(hosts) if h in fab.faults.rxdm_down]
    if not down or fab.net != "tcpxo":
        return None
    h, status = down[0], "UNAVAILABLE: simulated RxDM down"
    pre, warn = f"{h}:4000:4000 [0] NCCL INFO", f"{h}:4000:4000 [0] init.cc:95 NCCL WARN"
    text = [
        f"{pre} NET/Plugin: Loaded net plugin FasTrak (v7)",
        fastrak(pre, f"Initializing network FasTrak, version: {FASTRAK_VERSION}"),
        fastrak(warn, f"Timeout: RxDM not ready on {h} after {RXDM_TIMEOUT_S} seconds: {status}"),
        fastrak(warn, f"Plug-in core initialization failed (DEADLINE_EXCEEDED: {status}), aborting..."),
    ]
    return "\n".join(text) + "\n", ABORT_RC
