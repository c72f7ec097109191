"""The port record shared by the RDMA device tools (ibstat, ibv_devinfo, ibdev2netdev, ``rdma link``).

Each tool spells states its own way; they are normalised here so a probe can cross-check tools:

- ``state`` (logical port state): DOWN, INIT, ARMED, ACTIVE, ACTIVE_DEFER, NOP, UNKNOWN
  (ibstat "Active", ibv_devinfo "PORT_ACTIVE (4)", rdma "ACTIVE" all become "ACTIVE").
- ``phys_state``: NOP, SLEEP, POLLING, DISABLED, PORT_CONFIGURATION_TRAINING, LINK_UP,
  LINK_ERROR_RECOVERY, PHY_TEST, UNKNOWN (ibstat "LinkUp", ibv_devinfo "LINK_UP (5)", rdma "LINK_UP").
- ``link_layer``: "InfiniBand", "Ethernet" or "Unspecified", as the verbs library names it.
- GUIDs: "0x" + 16 lowercase hex digits (ibstat prints 0x..., ibv_devinfo prints xxxx:xxxx:xxxx:xxxx).

A field is None where the tool does not say it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError


@dataclass(frozen=True)
class IbPort:
    """One port of one RDMA device, as one tool reports it."""

    device: str  # "mlx5_0"
    port: int  # 1-based port number
    state: str | None = None  # normalised logical state, see module doc
    phys_state: str | None = None  # normalised physical state
    rate_Gbps: float | None = None  # active width x lane speed (ibstat "Rate", ibv_devinfo -v)
    link_layer: str | None = None  # "InfiniBand" | "Ethernet" | "Unspecified"
    fw_version: str | None = None  # firmware of the device the port belongs to
    netdev: str | None = None  # associated network interface ("ib0", "eno5np0")
    netdev_state: str | None = None  # ibdev2netdev only: netdev carrier "Up" | "Down" | "NA"
    lid: int | None = None  # base LID (0 on Ethernet ports)
    sm_lid: int | None = None  # subnet manager LID (0: no SM seen / Ethernet)
    port_guid: str | None = None
    active_mtu_B: int | None = None  # ibv_devinfo only

    def is_up(self) -> bool:
        """True when the logical state is ACTIVE and the physical link (where reported) is LINK_UP."""
        return self.state == "ACTIVE" and self.phys_state in (None, "LINK_UP")


# Logical states. rdma-core devinfo.c port_state_str (PORT_DOWN..PORT_ACTIVE), infiniband-diags
# ibstat.c port_state_str ("Down".."Active"), iproute2 rdma/link.c link_state_str (NOP..ACTIVE_DEFER).
_STATES: dict[str, str] = {
    "DOWN": "DOWN",
    "INIT": "INIT",
    "INITIALIZING": "INIT",
    "ARMED": "ARMED",
    "ACTIVE": "ACTIVE",
    "ACTIVE_DEFER": "ACTIVE_DEFER",
    "NOP": "NOP",
    "UNKNOWN": "UNKNOWN",
    "???": "UNKNOWN",
    "INVALID STATE": "UNKNOWN",
}

# Physical states. ibstat.c port_phy_state_str ("No state change", "Sleep", ..., "PhyTest");
# devinfo.c port_phy_state_str ("SLEEP", ..., "PORT_CONFIGURATION TRAINNING" [sic], "PHY TEST");
# iproute2 rdma/link.c phys_state_str prints "ARMED" for value 4 (PortConfigurationTraining in the IB
# spec) and "LINK_ERROR_RECOVER": both mapped to the spec's names here.
_PHYS: dict[str, str] = {
    "NOP": "NOP",
    "NO STATE CHANGE": "NOP",
    "SLEEP": "SLEEP",
    "POLLING": "POLLING",
    "DISABLED": "DISABLED",
    "PORTCONFIGURATIONTRAINING": "PORT_CONFIGURATION_TRAINING",
    "PORT_CONFIGURATION TRAINNING": "PORT_CONFIGURATION_TRAINING",
    "PORT_CONFIGURATION TRAINING": "PORT_CONFIGURATION_TRAINING",
    "ARMED": "PORT_CONFIGURATION_TRAINING",
    "LINKUP": "LINK_UP",
    "LINK_UP": "LINK_UP",
    "LINKERRORRECOVERY": "LINK_ERROR_RECOVERY",
    "LINK_ERROR_RECOVERY": "LINK_ERROR_RECOVERY",
    "LINK_ERROR_RECOVER": "LINK_ERROR_RECOVERY",
    "PHYTEST": "PHY_TEST",
    "PHY TEST": "PHY_TEST",
    "PHY_TEST": "PHY_TEST",
    "OPA_OFFLINE": "OPA_OFFLINE",
    "OPA_TEST": "OPA_TEST",
    "UNKNOWN": "UNKNOWN",
    "???": "UNKNOWN",
    "INVALID PHYSICAL STATE": "UNKNOWN",
}

LINK_LAYERS: dict[str, str] = {
    "infiniband": "InfiniBand",
    "ethernet": "Ethernet",
    "unspecified": "Unspecified",
    "unknown": "Unknown",
}

_HEX_GUID = re.compile(r"0x[0-9a-fA-F]{1,16}")
_COLON_GUID = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}:[0-9a-fA-F]{4}:[0-9a-fA-F]{4}")


def norm_state(raw: str, line_no: int) -> str:
    """Normalise a logical port state; ParseError on a word no tool prints."""
    key = raw.strip().upper()
    if key.startswith("PORT_"):
        key = key[5:]
    if key not in _STATES:
        raise ParseError(line_no, "a port state (DOWN/INIT/ARMED/ACTIVE)", raw)
    return _STATES[key]


def norm_phys_state(raw: str, line_no: int) -> str:
    """Normalise a physical port state; ParseError on a word no tool prints."""
    key = raw.strip().upper()
    if key not in _PHYS:
        raise ParseError(line_no, "a physical port state (LinkUp/Disabled/Polling/...)", raw)
    return _PHYS[key]


def norm_link_layer(raw: str, line_no: int) -> str:
    key = raw.strip().lower()
    if key not in LINK_LAYERS:
        raise ParseError(line_no, "a link layer (InfiniBand/Ethernet)", raw)
    return LINK_LAYERS[key]


def norm_guid(raw: str, line_no: int) -> str:
    """A GUID as "0x" + 16 lowercase hex digits, from ibstat (0x...) or ibv_devinfo (xxxx:xxxx:...)."""
    text = raw.strip()
    if _HEX_GUID.fullmatch(text):
        return "0x" + text[2:].lower().rjust(16, "0")
    if _COLON_GUID.fullmatch(text):
        return "0x" + text.replace(":", "").lower()
    raise ParseError(line_no, "a GUID (0x... or xxxx:xxxx:xxxx:xxxx)", raw)


def to_int(raw: str, line_no: int, what: str) -> int:
    """A decimal (or 0x-prefixed hex) integer, ParseError otherwise."""
    text = raw.strip()
    try:
        if text.lower().startswith("0x"):
            return int(text[2:], 16)
        if not text.isascii() or not text.isdigit():
            raise ValueError(text)
        return int(text)
    except ValueError:
        raise ParseError(line_no, what, raw) from None


def to_float(raw: str, line_no: int, what: str) -> float:
    text = raw.strip()
    if not re.fullmatch(r"\d+(?:\.\d+)?", text):
        raise ParseError(line_no, what, raw)
    return float(text)
