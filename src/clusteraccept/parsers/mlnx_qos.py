"""Parser for ``mlnx_qos -i <netdev>`` (MLNX_OFED / mlnx-tools QoS query).

Format source: github.com/Mellanox/mlnx-tools python/mlnx_qos ``pretty_print()`` (HEAD 8fbfd9cf, 2025;
history back to 2017), whose lines are, in order:

    DCBX mode: OS controlled | Firmware controlled
    Priority trust state: pcp | dscp | none
    dscp2prio mapping:                      (trust dscp only)
    \tprio:N dscp:DD,DD,...,                (8 dscps a line; a prio may take several lines)
    default priority:                       (printed until commit 374d9b5, Nov 2024)
    \tprio:N                                (zero or more)
    Receive buffer size (bytes): B0,...,B7,[max_buffer_size=N | total_size=N]   (buffer sysfs/netlink only;
                                            "total_size" Jan-May 2023, "max_buffer_size" since b8c08c5)
    Cable len: N
    PFC configuration:
    \tpriority    0   1   2   3   4   5   6   7
    \tenabled     e0  ...  e7
    \tbuffer      b0  ...  b7               (with the receive-buffer line only)
    tc: T ratelimit: unlimited | X.Y Gbps, tsa: vendor | strict | ets, bw: N% | unknown
    \t priority:  P                         (one line per priority)

The first public version (mlnx-tools 80fb22e, June 2017) starts at "PFC configuration:" (and prints an empty
line after the enabled row); the next (5c00758) prints "Priority trust mode: pcp|dscp|both|none" before it;
"DCBX mode:" and "Priority trust state:" come with the OFED 4.2 sync (d1b0709, Sept 2017).
Notices printed when a feature is missing ("... is not supported on your system") are kept in ``notices``.
When rate limits are unsupported its ``ratelimit`` list is empty and the "tc: T ratelimit: ..., tsa: "
prefix is lost, leaving a bare "vendor"/"ets, bw: N%" line: such a class gets ``tc=None``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_FIRST = ("DCBX mode:", "Priority trust mode:", "Priority trust state:", "PFC configuration:")
_NOTICES = (
    "Rate limit is not supported on your system!",
    "Priority trust state is not supported on your system",
    "Buffers commands are not supported on your system",
)
_TSA_RE = r"(?P<tsa>vendor|strict|unknown|ets, bw: (?P<bw>\d+)%)"
_TC_RE = re.compile(
    r"tc:\s*(?P<tc>\d+)\s+ratelimit:\s*(?:unlimited|(?P<rate>\d+(?:\.\d+)?)\s*Gbps),\s*tsa:\s*"
    + _TSA_RE
    + r"$"
)
_BARE_TSA_RE = re.compile(_TSA_RE + r"$")
_DSCP_RE = re.compile(r"prio:\s*(\d+)\s+dscp:\s*((?:\d+,?)+)$")
_DEFAULT_PRIO_RE = re.compile(r"prio:\s*(\d+)$")
_DIGITS = re.compile(r"[0-9]+")
_TC_PRIO_RE = re.compile(r"priority:\s*(\d+)$")
_RXBUF_RE = re.compile(
    r"Receive buffer size \(bytes\):\s*(?P<sizes>(?:\d+,){8})\s*"
    r"(?:(?P<key>max_buffer_size|total_size)=(?P<total>\d+))?$"
)


@dataclass(frozen=True)
class TrafficClass:
    """One ``tc:`` block. ``ratelimit_Gbps`` None means unlimited; ``bw_pct`` is set for tsa "ets" only."""

    tc: int | None
    ratelimit_Gbps: float | None
    tsa: str
    bw_pct: int | None
    priorities: tuple[int, ...]


@dataclass(frozen=True)
class MlnxQos:
    """The QoS state of one netdev as ``mlnx_qos -i`` prints it."""

    dcbx_mode: str | None  # "os" or "firmware"; None before OFED 4.2 (no DCBX line)
    trust: str | None  # "pcp", "dscp", "none" (unsupported), "both" (2017 "trust mode"); None if not printed
    dscp2prio: tuple[int | None, ...]  # index = DSCP 0..63 -> priority; all None unless trust dscp
    default_priority: tuple[int, ...]  # "default priority:" entries (older versions); empty if none
    receive_buffer_size_B: tuple[int, ...] | None  # 8 buffer sizes, newer versions only
    max_buffer_size_B: int | None  # "max_buffer_size=" (since mlnx-tools b8c08c5, May 2023)
    total_size_B: int | None  # "total_size=" (Jan-May 2023 versions)
    cable_len_m: int | None  # mlx5 reads the PFC delay field as cable length in meters (port_buffer.h)
    pfc_enabled: tuple[bool, ...]  # index = priority 0..7
    pfc_buffer: tuple[int, ...] | None  # receive buffer of each priority 0..7 (newer versions only)
    traffic_classes: tuple[TrafficClass, ...]
    notices: tuple[str, ...]

    def pfc_priorities(self) -> tuple[int, ...]:
        """Priorities with PFC enabled."""
        return tuple(p for p, on in enumerate(self.pfc_enabled) if on)

    def prio_for_dscp(self, dscp: int) -> int | None:
        """The priority DSCP ``dscp`` maps to (the first printed if listed twice), None if unmapped."""
        return self.dscp2prio[dscp]

    def dscps_for_prio(self, prio: int) -> tuple[int, ...]:
        """All DSCP values mapped to ``prio``, sorted."""
        return tuple(d for d, p in enumerate(self.dscp2prio) if p == prio)

    def tc_for_prio(self, prio: int) -> int | None:
        """The traffic class ``prio`` is in (None if not listed or the tc number was not printed)."""
        return next((t.tc for t in self.traffic_classes if prio in t.priorities), None)


def _int(value: str, lo: int, hi: int, line_no: int, what: str) -> int:
    if not _DIGITS.fullmatch(value) or not lo <= int(value) <= hi:
        raise ParseError(line_no, f"{what} in {lo}..{hi}", value)
    return int(value)


def _pfc_row(line: str, key: str, line_no: int, hi: int) -> tuple[int, ...]:
    values = line.split()[1:]
    if len(values) != 8:
        raise ParseError(line_no, f"'{key}' followed by 8 values", line)
    return tuple(_int(v, 0, hi, line_no, f"PFC {key} value") for v in values)


def parse(text: str) -> MlnxQos:
    """Parse ``mlnx_qos -i <netdev>`` output (any mlnx-tools version since 2017)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.strip().startswith(_FIRST)), None)
    if start is None:
        raise ParseError(0, "a 'DCBX mode:' or 'PFC configuration:' line (mlnx_qos -i output)", text[:80])
    notices = [ln.strip() for ln in lines[:start] if ln.strip() in _NOTICES]
    modes = {"OS controlled": "os", "Firmware controlled": "firmware"}
    dcbx: str | None = None

    trust: str | None = None
    dscp2prio: list[int | None] = [None] * 64
    default_prio: list[int] = []
    rxbuf: tuple[int, ...] | None = None
    max_buf: int | None = None
    total: int | None = None
    cable: int | None = None
    pfc_en: tuple[int, ...] | None = None
    pfc_buf: tuple[int, ...] | None = None
    tcs: list[TrafficClass] = []
    tc_prios: list[int] = []
    section = ""  # "dscp", "default", "pfc", "tc"

    def close_tc() -> None:
        if tcs:
            last = tcs[-1]
            tcs[-1] = TrafficClass(last.tc, last.ratelimit_Gbps, last.tsa, last.bw_pct, tuple(tc_prios))

    for idx in range(start, len(lines)):
        no, s = idx + 1, lines[idx].strip()
        if not s:
            continue
        if s in _NOTICES:
            notices.append(s)
            continue
        tc_m = _TC_RE.match(s) or _BARE_TSA_RE.match(s)
        if s.startswith("DCBX mode:") and dcbx is None and idx == start:
            dcbx = s.removeprefix("DCBX mode:").strip()
            if dcbx not in modes:
                raise ParseError(no, "DCBX mode 'OS controlled' or 'Firmware controlled'", dcbx)
        elif s.startswith(("Priority trust state:", "Priority trust mode:")) and trust is None:
            trust = s.split(":", 1)[1].strip()
            if trust not in ("pcp", "dscp", "none", "both"):
                raise ParseError(no, "trust pcp, dscp, both or none", trust)
            section = ""
        elif s == "dscp2prio mapping:":
            section = "dscp"
        elif s == "default priority:":
            section = "default"
        elif section == "dscp" and s.startswith("prio:"):
            m = _DSCP_RE.match(s)
            if not m:
                raise ParseError(no, "'prio:N dscp:D,D,...'", s)
            prio = _int(m.group(1), 0, 7, no, "priority")
            for d in m.group(2).rstrip(",").split(","):
                dscp = _int(d, 0, 63, no, "DSCP")
                if dscp2prio[dscp] is None:
                    dscp2prio[dscp] = prio
        elif section == "default" and s.startswith("prio:"):
            m = _DEFAULT_PRIO_RE.match(s)
            if not m:
                raise ParseError(no, "'prio:N' under 'default priority:'", s)
            default_prio.append(_int(m.group(1), 0, 7, no, "default priority"))
        elif s.startswith("Receive buffer size"):
            m = _RXBUF_RE.match(s)
            if not m:
                raise ParseError(no, "'Receive buffer size (bytes): B0,...,B7,[max_buffer_size=N]'", s)
            rxbuf = tuple(int(v) for v in m.group("sizes").rstrip(",").split(","))
            if m.group("key") == "max_buffer_size":
                max_buf = int(m.group("total"))
            elif m.group("key") == "total_size":
                total = int(m.group("total"))
            section = ""
        elif s.startswith("Cable len:"):
            cable = _int(s.split(":", 1)[1].strip(), 0, 0xFFFF, no, "cable length")
            section = ""
        elif s == "PFC configuration:":
            section = "pfc"
        elif section == "pfc" and s.split()[0] in ("priority", "enabled", "buffer"):
            key = s.split()[0]
            if key == "priority":
                if _pfc_row(s, key, no, 7) != tuple(range(8)):
                    raise ParseError(no, "'priority 0 1 2 3 4 5 6 7'", s)
            elif key == "enabled":
                pfc_en = _pfc_row(s, key, no, 1)
            else:
                pfc_buf = _pfc_row(s, key, no, 7)
        elif tc_m:
            close_tc()
            tc_prios = []
            rate = tc_m.groupdict().get("rate")
            tc_no = tc_m.groupdict().get("tc")
            tsa = tc_m.group("tsa").split(",")[0]
            bw = int(tc_m.group("bw")) if tc_m.group("bw") else None
            if bw is not None and bw > 100:
                raise ParseError(no, "ETS bandwidth 0..100%", s)
            rate_Gbps = float(rate) if rate else None
            tcs.append(TrafficClass(int(tc_no) if tc_no else None, rate_Gbps, tsa, bw, ()))
            section = "tc"
        elif section == "tc" and s.startswith("priority:"):
            m = _TC_PRIO_RE.match(s)
            if not m:
                raise ParseError(no, "'priority:  N' under a tc line", s)
            tc_prios.append(_int(m.group(1), 0, 7, no, "priority"))
        elif section == "tc":
            break  # the tc blocks are the last thing mlnx_qos prints: what follows is not its output
        else:
            raise ParseError(no, "a line of mlnx_qos -i output", s)
    close_tc()

    if pfc_en is None:
        raise ParseError(len(lines), "a 'PFC configuration:' block with an 'enabled' row", "end of input")
    if trust == "dscp" and all(p is None for p in dscp2prio):
        raise ParseError(len(lines), "a dscp2prio mapping after 'Priority trust state: dscp'", "none")
    return MlnxQos(
        dcbx_mode=modes[dcbx] if dcbx is not None else None,
        trust=trust,
        dscp2prio=tuple(dscp2prio),
        default_priority=tuple(default_prio),
        receive_buffer_size_B=rxbuf,
        max_buffer_size_B=max_buf,
        total_size_B=total,
        cable_len_m=cable,
        pfc_enabled=tuple(bool(v) for v in pfc_en),
        pfc_buffer=pfc_buf,
        traffic_classes=tuple(tcs),
        notices=tuple(notices),
    )
