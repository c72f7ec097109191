"""``ibdev2netdev`` (MLNX_OFED script): which network interface belongs to which RDMA port.

Two line forms (the script's two ``echo`` lines)::

    mlx5_0 port 1 ==> ib0 (Up)
    0000:b1:00.0 mlx5_5 (MT4123 - MCX654105A-HCAT) ConnectX-6 VPI fw 20.30.1004 port 1 (ACTIVE) ==> ib0 (Up)

The second is ``ibdev2netdev -v``: PCI address (older versions omit it), device id and part number, the
VPD description (free text, may hold parentheses), firmware, and the RDMA port state from
``/sys/class/infiniband/<dev>/ports/<n>/state`` padded to 6 ("DOWN  "). The trailing (Up)/(Down) is the
*netdev* carrier (``/sys/class/net/<if>/carrier``: 1 -> Up, else Down, missing -> NA), not the RDMA port
state: it goes to ``IbPort.netdev_state``; ``IbPort.state`` is set only by the -v form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._ib import IbPort, norm_state


@dataclass(frozen=True)
class Ibdev2netdevEntry:
    """Extra facts of one ``-v`` line (None in the short form)."""

    device: str
    port: int
    pci_address: str | None  # "0000:b1:00.0"
    device_id: str | None  # "MT4123"
    part_number: str | None  # "MCX654105A-HCAT" ("NA" for VFs)
    description: str | None  # VPD product name, "" when the VPD is absent


@dataclass(frozen=True)
class Ibdev2netdev:
    ports: tuple[IbPort, ...]  # in output order
    details: tuple[Ibdev2netdevEntry, ...]  # one per -v line; empty for the short form

    def netdev_of(self, device: str, port: int = 1) -> str | None:
        return next((p.netdev for p in self.ports if p.device == device and p.port == port), None)

    def device_of(self, netdev: str) -> tuple[str, int] | None:
        """(device, port) whose network interface is ``netdev``."""
        return next(((p.device, p.port) for p in self.ports if p.netdev == netdev), None)


_SHORT = re.compile(r"^\s*(?P<dev>\S+) port (?P<port>\d+) ==> (?P<netdev>\S+) \((?P<link>Up|Down|NA)\)\s*$")
_VERBOSE = re.compile(
    r"^\s*(?:(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) )?(?P<dev>\S+)"
    r" \((?P<devid>[^()]*?) - (?P<part>[^()]*?)\)(?P<desc>.*?)"
    r" fw (?P<fw>\S+) port (?P<port>\d+) \((?P<state>[A-Za-z_]+) *\)"
    r" ==> (?P<netdev>\S+) \((?P<link>Up|Down|NA)\)\s*$"
)


def parse(text: str) -> Ibdev2netdev:
    """Parse ``ibdev2netdev`` or ``ibdev2netdev -v`` output."""
    ports: list[IbPort] = []
    details: list[Ibdev2netdevEntry] = []
    seen: dict[tuple[str, int], int] = {}
    for line_no, line in enumerate(text.splitlines(), start=1):
        if "==>" not in line:
            continue  # a prompt, a banner: the script prints nothing else
        if m := _SHORT.match(line):
            port = IbPort(device=m["dev"], port=int(m["port"]), netdev=m["netdev"], netdev_state=m["link"])
        elif m := _VERBOSE.match(line):
            port = IbPort(
                device=m["dev"],
                port=int(m["port"]),
                state=norm_state(m["state"], line_no),
                fw_version=m["fw"],
                netdev=m["netdev"],
                netdev_state=m["link"],
            )
            details.append(
                Ibdev2netdevEntry(
                    device=m["dev"],
                    port=int(m["port"]),
                    pci_address=m["pci"],
                    device_id=m["devid"].strip() or None,
                    part_number=m["part"].strip() or None,
                    description=m["desc"].strip(),
                )
            )
        else:
            raise ParseError(line_no, "'DEV port N ==> NETDEV (Up|Down)' (or the -v form)", line.strip())
        if port.port == 0:
            raise ParseError(line_no, "a port number from 1", line.strip())
        key = (port.device, port.port)
        if key in seen:
            # One netdev per port; a repeat means two captures were concatenated.
            raise ParseError(
                line_no, f"one line per port ({key[0]} port {key[1]} is on line {seen[key]})", line.strip()
            )
        seen[key] = line_no
        ports.append(port)
    if not ports:
        raise ParseError(0, "ibdev2netdev output (lines with '==>')", text[:80])
    return Ibdev2netdev(ports=tuple(ports), details=tuple(details))
