"""``rdma link show`` (iproute2): state, physical state and netdev of every RDMA port.

One line per port (iproute2 rdma/link.c, link_parse_cb; github.com/iproute2/iproute2 at ee2a4a86)::

    link mlx5_0/1 subnet_prefix fe80:0000:0000:0000 lid 13 sm_lid 1 lmc 0 state ACTIVE physical_state LINK_UP
    link mlx5_2/1 state ACTIVE physical_state LINK_UP netdev eno6np0     (Ethernet/RoCE ports: no LID fields)

(IB ports end with ``netdev ib0`` too.)

Every field is "key value " (trailing space). Before iproute2 5.5 (commit b0a688a5, 2019) the line began
``1/1: mlx5_0/1: ``. ``-d`` adds ``netdev_index N`` and a continuation line ``    caps: <...>``.
``rdma -j link show`` (JSON: ifname, port, state, physical_state, netdev, ...) is read too.
Rate and link layer are not printed by this command: None.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from clusteraccept.errors import ParseError
from clusteraccept.parsers._ib import IbPort, norm_phys_state, norm_state, to_int


@dataclass(frozen=True)
class RdmaLink:
    ports: tuple[IbPort, ...]  # in output order

    def port(self, device: str, port: int = 1) -> IbPort | None:
        return next((p for p in self.ports if p.device == device and p.port == port), None)

    def device_of(self, netdev: str) -> tuple[str, int] | None:
        """(device, port) whose network interface is ``netdev``."""
        return next(((p.device, p.port) for p in self.ports if p.netdev == netdev), None)


_NEW = re.compile(r"^link (?P<dev>[^\s/]+)/(?P<port>\d+) ?(?P<rest>.*)$")
_OLD = re.compile(r"^\d+/\d+: (?P<dev>[^\s/]+)/(?P<port>\d+): ?(?P<rest>.*)$")
_KNOWN = {"subnet_prefix", "lid", "sm_lid", "lmc", "state", "physical_state", "netdev", "netdev_index"}


def _port(dev: str, port_raw: str, kv: dict[str, str], line_no: int) -> IbPort:
    port = to_int(port_raw, line_no, "a port number")
    if port == 0:
        raise ParseError(line_no, "a port number from 1", port_raw)
    if "state" not in kv or "physical_state" not in kv:
        got = " ".join(f"{k} {v}" for k, v in kv.items())
        raise ParseError(line_no, "'state X physical_state Y' on a link line", got)
    return IbPort(
        device=dev,
        port=port,
        state=norm_state(kv["state"], line_no),
        phys_state=norm_phys_state(kv["physical_state"], line_no),
        netdev=kv.get("netdev"),
        lid=to_int(kv["lid"], line_no, "a LID") if "lid" in kv else None,
        sm_lid=to_int(kv["sm_lid"], line_no, "an SM LID") if "sm_lid" in kv else None,
    )


def _parse_json(text: str) -> RdmaLink:
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", 0)
        raise ParseError(line, "rdma -j link output (a JSON array)", str(exc)) from None
    except RecursionError:  # "[[[[..." nested past the interpreter's limit
        raise ParseError(1, "rdma -j link output (a flat JSON array)", text[:80]) from None
    if not isinstance(data, list) or not data:
        raise ParseError(1, "a non-empty JSON array of links", type(data).__name__)
    ports: list[IbPort] = []
    for i, obj in enumerate(data):
        if not isinstance(obj, dict) or not isinstance(obj.get("ifname"), str) or "port" not in obj:
            raise ParseError(1, f"a link object with ifname and port (element {i})", repr(obj)[:80])
        kv = {k: str(v) for k, v in obj.items() if k in _KNOWN and isinstance(v, str | int)}
        ports.append(_port(obj["ifname"], str(obj["port"]), kv, 1))
    return RdmaLink(ports=tuple(ports))


def parse(text: str) -> RdmaLink:
    """Parse ``rdma link show`` (text, old or new layout, with or without -d) or ``rdma -j link show``."""
    if text.lstrip().startswith("["):
        return _parse_json(text)
    ports: list[IbPort] = []
    seen: set[tuple[str, int]] = set()
    for line_no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("caps: <"):
            continue  # blank, or the -d capability continuation line
        m = _NEW.match(stripped) or _OLD.match(stripped)
        if m is None:
            if stripped.startswith("link "):
                raise ParseError(line_no, "'link DEV/PORT key value ...'", stripped)
            continue  # a prompt or a banner around the output
        tokens = m["rest"].split()
        if len(tokens) % 2:
            raise ParseError(line_no, "'key value' pairs after link DEV/PORT", m["rest"])
        kv = dict(zip(tokens[0::2], tokens[1::2], strict=True))
        port = _port(m["dev"], m["port"], kv, line_no)
        if (port.device, port.port) in seen:
            raise ParseError(line_no, "one line per port", stripped)
        seen.add((port.device, port.port))
        ports.append(port)
    if not ports:
        raise ParseError(0, "rdma link output ('link DEV/PORT ...' lines)", text[:80])
    return RdmaLink(ports=tuple(ports))
