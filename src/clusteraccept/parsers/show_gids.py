"""Parser for ``show_gids`` (MLNX_OFED / mlnx-tools sbin/show_gids).

Format source: github.com/Mellanox/mlnx-tools sbin/show_gids (HEAD 8fbfd9cf). It prints a header pair

    DEV<TAB>PORT<TAB>INDEX<TAB>GID<TAB>...<TAB>IPv4  <TAB><TAB>VER<TAB>DEV
    ---<TAB>----<TAB>-----<TAB>---<TAB>...<TAB>------------  <TAB>---<TAB>---

then one line per non-zero GID, ``$d\\t$p\\t$g\\t$gid\\t$ipv4  \\t$_type\\t$_ndev`` for IPv4-mapped GIDs
(gid starting 0000) and ``$d\\t$p\\t$g\\t$gid\\t\\t\\t$_type\\t$_ndev`` otherwise, where ``_type`` is the
``v1``/``v2`` tail of /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index> ("IB/RoCE v1",
"RoCE v2") and ``_ndev`` is gid_attrs/ndevs/<index>; either may be empty. It ends with ``n_gids_found=N``.
Lines are split on any whitespace, so tab-separated and space-pasted copies both parse.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_GID_RE = re.compile(r"[0-9a-fA-F]{4}(?::[0-9a-fA-F]{4}){7}$")
_INT_RE = re.compile(r"[0-9]+$")
_VER_RE = re.compile(r"[vV][0-9]+$")
_TRAILER_RE = re.compile(r"n_gids_found=(\d+)$")


@dataclass(frozen=True)
class GidEntry:
    """One GID table entry. ``roce_version`` is "v1" or "v2" (None if not printed)."""

    device: str
    port: int
    index: int
    gid: str
    ipv4: str | None
    roce_version: str | None
    netdev: str | None


@dataclass(frozen=True)
class ShowGids:
    """All GID entries show_gids listed, and its own count."""

    entries: tuple[GidEntry, ...]
    n_gids_found: int

    def for_port(self, device: str, port: int) -> tuple[GidEntry, ...]:
        """The entries of one device port, in index order."""
        return tuple(
            sorted((e for e in self.entries if e.device == device and e.port == port), key=lambda e: e.index)
        )

    def rocev2_ipv4_index(self, device: str, port: int) -> int | None:
        """The lowest GID index of ``device``/``port`` that is RoCE v2 with an IPv4 address (the value for
        NCCL_IB_GID_INDEX), None if none. Often 3 but not always (more addresses, VLANs, IPv6 first)."""
        return next((e.index for e in self.for_port(device, port) if e.roce_version == "v2" and e.ipv4), None)


def _entry(toks: list[str], line_no: int, line: str) -> GidEntry:
    if len(toks) < 4 or not _INT_RE.match(toks[1]) or not _INT_RE.match(toks[2]):
        raise ParseError(line_no, "DEV PORT INDEX GID [IPv4] [VER] [NETDEV]", line)
    device, port, index, gid, rest = toks[0], int(toks[1]), int(toks[2]), toks[3], toks[4:]
    if not _GID_RE.match(gid):
        raise ParseError(line_no, "a GID of 8 groups of 4 hex digits", gid)
    ipv4: str | None = None
    if rest and rest[0].count(".") == 3:
        try:
            ipv4 = str(ipaddress.IPv4Address(rest[0]))
        except ValueError:
            raise ParseError(line_no, "an IPv4 address", rest[0]) from None
        rest = rest[1:]
    version: str | None = None
    if rest and _VER_RE.match(rest[0]):
        version, rest = rest[0].lower(), rest[1:]
    if len(rest) > 1:
        raise ParseError(line_no, "at most a netdev after the RoCE version", " ".join(rest))
    return GidEntry(device, port, index, gid.lower(), ipv4, version, rest[0] if rest else None)


def parse(text: str) -> ShowGids:
    """Parse show_gids output; ParseError if the ``n_gids_found=N`` trailer is missing or disagrees."""
    lines = text.splitlines()
    header = next(
        (i for i, ln in enumerate(lines) if ln.split()[:4] == ["DEV", "PORT", "INDEX", "GID"]), None
    )
    if header is None:
        raise ParseError(0, "the show_gids header 'DEV PORT INDEX GID ...'", text[:80])
    entries: list[GidEntry] = []
    count: int | None = None
    for idx in range(header + 1, len(lines)):
        no, line = idx + 1, lines[idx].strip()
        if not line or set(line) <= set("- \t"):
            continue
        m = _TRAILER_RE.match(line)
        if m:
            count = int(m.group(1))
            if count != len(entries):
                raise ParseError(no, f"n_gids_found={len(entries)} (the number of GID lines)", line)
            break
        entries.append(_entry(line.split(), no, line))
    if count is None:
        raise ParseError(len(lines), "the trailer 'n_gids_found=N' (output truncated?)", "end of input")
    keys = [(e.device, e.port, e.index) for e in entries]
    if len(set(keys)) != len(keys):
        raise ParseError(0, "one line per device/port/index", "a repeated GID index")
    return ShowGids(tuple(entries), count)
