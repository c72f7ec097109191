"""Simulated NVLink/NVSwitch host part (probes/nvlink.py, the counter snapshots' ``--nvlink``).

Built from REAL captures (tests/data/*/SOURCES.md), adapted to the node type's GPUs and NVLink:
- ``nvidia-smi nvlink --status``: the layout of nvlink-status-h100-gpu0-18links-26.562-tab-indent-a3high.txt
  (``GPU k: <model> (UUID: ...)``, then ``<TAB> Link L: 26.562 GB/s``) for every GPU, with the site's
  link count and speed;
- ``nvidia-smi nvlink -e``: the same layout, one line per link and counter (:data:`ERROR_COUNTERS`), all 0;
- ``nvidia-smi -q``: the H200 capture h200-1gpu-vm-driver580-fabric-na.txt, its GPU block once per GPU
  (bus id, product name and UUID replaced), its Fabric section saying what the node's NVSwitch fabric is
  (:data:`FABRIC_UP` where the node type has ``nvswitch``, the capture's N/A where it has not).
GPU UUIDs are uuid5 of the site, node and GPU; bus ids those of the simulated topology (profile_topology).

Faults (site ``sim.faults``):
- ``nvlink_inactive {node, gpu, link}``: that link prints ``<inactive>``;
- ``nvlink_errors {node, gpu, link, count}``: that link's CRC counter rises by ``count`` (default 25) with
  every step that runs several ranks on the node (sim/traffic.py: errors under load, a marginal link);
- ``fabric_manager_down {node}``: the fabric was never set up (:data:`FABRIC_NOT_UP` on every GPU) and
  ``systemctl is-active nvidia-fabricmanager`` says inactive.

A node in a multi-node NVLink domain (``nvlink_domains``, an NVL72 rack) has its GPUs' Fabric CliqueId 1
and a ClusterUUID of the domain (uuid5 of the site and domain; the layout of the real GB200 capture
dra-driver-626-gb200-unhealthy-grep-C3.txt), ``nvidia-imex`` active and ``nvidia-imex-ctl -N`` in the
layout of the real 18-node capture imex-N-18node-gb200-570.172-aws-pcs.txt (addresses 10.<d>.0.<i>).
- ``wrong_clique {node}``: that tray's GPUs are in clique 2 (NCCL's multi-node NVLink then fails there);
- ``imex_down {node}``: ``systemctl is-active nvidia-imex`` says inactive there, its own ``nvidia-imex-ctl
  -N`` finds no daemon (exit 1, nothing printed: a model), and the other nodes list it ``UNAVAILABLE`` with
  ``I`` in the matrix and ``Domain State: DEGRADED`` (the node-down view NCCL's troubleshooting guide and a
  CycleCloud health check describe).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from clusteraccept.probes.counters import NVLINK_ERRORS
from clusteraccept.probes.nvlink import FABRIC_MANAGER, IMEX_DOMAIN, IMEX_SERVICE, QUERY, STATUS
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim import profile_topology
from clusteraccept.sim.hosts import Part, faults_for
from clusteraccept.sim.traffic import NVLINK
from clusteraccept.site.model import Site

DATA = REPO_ROOT / "tests" / "data"
QUERY_FIXTURE = DATA / "nvidia-smi-q" / "h200-1gpu-vm-driver580-fabric-na.txt"
IMEX_FIXTURE = DATA / "nvidia-imex-ctl" / "imex-N-18node-gb200-570.172-aws-pcs.txt"
CAPTURE_BUS = "00000000:00:06.0"
ERROR_COUNTERS = ("Replay Errors", "Recovery Errors", "CRC Errors")
CRC = "CRC Errors"
FABRIC_UP = (("State", "Completed"), ("Status", "Success"))
# as the real capture gpu-operator-2511-in-progress-r580.txt and the Fabric Manager user guide show a fabric
# the GPUs have not completed their registration with
FABRIC_NOT_UP = (("State", "In Progress"), ("Status", "N/A"))


def _uuid(site: Site, node: str, gpu: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'clusteraccept-sim:{site.name}:{node}:gpu{gpu}')}"


def bus_ids(node: str, site: Site, faults: list[dict[str, Any]]) -> list[str]:
    """nvidia-smi's bus id of each GPU (``00000000:1c:00.0``): the simulated topology's where it has one."""
    if profile_topology.supported(site, node):
        bdfs = [s.gpu_bdf for s in sorted(profile_topology.layout(node, site, faults), key=lambda s: s.gpu)]
    else:
        bdfs = [f"0000:{0x10 + 0x10 * k:02x}:00.0" for k in range(site.node_type(node).gpus)]
    return [f"0000{b}" for b in bdfs]


def _of(faults: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in faults if f["kind"] == kind]


def status_text(heads: list[str], links: int, speed: str, inactive: set[tuple[int, int]]) -> str:
    out = []
    for g, head in enumerate(heads):
        out.append(head)
        out += [
            f"\t Link {k}: {'<inactive>' if (g, k) in inactive else speed + ' GB/s'}" for k in range(links)
        ]
    return "\n".join(out) + "\n"


def errors_text(heads: list[str], links: int) -> str:
    out = []
    for head in heads:
        out.append(head)
        out += [f"\t Link {k}: {name}: 0" for k in range(links) for name in ERROR_COUNTERS]
    return "\n".join(out) + "\n"


def _fabric(block: str, values: tuple[tuple[str, str], ...]) -> str:
    for key, value in values:
        block = re.sub(
            rf"^(    Fabric\n(?:        .*\n)*?        {key} +: ).*$", rf"\g<1>{value}", block, flags=re.M
        )
    return block


def query_text(model: str, uuids: list[str], buses: list[str], fabric: tuple[tuple[str, str], ...]) -> str:
    text = QUERY_FIXTURE.read_text()
    head, _, block = text.partition(f"GPU {CAPTURE_BUS}\n")
    head = re.sub(r"^(Attached GPUs +: )\d+$", rf"\g<1>{len(uuids)}", head, flags=re.M)
    out = [head]
    for u, bus in zip(uuids, buses, strict=True):
        b = block.replace(CAPTURE_BUS, bus)
        b = re.sub(r"^(    Product Name +: ).*$", rf"\g<1>{model}", b, flags=re.M)
        b = re.sub(r"^(    GPU UUID +: ).*$", rf"\g<1>{u}", b, flags=re.M)
        out.append(f"GPU {bus}\n" + _fabric(b, fabric))
    return "".join(out)


def imex_text(addresses: list[str], down: set[int]) -> str:
    """``nvidia-imex-ctl -N`` over ``addresses``, the nodes ``down`` UNAVAILABLE (the real capture's
    legend, timestamp and column layout)."""
    text = IMEX_FIXTURE.read_text()
    head = text[: text.index("Nodes:\n")]
    out = [head, "Nodes:\n"]
    for i, a in enumerate(addresses):
        status = "UNAVAILABLE" if i in down else "READY"
        out.append(f"{f'Node #{i}':<9} - {a:<15} - {status:<20} - Version: 570.172\n")
    n = len(addresses)
    out.append("\n " + "Nodes From\\To  " + "".join(f"{j:<4}" for j in range(n)).rstrip() + "\n")
    for i in range(n):
        cells = ["I" if i in down or j in down else "C" for j in range(n)]
        out.append(f"{i:>8}        " + "".join(f"{c:<4}" for c in cells).rstrip() + "\n")
    out.append(f"\nDomain State: {'DEGRADED' if down else 'UP'}\n")
    return "".join(out)


def _domain(node: str, site: Site, part: Part) -> tuple[tuple[str, str], ...]:
    """The node's part of its multi-node NVLink domain (IMEX commands) and its GPUs' clique facts."""
    name = site.domain_of(node)
    if name is None:
        return ()
    members = site.nvlink_domains[name]
    d = list(site.nvlink_domains).index(name) + 1
    down = {i for i, n in enumerate(members) if any(f["kind"] == "imex_down" for f in faults_for(site, n))}
    me = members.index(node)
    cluster = str(uuid.uuid5(uuid.NAMESPACE_URL, f"clusteraccept-sim:{site.name}:{name}"))
    clique = "2" if any(f["kind"] == "wrong_clique" for f in faults_for(site, node)) else "1"
    if me in down:
        part.commands += [(" ".join(IMEX_SERVICE), "inactive\n", 3), (" ".join(IMEX_DOMAIN), "", 1)]
    else:
        addresses = [f"10.{d}.0.{i + 1}" for i in range(len(members))]
        part.commands += [
            (" ".join(IMEX_SERVICE), "active\n", 0),
            (" ".join(IMEX_DOMAIN), imex_text(addresses, down), 0),
        ]
    return (("CliqueId", clique), ("ClusterUUID", cluster))


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    if nt.nvlink is None:
        return part  # no NVLink declared: the probe reads nothing on this node
    model = nt.gpu_model or profile_topology.GPU_MODEL
    uuids = [_uuid(site, node, g) for g in range(nt.gpus)]
    heads = [f"GPU {g}: {model} (UUID: {u})" for g, u in enumerate(uuids)]
    links, speed = nt.nvlink.links_per_gpu, f"{nt.nvlink.link_GBps:.3f}"
    inactive = {(int(f["gpu"]), int(f["link"])) for f in _of(faults, "nvlink_inactive")}
    fabric: tuple[tuple[str, str], ...] = FABRIC_UP if nt.nvlink.nvswitch else ()
    if _of(faults, "fabric_manager_down"):
        fabric = FABRIC_NOT_UP
    fabric += _domain(node, site, part)
    down = bool(_of(faults, "fabric_manager_down"))
    if nt.nvlink.nvswitch:  # systemctl(1) is-active: the state, exit 0 only when active (3 where inactive)
        part.commands.append(
            (" ".join(FABRIC_MANAGER), "inactive\n" if down else "active\n", 3 if down else 0)
        )
    part.commands += [
        (" ".join(STATUS), status_text(heads, links, speed, inactive), 0),
        (" ".join(NVLINK_ERRORS), errors_text(heads, links), 0),
        (" ".join(QUERY), query_text(model, uuids, bus_ids(node, site, faults), fabric), 0),
    ]
    rising = [
        [int(f["gpu"]), int(f["link"]), CRC, int(f.get("count") or 25)] for f in _of(faults, "nvlink_errors")
    ]
    if rising:
        part.traffic[NVLINK] = {"match": " ".join(NVLINK_ERRORS), "add": rising}
    return part
