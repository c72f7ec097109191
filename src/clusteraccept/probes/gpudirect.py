"""GPUDirect RDMA evidence: peer-memory kernel support, ACS on the bridges, IOMMU mode, GPU-memory RDMA.

Files and commands (each optional on a given host; absence is recorded, not an error):
- ``/sys/module/{nvidia_peermem,nv_peer_mem}/initstate`` ("live" when the module is loaded:
  Documentation/ABI/testing/sysfs-module) and ``lsmod`` (not installed on every host);
- ``/proc/driver/nvidia/version`` (open vs proprietary kernel module) and ``uname -r`` (DMA-BUF needs
  Linux >= 5.12 and the open GPU kernel modules);
- ``lspci -D -vvv -s <BDF>`` (pciutils; -D always prints the domain) for every bridge above a GPU or
  an RDMA device: the ACSCtl line (needs root: without it lspci prints "<access denied>");
- ``/sys/bus/pci/devices/<gpu>/iommu_group/type`` (DMA, DMA-FQ, identity...:
  Documentation/ABI/testing/sysfs-kernel-iommu_groups);
- per rail of this node: a loopback ``ib_write_bw`` (perftest) on the rail's HCA port with the
  buffers in the rail GPU's memory (``--use_cuda=<gpu>``), server and client on this node.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import replace
from typing import Any

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import (
    IB_CLASS_DIR,
    PCI_DEVICES,
    device_path,
    fabric_nics,
    gpu_bdfs,
    hcas,
    listing,
    resolved,
    timeout_of,
)

PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")  # R470+ driver module; the older MLNX_OFED-era one
BASE_PORT = 18515  # perftest's default TCP port (-p); rail k uses BASE_PORT + k
ITERATIONS = 20000  # 20 GiB of 1 MiB writes: about half a second at 400 Gb/s
MESSAGE_B = 1 << 20
SERVER_TIMEOUT_S = 60.0  # a server whose client never connects waits until killed
CONNECT_TRIES = 20


def _bridges(paths: list[str], leaves: set[str]) -> list[str]:
    """PCI addresses on the resolved paths that are not the GPUs/NICs themselves, first seen first."""
    out: list[str] = []
    for path in paths:
        for part in path.split("/")[3:]:  # /sys/devices/pci0000:17/0000:17:01.0/...
            if part.count(":") == 2 and part not in leaves and part not in out:
                out.append(part)
    return out


def _rails(options: dict[str, object]) -> list[dict[str, Any]]:
    node_rails = options.get("node_rails")
    if not isinstance(node_rails, dict):
        return []
    rails = node_rails.get(hostio.hostname(), [])
    return [r for r in rails if isinstance(r, dict)] if isinstance(rails, list) else []


def write_bw_argv(binary: str, hca: str, port: int, gpu: int, tcp_port: int) -> list[str]:
    # perftest README "Common Options" (-d, -i, -p, -s, -n, -F) and "GPUDirect usage" (--use_cuda=<gpu
    # index>); --report_gbits: perftest_parameters.c usage ("Report Max/Average BW of test in Gbit/sec").
    return [
        binary,
        "-d",
        hca,
        "-i",
        str(port),
        "-p",
        str(tcp_port),
        f"--use_cuda={gpu}",
        "--report_gbits",
        "-F",
        "-s",
        str(MESSAGE_B),
        "-n",
        str(ITERATIONS),
    ]


def loopback_write_bw(binary: str, rail: dict[str, Any], timeout_s: float) -> list[Evidence]:
    """Server then client on this node; both runs come back as evidence (the client's is judged)."""
    argv = write_bw_argv(
        binary, str(rail["hca"]), int(rail.get("port", 1)), int(rail["gpu"]), BASE_PORT + int(rail["gpu"])
    )
    # CUDA's default order is fastest-first; PCI_BUS_ID makes --use_cuda=<k> the GPU nvidia-smi calls k
    # (CUDA Programming Guide, "CUDA Environment Variables": CUDA_DEVICE_ORDER).
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    server: list[Evidence] = []
    thread = threading.Thread(
        target=lambda: server.append(hostio.run(argv, SERVER_TIMEOUT_S, source="perftest", env=env))
    )
    thread.start()
    # The client cannot connect before the server listens; perftest then says "Couldn't connect to
    # <server>:<port>" (perftest_communication.c) and exits: try again shortly, a bounded number of times.
    attempt = 0
    while True:
        attempt += 1
        client = hostio.run(
            [*argv, "localhost"], min(timeout_s, SERVER_TIMEOUT_S - 5), source="perftest", env=env
        )
        refused = "Couldn't connect to" in client.stderr + client.stdout
        if not refused or not thread.is_alive() or attempt >= CONNECT_TRIES:
            break
        time.sleep(0.5)
    thread.join()
    meta = {"hca": str(rail["hca"]), "gpu": str(rail["gpu"])}
    evs = [replace(e, meta={**e.meta, **meta, "role": "server"}) for e in server]
    return [*evs, replace(client, meta={**client.meta, **meta, "role": "client", "attempts": str(attempt)})]


def collect(options: dict[str, object]) -> list[Evidence]:
    timeout_s = timeout_of(options)
    gpu_list, bdfs = gpu_bdfs()
    hca_list, names = hcas()
    out = [
        gpu_list,
        hca_list,
        hostio.run(
            ["nvidia-smi", "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"],
            timeout_s,
            source="nvidia-smi-query",
        ),
        hostio.read("/proc/driver/nvidia/version", source="nvidia-driver"),
        hostio.run(["uname", "-r"], timeout_s, source="uname"),
        hostio.run(["lsmod"], timeout_s, source="lsmod"),
        *[hostio.read(f"/sys/module/{m}/initstate") for m in PEERMEM_MODULES],
        *[hostio.read(f"{PCI_DEVICES}/{b}/iommu_group/type") for b in bdfs],
        # the group itself: absent = IOMMU off; present without "type" = a kernel too old to say the mode
        *[listing(f"{PCI_DEVICES}/{b}/iommu_group")[0] for b in bdfs],
    ]
    links = [resolved(f"{PCI_DEVICES}/{b}") for b in bdfs] + [
        resolved(f"{IB_CLASS_DIR}/{h}/device") for h in names
    ]
    nic_lists, nic_links = fabric_nics(options)  # Slingshot's cxi NICs, TCPX's GPU NICs: no ibverbs'
    out += nic_lists
    links += [resolved(link) for link in nic_links]
    out += links
    paths = [p for p in (device_path(ev) for ev in links) if p]
    if bdfs and (names or nic_links):  # ACS matters between a GPU and a NIC
        leaves = {p.rsplit("/", 1)[-1] for p in paths}
        out += [
            hostio.run(["lspci", "-D", "-vvv", "-s", b], timeout_s, source="lspci")
            for b in _bridges(paths, leaves)
        ]
    perftest_bin = options.get("perftest_bin")
    binary = os.path.join(perftest_bin, "ib_write_bw") if isinstance(perftest_bin, str) else "ib_write_bw"
    for rail in _rails(options):
        if bdfs and str(rail.get("hca")) in names:
            evs = loopback_write_bw(binary, rail, timeout_s)
            out += evs
            if any(e.returncode in (126, 127) for e in evs):
                break  # no perftest binary: every rail would say the same
    return out
