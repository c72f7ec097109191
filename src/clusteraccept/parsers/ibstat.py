"""``ibstat`` (infiniband-diags): CAs, their firmware and per-port state, rate and link layer.

Layout (rdma-core infiniband-diags/ibstat.c, ca_dump/port_dump)::

    CA 'mlx5_0'
            CA type: MT4129
            Number of ports: 1
            Firmware version: 28.41.1000
            ...
            Port 1:
                    State: Active
                    Physical state: LinkUp
                    Rate: 400                      ("Rate: 2.5" for 1x SDR, "Rate: 40 (FDR10)")
                    Effective speed: 400           (newer rdma-core only)
                    Base lid: 287
                    ...
                    Link layer: InfiniBand

``ibstat CA PORT`` prints ``CA: 'mlx5_0'`` and one unindented port block; ``ibstat -s`` prints the CA
headers without ports. Tabs or spaces; the node type word is CA, Switch, Router, "iWARP RNIC" or ???.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from clusteraccept.errors import ParseError
from clusteraccept.parsers._ib import (
    IbPort,
    norm_guid,
    norm_link_layer,
    norm_phys_state,
    norm_state,
    to_int,
)


@dataclass(frozen=True)
class IbstatCa:
    """One channel adapter (or switch/router) block."""

    name: str  # "mlx5_0"
    node_type: str  # "CA" | "Switch" | "Router" | "iWARP RNIC" | "???"
    ca_type: str | None  # "MT4129" (ConnectX-7)
    num_ports: int | None
    fw_version: str | None
    hw_version: str | None
    node_guid: str | None
    sys_image_guid: str | None
    ports: tuple[IbPort, ...]


@dataclass(frozen=True)
class Ibstat:
    cas: tuple[IbstatCa, ...]  # in output order (ibstat sorts names as strings: mlx5_10 before mlx5_2)

    def ports(self) -> tuple[IbPort, ...]:
        """Every port of every CA, in output order."""
        return tuple(p for ca in self.cas for p in ca.ports)

    def ca(self, name: str) -> IbstatCa | None:
        return next((ca for ca in self.cas if ca.name == name), None)

    def port(self, device: str, port: int = 1) -> IbPort | None:
        return next((p for p in self.ports() if p.device == device and p.port == port), None)


_NODE_TYPES = r"CA|Switch|Router|iWARP RNIC|\?\?\?"
_HEADER = re.compile(rf"^({_NODE_TYPES})(:?) '([^']+)'\s*$")
_PORT = re.compile(r"^\s*Port (\d+):\s*$")
_KV = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?):[ \t]*(.*?)\s*$")
# "Rate: 400", "Rate: 2.5", "Rate: 40 (FDR10)" (ibstat.c port_dump)
_RATE = re.compile(r"(\d+(?:\.\d+)?)(?: \(FDR10\))?")
_REQUIRED_PORT_KEYS = ("State", "Physical state", "Rate", "Link layer")


@dataclass
class _CaBuild:
    line_no: int
    name: str
    node_type: str
    single: bool  # "CA: 'x'" form of ``ibstat CA PORT``
    fields: dict[str, str] = field(default_factory=dict)
    ports: list[IbPort] = field(default_factory=list)


def _build_port(ca: _CaBuild, port_no: int, line_no: int, kv: dict[str, tuple[int, str]]) -> IbPort:
    missing = [k for k in _REQUIRED_PORT_KEYS if k not in kv]
    if missing:
        expected = f"{', '.join(missing)} line(s) in the block of port {port_no}"
        raise ParseError(line_no, expected, "end of block")
    n, rate_raw = kv["Rate"]
    m = _RATE.fullmatch(rate_raw)
    if not m:
        raise ParseError(n, "a rate in Gb/s (400, 2.5, 40 (FDR10))", rate_raw)
    args: dict[str, Any] = {
        "device": ca.name,
        "port": port_no,
        "state": norm_state(kv["State"][1], kv["State"][0]),
        "phys_state": norm_phys_state(kv["Physical state"][1], kv["Physical state"][0]),
        "rate_Gbps": float(m.group(1)),
        "link_layer": norm_link_layer(kv["Link layer"][1], kv["Link layer"][0]),
        "fw_version": ca.fields.get("Firmware version"),
    }
    if "Base lid" in kv:
        args["lid"] = to_int(kv["Base lid"][1], kv["Base lid"][0], "a LID")
    if "SM lid" in kv:
        args["sm_lid"] = to_int(kv["SM lid"][1], kv["SM lid"][0], "an SM LID")
    if "Port GUID" in kv:
        args["port_guid"] = norm_guid(kv["Port GUID"][1], kv["Port GUID"][0])
    return IbPort(**args)


def _build_ca(ca: _CaBuild, guid_lines: dict[str, int]) -> IbstatCa:
    f = ca.fields
    num_ports: int | None = None
    if not ca.single:
        for key in ("Number of ports", "Firmware version"):
            if key not in f:
                raise ParseError(ca.line_no, f"a '{key}:' line in the block of {ca.name}", "end of block")
        num_ports = to_int(f["Number of ports"], guid_lines["Number of ports"], "a port count")
        if ca.ports and len(ca.ports) < num_ports:
            raise ParseError(
                ca.line_no, f"{num_ports} port block(s) for {ca.name}", f"{len(ca.ports)} (output cut short?)"
            )
    guids = {
        k: norm_guid(f[k], guid_lines[k]) if k in f else None for k in ("Node GUID", "System image GUID")
    }
    return IbstatCa(
        name=ca.name,
        node_type=ca.node_type,
        ca_type=f.get("CA type"),
        num_ports=num_ports,
        fw_version=f.get("Firmware version"),
        hw_version=f.get("Hardware version"),
        node_guid=guids["Node GUID"],
        sys_image_guid=guids["System image GUID"],
        ports=tuple(ca.ports),
    )


def parse(text: str) -> Ibstat:
    """Parse ``ibstat`` output (all CAs, one CA, one port, or ``-s``)."""
    cas: list[IbstatCa] = []
    header_lines: list[int] = []
    ca: _CaBuild | None = None
    ca_lines: dict[str, int] = {}
    port_no: int | None = None
    port_line = 0
    port_kv: dict[str, tuple[int, str]] = {}

    def close_port() -> None:
        nonlocal port_no, port_kv
        if ca is not None and port_no is not None:
            ca.ports.append(_build_port(ca, port_no, port_line, port_kv))
        port_no, port_kv = None, {}

    def close_ca() -> None:
        nonlocal ca, ca_lines
        close_port()
        if ca is not None:
            cas.append(_build_ca(ca, ca_lines))
            header_lines.append(ca.line_no)
        ca, ca_lines = None, {}

    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if m := _HEADER.match(line):
            close_ca()
            ca = _CaBuild(line_no, m.group(3), m.group(1), single=bool(m.group(2)))
            continue
        if ca is None:
            continue  # noise before the first CA header (a prompt, a banner)
        if m := _PORT.match(line):
            close_port()
            port_no, port_line = int(m.group(1)), line_no
            if any(p.port == port_no for p in ca.ports):
                raise ParseError(line_no, f"one block per port of {ca.name}", line.strip())
            continue
        if m := _KV.match(line):
            key, value = m.group(1), m.group(2)
            if port_no is not None:
                port_kv[key] = (line_no, value)
            elif not ca.single:
                ca.fields[key] = value
                ca_lines[key] = line_no
            continue
        if line[:1] in (" ", "\t"):
            raise ParseError(line_no, f"a 'Key: value' line in the block of {ca.name}", line.strip())
        close_ca()  # an unindented foreign line ends the output (a prompt after it)
    close_ca()
    if not cas:
        raise ParseError(0, "ibstat output (a \"CA 'name'\" header)", text[:80])
    with_ports = [c for c in cas if c.ports]
    if with_ports and len(with_ports) != len(cas):
        i = next(i for i, c in enumerate(cas) if not c.ports)
        expected = f"port blocks for every CA (as for {with_ports[0].name})"
        raise ParseError(header_lines[i], expected, f"none for {cas[i].name}")
    return Ibstat(cas=tuple(cas))
