"""Simulated port counters: the files probes/counters.py reads, and what one traffic step adds to them.

Every rail's port gets ``link_layer`` (InfiniBand nodes; the RoCE part writes it for Ethernet) and the PMA
counters of :data:`probes.counters.IB_ERRORS` and ``IB_DATA`` at 0. ``traffic.json`` in the node's profile
says what one multi-node step adds per HCA (sim/traffic.py applies it; the simulated nccl-tests calls it):
- data: port_xmit_data/port_rcv_data (units of 4 octets, IBTA PortXmitData);
- RoCE: the bytes/packets go to the priority the node classifies RoCE onto (the lossless one; priority 0
  under the ``trust_pcp`` fault: untagged traffic, DSCP ignored). Where PFC protects that priority a few
  pause frames appear on it (normal for a lossless class); where it does not (``pfc_wrong_prio``,
  ``trust_pcp``) the port drops instead (rx_discards_phy). CNPs: np_cnp_sent, and rp_cnp_handled unless the
  ``ecn_rp_off`` fault disabled the reaction point;
- fault ``link_errors`` (``node``, optional ``rail``, ``count`` = errors per step, default 40): symbol_error
  and port_rcv_errors rise while traffic runs, bandwidth unchanged (a marginal cable or transceiver).
The figures are model values for the demo, not measurements.
"""

from __future__ import annotations

from typing import Any

from clusteraccept.probes.counters import EFA_DATA, EFA_ERRORS, IB_DATA, IB_ERRORS
from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_efa import missing_devices
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import Rail

KINDS = ("link_errors",)
STEP_B = 64 << 30  # bytes one pair step moves per direction (model value)


def _has(faults: list[dict[str, Any]], kind: str, rail: Rail) -> dict[str, Any] | None:
    return next((f for f in faults if f["kind"] == kind and f.get("rail") in (None, rail.index)), None)


def _roce_add(site: Site, rail: Rail, faults: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, int]]:
    """(ethtool -S increments, hw_counters increments) of one step on a RoCE port."""
    roce = site.roce
    assert roce is not None
    p = roce.lossless_priority
    prio = 0 if _has(faults, "trust_pcp", rail) else p
    pfc = {(p + 1) % 8} if _has(faults, "pfc_wrong_prio", rail) else {p}
    add = {f"{d}_prio{prio}_bytes": STEP_B for d in ("rx", "tx")}
    add |= {f"{d}_prio{prio}_packets": STEP_B // 4096 for d in ("rx", "tx")}
    if prio in pfc:
        add |= {f"rx_prio{prio}_pause": 150, f"tx_prio{prio}_pause": 120}
    else:
        add["rx_discards_phy"] = 37
    hw = {"np_cnp_sent": 40, "rp_cnp_handled": 0 if _has(faults, "ecn_rp_off", rail) else 38}
    return add, hw


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    nt = site.node_type(node)
    ethernet = nt.link_layer == "Ethernet" and site.roce is not None
    if nt.fabric == "efa":
        return _efa(part, site, node, faults)
    for rail in nt.rails:
        base = f"/sys/class/infiniband/{rail.hca}/ports/{rail.port}"
        if nt.link_layer == "InfiniBand":
            part.files[f"{base}/link_layer"] = "InfiniBand\n"
        for name in (*IB_ERRORS, *IB_DATA):
            part.files[f"{base}/counters/{name}"] = "0\n"
        ib = {n: STEP_B // 4 for n in IB_DATA}
        bad = _has(faults, "link_errors", rail)
        if bad:
            errors = int(bad.get("count") or 40)
            ib |= {"symbol_error": errors, "port_rcv_errors": max(1, errors // 5)}
        spec: dict[str, Any] = {"dir": f"fs{base}", "counters": ib}
        if ethernet:
            spec["ethtool"], spec["hw_counters"] = _roce_add(site, rail, faults)
            spec["netdev"] = rail.netdev or f"eth{rail.index}"
        part.traffic[rail.hca] = spec
    return part


def _efa(part: Part, site: Site, node: str, faults: list[dict[str, Any]]) -> Part:
    """An EFA node's devices: their hw_counters at 0, a step's bytes on each device of the rail it used
    (split among the rail's devices); a missing device (efa_device_missing) has none."""
    gone = missing_devices(site, node, faults)
    for rail in site.node_type(node).rails:
        nics = [n for n in rail.devices if n not in gone]
        devices = []
        for nic in nics:
            base = f"/sys/class/infiniband/{nic}/ports/{rail.port}"
            for name in (*EFA_ERRORS, *EFA_DATA):
                part.files[f"{base}/hw_counters/{name}"] = "0\n"
            devices.append({"dir": f"fs{base}", "hw_counters": {n: STEP_B // len(nics) for n in EFA_DATA}})
        part.traffic[rail.hca] = {"devices": devices}  # the simulated nccl-tests names a rail by its first
    return part
