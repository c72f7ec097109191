"""Simulated host part for the gpudirect family, on the PCIe layout of sim/profile_topology.py.

Built from REAL captures (tests/data/*/SOURCES.md), adapted per node:
- ``lsmod``: tests/data/lsmod/lsmod-grep-nvidia-peermem-gpu-operator-docs.txt (nvidia_peermem loaded);
- ``lspci -D -vvv -s <bridge>``: tests/data/lspci/lspci-vvv-s-amd-matisse-dsp-acs-on-kvm2023.txt, with the
  device line, PCIe port type and link lines set for each bridge of the layout (Gen5 x16; switch ports
  named as lspci names a Broadcom PEX890xx switch) and ACSCtl all '-' (ACS disabled, as an HGX BIOS
  ships it), or the fixture's real ACSCtl line (SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+) on the
  switch ports of a faulted GPU;
- ``ib_write_bw`` client/server: tests/data/perftest/ib_write_bw-roce-gke-h200-cuda-dmabuf-a-gbits-dranet.txt
  (client, CUDA, Gb/s) and ib_write_bw-ib-rtx4080-cuda-mibps-server.txt (server, IB link type), set to
  the rail's HCA, IB link type, the rail GPU and one 1 MiB row near NDR400 line rate;
- ``/proc/driver/nvidia/version``: the proprietary kernel module line shape of real captures with the
  sglang machine's driver 570.133.20 (so DMA-BUF is not available and nvidia_peermem is required);
  ``uname -r`` an Ubuntu 22.04 kernel; ``/sys/module/nvidia_peermem/initstate`` "live".
Faults: ``peermem_missing {node}`` unloads nvidia_peermem (no initstate, no lsmod line);
``acs_on {node, gpu}`` turns ACS redirect on for the switch ports above GPU k and its rail NIC.
"""

from __future__ import annotations

import re
from typing import Any

from clusteraccept.probes.gpudirect import BASE_PORT, ITERATIONS, MESSAGE_B
from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_topology import DATA, GPU_MODEL, Slot, _fixture, layout, supported
from clusteraccept.site.model import Site

LSMOD = DATA / "lsmod" / "lsmod-grep-nvidia-peermem-gpu-operator-docs.txt"
LSPCI = DATA / "lspci" / "lspci-vvv-s-amd-matisse-dsp-acs-on-kvm2023.txt"
CLIENT = DATA / "perftest" / "ib_write_bw-roce-gke-h200-cuda-dmabuf-a-gbits-dranet.txt"
SERVER = DATA / "perftest" / "ib_write_bw-ib-rtx4080-cuda-mibps-server.txt"
DRIVER = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Wed Mar 12 22:36:21 UTC 2025\n"
    "GCC version:  gcc version 11.4.0 (Ubuntu 11.4.0-1ubuntu1~22.04)\n"
)
KERNEL = "5.15.0-131-generic\n"
SWITCH = "Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])"
ACS_OFF = "SrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-"
WRITE_BW_Gbps = 391.24  # 1 MiB GPU-memory RDMA writes on a healthy NDR400 rail (~98% of line rate)


def _lspci(bdf: str, port_type: str, acs_on: bool) -> str:
    text = _fixture(str(LSPCI))
    desc = SWITCH if port_type != "Root Port" else text.split(": ", 1)[1].split("\n", 1)[0]
    text = re.sub(r"^03:02\.0 PCI bridge: .*$", f"{bdf} PCI bridge: {desc}", text, count=1, flags=re.M)
    slot = " (Slot+)" if port_type != "Upstream Port" else ""
    text = text.replace("Express (v2) Downstream Port (Slot+)", f"Express (v2) {port_type}{slot}")
    text = text.replace("Speed 16GT/s, Width x4", "Speed 32GT/s, Width x16")
    text = text.replace("Speed 8GT/s (downgraded), Width x4 (ok)", "Speed 32GT/s (ok), Width x16 (ok)")
    text = text.replace("Target Link Speed: 16GT/s", "Target Link Speed: 32GT/s")
    if not acs_on:
        text = re.sub(r"ACSCtl:\t.*", "ACSCtl:\t" + ACS_OFF, text)
    return text


def _bridges(s: Slot) -> list[tuple[str, str]]:
    """(bdf, PCIe port type) of every bridge above GPU and NIC of a slot."""
    kinds = ("Root Port", "Upstream Port", "Downstream Port")  # a lone bridge is the root port
    return [(b, kinds[i]) for path in (s.bridges_gpu, s.bridges_nic) for i, b in enumerate(path)]


def _client(s: Slot, model: str, slots: list[Slot]) -> str:
    text = _fixture(str(CLIENT))
    text = text.split("\n", 1)[1]  # the shell prompt line of the capture
    listing = "".join(f"CUDA device {x.gpu}: PCIe address is {x.gpu_bdf[5:7].upper()}:00\n" for x in slots)
    text = re.sub(r"CUDA device 0: PCIe address is 8F:00\n", listing, text)
    text = text.replace("Picking device No. 0", f"Picking device No. {s.gpu}")
    text = text.replace("device name = [NVIDIA H200]", f"device name = [{model}]")
    text = re.sub(r"using DMA-BUF for GPU buffer .*\n", "", text)
    text = re.sub(r"Calling ibv_reg_dmabuf_mr.*\n", "", text)
    text = text.replace("Device         : mlx5_3", f"Device         : {s.hca}")
    text = text.replace("Link type       : Ethernet", "Link type       : IB")
    text = text.replace(" GID index       : 3\n", "").replace("LID 0000", "LID 0x01")  # IB: LIDs, no GIDs
    text = re.sub(r" GID: .*\n", "", text)
    rows = re.compile(r"(?ms)^ 2 +5000 .*?(?=^-{10})")
    row = f" {MESSAGE_B:<10} {ITERATIONS:<14} {WRITE_BW_Gbps + 0.9:<18.2f} {WRITE_BW_Gbps:<19.2f} 0.046641\n"
    return rows.sub(row, text)


def _server(s: Slot, model: str) -> str:
    text = _fixture(str(SERVER))
    text = text.replace("Picking device No. 0", f"Picking device No. {s.gpu}")
    text = text.replace("NVIDIA GeForce RTX 4080", model)
    text = text.replace("Device         : mlx5_0", f"Device         : {s.hca}")
    text = text.replace("BW peak[MiB/sec]    BW average[MiB/sec]", "BW peak[Gb/sec]    BW average[Gb/sec]")
    return re.sub(
        r"(?m)^ 65536 .*$",
        f" {MESSAGE_B:<10} {ITERATIONS:<14} {WRITE_BW_Gbps + 0.9:<18.2f} {WRITE_BW_Gbps:<19.2f} 0.046641",
        text,
    )


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    if not supported(site, node):
        return part
    kinds = {f.get("kind") for f in faults}
    acs_gpus = {int(f["gpu"]) for f in faults if f.get("kind") == "acs_on" and "gpu" in f}
    slots = layout(node, site, faults)
    ports = {r.index: r.port for r in site.node_type(node).rails}
    model = site.node_type(node).gpu_model or GPU_MODEL
    lsmod = _fixture(str(LSMOD))
    if "peermem_missing" in kinds:
        lsmod = re.sub(r"(?m)^nvidia_peermem .*\n", "", lsmod).replace("nvidia_peermem,", "")
    else:
        part.files["/sys/module/nvidia_peermem/initstate"] = "live\n"
    part.files["/proc/driver/nvidia/version"] = DRIVER
    part.commands += [("uname -r", KERNEL, 0), ("lsmod", lsmod, 0)]
    done: set[str] = set()
    for s in slots:
        if "iommu_translated" in kinds:  # the GPUs' group translated (iommu_group/type, sysfs ABI)
            part.files[f"{s.gpu_dir}/iommu_group/type"] = "DMA-FQ\n"
        for bdf, kind in _bridges(s):
            # ACS redirect on the switch ports (not the root port) above this GPU and its NIC
            on = s.gpu in acs_gpus and kind == "Downstream Port"
            if bdf not in done:
                part.commands.append((f"lspci -D -vvv -s {bdf}", _lspci(bdf, kind, on), 0))
                done.add(bdf)
        head = f"*ib_write_bw -d {s.hca} -i {ports[s.rail]} -p {BASE_PORT + s.gpu} --use_cuda={s.gpu} *"
        part.commands.append((head + " localhost", _client(s, model, slots), 0))  # the client first
        part.commands.append((head, _server(s, model), 0))
    return part
