"""Parser for iproute2 ``dcb pfc show dev X`` and ``dcb app show dev X`` (either, or both concatenated).

Format source: iproute2 (github.com/iproute2/iproute2, HEAD ee2a4a86, 2026) dcb/dcb_pfc.c
``dcb_pfc_print()`` and dcb/dcb_app.c ``dcb_app_print()``, man pages dcb-pfc(8) and dcb-app(8):

    pfc-cap 8 macsec-bypass off delay 4096
    prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off
    requests 0:0 1:0 ...        (only with ``dcb -s``: PFC frames sent per priority)
    indications 0:0 1:0 ...     (only with ``dcb -s``: PFC frames received per priority)

    ethtype-prio 8906:3         (EtherType in hex)
    default-prio 3
    dscp-prio 0:0 CS3:3 26:3 48:6
    stream-port-prio 4791:3 / dgram-port-prio ... / port-prio ...
    pcp-prio 1nd:1 2de:2

``dcb show`` with explicit keywords prints each keyword on its own line, so any split of these key/value pairs
over lines is accepted. Without ``-N`` (dcb(8): "-N, --Numeric ... suppress this translation") DSCP values
are printed by name from iproute2's rt_dsfield table (etc/iproute2/rt_dsfield: AF11..AF43, CS1..CS7, EF,
default); the stock names are translated here, any other name raises ParseError: probes should run ``dcb -N``.
An empty APP table prints nothing (dcb-app(8) example "(nothing)").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

# iproute2 etc/iproute2/rt_dsfield: DS field byte -> name; dcb looks names up by (dscp << 2).
_DSCP_NAMES: dict[str, int] = {
    "default": 0,
    **{f"CS{i}": 8 * i for i in range(1, 8)},
    **{f"AF{c}{d}": 8 * c + 2 * d for c in range(1, 5) for d in range(1, 4)},
    "EF": 46,
}
_PCP_RE = re.compile(r"(?:[0-7](?:nd|de)|\d+)$")  # pcp_names[] in dcb_app.c ("1nd", "2de"), or -N numbers
_MAP_KEYS = ("dscp-prio", "pcp-prio", "ethtype-prio", "stream-port-prio", "dgram-port-prio", "port-prio")
_PFC_KEYS = ("pfc-cap", "macsec-bypass", "delay", "prio-pfc", "requests", "indications")
_KEYS = (*_PFC_KEYS, "default-prio", *_MAP_KEYS)


@dataclass(frozen=True)
class DcbInfo:
    """PFC and APP-table facts of one netdev as ``dcb`` prints them; None / empty where not printed."""

    pfc_cap: int | None
    macsec_bypass: bool | None
    # dcb-pfc(8) "delay": "round-trip propagation delay of the link in bits"; but mlx5 (en_dcbnl.c
    # mlx5e_dcbnl_ieee_getpfc: pfc->delay = priv->dcbx.cable_len) reports its cable length in meters here,
    # the value mlnx_qos prints as "Cable len". Hence no unit in the name.
    pfc_delay: int | None
    pfc_enabled: tuple[bool, ...] | None  # index = priority 0..7
    pfc_requests: tuple[int, ...] | None  # PFC frames sent per priority (dcb -s; mlx5: tx_prioN_pause)
    pfc_indications: tuple[int, ...] | None  # PFC frames received per priority (dcb -s; mlx5: rx_prioN_pause)
    default_prio: tuple[int, ...]
    dscp_prio: tuple[tuple[int, int], ...]  # (dscp, prio) in printed order; a dscp may appear twice
    pcp_prio: tuple[tuple[str, int], ...]  # ("1nd", 1): PCP + DEI name as printed
    ethtype_prio: tuple[tuple[int, int], ...]
    stream_port_prio: tuple[tuple[int, int], ...]
    dgram_port_prio: tuple[tuple[int, int], ...]
    port_prio: tuple[tuple[int, int], ...]

    def pfc_priorities(self) -> tuple[int, ...]:
        """Priorities with PFC on (empty if prio-pfc was not printed)."""
        return tuple(p for p, on in enumerate(self.pfc_enabled or ()) if on)

    def prios_for_dscp(self, dscp: int) -> tuple[int, ...]:
        """All priorities the APP table assigns to ``dscp`` (dcb-app(8): conflicting entries are valid)."""
        return tuple(p for d, p in self.dscp_prio if d == dscp)


def _num(tok: str, lo: int, hi: int, line_no: int, what: str, base: int = 10) -> int:
    try:
        value = int(tok, base)
    except ValueError:
        raise ParseError(line_no, what, tok) from None
    if not lo <= value <= hi or not tok.isalnum():
        raise ParseError(line_no, f"{what} in {lo}..{hi}", tok)
    return value


def _pair(tok: str, line_no: int) -> tuple[str, str]:
    key, sep, value = tok.rpartition(":")
    if not sep or not key or not value:
        raise ParseError(line_no, "KEY:VALUE", tok)
    return key, value


def _dscp(tok: str, line_no: int) -> int:
    if tok in _DSCP_NAMES:
        return _DSCP_NAMES[tok]
    if tok.isdigit():
        return _num(tok, 0, 63, line_no, "DSCP")
    raise ParseError(line_no, "a DSCP number or rt_dsfield name (run dcb -N for numbers)", tok)


def _take(
    key: str,
    rest: list[str],
    no: int,
    scalars: dict[str, int | bool],
    arrays: dict[str, tuple[int, ...]],
    default_prio: list[int],
    maps: dict[str, list[tuple[int | str, int]]],
) -> None:
    """Check and store the values of one keyword."""
    if key in ("pfc-cap", "macsec-bypass", "delay"):
        if len(rest) != 1:
            raise ParseError(no, f"{key} followed by one value", " ".join([key, *rest]))
        if key == "macsec-bypass":
            if rest[0] not in ("on", "off"):
                raise ParseError(no, "macsec-bypass on|off", rest[0])
            scalars[key] = rest[0] == "on"
        else:
            scalars[key] = _num(rest[0], 0, 0xFFFF, no, key)
    elif key in ("prio-pfc", "requests", "indications"):
        pairs = [_pair(t, no) for t in rest]
        if [k for k, _ in pairs] != [str(i) for i in range(8)]:
            raise ParseError(no, f"{key} 0:V 1:V ... 7:V", " ".join([key, *rest]))
        if key == "prio-pfc":
            if any(v not in ("on", "off") for _, v in pairs):
                raise ParseError(no, "prio-pfc values on|off", " ".join(rest))
            arrays[key] = tuple(int(v == "on") for _, v in pairs)
        else:
            arrays[key] = tuple(_num(v, 0, 2**64 - 1, no, "PFC frame count") for _, v in pairs)
    elif key == "default-prio":
        if not rest:
            raise ParseError(no, "default-prio PRIO...", key)
        default_prio.extend(_num(t, 0, 7, no, "default priority") for t in rest)
    else:
        if not rest:
            raise ParseError(no, f"{key} KEY:PRIO...", key)
        for tok in rest:
            k, v = _pair(tok, no)
            prio = _num(v, 0, 7, no, "priority")
            pid: int | str
            if key == "dscp-prio":
                pid = _dscp(k, no)
            elif key == "pcp-prio":
                if not _PCP_RE.match(k):
                    raise ParseError(no, "a PCP name like 1nd / 2de", k)
                pid = k
            elif key == "ethtype-prio":
                pid = _num(k, 0, 0xFFFF, no, "EtherType (hex)", base=16)
            else:
                pid = _num(k, 1, 0xFFFF, no, "L4 port")
            maps[key].append((pid, prio))


def parse(text: str) -> DcbInfo:
    """Parse ``dcb pfc show dev X`` and/or ``dcb app show dev X`` output."""
    scalars: dict[str, int | bool] = {}
    arrays: dict[str, tuple[int, ...]] = {}
    maps: dict[str, list[tuple[int | str, int]]] = {k: [] for k in _MAP_KEYS}
    default_prio: list[int] = []
    seen_any = False
    for no, line in enumerate(text.splitlines(), 1):
        toks = line.split()
        if not toks:
            continue
        if toks[0] not in _KEYS:
            if seen_any:
                raise ParseError(no, "a dcb keyword (pfc-cap, prio-pfc, dscp-prio, ...)", line.strip())
            continue  # noise before the output (a prompt, a banner)
        seen_any = True
        # A keyword owns the tokens up to the next keyword: dcb prints "pfc-cap 8 macsec-bypass off delay 0"
        # on one line, or one keyword a line when keywords are given to "show".
        groups: list[tuple[str, list[str]]] = []
        for tok in toks:
            if tok in _KEYS:
                groups.append((tok, []))
            else:
                groups[-1][1].append(tok)
        for key, rest in groups:
            _take(key, rest, no, scalars, arrays, default_prio, maps)
    if not seen_any:
        raise ParseError(0, "dcb pfc show / dcb app show output", text[:80])

    def ints(key: str) -> tuple[tuple[int, int], ...]:
        return tuple((int(k), p) for k, p in maps[key])

    pfc = arrays.get("prio-pfc")
    cap, mbc, delay = scalars.get("pfc-cap"), scalars.get("macsec-bypass"), scalars.get("delay")
    return DcbInfo(
        pfc_cap=int(cap) if cap is not None else None,
        macsec_bypass=bool(mbc) if mbc is not None else None,
        pfc_delay=int(delay) if delay is not None else None,
        pfc_enabled=tuple(bool(v) for v in pfc) if pfc is not None else None,
        pfc_requests=arrays.get("requests"),
        pfc_indications=arrays.get("indications"),
        default_prio=tuple(default_prio),
        dscp_prio=ints("dscp-prio"),
        pcp_prio=tuple((str(k), p) for k, p in maps["pcp-prio"]),
        ethtype_prio=ints("ethtype-prio"),
        stream_port_prio=ints("stream-port-prio"),
        dgram_port_prio=ints("dgram-port-prio"),
        port_prio=ints("port-prio"),
    )
