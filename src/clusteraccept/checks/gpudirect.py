"""GPUDirect RDMA: peer-memory support, ACS on the GPU<->NIC path, IOMMU mode, GPU-memory RDMA bandwidth.

Evidence: probes/gpudirect.py. Verdicts:
- ``gpudirect.peermem`` on ``<node>``: ``nvidia_peermem`` (or the older ``nv_peer_mem``) loaded, or
  DMA-BUF usable: the OPEN NVIDIA kernel modules (``/proc/driver/nvidia/version`` says "Open Kernel
  Module"; NVIDIA driver README "Open Linux Kernel Modules": "DMABUF support for CUDA allocations" works
  only with them) and Linux >= 5.12 (RDMA dma-buf memory registration, ``ibv_reg_dmabuf_mr``); NCCL's
  troubleshooting guide ("GPU-to-NIC communication") names both routes;
- ``gpudirect.acs`` on ``<node>:gpu<k>``: no bridge between GPU k and its rail NIC(s) has ACS
  redirect on (lspci ACSCtl; NCCL troubleshooting "PCI Access Control Services (ACS)");
- ``gpudirect.iommu`` on ``<node>``: the IOMMU mode of the GPUs' groups against the site's ``gpudirect.iommu``
  (SKIP, saying what was seen, when the site declares none);
- ``gpudirect.write_bw`` on ``<node>:rail<k>``: loopback ``ib_write_bw --use_cuda`` on the rail, Gb/s
  against the baseline of ``gpudirect.write_bw.<node>.rail<k>``;
- ``gpudirect.nccl_gdrdma`` on ``<node>``: an NCCL INFO log of a multi-node run shows ``/GDRDMA`` on every
  NET channel of this node (SKIP until such a log is routed to this family).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clusteraccept.checks.hostfacts import (
    NodeEvidence,
    every_subject,
    failure,
    gpu_addresses,
    judge_nodes,
    last_line,
    parsed,
)
from clusteraccept.errors import ParseError
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.judge.verdicts import judge as judge_value
from clusteraccept.parsers import lsmod, lspci, nccl_debug, perftest
from clusteraccept.plan.subjects import gpu_subject, rail_subject
from clusteraccept.probes.gpudirect import MESSAGE_B, PEERMEM_MODULES
from clusteraccept.probes.topology import (
    CXI_CLASS_DIR,
    IB_CLASS_DIR,
    NET_CLASS_DIR,
    PCI_DEVICES,
    nic_class_dir,
)
from clusteraccept.site.baselines import lookup
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import NodeType

FAMILY = "gpudirect"
_DRIVER = re.compile(r"NVRM version: NVIDIA UNIX (Open Kernel Module for \S+|\S+ Kernel Module)\s+([0-9.]+)")
_KERNEL = re.compile(r"([0-9]+)\.([0-9]+)")
DMABUF_KERNEL = (5, 12)


def driver_flavor(text: str | None) -> tuple[str | None, str | None]:
    """("open" | "proprietary", version) from /proc/driver/nvidia/version; (None, None) if unknown."""
    m = _DRIVER.search(text or "")
    if m is None:
        return None, None
    return ("open" if m.group(1).startswith("Open") else "proprietary"), m.group(2)


def _no_hca(ne: NodeEvidence, where: str) -> bool:
    """No rail NIC at all: the node type's NIC class (probes/topology.nic_class_dir) is empty."""
    names = ne.listing(where)
    return names is not None and not names


def _ib_ev(ne: NodeEvidence, where: str) -> tuple[str, ...]:
    """The archived listing of the NICs' class (the evidence of "no RDMA device")."""
    path = ne.archived(where)
    return (path,) if path else ()


def _no_rdma(node: str, where: str) -> str:
    what = {CXI_CLASS_DIR: "Slingshot NIC", NET_CLASS_DIR: "GPU NIC"}.get(where, "RDMA device")
    return f"{node}: no {what} on this host ({where} is empty): GPUDirect RDMA does not apply"


# nvidia-peermem is ib_core's peer-memory client, and perftest's ib_write_bw an ibverbs program (NVIDIA
# GPUDirect RDMA docs; perftest README): neither applies to a Slingshot NIC or a GPUDirect-TCPX GPU NIC,
# which are no ibverbs devices. GPU memory reaching the NIC is read from the NCCL log there
# (gpudirect.nccl_gdrdma: /GDRDMA; Google's plugins offer NCCL GPU buffers, NCCL_PTR_CUDA: tcpx
# src/net_tcpx.cc, tcpxo nccl_shim.cc).
def _not_verbs(nt: NodeType) -> str:
    return f"a {nt.nic_noun} is no ibverbs device"


def _peermem(node: str, ne: NodeEvidence) -> Verdict:
    check = "gpudirect.peermem"
    init = [f"/sys/module/{m}/initstate" for m in PEERMEM_MODULES]
    ev = tuple(p for p in [*(ne.archived(x) for x in init), ne.archived("/proc/driver/nvidia/version")] if p)
    ev += ne.archived_command("lsmod") + ne.archived_command("uname")
    live = [m for m, path in zip(PEERMEM_MODULES, init, strict=True) if ne.text(path) == "live"]
    mods, _ = parsed(lsmod.parse, "lsmod", ne.command("lsmod"))
    live += [m for m in PEERMEM_MODULES if mods is not None and mods.loaded(m) and m not in live]
    if not live and mods is None and all(ne.file(p) is None for p in init):
        return error(check, FAMILY, node, f"{node}: no kernel module evidence (/sys/module, lsmod) came back")
    flavor, version = driver_flavor(ne.text("/proc/driver/nvidia/version"))
    uname = ne.command("uname")
    release = uname[0].stdout.strip() if uname and uname[0].ok else ""
    km = _KERNEL.match(release)
    kernel_ok = km is not None and (int(km.group(1)), int(km.group(2))) >= DMABUF_KERNEL
    dmabuf = flavor == "open" and kernel_ok
    if _no_hca(ne, IB_CLASS_DIR):  # a Slingshot node's peermem verdict is a SKIP of its own (_node)
        seen = (f"{live[0]} loaded" if live else "no peer-memory module loaded") + (
            f", DMA-BUF usable (open NVIDIA kernel module {version}, Linux {release})" if dmabuf else ""
        )
        return skip(check, FAMILY, node, f"{_no_rdma(node, IB_CLASS_DIR)} (observed: {seen})", ev)
    if live:
        also = "; DMA-BUF also usable" if dmabuf else ""
        return expect(
            check,
            FAMILY,
            node,
            True,
            f"{node}: {live[0]} loaded (GPU memory can be registered with the HCA){also}",
            value=live[0],
            evidence=ev,
        )
    if dmabuf:
        return expect(
            check,
            FAMILY,
            node,
            True,
            f"{node}: nvidia_peermem not loaded, DMA-BUF usable instead "
            f"(open NVIDIA kernel module {version}, Linux {release})",
            value="dmabuf",
            evidence=ev,
        )
    why = []
    if flavor != "open":
        why.append(
            f"NVIDIA kernel module {version} is the proprietary flavor"
            if flavor
            else "NVIDIA kernel module flavor unknown (/proc/driver/nvidia/version unreadable)"
        )
    if not kernel_ok:
        why.append(f"Linux {release or '(unknown)'} is older than 5.12")
    msg = (
        f"{node}: nvidia_peermem is not loaded and DMA-BUF is not usable ({'; '.join(why)}; DMA-BUF "
        "needs the open GPU kernel modules and Linux >= 5.12): GPUDirect RDMA cannot register GPU memory, "
        "NCCL falls back to host copies; run `modprobe nvidia-peermem`"
    )
    return expect(check, FAMILY, node, False, msg, value="none", evidence=ev)


def _path_bridges(gpu_path: str, nic_path: str) -> list[str]:
    """PCI bridges a GPU<->NIC peer-to-peer transfer crosses (up to and including the common switch)."""
    g = [p for p in gpu_path.split("/")[3:-1] if p.count(":") == 2]
    n = [p for p in nic_path.split("/")[3:-1] if p.count(":") == 2]
    common = 0
    while common < min(len(g), len(n)) and g[common] == n[common]:
        common += 1
    shared = g[common - 1 : common] if common else []
    return list(dict.fromkeys(g[common:] + n[common:] + shared))


def _acs(site: Site, node: str, ne: NodeEvidence, k: int, addr: str | None) -> Verdict:
    check, subject = "gpudirect.acs", gpu_subject(node, k)
    rails = [r for r in site.node_type(node).rails if r.gpu == k]
    if not rails:
        return skip(check, FAMILY, subject, f"the site's rail map assigns no NIC to GPU{k}")
    where = nic_class_dir(site.node_type(node).fabric)
    if _no_hca(ne, where):
        return skip(check, FAMILY, subject, _no_rdma(node, where), _ib_ev(ne, where))
    gpu_path = ne.link(f"{PCI_DEVICES}/{addr}") if addr else None
    if gpu_path is None:
        return error(check, FAMILY, subject, f"{node} gpu{k}: no PCI path for the GPU (nvidia-smi/sysfs)")
    runs = {ev.argv[-1]: (ev, p) for ev, p in ne.commands("lspci")}
    ev: list[str] = [p for x in [f"{PCI_DEVICES}/{addr}"] if (p := ne.archived(x))]
    bad: list[str] = []
    checked: list[str] = []
    for r in rails:
        nic_path = ne.link(f"{where}/{r.hca}/device")
        if nic_path is None:
            return skip(check, FAMILY, subject, f"{node} gpu{k}: rail NIC {r.hca} is absent (see topology)")
        for bdf in _path_bridges(gpu_path, nic_path):
            item = runs.get(bdf)
            if item is None:
                return error(
                    check, FAMILY, subject, f"{node} gpu{k}: no lspci evidence for bridge {bdf}", tuple(ev)
                )
            ev.append(item[1])
            if item[0].returncode in (126, 127):
                why = f"{node} gpu{k}: lspci not found (pciutils not installed): ACS not checked"
                return skip(check, FAMILY, subject, why, tuple(ev))
            result, failed = parsed(lspci.parse, "lspci", item)
            dev = result.device(bdf) if result else None
            if dev is None:
                return error(
                    check, FAMILY, subject, f"{node} gpu{k}: {failed or f'lspci lists no {bdf}'}", tuple(ev)
                )
            if dev.caps_access_denied:
                why = (
                    f"{node} gpu{k}: lspci could not read the capabilities of bridge {bdf} "
                    "(<access denied>): run the probe job as root to read ACS"
                )
                return error(check, FAMILY, subject, why, tuple(ev))
            on = dev.acs_blocks_p2p()
            if on and bdf not in checked:
                flags = " ".join(f + "+" for f in on)
                bad.append(f"{bdf} ({dev.port_type or dev.device_class}, ACSCtl {flags})")
            checked.append(bdf)
    if bad:
        nics = ", ".join(r.hca for r in rails)
        msg = (
            f"{node} gpu{k}: ACS is on at bridge {'; '.join(bad)} between GPU{k} and {nics}: peer-to-peer "
            "traffic is redirected to the root complex, breaking GPUDirect RDMA; disable ACS (BIOS, or "
            "setpci ECAP_ACS+0x6.w=0000)"
        )
        return expect(check, FAMILY, subject, False, msg, evidence=tuple(ev))
    nics = ", ".join(r.hca for r in rails)
    where = ", ".join(dict.fromkeys(checked)) or "none"
    msg = f"{node} gpu{k}: ACS off on the {len(set(checked))} bridge(s) between GPU{k} and {nics} ({where})"
    return expect(check, FAMILY, subject, True, msg, evidence=tuple(ev))


def iommu_modes(ne: NodeEvidence, addrs: dict[int, str]) -> dict[int, str]:
    """GPU k -> the IOMMU mode of its group (``iommu_group/type``: DMA, DMA-FQ, identity...); "none" where it
    is in no group (IOMMU off), "unknown" where it is in one whose type cannot be read."""

    def mode_of(addr: str) -> str:
        group = f"{PCI_DEVICES}/{addr}/iommu_group"
        text, names = ne.text(f"{group}/type"), ne.listing(group)
        if text:
            return text
        if names is None or not names:  # no group (or a run that did not list it): IOMMU off
            return "none"
        return "unknown"  # a group, but no readable type: the kernel does not say, or it was unreadable

    return {k: mode_of(a) for k, a in addrs.items()}


def _iommu(site: Site, node: str, ne: NodeEvidence, addrs: dict[int, str]) -> Verdict:
    """The IOMMU mode of every GPU's group (``iommu_group/type``; no group: "none") against the site's
    ``gpudirect.iommu``. A translating IOMMU (DMA, DMA-FQ) on the GPUs breaks or slows PCIe peer-to-peer
    between GPU and NIC on bare metal; NVIDIA advises IOMMU off or passthrough (iommu=pt: "identity")."""
    check, accepted = "gpudirect.iommu", site.gpudirect.iommu
    groups = {k: f"{PCI_DEVICES}/{a}/iommu_group" for k, a in addrs.items()}
    paths = {k: f"{g}/type" for k, g in groups.items()}
    ev = tuple(p for p in (ne.archived(x) for x in (*paths.values(), *groups.values())) if p)
    mode = iommu_modes(ne, addrs)
    modes = sorted(set(mode.values()))
    gpus = {m: ", ".join(str(k) for k in sorted(mode) if mode[k] == m) for m in modes}
    label = {"none": "off (no IOMMU group)", "identity": "passthrough (identity)"}
    observed = ", ".join(f"{label.get(m, m)} on GPU {gpus[m]}" for m in modes) or "-"
    if not accepted:
        why = f"{node}: the site declares no IOMMU mode to check (gpudirect.iommu); observed: {observed}"
        return skip(check, FAMILY, node, why, ev)
    if not addrs:
        return error(check, FAMILY, node, f"{node}: no GPU PCI address known, IOMMU mode not read", ev)
    if "unknown" in modes:
        why = f"{node}: the GPUs are in an IOMMU group whose type cannot be read ({observed}); mode unknown"
        return error(check, FAMILY, node, why, ev)
    bad = [m for m in modes if m not in accepted]
    msg = (
        f"{node}: IOMMU {observed}; the site accepts {', '.join(accepted)} (a translating IOMMU on the "
        "GPUs breaks or slows GPUDirect peer-to-peer: boot with iommu=pt, or the IOMMU off)"
        if bad
        else f"{node}: IOMMU {observed}, as the site accepts"
    )
    return expect(check, FAMILY, node, not bad, msg, value=",".join(modes), evidence=ev)


def _write_bw(site: Site, node: str, ne: NodeEvidence) -> list[Verdict]:
    out: list[Verdict] = []
    runs = ne.commands("perftest")
    absent = next((e for e in runs if e[0].returncode in (126, 127)), None)
    for r in site.node_type(node).rails:
        check, subject = "gpudirect.write_bw", rail_subject(node, r.index)
        who = f"{node} rail{r.index} {r.hca}<->GPU{r.gpu}"
        if not site.node_type(node).verbs:
            why = f"{who}: ib_write_bw is an ibverbs benchmark and {_not_verbs(site.node_type(node))} "
            why += "(gpudirect.nccl_gdrdma judges"
            out.append(skip(check, FAMILY, subject, why + " GPU memory over it)"))
            continue
        if _no_hca(ne, IB_CLASS_DIR):
            out.append(skip(check, FAMILY, subject, _no_rdma(node, IB_CLASS_DIR), _ib_ev(ne, IB_CLASS_DIR)))
            continue
        if absent is not None:
            why = (
                f"{who}: ib_write_bw not found on this node (perftest not installed; tools.perftest_bin): "
                + failure("ib_write_bw", absent[0])
            )
            out.append(skip(check, FAMILY, subject, why, (absent[1],)))
            continue
        mine = {e.meta.get("role"): (e, p) for e, p in runs if e.meta.get("hca") == r.hca}
        item = mine.get("client")
        if item is None:
            why = "rail NIC absent" if ne.link(f"{IB_CLASS_DIR}/{r.hca}/device") is None else "no GPU listed"
            out.append(skip(check, FAMILY, subject, f"{who}: not measured ({why})"))
            continue
        out.append(_write_bw_verdict(site, node, r.index, r.gpu, who, item, mine.get("server")))
    return out


def _write_bw_verdict(
    site: Site,
    node: str,
    rail: int,
    gpu: int,
    who: str,
    item: tuple[Any, str],
    server: tuple[Any, str] | None,
) -> Verdict:
    check, subject, (ev, path) = "gpudirect.write_bw", rail_subject(node, rail), item
    evidence = (path,) + ((server[1],) if server else ())
    text = ev.stdout + "\n" + ev.stderr
    if "unrecognized option" in text and "use_cuda" in text:
        why = f"{who}: ib_write_bw was built without CUDA (--use_cuda unknown): rebuild perftest with CUDA"
        return skip(check, FAMILY, subject, why, evidence)
    if ev.returncode is None:
        return expect(
            check,
            FAMILY,
            subject,
            False,
            f"{who}: ib_write_bw --use_cuda did not finish ({failure('ib_write_bw', ev)})",
            evidence=evidence,
        )
    try:
        res: perftest.PerftestBw | None = perftest.parse(ev.stdout)
    except ParseError as exc:
        if ev.returncode == 0:
            return error(check, FAMILY, subject, f"could not parse perftest output ({path}): {exc}", evidence)
        res = None
    value = res.max_avg_Gbps() if res else None
    if ev.returncode != 0 or res is None or not res.completed or value is None:
        detail = ("; ".join(res.errors[:2]) if res else "") or failure("ib_write_bw", ev)
        if server is not None and server[0].returncode != 0:  # the server's reason (CUDA, MR) says more
            detail += f"; server: {last_line(server[0])}"
        return expect(
            check,
            FAMILY,
            subject,
            False,
            f"{who}: ib_write_bw --use_cuda failed: {detail}",
            evidence=evidence,
        )
    if not res.use_cuda or res.cuda_device not in (None, gpu):
        return expect(
            check,
            FAMILY,
            subject,
            False,
            f"{who}: ib_write_bw did not use GPU{gpu} memory (CUDA device {res.cuda_device})",
            evidence=evidence,
        )
    key = f"gpudirect.write_bw.{node}.rail{rail}"
    return judge_value(
        check,
        FAMILY,
        subject,
        value,
        lookup(site.baselines, key),
        what="write_bw_Gbps",
        context=f"{who} loopback, {MESSAGE_B >> 20} MiB, GPU memory",
        evidence=evidence,
        labels={"key": key},
    )


@dataclass(frozen=True)
class _Logs:
    """The NCCL INFO logs, each parsed once: per host, the first log with NET channels of that host (its
    position, those channels, its path); and the first log that did not parse (position, why, path)."""

    first: Mapping[str, tuple[int, tuple[Any, ...], str]]
    unparsable: tuple[int, str, str] | None


def _index_logs(logs: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> _Logs:
    """In archive order, until every one of ``nodes`` has its log (the rest cannot change a verdict)."""
    first: dict[str, tuple[int, tuple[Any, ...], str]] = {}
    unparsable: tuple[int, str, str] | None = None
    wanted = set(nodes)
    for i, (ev, path) in enumerate(logs):
        if wanted <= first.keys():
            break
        if ev.ok:
            result, why = parsed(nccl_debug.parse, "NCCL INFO log", (ev, path))
        else:  # a step that failed (nccl.launch says how) may still show the channels it built
            result = _lines_of_failed(ev.stdout)
            if result is None:
                continue  # a failed step's partial output is no parser fault
        if result is None:
            unparsable = unparsable or (i, str(why), path)
            continue
        by_host: dict[str, list[Any]] = {}
        for c in result.net_channels():
            if c.host is not None:
                by_host.setdefault(c.host, []).append(c)
        for host, channels in by_host.items():
            first.setdefault(host, (i, tuple(channels), path))
    return _Logs(first, unparsable)


def _lines_of_failed(text: str) -> nccl_debug.NcclDebug | None:
    try:
        return nccl_debug.parse(text)
    except ParseError:
        return None


def _nccl_gdrdma(node: str, ne: NodeEvidence, logs: _Logs, where: str) -> Verdict:
    """Judged on the first log (in archive order) with NET channels of the node; a log that did not parse
    before it is an ERROR (it may have been the node's)."""
    check = "gpudirect.nccl_gdrdma"
    if _no_hca(ne, where):
        return skip(check, FAMILY, node, _no_rdma(node, where), _ib_ev(ne, where))
    hit, bad = logs.first.get(node), logs.unparsable
    if bad is not None and (hit is None or bad[0] < hit[0]):
        return error(check, FAMILY, node, f"{node}: {bad[1]}", (bad[2],))
    if hit is None:
        return skip(check, FAMILY, node, "needs the pair campaign's NCCL INFO log")
    _, mine, path = hit
    if all(c.transport == "NET/Socket" for c in mine):  # TCP sockets have no GPUDirect RDMA to use
        why = f"not judged: nccl.transport on {node}: its NET channels are TCP sockets (via {mine[0].via})"
        return skip(check, FAMILY, node, why, (path,))
    plain = [c for c in mine if not c.gdrdma]
    return expect(
        check,
        FAMILY,
        node,
        not plain,
        f"{node}: {len(mine) - len(plain)}/{len(mine)} NET "
        "channels use /GDRDMA" + (f" (channel {plain[0].channel}: via {plain[0].via})" if plain else ""),
        evidence=(path,),
    )


def _node(site: Site, node: str, ne: NodeEvidence, logs: _Logs) -> list[Verdict]:
    addrs, why = gpu_addresses(ne)
    nt = site.node_type(node)
    peermem = (
        skip(
            "gpudirect.peermem",
            FAMILY,
            node,
            f"{node}: nvidia-peermem serves ibverbs drivers; {_not_verbs(nt)}",
        )
        if not nt.verbs
        else _peermem(node, ne)
    )
    where = nic_class_dir(site.node_type(node).fabric)
    out = [peermem, _iommu(site, node, ne, addrs or {}), _nccl_gdrdma(node, ne, logs, where)]
    for k in range(site.node_type(node).gpus):
        if _no_hca(ne, where):
            out.append(
                skip("gpudirect.acs", FAMILY, gpu_subject(node, k), _no_rdma(node, where), _ib_ev(ne, where))
            )
        elif addrs is None or k not in addrs:
            out.append(
                error(
                    "gpudirect.acs",
                    FAMILY,
                    gpu_subject(node, k),
                    f"{node} gpu{k}: " + (why if addrs is None else f"GPU{k} is not listed by nvidia-smi"),
                )
            )
        else:
            out.append(_acs(site, node, ne, k, addrs[k]))
    return out + _write_bw(site, node, ne)


def _missing(site: Site, node: str, reason: str) -> list[Verdict]:
    subjects = every_subject(
        site,
        node,
        ["gpudirect.peermem", "gpudirect.iommu", "gpudirect.nccl_gdrdma"],
        ["gpudirect.acs"],
        ["gpudirect.write_bw"],
    )
    return [error(c, FAMILY, s, reason) for c, s in subjects]


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    sources = ("nccl-debug", "nccl-tests")
    # each log parsed once, not once per node: 68,000 logs at 256 nodes
    logs = _index_logs(
        [(ev, p) for ev, p in evidence if ev.source in sources and "NCCL INFO" in ev.stdout], nodes
    )
    return judge_nodes(site, evidence, nodes, FAMILY, lambda s, n, ne: _node(s, n, ne, logs), _missing)
