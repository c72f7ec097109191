"""Simulated RoCE host part: what probes/roce.py reads on a node of a RoCE site, from REAL captures.

Sources (tests/data/<tool>/SOURCES.md), adapted per node and netdev:
- ``mlnx_qos -i <netdev>``: mlnx-tools-d477a17-dscp-rxbuf-buffer-row-tc-unsorted.txt (newer format, trust
  dscp, receive-buffer line and PFC buffer row). Its PFC enabled/buffer rows are set to the site's lossless
  priority; its dscp2prio lines (the default DSCP >> 3 map) are kept when the site's DSCPs fit that map and
  re-rendered in the same layout otherwise. Under trust pcp mlnx_qos prints no dscp2prio section (parser
  docstring, mlnx-tools pretty_print), so the trust_pcp fault drops it.
- ``show_gids``: mlx5_bond_0-roce-ipv4-tabs.txt, its four lines (link-local and IPv4-mapped GID, v1 and v2)
  repeated for every rail with the rail's HCA, netdev and an IPv4 address per node and rail.
- ``ethtool -S <netdev>``: mlx5_core-cx4-kernel4.15-ethq.txt in ethtool's own layout ("NIC statistics:",
  5-space indent: ethtool do_gstats()). That host used link-level pause (its rx/tx_global_pause group); a
  lossless RoCE port has PFC instead, for which mlx5 prints the same five counters as "prio<p>" for each
  PFC-enabled priority (en_stats.c mlx5e_grp_per_prio_pfc_fill_strings; counters.rst), so they replace it.
- files: link_layer, gid_attrs/ndevs/0, CNP hw_counters and every path of roce_sysfs.all_paths, with the
  site's values (default_roce_tos = DSCP << 2 | ECT(0), as ``cma_roce_tos -t 106`` for DSCP 26 in the
  att/netarbiter capture of the mlnx_qos fixture).
Faults (site ``sim.faults``; an optional ``rail`` limits one to that rail, else all the node's rails):
``trust_pcp``, ``pfc_wrong_prio`` (PFC on the priority above the lossless one instead), ``ecn_rp_off`` (ECN
reaction point off on the lossless priority), ``mtu_1500``.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from clusteraccept.parsers import roce_sysfs
from clusteraccept.probes.counters import CNP_COUNTERS
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import Part
from clusteraccept.site.fabric import Roce
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import Rail

DATA = REPO_ROOT / "tests" / "data"
QOS_FIXTURE = DATA / "mlnx_qos" / "mlnx-tools-d477a17-dscp-rxbuf-buffer-row-tc-unsorted.txt"
GIDS_FIXTURE = DATA / "show_gids" / "mlx5_bond_0-roce-ipv4-tabs.txt"
ETHTOOL_FIXTURE = DATA / "ethtool-stats" / "mlx5_core-cx4-kernel4.15-ethq.txt"
KINDS = ("trust_pcp", "pfc_wrong_prio", "ecn_rp_off", "mtu_1500")
_PAUSE = (
    "rx_{}_pause",
    "rx_{}_pause_duration",
    "tx_{}_pause",
    "tx_{}_pause_duration",
    "rx_{}_pause_transition",
)


def _row(label: str, values: list[int], indent: str) -> str:
    return indent + f"{label:<12}" + "   ".join(str(v) for v in values)


def _dscp_lines(dscp2prio: list[int], indent: str) -> list[str]:
    """dscp2prio lines as mlnx_qos prints them: per priority, DSCPs high to low, 8 per line, "DD," each."""
    out = []
    for prio in range(8):
        dscps = sorted((d for d, p in enumerate(dscp2prio) if p == prio), reverse=True)
        for i in range(0, len(dscps), 8):
            out.append(f"{indent}prio:{prio} dscp:" + "".join(f"{d:02d}," for d in dscps[i : i + 8]))
    return out


def mlnx_qos_text(roce: Roce, trust: str, pfc: set[int]) -> str:
    lines = Path(QOS_FIXTURE).read_text().splitlines()
    dscp2prio = [d >> 3 for d in range(64)]
    dscp2prio[roce.roce_dscp] = roce.lossless_priority
    if roce.cnp_dscp is not None and roce.cnp_priority is not None:
        dscp2prio[roce.cnp_dscp] = roce.cnp_priority
    out: list[str] = []
    for line in lines:
        s = line.strip()
        indent = line[: len(line) - len(line.lstrip())]
        if s.startswith("Priority trust state:"):
            out.append(f"Priority trust state: {trust}")
        elif s.startswith("prio:"):
            if trust == "dscp" and s.startswith("prio:0 "):
                out += _dscp_lines(dscp2prio, indent)
        elif s == "dscp2prio mapping:":
            if trust == "dscp":
                out.append(line)
        elif s.startswith("enabled "):
            out.append(_row("enabled", [int(p in pfc) for p in range(8)], indent))
        elif s.startswith("buffer "):
            # lossless priorities in receive buffer 1 (the fixture's layout), the rest in buffer 0
            out.append(_row("buffer", [int(p in pfc) for p in range(8)], indent))
        else:
            out.append(line)
    return "\n".join(out) + "\n"


def _ipv4(node_index: int, rail: Rail) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(f"10.{96 + rail.index}.{node_index // 250}.{node_index % 250 + 1}")


def show_gids_text(node_index: int, rails: list[Rail], netdev: dict[int, str]) -> str:
    lines = Path(GIDS_FIXTURE).read_text().splitlines()
    header, body = lines[:2], [ln.split("\t") for ln in lines[2:] if ln.startswith("mlx5")]
    out = list(header)
    for rail in rails:
        ip = _ipv4(node_index, rail)
        mapped = ip.packed.hex()
        mac = f"0e42:a1ff:fe{node_index % 256:02x}:{rail.index:02x}{rail.port:02x}"
        for f in body:
            f = list(f)
            f[0], f[1], f[-1] = rail.hca, str(rail.port), netdev[rail.index]
            if f[3].startswith("fe80"):
                f[3] = "fe80:0000:0000:0000:" + mac
            else:
                f[3] = f"0000:0000:0000:0000:0000:ffff:{mapped[:4]}:{mapped[4:]}"
                f[4] = f"{ip}  "
            out.append("\t".join(f))
    out.append(f"n_gids_found={len(out) - 2}")
    return "\n".join(out) + "\n"


def ethtool_text(pfc: set[int]) -> str:
    out = ["NIC statistics:"]
    for line in Path(ETHTOOL_FIXTURE).read_text().splitlines():
        name = line.split(":", 1)[0]
        if pfc and name.startswith(("rx_global_pause", "tx_global_pause")):
            if name == "rx_global_pause":
                out += [f"     {c.format(f'prio{p}')}: 0" for p in sorted(pfc) for c in _PAUSE]
            continue
        out.append(f"     {line.strip()}")
    return "\n".join(out) + "\n"


def _applies(fault: dict[str, Any], kind: str, rail: Rail) -> bool:
    return bool(fault["kind"] == kind and fault.get("rail") in (None, rail.index))


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    roce = site.roce
    if roce is None or nt.link_layer != "Ethernet" or not nt.rails:
        return part
    node_index = site.nodes.index(node)
    netdev = {r.index: r.netdev or f"eth{r.index}" for r in nt.rails}
    p = roce.lossless_priority
    for rail in nt.rails:
        dev = netdev[rail.index]

        def has(kind: str, rail: Rail = rail) -> bool:
            return any(_applies(f, kind, rail) for f in faults)

        pfc = {(p + 1) % 8} if has("pfc_wrong_prio") else {p}
        trust = "pcp" if has("trust_pcp") else roce.trust
        part.commands.append((f"mlnx_qos -i {dev}", mlnx_qos_text(roce, trust, pfc), 0))
        part.commands.append((f"ethtool -S {dev}", ethtool_text(pfc), 0))
        ib = f"/sys/class/infiniband/{rail.hca}/ports/{rail.port}"
        part.files[f"{ib}/link_layer"] = "Ethernet\n"
        part.files[f"{ib}/gid_attrs/ndevs/0"] = f"{dev}\n"
        for name in CNP_COUNTERS:
            part.files[roce_sysfs.hw_counter_path(rail.hca, rail.port, name)] = "0\n"
        for prio in range(8):
            on = prio == p and roce.ecn
            part.files[roce_sysfs.ecn_np_enable_path(dev, prio)] = f"{int(on)}\n"
            part.files[roce_sysfs.ecn_rp_enable_path(dev, prio)] = f"{int(on and not has('ecn_rp_off'))}\n"
        if roce.cnp_dscp is not None:  # no site value: no file (the driver default is not recorded here)
            part.files[roce_sysfs.cnp_dscp_path(dev)] = f"{roce.cnp_dscp}\n"
        if roce.cnp_priority is not None:
            part.files[roce_sysfs.cnp_802p_prio_path(dev)] = f"{roce.cnp_priority}\n"
        part.files[roce_sysfs.mtu_path(dev)] = f"{1500 if has('mtu_1500') else roce.mtu}\n"
        part.files[roce_sysfs.default_roce_tos_path(rail.hca, rail.port)] = f"{roce.roce_dscp << 2 | 2}\n"
        part.files[roce_sysfs.default_roce_mode_path(rail.hca, rail.port)] = "RoCE v2\n"
    part.commands.append(("show_gids", show_gids_text(node_index, list(nt.rails), netdev), 0))
    return part
