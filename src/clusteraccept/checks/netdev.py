"""A network interface's link as sysfs says it (``/sys/class/net/<netdev>/operstate``), judged for the
fabrics whose rail NICs are judged by their netdev: a Slingshot NIC's hsn netdev (checks/slingshot.py), a
GPUDirect-TCPX(O) GPU NIC (checks/tcpx.py). Pure.
"""

from __future__ import annotations

from clusteraccept.checks.hostfacts import NodeEvidence
from clusteraccept.probes.topology import NET_CLASS_DIR

# RFC 2863's operational states as sysfs prints them (Documentation/ABI/testing/sysfs-class-net): these say
# the link is not up; "unknown", "testing" and "dormant" say nothing of it (a driver that does not report)
NOT_UP = ("down", "lowerlayerdown", "notpresent")


def link_state(ne: NodeEvidence, netdev: str, who: str) -> tuple[str | None, str | None]:
    """(what is wrong, what could not be judged) of ``netdev``'s link; both None: up. ``who``: how the
    messages name the interface (e.g. "rail 2's hsn2 (cxi2)")."""
    item = ne.file(f"{NET_CLASS_DIR}/{netdev}/operstate")
    state = item[0].stdout.strip() if item is not None and item[0].ok else None
    if item is None:
        return None, f"{who}: its operstate was not read"
    if state is None:
        return f"{who}: no such network device in {NET_CLASS_DIR}", None
    if state in NOT_UP:
        return f"{who} link is {state}, expected up", None
    if state != "up":
        return None, f"{who}: operstate {state!r} says nothing of its link"
    return None, None


def pci_address(ne: NodeEvidence, netdev: str) -> str | None:
    """The PCI address ``netdev``'s device link leads to (None: not read, or not a PCI device)."""
    dev = ne.link(f"{NET_CLASS_DIR}/{netdev}/device")
    return dev.rsplit("/", 1)[-1] if dev else None
