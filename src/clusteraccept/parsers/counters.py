"""Parser for a node's counter snapshot (probes/counters.py's sectioned text), with deltas between two.

Sections: ``## rail <gpu> hca <hca> port <port> netdev <netdev|->`` opens a rail; under it
``### link_layer`` (one line), ``### ib-counters <dir>`` and ``### hw-counters <dir>`` (``name: value``),
``### ethtool-stats rc=<rc>`` (``ethtool -S`` as printed, parsed by :mod:`ethtool_stats`) and
``### unreadable`` (one reason per line), and on an EFA rail ``### efa-counters <device> <dir>`` per device
(``name: value``). A last ``## nvlink rc=<rc>`` section holds ``nvidia-smi nvlink -e``
as printed (parsed by :mod:`nvidia_smi_nvlink`), or its error output where rc is not 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from clusteraccept.errors import ParseError
from clusteraccept.parsers import ethtool_stats, nvidia_smi_nvlink

_RAIL_RE = re.compile(r"## rail (?P<gpu>\d+) hca (?P<hca>\S+) port (?P<port>\d+) netdev (?P<netdev>\S+)$")
_VALUE_RE = re.compile(r"(?P<name>[A-Za-z0-9_]+): (?P<value>\d+)$")
_PAIR_RE = re.compile(r"^[ \t]*([A-Za-z0-9_]+): ([0-9]+)[ \t]*$", re.MULTILINE)
_NVLINK_RE = re.compile(r"## nvlink rc=(?P<rc>-?\d+)$")
_SECTIONS = ("link_layer", "ib-counters", "hw-counters", "ethtool-stats", "unreadable", "efa-counters")


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
    efa: dict[str, dict[str, int]] = field(default_factory=dict, hash=False)  # EFA device -> counters


@dataclass(frozen=True)
class NvlinkCounters:
    returncode: int
    report: nvidia_smi_nvlink.NvlinkReport | None  # None: the command failed (``error`` says why)
    error: str = ""


@dataclass(frozen=True)
class Snapshot:
    rails: dict[int, RailCounters] = field(hash=False)
    nvlink: NvlinkCounters | None = None  # None: the snapshot did not read NVLink (no --nvlink)


def _nvlink(m: re.Match[str], lines: list[str], first_no: int) -> NvlinkCounters:
    rc = int(m["rc"])
    if rc != 0:
        return NvlinkCounters(rc, None, "\n".join(ln.strip() for ln in lines if ln.strip())[:300])
    try:
        return NvlinkCounters(rc, nvidia_smi_nvlink.parse("\n".join(lines)))
    except ParseError as exc:
        raise ParseError(first_no + exc.line_no - 1, exc.expected, exc.got) from None


@dataclass(frozen=True)
class RailDelta:
    """``after - before`` of one rail; counters that went backwards (reset, driver reload) are listed."""

    ib: dict[str, int] = field(hash=False)
    hw: dict[str, int] = field(hash=False)
    ethtool: ethtool_stats.CounterDelta | None = field(hash=False)
    went_backwards: tuple[str, ...] = ()
    link_layer: str | None = None  # as the later snapshot read it
    efa: dict[str, dict[str, int]] = field(default_factory=dict, hash=False)  # EFA device -> rise


def _values(lines: list[str], first_no: int) -> dict[str, int]:
    """``name: value`` lines (line ``first_no`` is ``lines[0]``); one regex over the block when it is clean
    (a 4,096-node campaign parses ~150,000 snapshots), line by line only to name the bad line."""
    pairs = _PAIR_RE.findall("\n".join(lines))  # at most one match per line (anchored)
    if len(pairs) == len(lines):
        out = {name: int(value) for name, value in pairs}
        if len(out) == len(lines):
            return out
    out = {}
    for no, line in enumerate(lines, first_no):
        m = _VALUE_RE.match(line.strip())
        if not m:
            raise ParseError(no, "'<counter>: <unsigned integer>'", line)
        if m["name"] in out:
            raise ParseError(no, "each counter once per section", f"{m['name']} again")
        out[m["name"]] = int(m["value"])
    return out


Body = dict[str, tuple[int, list[str]]]  # section -> (line number of its first line, its lines)


def _rail(head: re.Match[str], body: Body, head_no: int) -> RailCounters:
    link = [ln.strip() for ln in body.get("link_layer", (0, []))[1] if ln.strip()]
    ethtool = None
    if "ethtool-stats" in body:
        first, lines = body["ethtool-stats"]
        try:
            ethtool = ethtool_stats.parse("\n".join(lines))
        except ParseError as exc:
            raise ParseError(first + exc.line_no - 1, exc.expected, exc.got) from None
    ib, hw = (body.get(k, (0, [])) for k in ("ib-counters", "hw-counters"))
    return RailCounters(
        int(head["gpu"]),
        head["hca"],
        int(head["port"]),
        None if head["netdev"] == "-" else head["netdev"],
        link[0] if link else None,
        _values(ib[1], ib[0]),
        _values(hw[1], hw[0]),
        ethtool,
        tuple(ln.strip() for ln in body.get("unreadable", (0, []))[1] if ln.strip()),
        {k.split(" ", 1)[1]: _values(v[1], v[0]) for k, v in body.items() if k.startswith("efa-counters ")},
    )


# An IB rail as the probe writes it on a healthy node: its link layer and its counter sections, every line
# clean. A snapshot made of these alone (and what follows its "## nvlink" line) is read by one regex pass;
# anything else, or anything this does not cover exactly, goes through the line-by-line reading below,
# which names the line of an error. Both give the same Snapshot (tests/unit/parsers/test_counters.py).
_CLEAN_RAIL = re.compile(
    r"## rail (?P<gpu>[0-9]+) hca (?P<hca>[^\s#]\S*) port (?P<port>[0-9]+) netdev (?P<netdev>\S+)\n"
    r"### link_layer\n(?P<ll>[^\s#]\S*)\n"
    r"(?:### ib-counters(?: [^\n]*)?\n(?P<ib>(?:[A-Za-z0-9_]+: [0-9]+\n)*))?"
    r"(?:### hw-counters(?: [^\n]*)?\n(?P<hw>(?:[A-Za-z0-9_]+: [0-9]+\n)*))?"
)
_COUNTER = re.compile(r"([A-Za-z0-9_]+): ([0-9]+)\n")
# str.splitlines() breaks a line at these too (and at \x85, \u2028, \u2029: not ASCII): a text with one
# is left to the line-by-line reading
_OTHER_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e"


def _clean_rails(text: str) -> dict[int, RailCounters] | None:
    """The rails of a snapshot whose rail part is only clean IB rails (above), else None."""
    end = 0 if text.startswith("## nvlink") else text.find("\n## nvlink") + 1 or len(text)
    part = text[:end]
    if not part.endswith("\n") or not part.isascii() or any(c in part for c in _OTHER_BREAKS):
        return None
    by_rail: dict[int, RailCounters] = {}
    pos = 0
    while pos < end:
        m = _CLEAN_RAIL.match(part, pos)
        if m is None or m.end() == pos:
            return None
        ib, hw = (_COUNTER.findall(m[k]) if m[k] else [] for k in ("ib", "hw"))
        ib_d, hw_d = {k: int(v) for k, v in ib}, {k: int(v) for k, v in hw}
        rail = int(m["gpu"])
        if len(ib_d) != len(ib) or len(hw_d) != len(hw) or rail in by_rail:
            return None  # a counter or a rail twice: the line-by-line reading names it
        netdev = m["netdev"]
        by_rail[rail] = RailCounters(
            rail, m["hca"], int(m["port"]), None if netdev == "-" else netdev, m["ll"], ib_d, hw_d, None
        )
        pos = m.end()
    return by_rail


def _line_starting(text: str, prefix: str) -> int:
    """Where the first line of ``text`` (broken at "\n") that starts with ``prefix`` begins; -1: none."""
    if text.startswith(prefix):
        return 0
    at = text.find("\n" + prefix)
    return at + 1 if at >= 0 else -1


def _nvlink_only(text: str) -> Snapshot | None:
    """The NVLink section alone of a snapshot whose lines break only at "\n" (what :func:`parse` reads with
    ``rails=False``), found without splitting the rails' lines; None where the line-by-line reading must
    name a fault (text before the first section, a bad ``## nvlink`` line) or another line break could
    begin a section."""
    if not text.isascii() or any(c in text for c in _OTHER_BREAKS):
        return None
    first = _line_starting(text, "##")
    if first < 0 or text[:first].strip():
        return None  # no section at all, or something before the first one
    at = _line_starting(text, "## nvlink")
    if at < 0:
        return Snapshot({}, None)
    lines = text[at:].splitlines()
    m = _NVLINK_RE.match(lines[0].rstrip())
    if m is None:
        return None
    return Snapshot({}, _nvlink(m, lines[1:], text.count("\n", 0, at) + 2))


def parse(text: str, *, rails: bool = True, nvlink: bool = True) -> Snapshot:
    """Parse one snapshot; ParseError names the line for anything outside the documented layout.
    ``rails=False`` / ``nvlink=False`` leave that part out (empty / None) unread: a judge that reads only
    the other part does not pay for it (a 1,024-node campaign takes ~170,000 snapshots)."""
    if not rails and nvlink and (alone := _nvlink_only(text)) is not None:
        return alone
    if rails and (clean := _clean_rails(text)) is not None:
        # the NVLink section, where there is one, read as the line-by-line reading reads it
        links = parse(text, rails=False).nvlink if nvlink and "## nvlink" in text else None
        return Snapshot(clean, links)
    lines = text.splitlines()
    heads = [i for i, ln in enumerate(lines) if ln.startswith("##")]
    nv_at = next((i for i in heads if lines[i].startswith("## nvlink")), None)
    heads = [i for i in heads if nv_at is None or i <= nv_at]  # nvidia-smi's text is no section
    for i in range(heads[0] if heads else len(lines)):
        if lines[i].strip():
            raise ParseError(i + 1, "'## rail ...' before any counter", lines[i])
    nv = next((k for k, i in enumerate(heads) if lines[i].startswith("## nvlink")), None)
    links = None
    if nv is not None:  # the last section: what follows it is nvidia-smi's own text
        if nvlink:
            m = _NVLINK_RE.match(lines[heads[nv]].rstrip())
            if not m:
                raise ParseError(heads[nv] + 1, "'## nvlink rc=<returncode>'", lines[heads[nv]])
            links = _nvlink(m, lines[heads[nv] + 1 :], heads[nv] + 2)
        lines, heads = lines[: heads[nv]], heads[:nv]
    if not rails:
        return Snapshot({}, links)
    by_rail: dict[int, RailCounters] = {}
    head: tuple[re.Match[str], int] | None = None
    body: Body = {}
    for k, i in enumerate(heads):
        line, end = lines[i], heads[k + 1] if k + 1 < len(heads) else len(lines)
        if line.startswith("### "):
            name = line[4:].split(" ", 1)[0]
            if head is None or name not in _SECTIONS:
                raise ParseError(i + 1, f"a section of a rail ({', '.join(_SECTIONS)})", line)
            if name == "efa-counters":  # one per EFA device of the rail: keyed by the device
                parts = line[4:].split()
                if len(parts) < 2:
                    raise ParseError(i + 1, "'### efa-counters <device> <dir>'", line)
                name = f"efa-counters {parts[1]}"
            if name in body:
                raise ParseError(i + 1, "each section once per rail", line)
            body[name] = (i + 2, lines[i + 1 : end])
            continue
        m = _RAIL_RE.match(line.rstrip()) if line.startswith("## ") else None
        if not m:
            raise ParseError(i + 1, "'## rail <gpu> hca <hca> port <port> netdev <netdev>'", line)
        if any(ln.strip() for ln in lines[i + 1 : end]):
            raise ParseError(i + 2, "a '### <section>' line after the rail line", lines[i + 1])
        _close(by_rail, head, body)
        head, body = (m, i + 1), {}
    _close(by_rail, head, body)
    return Snapshot(by_rail, links)


def _close(rails: dict[int, RailCounters], head: tuple[re.Match[str], int] | None, body: Body) -> None:
    if head is not None:
        r = _rail(head[0], body, head[1])
        if r.rail in rails:
            raise ParseError(head[1], "each rail once", f"rail {r.rail} again")
        rails[r.rail] = r


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
    efa = {dev: _sub(before.efa[dev], c, back) for dev, c in after.efa.items() if dev in before.efa}
    return RailDelta(ib, hw, eth, tuple(sorted(back)), after.link_layer, efa)


NvlinkDelta = dict[tuple[int, int], dict[str, int]]  # (gpu, link) -> counter -> after - before


def nvlink_delta(before: NvlinkCounters | None, after: NvlinkCounters | None) -> NvlinkDelta | None:
    """The NVLink counters' rise between two snapshots, per GPU and link, for the integer counters both
    list (a negative rise: the counter went backwards, a reset); None where either has no readable listing."""
    if before is None or after is None or before.report is None or after.report is None:
        return None
    out: NvlinkDelta = {}
    for gpu in after.report.gpus:
        old = before.report.gpu(gpu.index)
        for link in gpu.links if old is not None else ():
            was = old.link(link.index) if old is not None else None
            if was is None:
                continue
            prev = dict(was.counters)
            out[(gpu.index, link.index)] = {
                name: value - int(prev[name] or 0)
                for name, value in link.counters
                if isinstance(value, int) and isinstance(prev.get(name), int)
            }
    return out
