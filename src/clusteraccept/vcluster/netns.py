"""Network plumbing of the virtual cluster: one bridge, one namespace per host, veth pairs between them.

A cluster occupies a *slot* ``k``: bridge ``cabr<k>`` (its ifalias names the owning state dir), subnet
``10.77.<k>.0/24``, namespaces ``ca<k>ctl`` and ``ca<k>n<i>``, root-side veths ``ca<k>v<i>``.
The root namespace is the submit host (``.254`` on the bridge). The namespaces get no default route,
so nothing started in them can reach beyond the subnet.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
MAX_SLOTS = 16
_CTL_HOST = 1
_SUBMIT_HOST = 254
_SVC_HOST = 9


@dataclass(frozen=True)
class Net:
    """Names and addresses of one slot."""

    slot: int
    n_nodes: int
    # a service host (`svc`, partition `service`) for batch jobs that must not wait behind the exclusive
    # campaigns: scrontab's entries (Slurm 24.11)
    service: bool = False

    @property
    def bridge(self) -> str:
        return f"cabr{self.slot}"

    @property
    def prefix(self) -> str:
        return f"ca{self.slot}"

    @property
    def subnet(self) -> str:
        return f"10.77.{self.slot}.0/24"

    def ip(self, host: int) -> str:
        return f"10.77.{self.slot}.{host}"

    @property
    def ctl_ip(self) -> str:
        return self.ip(_CTL_HOST)

    @property
    def submit_ip(self) -> str:
        return self.ip(_SUBMIT_HOST)

    @property
    def ctl_ns(self) -> str:
        return f"{self.prefix}ctl"

    def node_ns(self, i: int) -> str:
        return f"{self.prefix}n{i}"

    def node_ip(self, i: int) -> str:
        return self.ip(10 + i)

    @property
    def svc_ns(self) -> str:
        return f"{self.prefix}svc"

    @property
    def svc_ip(self) -> str:
        return self.ip(_SVC_HOST)

    def hosts(self) -> list[tuple[str, str]]:
        """(namespace, address) of every host but the submit host, in veth index order."""
        out = [(self.ctl_ns, self.ctl_ip)] + [
            (self.node_ns(i), self.node_ip(i)) for i in range(1, self.n_nodes + 1)
        ]
        return out + ([(self.svc_ns, self.svc_ip)] if self.service else [])

    def namespaces(self) -> list[str]:
        return [ns for ns, _ in self.hosts()]

    def veth(self, index: int) -> str:
        """Root-side veth of host ``index`` (0 = controller)."""
        return f"{self.prefix}v{index}"


def ip_cmd(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and out.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {out.stderr.strip()}")
    return out


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def bridge_owner(bridge: str) -> str | None:
    """The state dir recorded in the bridge's ifalias, or None if there is no such bridge."""
    if not link_exists(bridge):
        return None
    try:
        return Path("/sys/class/net", bridge, "ifalias").read_text().strip()
    except OSError:
        return ""


def _subnet_taken_elsewhere(net: Net) -> bool:
    """True if some other interface of the root namespace already has an address in the slot's subnet."""
    out = ip_cmd("-j", "addr", "show", check=False).stdout or "[]"
    subnet = ipaddress.ip_network(net.subnet)
    for link in json.loads(out):
        if link.get("ifname") == net.bridge:
            continue
        for addr in link.get("addr_info", []):
            if addr.get("family") == "inet" and ipaddress.ip_address(addr["local"]) in subnet:
                return True
    return False


def slot_usable(net: Net) -> bool:
    return not _subnet_taken_elsewhere(net)


def slot_namespaces(slot: int) -> list[str]:
    """Every namespace of a slot present now (including ones left by a larger earlier cluster)."""
    if not NETNS_DIR.is_dir():
        return []
    prefix = f"ca{slot}"
    return sorted(
        p.name
        for p in NETNS_DIR.iterdir()
        if p.name in (f"{prefix}ctl", f"{prefix}svc")
        or (p.name.startswith(f"{prefix}n") and p.name[len(prefix) + 1 :].isdigit())
    )


def slot_veths(slot: int) -> list[str]:
    prefix = f"ca{slot}v"
    return sorted(
        p.name
        for p in Path("/sys/class/net").iterdir()
        if p.name.startswith(prefix) and p.name[len(prefix) :].isdigit()
    )


def ns_inode(ns: str) -> tuple[int, int] | None:
    try:
        st = os.stat(NETNS_DIR / ns)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in_namespaces(namespaces: list[str]) -> dict[int, str]:
    """Processes whose network namespace is one of ``namespaces``: pid -> namespace name."""
    wanted = {ino: ns for ns in namespaces if (ino := ns_inode(ns)) is not None}
    found: dict[int, str] = {}
    if not wanted:
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        ns = wanted.get((st.st_dev, st.st_ino))
        if ns is not None:
            found[int(entry)] = ns
    return found


def destroy_slot(slot: int) -> None:
    """Delete every namespace, veth and the bridge of a slot (processes must already be gone)."""
    for ns in slot_namespaces(slot):
        ip_cmd("netns", "del", ns, check=False)
    # Deleting one end of a veth pair deletes both; a namespace with a process still inside keeps its
    # end alive otherwise, and a later `ip link add` of the same name would fail.
    for veth in slot_veths(slot):
        ip_cmd("link", "del", veth, check=False)
    bridge = f"cabr{slot}"
    if link_exists(bridge):
        ip_cmd("link", "del", bridge, check=False)


def create(net: Net, owner: Path) -> None:
    """Bridge + namespaces + veths for ``net``; the slot must be clean (see destroy_slot)."""
    ip_cmd("link", "add", net.bridge, "type", "bridge")
    ip_cmd("link", "set", net.bridge, "alias", str(owner))
    ip_cmd("addr", "add", f"{net.submit_ip}/24", "dev", net.bridge)
    ip_cmd("link", "set", net.bridge, "up")
    for index, (ns, addr) in enumerate(net.hosts()):
        veth, peer = net.veth(index), f"{net.prefix}p{index}"
        ip_cmd("netns", "add", ns)
        ip_cmd("link", "add", veth, "type", "veth", "peer", "name", peer)
        ip_cmd("link", "set", peer, "netns", ns)
        ip_cmd("link", "set", veth, "master", net.bridge)
        ip_cmd("link", "set", veth, "up")
        inside = ("-n", ns)
        ip_cmd(*inside, "link", "set", peer, "name", "eth0")
        ip_cmd(*inside, "addr", "add", f"{addr}/24", "dev", "eth0")
        ip_cmd(*inside, "link", "set", "eth0", "up")
        ip_cmd(*inside, "link", "set", "lo", "up")
        # No default route on purpose: only the on-link subnet route exists.


def intact(net: Net, owner: Path) -> bool:
    """The bridge is ours and every namespace and veth of ``net`` exists."""
    if bridge_owner(net.bridge) != str(owner):
        return False
    if any(ns_inode(ns) is None for ns in net.namespaces()):
        return False
    return all(link_exists(net.veth(i)) for i in range(len(net.hosts())))
