"""``lspci -vvv`` (pciutils), whole or per device (``-s BDF``): ACS control, PCIe port type, link state.

Layout (pciutils lspci.c ``show_device()``, ls-caps.c ``cap_express()``/``cap_express_link()``,
ls-ecaps.c ``cap_acs()``)::

    0000:03:02.0 PCI bridge: Advanced Micro Devices, Inc. [AMD] Matisse PCIe GPP Bridge (prog-if 00 ...)
    \\tControl: I/O+ Mem+ BusMaster+ ...                    (domain only with -D or a non-zero domain)
    \\tCapabilities: [58] Express (v2) Downstream Port (Slot+), MSI 00
    \\t\\tLnkCap:\\tPort #2, Speed 16GT/s, Width x4, ASPM L1, Exit Latency L1 <32us
    \\t\\tLnkSta:\\tSpeed 8GT/s (downgraded), Width x4 (ok)   (older lspci: no "(ok)" notes, same line
    \\tCapabilities: [2a0 v1] Access Control Services          as TrErr- Train- ...)
    \\t\\tACSCap:\\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+
    \\t\\tACSCtl:\\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
    \\tKernel driver in use: pcieport
    (blank line)

Without root, lspci cannot read the extended configuration space and prints
``Capabilities: <access denied>`` instead of every capability (so no ACS and no link lines).
``lspci -s`` on an absent device prints nothing: empty input is a valid, empty result. Lines before
the first device line (a shell prompt, ``+ lspci ...``) and unindented lines between devices are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_HEADER = re.compile(
    r"(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])"  # [domain:]bus:dev.fn
    r" ([^:\[\]]+?)(?: \[[0-9a-fA-F]{4}\])?: (.*)"  # class [class code with -nn]: description
)
_EXPRESS = re.compile(r"Capabilities: \[[0-9a-f]+\] Express \(v[0-9]+\) (.+?)(?: \(Slot[+-]\))?, ")
_LINK = re.compile(r"Speed ([0-9]+(?:\.[0-9]+)?GT/s|unknown)(?: \([^)]*\))?, Width x([0-9]+)")
_FLAG = re.compile(r"([A-Za-z0-9]+)([+-])")
# ACS redirect/blocking controls that send peer-to-peer TLPs up to the root complex instead of across
# the switch (PCIe Base Spec "ACS P2P Request/Completion Redirect", "Egress Control"); NCCL's
# troubleshooting guide flags "SrcValid+" on ACSCtl as the sign that ACS is enabled.
P2P_BREAKING = ("SrcValid", "ReqRedir", "CmpltRedir", "EgressCtrl")


@dataclass(frozen=True)
class PciDevice:
    """One device block of ``lspci -vvv``. Link fields are None when lspci printed no such line."""

    bdf: str  # "0000:03:02.0" (domain 0000 when lspci printed none), lowercase
    device_class: str  # "PCI bridge", "3D controller", "Infiniband controller", ...
    description: str  # the rest of the device line, verbatim
    port_type: str | None  # PCIe capability: "Root Port", "Downstream Port", "Upstream Port", "Endpoint"...
    caps_access_denied: bool  # "Capabilities: <access denied>" (lspci run without root)
    acs_cap: tuple[tuple[str, bool], ...] | None  # ACSCap flags in printed order; None: no ACS capability
    acs_ctl: tuple[tuple[str, bool], ...] | None  # ACSCtl flags (what is enabled)
    link_cap_GTps: float | None  # LnkCap speed (None also for "unknown")
    link_cap_width: int | None
    link_GTps: float | None  # LnkSta speed
    link_width: int | None
    driver: str | None  # "Kernel driver in use"

    def acs_enabled(self) -> tuple[str, ...]:
        """ACSCtl flags that are on ("+"); empty without an ACS capability."""
        return tuple(name for name, on in self.acs_ctl or () if on)

    def acs_blocks_p2p(self) -> tuple[str, ...]:
        """The enabled ACSCtl flags that redirect or block peer-to-peer traffic (see P2P_BREAKING)."""
        return tuple(f for f in self.acs_enabled() if f in P2P_BREAKING)


@dataclass(frozen=True)
class Lspci:
    devices: tuple[PciDevice, ...]

    def device(self, bdf: str) -> PciDevice | None:
        """The device at ``bdf`` ("0000:03:02.0" or "03:02.0"), None if lspci did not list it."""
        want = normalize_bdf(bdf)
        return next((d for d in self.devices if d.bdf == want), None)


def normalize_bdf(bdf: str) -> str:
    """``03:02.0`` -> ``0000:03:02.0``; ``00000000:1B:00.0`` (nvidia-smi) -> ``0000:1b:00.0``."""
    text = bdf.strip().lower()
    parts = text.split(":")
    if len(parts) == 2:
        return "0000:" + text
    if len(parts) == 3 and len(parts[0]) > 4 and set(parts[0][:-4]) <= {"0"}:
        return parts[0][-4:] + ":" + parts[1] + ":" + parts[2]
    return text


def _flags(value: str, no: int, what: str) -> tuple[tuple[str, bool], ...]:
    tokens = value.split()
    out: list[tuple[str, bool]] = []
    for tok in tokens:
        m = _FLAG.fullmatch(tok)
        if m is None:
            raise ParseError(no, f"{what} flags like 'SrcValid+ ReqRedir-'", value.strip())
        out.append((m.group(1), m.group(2) == "+"))
    if not out:
        raise ParseError(no, f"{what} flags like 'SrcValid+ ReqRedir-'", "nothing")
    return tuple(out)


def _link(value: str, no: int, what: str) -> tuple[float | None, int]:
    m = _LINK.search(value)
    if m is None:
        raise ParseError(no, f"{what} 'Speed 16GT/s, Width x16'", value.strip())
    speed = None if m.group(1) == "unknown" else float(m.group(1)[:-4])
    return speed, int(m.group(2))


class _Block:
    def __init__(self, m: re.Match[str]) -> None:
        domain = (m.group(1) or "0000").lower()
        self.bdf = normalize_bdf(f"{domain}:{m.group(2)}:{m.group(3)}.{m.group(4)}")
        self.device_class = m.group(5).strip()
        self.description = m.group(6).strip()
        self.port_type: str | None = None
        self.denied = False
        self.acs_cap: tuple[tuple[str, bool], ...] | None = None
        self.acs_ctl: tuple[tuple[str, bool], ...] | None = None
        self.cap: tuple[float | None, int] | None = None
        self.sta: tuple[float | None, int] | None = None
        self.driver: str | None = None

    def line(self, s: str, no: int) -> None:
        key, _, value = s.partition(":")
        if s == "Capabilities: <access denied>":
            self.denied = True
        elif (m := _EXPRESS.match(s)) is not None:
            self.port_type = m.group(1)
        elif key == "LnkCap":
            self.cap = _link(value, no, "LnkCap")
        elif key == "LnkSta":
            self.sta = _link(value, no, "LnkSta")
        elif key == "ACSCap":
            self.acs_cap = _flags(value, no, "ACSCap")
        elif key == "ACSCtl":
            self.acs_ctl = _flags(value, no, "ACSCtl")
        elif key == "Kernel driver in use":
            self.driver = value.strip() or None

    def build(self) -> PciDevice:
        return PciDevice(
            bdf=self.bdf,
            device_class=self.device_class,
            description=self.description,
            port_type=self.port_type,
            caps_access_denied=self.denied,
            acs_cap=self.acs_cap,
            acs_ctl=self.acs_ctl,
            link_cap_GTps=self.cap[0] if self.cap else None,
            link_cap_width=self.cap[1] if self.cap else None,
            link_GTps=self.sta[0] if self.sta else None,
            link_width=self.sta[1] if self.sta else None,
            driver=self.driver,
        )


def parse(text: str) -> Lspci:
    """Parse ``lspci -vvv`` output (one or many devices)."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    devices: list[PciDevice] = []
    block: _Block | None = None
    seen: set[str] = set()
    first: tuple[int, str] | None = None
    for no, raw in enumerate(lines, start=1):
        if not raw.strip():
            if block is not None:
                devices.append(block.build())
                block = None
            continue
        if first is None:
            first = (no, raw.strip())
        if raw[0] in " \t":
            if block is not None:
                block.line(raw.strip(), no)
            continue  # indented noise before the first device
        m = _HEADER.fullmatch(raw.rstrip())
        if m is None:
            if block is not None:
                raise ParseError(no, "an indented detail line or a blank line inside a device block", raw)
            continue  # noise before or between devices
        if block is not None:
            devices.append(block.build())
        block = _Block(m)
        if block.bdf in seen:
            raise ParseError(no, "each device once", block.bdf)
        seen.add(block.bdf)
    if block is not None:
        devices.append(block.build())
    if first is not None and not devices:
        raise ParseError(first[0], "an lspci device line like '03:02.0 PCI bridge: ...'", first[1])
    return Lspci(devices=tuple(devices))
