"""GPU/NIC topology: inventory, GPU<->rail-NIC affinity (PCIe closeness and NUMA), PCIe links, NIC ports.

Evidence: probes/topology.py (nvidia-smi topo -m and --query-gpu, lscpu, ibstat, sysfs PCI files).
Verdicts:
- ``topology.gpu_inventory``  on ``<node>``: GPU count and model (nvidia-smi), every sysfs GPU visible;
- ``topology.gpu_nic_affinity`` on ``<node>:gpu<k>``: each rail NIC of GPU k is its closest NIC
  (PIX/PXB in ``nvidia-smi topo -m``, or the node type's ``gpu_nic_path``: NODE on Grace trays) and
  on the GPU's NUMA node (sysfs ``numa_node`` of both, cross-checked against nvidia-smi's NUMA
  affinity); ``numa_node = -1`` (a VM, one socket) is "no NUMA information", judged by the node
  type's ``numa_expected``;
- ``topology.pcie_link`` on ``<node>:gpu<k>`` and ``topology.nic_pcie_link`` on ``<node>:rail<k>``:
  current PCIe speed and width equal the device's maximum (sysfs current_link_* vs max_link_*);
- ``topology.nic_port`` on ``<node>:rail<k>``: the rail port is Active/LinkUp at the expected rate and
  link layer (ibstat).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from clusteraccept.checks.hostfacts import (
    NodeEvidence,
    Pci,
    every_subject,
    gpu_addresses,
    int_or_none,
    judge_nodes,
    parsed,
)
from clusteraccept.judge.verdicts import Outcome, Verdict, error, expect, skip
from clusteraccept.parsers import ibstat, lscpu, nvidia_smi_topo
from clusteraccept.plan.subjects import gpu_subject, rail_subject
from clusteraccept.probes.topology import NVIDIA_DRIVER_DIR, PCI_DEVICES, nic_class_dir
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import NodeType, Rail

FAMILY = "topology"
_GTS = re.compile(r"([0-9]+(?:\.[0-9]+)?) GT/s")


def _speed(text: str | None) -> float | None:
    m = _GTS.match(text or "")
    return float(m.group(1)) if m else None


def link_verdict(check: str, subject: str, who: str, dev: Pci, gpu: bool) -> Verdict:
    """Current PCIe speed/width against the device maximum."""
    ev = dev.evidence("current_link_speed", "current_link_width", "max_link_speed", "max_link_width")
    cur_s, max_s = _speed(dev.attr("current_link_speed")), _speed(dev.attr("max_link_speed"))
    cur_w, max_w = int_or_none(dev.attr("current_link_width")), int_or_none(dev.attr("max_link_width"))
    if None in (cur_s, max_s, cur_w, max_w):
        return error(
            check,
            FAMILY,
            subject,
            f"{who} ({dev.bdf}): PCIe link attributes missing or unreadable "
            f"in sysfs ({dev.link}/current_link_*, max_link_*)",
            ev,
        )
    have, cap = f"x{cur_w} at {cur_s:g} GT/s", f"x{max_w} at {max_s:g} GT/s"
    ok = cur_w == max_w and cur_s == max_s
    if ok:
        return expect(
            check,
            FAMILY,
            subject,
            True,
            f"{who} ({dev.bdf}): PCIe {have}, its maximum",
            value=have,
            evidence=ev,
        )
    port_w, port_s = int_or_none(dev.parent_attr("max_link_width")), _speed(dev.parent_attr("max_link_speed"))
    port = f"; the port above allows x{port_w} at {port_s:g} GT/s" if port_w is not None and port_s else ""
    hint = (
        "; nvidia-smi notes GPUs may lower link speed when idle: re-check under load before reseating"
        if gpu and cur_w == max_w
        else ""
    )
    return expect(
        check,
        FAMILY,
        subject,
        False,
        f"{who} ({dev.bdf}): PCIe link runs {have}, device maximum {cap}{port}{hint}",
        value=have,
        evidence=ev,
    )


def _rails_of(site: Site, node: str, gpu: int) -> list[Rail]:
    return [r for r in site.node_type(node).rails if r.gpu == gpu]


def _no_hca(ne: NodeEvidence, nt: NodeType) -> bool:
    names = ne.listing(nic_class_dir(nt.fabric))
    return names is not None and not names


def _noun(nt: NodeType) -> str:
    return nt.nic_noun if not nt.verbs else "RDMA device"


def _family_counts(nt: NodeType) -> str | None:
    """The check family that judges a libfabric node type's device count (efa.devices, slingshot.devices):
    a rail device absent there is its finding, not topology's."""
    return f"{nt.family}.devices" if nt.family else None


def _absent(nt: NodeType, node: str, counted: str, nics: list[str]) -> str:
    """Why a libfabric node type's absent rail device is not judged here: its family's finding."""
    return f"not judged: {counted} on {node}: {nt.nic_noun} {', '.join(nics)} absent"


def _topo_numa(topo: nvidia_smi_topo.TopoMatrix, gpu: int, cpus: lscpu.Lscpu | None) -> int | None:
    if "NUMA Affinity" in topo.columns:
        return topo.numa(gpu)
    mine = topo.cpus(gpu)  # old drivers: only CPU Affinity; the node whose CPUs contain them
    hits = [n.node for n in (cpus.nodes if cpus else ()) if mine and mine <= frozenset(n.cpus)]
    return hits[0] if len(hits) == 1 else None


def _affinity(
    site: Site,
    node: str,
    ne: NodeEvidence,
    gpu: int,
    addr: str,
    hca: str,
    topo: nvidia_smi_topo.TopoMatrix,
    cpus: lscpu.Lscpu | None,
) -> tuple[bool | None, str]:
    """(ok, why) of one rail NIC of GPU ``gpu``; ok None: nothing could be compared."""
    nt = site.node_type(node)
    g = Pci(ne, f"{PCI_DEVICES}/{addr}")
    n = Pci(ne, f"{nic_class_dir(nt.fabric)}/{hca}/device")
    if f"GPU{gpu}" not in topo.gpus:
        return False, f"nvidia-smi topo -m lists no GPU{gpu} ({len(topo.gpus)} GPUs)"
    link = topo.link(gpu, hca) if hca in topo.nics else None
    if link is None and nt.verbs:  # nvidia-smi topo -m lists RDMA NICs; of a cxi or TCPX NIC: not said
        return False, f"nvidia-smi topo -m lists no NIC {hca} (NICs: {', '.join(topo.nics) or 'none'})"
    closest = topo.closest_nics(gpu) if link is not None else ()
    g_numa, n_numa, t_numa = g.numa(), n.numa(), _topo_numa(topo, gpu, cpus)
    bad: list[str] = []
    if g_numa is not None and n_numa is not None and g_numa != n_numa:
        bad.append(f"rail NIC {hca} is on NUMA node {n_numa}, GPU{gpu} on NUMA node {g_numa}")
    if g_numa is not None and t_numa is not None and g_numa != t_numa:
        bad.append(f"sysfs puts GPU{gpu} on NUMA node {g_numa}, nvidia-smi topo on NUMA node {t_numa}")
    unknown = [w for w, v in ((f"GPU{gpu} {g.bdf}", g_numa), (f"{hca} {n.bdf}", n_numa)) if v is None]
    if unknown and site.node_type(node).numa_expected:
        bad.append(
            f"sysfs reports no NUMA node (numa_node=-1) for {' and '.join(unknown)} but node type "
            f"{site.node_type(node).name} expects NUMA information (numa_expected)"
        )
    close = nt.gpu_nic_path
    if link is None:  # a cxi NIC is no RDMA device: NVIDIA does not document nvidia-smi listing it
        pass
    elif link not in close:
        bad.append(f"nvidia-smi topo: {link}, expected {' or '.join(close)}")
    elif hca not in closest:
        bad.append(f"{hca} is {link} but not GPU{gpu}'s closest NIC ({', '.join(closest)} closer)")
    where = (
        f"both on NUMA node {g_numa}"
        if g_numa is not None and g_numa == n_numa
        else "no NUMA information (numa_node=-1), not expected by the site"
        if unknown
        else ""
    )
    if bad:
        return False, bad[0] + (f" ({'; '.join(bad[1:])})" if bad[1:] else "")
    if link is None:  # NUMA alone, where sysfs says both nodes; nothing compared is no pass
        return (True if where and not unknown else None), (
            f"rail NIC {hca}: {where or 'no NUMA information to compare'} (nvidia-smi topo -m does not list "
            "it, so its PCIe closeness is not judged)"
        )
    return True, f"rail NIC {hca} is {link} to GPU{gpu} (its closest NIC){', ' + where if where else ''}"


def _gpu_absent(check: str, subject: str, reason: str, ev: tuple[str, ...], unknown: bool) -> Verdict:
    """GPU k not measurable: ERROR when nvidia-smi gave nothing usable, FAIL when it lists fewer GPUs."""
    return (
        error(check, FAMILY, subject, reason, ev)
        if unknown
        else expect(check, FAMILY, subject, False, reason, evidence=ev)
    )


def _gpu_checks(site: Site, node: str, ne: NodeEvidence) -> list[Verdict]:
    out: list[Verdict] = []
    nt = site.node_type(node)
    addrs, why = gpu_addresses(ne)
    topo_item = ne.command("nvidia-smi-topo")
    topo, topo_err = parsed(nvidia_smi_topo.parse, "nvidia-smi topo -m", topo_item)
    cpus, _ = parsed(lscpu.parse, "lscpu", ne.command("lscpu"))
    q_ev = ne.archived_command("nvidia-smi-query")
    for k in range(nt.gpus):
        subject = gpu_subject(node, k)
        addr = addrs.get(k) if addrs is not None else None
        reason = f"{node} gpu{k}: " + (
            why if addrs is None else f"GPU{k} is not listed by nvidia-smi ({len(addrs)} GPUs)"
        )
        if addr is None:
            out.append(_gpu_absent("topology.pcie_link", subject, reason, q_ev, addrs is None))
            ev = q_ev
        else:
            dev = Pci(ne, f"{PCI_DEVICES}/{addr}")
            out.append(link_verdict("topology.pcie_link", subject, f"{node} gpu{k}", dev, gpu=True))
            ev = q_ev + ne.archived_command("nvidia-smi-topo") + dev.evidence("numa_node")
        v = _affinity_verdict(site, node, ne, k, addr, topo, topo_err, cpus, ev)
        out.append(v or _gpu_absent("topology.gpu_nic_affinity", subject, reason, q_ev, addrs is None))
    return out


def _affinity_verdict(
    site: Site,
    node: str,
    ne: NodeEvidence,
    k: int,
    addr: str | None,
    topo: nvidia_smi_topo.TopoMatrix | None,
    topo_err: str | None,
    cpus: lscpu.Lscpu | None,
    ev: tuple[str, ...],
) -> Verdict | None:
    """The affinity verdict of GPU k; None when the GPU itself is missing (the caller says why)."""
    check, subject = "topology.gpu_nic_affinity", gpu_subject(node, k)
    rails = _rails_of(site, node, k)
    nt = site.node_type(node)
    where = nic_class_dir(nt.fabric)
    if not rails:
        return skip(check, FAMILY, subject, f"the site's rail map assigns no NIC to GPU{k}")
    if _no_hca(ne, nt):
        listing = tuple(p for p in [ne.archived(where)] if p)
        return skip(
            check,
            FAMILY,
            subject,
            f"{node}: no {_noun(nt)} on this host ({where} is empty: "
            f"no {'HCA' if nt.verbs else 'NIC'}, or its driver is not loaded), "
            f"no NIC to pair with GPU{k}",
            ev + listing,
        )
    if addr is None:
        return None
    if topo is None:
        return error(check, FAMILY, subject, f"{node} gpu{k}: {topo_err}", ev)
    msgs: list[str] = []
    ok_all, unjudged = True, False
    absent = [nic for r in rails for nic in r.devices if Pci(ne, f"{where}/{nic}/device").path is None]
    if absent and (counted := _family_counts(nt)):  # the device count is that family's finding
        why = _absent(nt, node, counted, absent)
        return skip(check, FAMILY, subject, why, ev)
    for nic in (nic for r in rails for nic in r.devices):
        n = Pci(ne, f"{where}/{nic}/device")
        ev += n.evidence("numa_node")
        if n.path is None:
            ok_all = False
            msgs.append(
                f"rail NIC {nic} is not present ({where}: {', '.join(ne.listing(where) or []) or 'none'})"
            )
            continue
        ok, msg = _affinity(site, node, ne, k, addr, nic, topo, cpus)
        ok_all &= ok is not False
        unjudged |= ok is None
        msgs.append(msg)
    if ok_all and unjudged:
        return skip(check, FAMILY, subject, f"{node} gpu{k}: " + "; ".join(msgs), ev)
    return expect(check, FAMILY, subject, ok_all, f"{node} gpu{k}: " + "; ".join(msgs), evidence=ev)


def _inventory(site: Site, node: str, ne: NodeEvidence) -> Verdict:
    check, nt = "topology.gpu_inventory", site.node_type(node)
    q = ne.command("nvidia-smi-query")
    addrs, why = gpu_addresses(ne)
    ev = ne.archived_command("nvidia-smi-query")
    if addrs is None:
        failed = q is not None and q[0].returncode is not None and q[0].returncode != 0
        return (
            expect(check, FAMILY, node, False, f"{node}: {why}", evidence=ev)
            if failed
            else error(check, FAMILY, node, f"{node}: {why}", ev)
        )
    names = ne.gpu_names()
    problems = []
    if len(addrs) != nt.gpus:
        problems.append(f"nvidia-smi lists {len(addrs)} GPUs, node type {nt.name} has {nt.gpus}")
    wrong = sorted({n for n in names.values() if nt.gpu_model and n != nt.gpu_model})
    if wrong:
        problems.append(f"GPU model {', '.join(wrong)}, expected {nt.gpu_model}")
    sysfs = [
        b
        for b in ne.listing(NVIDIA_DRIVER_DIR) or []
        if (Pci(ne, f"{PCI_DEVICES}/{b}").attr("class") or "").startswith("0x03")
    ]
    hidden = sorted(set(sysfs) - set(addrs.values()))
    if hidden:
        problems.append(f"GPU(s) {', '.join(hidden)} bound to the nvidia driver but not listed by nvidia-smi")
    model = ", ".join(sorted(set(names.values())))
    msg = (
        "; ".join(problems)
        if problems
        else f"{len(addrs)} x {model} (nvidia-smi), as node type {nt.name} expects"
    )
    return expect(check, FAMILY, node, not problems, f"{node}: {msg}", value=len(addrs), evidence=ev)


def _rail_checks(site: Site, node: str, ne: NodeEvidence) -> list[Verdict]:
    out: list[Verdict] = []
    nt = site.node_type(node)
    stat_item = ne.command("ibstat")
    stat, stat_err = parsed(ibstat.parse, "ibstat", stat_item)
    stat_ev = ne.archived_command("ibstat")
    where = nic_class_dir(nt.fabric)
    for r in nt.rails:
        subject = rail_subject(node, r.index)
        if _no_hca(ne, nt):
            why = f"{node}: no {_noun(nt)} on this host ({where} is empty), rail NIC {r.hca} absent"
            ev = tuple(p for p in [ne.archived(where)] if p)
            out += [
                skip(c, FAMILY, subject, why, ev) for c in ("topology.nic_port", "topology.nic_pcie_link")
            ]
            continue
        out += _rail_nics(nt, node, ne, r, subject, (stat, stat_err, stat_item, stat_ev))
    return out


def _rail_nics(
    nt: NodeType, node: str, ne: NodeEvidence, r: Rail, subject: str, ibstat_of: tuple[Any, ...]
) -> list[Verdict]:
    """nic_pcie_link and nic_port of one rail: every device of it (EFA: several) judged, the worst said."""
    links, absent = [], []
    where = nic_class_dir(nt.fabric)
    for nic in r.devices:
        dev = Pci(ne, f"{where}/{nic}/device")
        if dev.path is None:
            absent.append((nic, dev))
        else:
            links.append(
                link_verdict("topology.nic_pcie_link", subject, f"{node} rail{r.index} {nic}", dev, gpu=False)
            )
    who = f"{node} rail{r.index} {', '.join(n for n, _ in absent)}"
    listed = ", ".join(ne.listing(where) or []) or "none"
    checks = ("topology.nic_port", "topology.nic_pcie_link")
    if absent and (counted := _family_counts(nt)):  # the device count is that family's finding
        why = _absent(nt, node, counted, [n for n, _ in absent])
        return [skip(c, FAMILY, subject, why, absent[0][1].evidence()) for c in checks]
    if absent:
        msg = f"{who}: not present ({where}: {listed})"
        return [expect(c, FAMILY, subject, False, msg, evidence=absent[0][1].evidence()) for c in checks]
    link = next((v for v in links if v.outcome is not Outcome.PASS), links[0])
    if not nt.verbs:  # a cxi NIC or a TCPX GPU NIC is no ibverbs device: ibstat has no port of it
        why = f"{node} rail{r.index}: a {nt.nic_noun}, its link state is judged by {nt.family}.devices"
        return [link, skip("topology.nic_port", FAMILY, subject, why)]
    if (
        nt.fabric == "efa"
    ):  # ibverbs' EFA ports are not InfiniBand ports: ibstat has none (efa.devices: state)
        why = f"{node} rail{r.index}: EFA devices, their port state is judged by efa.devices"
        return [link, skip("topology.nic_port", FAMILY, subject, why)]
    return [link, _port_verdict(nt.link_layer, r, subject, f"{node} rail{r.index} {r.hca}", *ibstat_of)]


def _port_verdict(
    layer: str,
    r: Rail,
    subject: str,
    who: str,
    stat: ibstat.Ibstat | None,
    stat_err: str | None,
    item: Any,
    ev: tuple[str, ...],
) -> Verdict:
    check = "topology.nic_port"
    if stat is None:
        if item is not None and item[0].returncode in (126, 127):
            return skip(
                check,
                FAMILY,
                subject,
                f"{who}: ibstat not found on this node (infiniband-diags not "
                "installed): port state not measured",
                ev,
            )
        return error(check, FAMILY, subject, f"{who}: {stat_err}", ev)
    port = stat.port(r.hca, r.port)
    if port is None:
        return expect(check, FAMILY, subject, False, f"{who}: ibstat shows no port {r.port}", evidence=ev)
    bad = []
    if not port.is_up():
        bad.append(f"port {r.port} is {port.state}/{port.phys_state}, expected ACTIVE/LINK_UP")
    if r.rate_Gbps is not None and port.rate_Gbps != r.rate_Gbps:
        bad.append(
            f"rate {port.rate_Gbps:g} Gb/s, expected {r.rate_Gbps:g}"
            if port.rate_Gbps is not None
            else "no rate reported"
        )
    if layer in ("InfiniBand", "Ethernet") and port.link_layer != layer:
        bad.append(f"link layer {port.link_layer}, expected {layer}")
    state = (
        f"{port.state}/{port.phys_state} at {port.rate_Gbps:g} Gb/s {port.link_layer}"
        if port.rate_Gbps
        else f"{port.state}/{port.phys_state}"
    )
    return expect(
        check,
        FAMILY,
        subject,
        not bad,
        f"{who}: " + ("; ".join(bad) if bad else state),
        value=port.rate_Gbps,
        evidence=ev,
    )


def _missing(site: Site, node: str, reason: str) -> list[Verdict]:
    subjects = every_subject(
        site,
        node,
        ["topology.gpu_inventory"],
        ["topology.gpu_nic_affinity", "topology.pcie_link"],
        ["topology.nic_port", "topology.nic_pcie_link"],
    )
    return [error(c, FAMILY, s, reason) for c, s in subjects]


def _node(site: Site, node: str, ne: NodeEvidence) -> list[Verdict]:
    return [_inventory(site, node, ne), *_gpu_checks(site, node, ne), *_rail_checks(site, node, ne)]


def judge(site: Site, evidence: Sequence[tuple[Any, str]], nodes: Sequence[str]) -> list[Verdict]:
    return judge_nodes(site, evidence, nodes, FAMILY, _node, _missing)
