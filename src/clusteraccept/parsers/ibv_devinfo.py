"""``ibv_devinfo`` (libibverbs): devices, firmware, per-port state, MTU, link layer (and rate with -v).

Both layouts are read (tabs or spaces):

- rdma-core (libibverbs/examples/devinfo.c, print_hca_cap; github.com/linux-rdma/rdma-core at
  691953d8): ``hca_id:\\t<dev>``, one-tab device attributes (``transport:``, ``fw_ver:``,
  ``node_guid:``, ..., ``phys_port_cnt:``; with ``-v`` many more, plus bare capability-flag lines),
  then per port ``\\t\\tport:\\t<n>`` and three-tab attributes (``state:``, ``max_mtu:``, ``active_mtu:``,
  ``sm_lid:``, ``port_lid:``, ``port_lmc:``, ``link_layer:``; with ``-v`` also ``active_width:``
  "4X (2)", ``active_speed:`` "25.0 Gbps (32)", ``effective_speed:``, ``phys_state:`` "LINK_UP (5)" and
  ``GID[  0]:`` lines).
- MLNX_OFED 4.x: the same with a ``\\tDevice ports:`` line before the first port.

Rate is only known with ``-v``: effective_speed when printed, else active_width x active_speed.
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
class IbvDevice:
    hca_id: str  # "mlx5_0"
    transport: str | None  # "InfiniBand" (the verbs transport: also "InfiniBand" on RoCE ports)
    fw_version: str | None
    node_guid: str | None
    sys_image_guid: str | None
    vendor_id: int | None  # 0x02c9 = Mellanox
    vendor_part_id: int | None  # 4129 = ConnectX-7
    hw_ver: str | None
    board_id: str | None  # "MT_0000000838"
    phys_port_cnt: int | None
    ports: tuple[IbPort, ...]  # as printed (all ports, or the one asked for with -i)


@dataclass(frozen=True)
class IbvDevinfo:
    devices: tuple[IbvDevice, ...]

    def ports(self) -> tuple[IbPort, ...]:
        return tuple(p for d in self.devices for p in d.ports)

    def device(self, hca_id: str) -> IbvDevice | None:
        return next((d for d in self.devices if d.hca_id == hca_id), None)

    def port(self, device: str, port: int = 1) -> IbPort | None:
        return next((p for p in self.ports() if p.device == device and p.port == port), None)


_HCA = re.compile(r"^\s*hca_id:\s*(\S+)\s*$")
_PORT = re.compile(r"^\s*port:\s*(\d+)\s*$")
_DEVICE_PORTS = re.compile(r"^\s*Device ports:\s*$")
_KV = re.compile(r"^\s*(GID\[\s*\d+\]|[A-Za-z_][\w ]*?):\s*(.*?)\s*$")
_CODED = re.compile(r"(.+?) \((-?\d+)\)")  # "PORT_ACTIVE (4)", "4096 (5)", "4X (2)"
_REQUIRED_PORT_KEYS = ("state", "max_mtu", "active_mtu", "sm_lid", "port_lid", "port_lmc", "link_layer")
_REQUIRED_DEVICE_KEYS = ("node_guid", "phys_port_cnt")


def _coded(raw: str, line_no: int, what: str) -> str:
    """The word of a "WORD (n)" value."""
    m = _CODED.fullmatch(raw)
    if not m:
        raise ParseError(line_no, f"{what} as 'NAME (n)'", raw)
    return m.group(1)


def _mtu(raw: str, line_no: int) -> int | None:
    word = _coded(raw, line_no, "an MTU")
    if word == "invalid MTU":  # devinfo.c mtu_str default
        return None
    return to_int(word, line_no, "an MTU in bytes")


def _rate(kv: dict[str, tuple[int, str]]) -> float | None:
    if "effective_speed" in kv:  # "%.1f Gbps", newest rdma-core only
        n, raw = kv["effective_speed"]
        m = re.fullmatch(r"(\d+(?:\.\d+)?) Gbps", raw)
        if not m:
            raise ParseError(n, "an effective speed as 'N.N Gbps'", raw)
        return float(m.group(1))
    if "active_width" not in kv or "active_speed" not in kv:
        return None
    nw, width_raw = kv["active_width"]
    ns, speed_raw = kv["active_speed"]
    width = _coded(width_raw, nw, "an active width")
    speed = _coded(speed_raw, ns, "an active speed")
    if width.startswith("invalid") or speed.startswith("invalid"):
        return None
    mw = re.fullmatch(r"(\d+)X", width)
    ms = re.fullmatch(r"(\d+(?:\.\d+)?) Gbps", speed)
    if not mw:
        raise ParseError(nw, "an active width as 'NX (n)'", width_raw)
    if not ms:
        raise ParseError(ns, "an active speed as 'N.N Gbps (n)'", speed_raw)
    return int(mw.group(1)) * float(ms.group(1))


@dataclass
class _Dev:
    line_no: int
    hca_id: str
    kv: dict[str, tuple[int, str]] = field(default_factory=dict)
    ports: list[IbPort] = field(default_factory=list)


def _build_port(dev: _Dev, port_no: int, line_no: int, kv: dict[str, tuple[int, str]]) -> IbPort:
    missing = [k for k in _REQUIRED_PORT_KEYS if k not in kv]
    if missing:
        raise ParseError(line_no, f"{', '.join(missing)} line(s) for port {port_no}", "end of block")
    args: dict[str, Any] = {
        "device": dev.hca_id,
        "port": port_no,
        "state": norm_state(_coded(kv["state"][1], kv["state"][0], "a port state"), kv["state"][0]),
        "link_layer": norm_link_layer(kv["link_layer"][1], kv["link_layer"][0]),
        "fw_version": dev.kv["fw_ver"][1] if "fw_ver" in dev.kv else None,
        "lid": to_int(kv["port_lid"][1], kv["port_lid"][0], "a LID"),
        "sm_lid": to_int(kv["sm_lid"][1], kv["sm_lid"][0], "an SM LID"),
        "active_mtu_B": _mtu(kv["active_mtu"][1], kv["active_mtu"][0]),
        "rate_Gbps": _rate(kv),
    }
    _mtu(kv["max_mtu"][1], kv["max_mtu"][0])  # validated only
    if "phys_state" in kv:
        n, raw = kv["phys_state"]
        args["phys_state"] = norm_phys_state(_coded(raw, n, "a physical state"), n)
    return IbPort(**args)


def _build_device(dev: _Dev) -> IbvDevice:
    kv = dev.kv
    missing = [k for k in _REQUIRED_DEVICE_KEYS if k not in kv]
    if missing:
        raise ParseError(dev.line_no, f"{', '.join(missing)} line(s) for {dev.hca_id}", "end of block")
    count = to_int(kv["phys_port_cnt"][1], kv["phys_port_cnt"][0], "a port count")
    if count and not dev.ports:
        expected = f"port blocks for {dev.hca_id} ({count} port(s))"
        raise ParseError(dev.line_no, expected, "none (output cut short?)")

    def opt(key: str) -> str | None:
        return kv[key][1] if key in kv else None

    def opt_guid(key: str) -> str | None:
        return norm_guid(kv[key][1], kv[key][0]) if key in kv else None

    def opt_int(key: str) -> int | None:
        return to_int(kv[key][1], kv[key][0], f"an integer {key}") if key in kv else None

    transport = opt("transport")
    if transport is not None:
        transport = _coded(transport, kv["transport"][0], "a transport")
    return IbvDevice(
        hca_id=dev.hca_id,
        transport=transport,
        fw_version=opt("fw_ver"),
        node_guid=opt_guid("node_guid"),
        sys_image_guid=opt_guid("sys_image_guid"),
        vendor_id=opt_int("vendor_id"),
        vendor_part_id=opt_int("vendor_part_id"),
        hw_ver=opt("hw_ver"),
        board_id=opt("board_id"),
        phys_port_cnt=count,
        ports=tuple(dev.ports),
    )


def parse(text: str) -> IbvDevinfo:
    """Parse ``ibv_devinfo`` or ``ibv_devinfo -v`` output (rdma-core or MLNX_OFED layout)."""
    devices: list[IbvDevice] = []
    dev: _Dev | None = None
    port_no: int | None = None
    port_line = 0
    port_kv: dict[str, tuple[int, str]] = {}

    def close_port() -> None:
        nonlocal port_no, port_kv
        if dev is not None and port_no is not None:
            dev.ports.append(_build_port(dev, port_no, port_line, port_kv))
        port_no, port_kv = None, {}

    def close_device() -> None:
        nonlocal dev
        close_port()
        if dev is not None:
            devices.append(_build_device(dev))
        dev = None

    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if m := _HCA.match(line):
            close_device()
            dev = _Dev(line_no, m.group(1))
            continue
        if dev is None:
            continue  # noise before the first device
        if m := _PORT.match(line):
            close_port()
            port_no, port_line = int(m.group(1)), line_no
            if port_no == 0 or any(p.port == port_no for p in dev.ports):
                raise ParseError(line_no, f"a new port number for {dev.hca_id}", line.strip())
            continue
        if _DEVICE_PORTS.match(line):
            continue
        indented = line[:1] in (" ", "\t")
        if m := _KV.match(line):
            key, value = m.group(1), m.group(2)
            if port_no is not None:
                if key in port_kv and not key.startswith("GID["):
                    raise ParseError(line_no, f"one '{key}:' line per port", line.strip())
                port_kv[key] = (line_no, value)
            elif indented:
                dev.kv.setdefault(key, (line_no, value))
            else:
                close_device()  # an unindented foreign "x: y" line ends the output
            continue
        if not indented:
            close_device()  # an unindented foreign line (a prompt) ends the output
            continue
        if port_no is not None:
            raise ParseError(line_no, "a 'key: value' line of a port block", line.strip())
        # Indented bare lines in a device block are -v capability flags ("RESIZE_MAX_WR",
        # "core clock not supported"): kept out of the result on purpose.
    close_device()
    if not devices:
        raise ParseError(0, "ibv_devinfo output (an 'hca_id:' line)", text[:80])
    return IbvDevinfo(devices=tuple(devices))
