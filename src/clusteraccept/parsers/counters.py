"""Parser for a node's counter snapshot (probes/counters.py's sectioned text), with deltas between two.

Sections: ``## rail <gpu> hca <hca> port <port> netdev <netdev|->`` opens a rail; under it
``### link_layer`` (one line), ``### ib-counters <dir>`` and ``### hw-counters <dir>`` (``name: value``),
``### ethtool-stats rc=<rc>`` (``ethtool -S`` as printed, parsed by :mod:`ethtool_stats`) and
``### unreadable`` (one reason per line).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import ParseError
from clusteraccept.parsers import ethtool_stats

_RAIL_RE = re.compile(r"## rail (?P<gpu>\d+) hca (?P<hca>\S+) port (?P<port>\d+) netdev (?P<netdev>\S+)$")
_VALUE_RE = re.compile(r"(?P<name>[A-Za-z0-9_]+): (?P<value>\d+)$")
_SECTIONS = ("link_layer", "ib-counters", "hw-counters", "ethtool-stats", "unreadable")


@dataclass(frozen=True)
class RailCounters:
    rail: int
    hca: str
    port: int
    netdev: str | None
    link_layer: str | None
    ib: dict[str, int] = field(hash=False)
    hw: dict[str, int] = field(hash=False)
    ethtool: ethtool_stats.EthtoolStats | None = field(hash=False)
    unreadable: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    rails: dict[int, RailCounters] = field(hash=False)


@dataclass(frozen=True)
class RailDelta:
    """``after - before`` of one rail; counters that went backwards (reset, driver reload) are listed."""

    ib: dict[str, int] = field(hash=False)
    hw: dict[str, int] = field(hash=False)
    ethtool: ethtool_stats.CounterDelta | None = field(hash=False)
    went_backwards: tuple[str, ...] = ()
    link_layer: str | None = None  # as the later snapshot read it


def _values(lines: list[tuple[int, str]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for no, line in lines:
        m = _VALUE_RE.match(line.strip())
        if not m:
            raise ParseError(no, "'<counter>: <unsigned integer>'", line)
        if m["name"] in out:
            raise ParseError(no, "each counter once per section", f"{m['name']} again")
        out[m["name"]] = int(m["value"])
    return out


def _rail(head: re.Match[str], body: dict[str, list[tuple[int, str]]], head_no: int) -> RailCounters:
    link = [ln.strip() for _, ln in body.get("link_layer", []) if ln.strip()]
    ethtool = None
    if "ethtool-stats" in body:
        text = "\n".join(ln for _, ln in body["ethtool-stats"])
        try:
            ethtool = ethtool_stats.parse(text)
        except ParseError as exc:
            first = body["ethtool-stats"][0][0] if body["ethtool-stats"] else head_no
            raise ParseError(first + exc.line_no - 1, exc.expected, exc.got) from None
    return RailCounters(
        int(head["gpu"]),
        head["hca"],
        int(head["port"]),
        None if head["netdev"] == "-" else head["netdev"],
        link[0] if link else None,
        _values(body.get("ib-counters", [])),
        _values(body.get("hw-counters", [])),
        ethtool,
        tuple(ln.strip() for _, ln in body.get("unreadable", []) if ln.strip()),
    )


def parse(text: str) -> Snapshot:
    """Parse one snapshot; ParseError names the line for anything outside the documented layout."""
    rails: dict[int, RailCounters] = {}
    head: tuple[re.Match[str], int] | None = None
    body: dict[str, list[tuple[int, str]]] = {}
    section: str | None = None

    def close() -> None:
        if head is not None:
            r = _rail(head[0], body, head[1])
            if r.rail in rails:
                raise ParseError(head[1], "each rail once", f"rail {r.rail} again")
            rails[r.rail] = r

    for no, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            m = _RAIL_RE.match(line.rstrip())
            if not m:
                raise ParseError(no, "'## rail <gpu> hca <hca> port <port> netdev <netdev>'", line)
            close()
            head, body, section = (m, no), {}, None
        elif line.startswith("### "):
            name = line[4:].split(" ", 1)[0]
            if head is None or name not in _SECTIONS:
                raise ParseError(no, f"a section of a rail ({', '.join(_SECTIONS)})", line)
            if name in body:
                raise ParseError(no, "each section once per rail", line)
            section = name
            body[name] = []
        elif section is not None:
            body[section].append((no, line))
        elif line.strip():
            raise ParseError(no, "'## rail ...' before any counter", line)
    close()
    return Snapshot(rails)


def _sub(before: dict[str, int], after: dict[str, int], back: list[str]) -> dict[str, int]:
    out = {}
    for name in before.keys() & after.keys():
        if after[name] < before[name]:
            back.append(name)
        else:
            out[name] = after[name] - before[name]
    return out


def delta(before: RailCounters, after: RailCounters) -> RailDelta:
    back: list[str] = []
    ib = _sub(before.ib, after.ib, back)
    hw = _sub(before.hw, after.hw, back)
    eth = None
    if before.ethtool is not None and after.ethtool is not None:
        eth = ethtool_stats.delta(before.ethtool, after.ethtool)
        back += list(eth.went_backwards)
    return RailDelta(ib, hw, eth, tuple(sorted(back)), after.link_layer)
