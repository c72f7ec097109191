"""Port counter deltas as evidence (probes/counters.py snapshots -> verdicts per ``node:railK``).

A campaign snapshots every node's counters before its first round and after each round; rounds are
matchings, so a rail's delta over one round belongs to the one step that used it (meta ``during``: the
node's steps of that round, one per rail in a pair round). A missing snapshot merges the intervals around
it (the rise still counts, attributed to those rounds together). Verdicts:

- ``nccl.link_errors`` (any link layer): an IB PMA error counter (symbol_error, link_downed, port_rcv_errors,
  port_xmit_discards, ...) rose while traffic ran. Bandwidth that passes on a link taking errors is a
  finding, not a pass: the errors are retransmitted today and become a dead link next week.
- ``roce.counters`` (RoCE ports): PFC pause frames on a priority other than the lossless one, discards on
  the lossless priority (rx_prio<p>_discards/_buf_discard/_cong_discard) or on the port (rx_discards_phy:
  a lossless port drops nothing), or RoCE traffic that did not travel on the lossless priority (the
  per-priority byte counters). mlx5 counter semantics: Linux Documentation/networking/device_drivers/
  ethernet/mellanox/mlx5/counters.rst. Without traffic snapshots it judges the RoCE probe's idle window.

Pure: parses the archived evidence handed in.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.parsers import counters as pc
from clusteraccept.probes.counters import EFA_DATA, EFA_ERRORS, IB_DATA, IB_ERRORS, IB_WIDTH_BITS
from clusteraccept.site.fabric import Roce

Archived = tuple[Evidence, str]
MIN_TRAFFIC_B = 1 << 20  # below this a window carried no RoCE traffic worth a per-priority share


@dataclass(frozen=True)
class Interval:
    """The counters of one node between two consecutive snapshots of one campaign (or idle window)."""

    campaign: str
    window: str  # traffic | idle
    after_round: str
    during: tuple[str, ...]  # "<collective>:<step subject>" of the steps the node was in
    rails: dict[int, pc.RailDelta]
    paths: tuple[str, str]
    span_s: float
    t_end: float = 0.0
    merged: int = 1  # rounds this interval spans (> 1: snapshots in between are missing)
    saturated: dict[int, tuple[str, ...]] = field(default_factory=dict)  # rail -> counters at their max
    nvlink: pc.NvlinkDelta | None = None  # the NVLink counters' rise (None: not read, or not readable)
    nvlink_failed: str = ""  # why a snapshot of the two could not read them (nvidia-smi's error)

    def steps_on(self, rail: int) -> str:
        """The steps of this interval that used ``rail`` (pair steps name it; block/intra use every rail)."""
        if not self.during and not self.after_round:
            return ""  # nothing recorded about the interval (not a campaign's)
        own = [d for d in self.during if ":rail" not in d or d.endswith(f":rail{rail}")]
        where = f" (round '{self.after_round}')" if self.after_round else ""
        if self.merged > 1:
            where = f" (the {self.merged} rounds up to '{self.after_round}': snapshots in between missing)"
        return (", ".join(own) if own else "no step on this rail") + where


Intervals = tuple[list["Interval"], list[str]]


def intervals(snaps: Sequence[Archived], *, nics: bool = True, nvlink: bool = True) -> Intervals:
    """Consecutive snapshot pairs per campaign, and what could not be used (parse errors, gaps). A judge
    of one part reads only it (``nics``: the NICs' counters, ``nvlink``: the GPUs' NVLink counters)."""
    problems: list[str] = []
    by_campaign: dict[str, list[tuple[int, Evidence, str, pc.Snapshot]]] = defaultdict(list)
    for ev, path in snaps:
        try:
            parsed = pc.parse(ev.stdout, rails=nics, nvlink=nvlink)
        except ParseError as exc:
            problems.append(f"could not parse counter snapshot {path}: {exc}")
            continue
        seq = ev.meta.get("seq", "")
        if not seq.isdigit():
            problems.append(f"{path}: counter snapshot without a sequence number")
            continue
        by_campaign[ev.meta.get("campaign", "")].append((int(seq), ev, path, parsed))
    out: list[Interval] = []
    for campaign, snaps_of in sorted(by_campaign.items()):
        snaps_of.sort(key=lambda s: s[0])
        for (k0, e0, p0, s0), (k1, e1, p1, s1) in itertools.pairwise(snaps_of):
            if k1 != k0 + 1:  # merge across the gap: a rise in the missing rounds still counts
                problems.append(f"{campaign}: snapshots {k0 + 1}..{k1 - 1} missing (rounds merged)")
            rails = {r: pc.delta(s0.rails[r], s1.rails[r]) for r in s0.rails.keys() & s1.rails.keys()}
            t = [float(e.meta.get("t_s", "0") or 0) for e in (e0, e1)]
            during = tuple(d for d in e1.meta.get("during", "").split("|") if d)
            after = e1.meta.get("after_round", "")
            full = {r: _at_max(s1.rails[r]) for r in rails}
            window = e1.meta.get("window", "traffic")
            iv = Interval(campaign, window, after, during, rails, (p0, p1), t[1] - t[0], t[1], k1 - k0)
            failed = [
                f"{p}: rc {s.nvlink.returncode}: {s.nvlink.error or 'no output'}"
                for s, p in ((s0, p0), (s1, p1))
                if s.nvlink and s.nvlink.report is None
            ]
            out.append(
                replace(
                    iv,
                    saturated={r: v for r, v in full.items() if v},
                    nvlink=pc.nvlink_delta(s0.nvlink, s1.nvlink),
                    nvlink_failed="; ".join(failed),
                )
            )
        last, expected = snaps_of[-1][0], snaps_of[-1][1].meta.get("of", "")
        if expected.isdigit() and last < int(expected) - 1:
            problems.append(f"{campaign}: snapshots after {last} missing (its last rounds not covered)")
    out.sort(key=lambda i: i.t_end)  # the order things happened in, whatever the campaign
    return out, problems


def _at_max(r: pc.RailCounters) -> tuple[str, ...]:
    return tuple(n for n, bits in IB_WIDTH_BITS.items() if r.ib.get(n) == (1 << bits) - 1)


def _windows(ivs: list[Interval], rail: int) -> tuple[list[Interval], str]:
    """The traffic intervals that cover ``rail``, else the idle ones; and which kind was used."""
    traffic = [i for i in ivs if i.window == "traffic" and rail in i.rails]
    if traffic:
        return traffic, "traffic"
    return [i for i in ivs if rail in i.rails], "idle"


def _paths(ivs: list[Interval]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for i in ivs for p in i.paths))


def _unusable(
    check: str, family: str, subject: str, ivs: list[Interval], problems: list[str]
) -> Verdict | None:
    if problems and not ivs:
        return error(check, family, subject, "; ".join(problems[:3]))
    if not ivs:
        return skip(check, family, subject, "no traffic test with counter snapshots in this run")
    return None


def _efa_errors(where: str, rail: int, subject: str, used: list[Interval], problems: list[str]) -> Verdict:
    """``nccl.link_errors`` on an EFA rail: none of its devices' drop and retransmit-timeout counters rose
    while traffic ran (probes/counters.EFA_ERRORS)."""
    check = "nccl.link_errors"
    if not any(n in c for i in used for c in i.rails[rail].efa.values() for n in EFA_ERRORS):
        return error(
            check, "nccl", subject, f"{where}: no EFA error counter readable in the snapshots", _paths(used)
        )
    back = sorted({n for i in used for n in i.rails[rail].went_backwards if n in EFA_ERRORS})
    if back:
        why = (
            f"{where}: counters went backwards between snapshots ({', '.join(back)}): reset or driver reload"
        )
        return error(check, "nccl", subject, why, _paths(used))
    rose = [
        f"{dev} {n} +{c[n]}" + (f" during {i.steps_on(rail)}" if i.steps_on(rail) else "")
        for i in used
        for dev, c in i.rails[rail].efa.items()
        for n in EFA_ERRORS
        if c.get(n)
    ]
    if rose:
        total = sum(c.get(n, 0) for i in used for c in i.rails[rail].efa.values() for n in EFA_ERRORS)
        more = f"; and {len(rose) - 3} more" if len(rose) > 3 else ""
        msg = (
            f"{where}: EFA error counters rose while traffic ran: {'; '.join(rose[:3])}{more}; whatever the "
            "bandwidth, a device dropping or timing out is a finding"
        )
        return expect(check, "nccl", subject, False, msg, value=total, evidence=_paths(used))
    moved_B = sum(c.get(n, 0) for i in used for c in i.rails[rail].efa.values() for n in EFA_DATA)
    if moved_B == 0:
        why = f"{where}: no traffic crossed these EFA devices while the campaign ran (tx/rx_bytes unchanged)"
        return skip(check, "nccl", subject, why, _paths(used))
    note = f"; but {'; '.join(problems[:2])}" if problems else ""
    moved = f"{moved_B / 1e9:.1f} GB moved"
    msg = f"{where}: no EFA error counter rose over {len(used)} traffic intervals ({moved}){note}"
    return expect(check, "nccl", subject, True, msg, value=0, evidence=_paths(used))


def link_errors(where: str, rail: int, subject: str, ivs: list[Interval], problems: list[str]) -> Verdict:
    """``nccl.link_errors``: no IB error counter of the rail's port rose while the campaign ran."""
    check = "nccl.link_errors"
    used = [i for i in ivs if i.window == "traffic" and rail in i.rails]
    bad = _unusable(check, "nccl", subject, used, problems)
    if bad is not None:
        return bad
    if any(i.rails[rail].efa for i in used):
        return _efa_errors(where, rail, subject, used, problems)
    missing = [n for n in IB_ERRORS if all(n not in i.rails[rail].ib for i in used)]
    if len(missing) == len(IB_ERRORS):
        if used[-1].rails[rail].link_layer == "Ethernet":  # RoCE: the driver may expose no PMA counters
            why = f"{where}: no IB PMA error counters on this RoCE port (roce.counters judges its ethtool -S)"
            return skip(check, "nccl", subject, why, _paths(used))
        return error(
            check, "nccl", subject, f"{where}: no IB port counter readable in the snapshots", _paths(used)
        )
    back = sorted({n for i in used for n in i.rails[rail].went_backwards if n in IB_ERRORS})
    if back:
        why = (
            f"{where}: counters went backwards between snapshots ({', '.join(back)}): reset or driver reload"
        )
        return error(check, "nccl", subject, why, _paths(used))
    stuck = sorted({n for i in used for n in i.saturated.get(rail, ()) if n in IB_ERRORS})
    if stuck:
        why = (
            f"{where}: {', '.join(stuck)} sit at their maximum (PMA counters stop there), so a rise cannot "
            "show: reset the port's counters and run again"
        )
        return error(check, "nccl", subject, why, _paths(used))
    rose: list[str] = []
    total = 0
    names: set[str] = set()
    for i in used:
        d = i.rails[rail].ib
        hits = {n: d[n] for n in IB_ERRORS if d.get(n)}
        if hits:
            total += sum(hits.values())
            names |= set(hits)
            during = i.steps_on(rail)
            rose.append(
                ", ".join(f"{n} +{v}" for n, v in hits.items()) + (f" during {during}" if during else "")
            )
    data_B = 4 * sum(i.rails[rail].ib.get(n, 0) for i in used for n in ("port_xmit_data", "port_rcv_data"))
    if rose:
        more = f"; and {len(rose) - 3} more" if len(rose) > 3 else ""
        msg = (
            f"{where}: error counters rose while traffic ran, in {len(rose)} of {len(used)} intervals: "
            f"{'; '.join(rose[:3])}{more}; whatever the bandwidth, a port taking errors is a finding "
            f"({_advice(names)})"
        )
        return expect(check, "nccl", subject, False, msg, value=total, evidence=_paths(used))
    data_known = all(n in i.rails[rail].ib for i in used for n in IB_DATA)
    data_stuck = any(n in IB_DATA for i in used for n in i.saturated.get(rail, ()))
    if data_known and not data_stuck and data_B == 0:
        why = f"{where}: no traffic crossed this port while the campaign ran (its data counters did not move)"
        return skip(check, "nccl", subject, why, _paths(used))
    note = f"; but {'; '.join(problems[:2])}" if problems else ""
    msg = (
        f"{where}: no error counter rose over {len(used)} traffic intervals ({data_B / 1e9:.1f} GB moved)"
        f"{note}"
    )
    return expect(check, "nccl", subject, True, msg, value=0, evidence=_paths(used))


# Where a rising counter points (the PortCounters descriptions in Documentation/ABI/stable/
# sysfs-class-infiniband and NVIDIA's mlx5 counter docs): physical-layer errors belong to this link (its
# cable, transceivers or one of its two ports); EBP-marked packets ("End Bad Packet") were corrupted on
# another link of the path, the port only received them; transmit discards mean the port was down or
# congested. The message says which, so nobody swaps a good cable for an upstream fault.
_UPSTREAM = frozenset({"port_rcv_remote_physical_errors"})
_DISCARD = frozenset({"port_xmit_discards"})


def _advice(names: set[str]) -> str:
    said = []
    if names - _UPSTREAM - _DISCARD:
        said.append("physical errors on this link: reseat or replace its cable/transceiver, check both ports")
    if names & _UPSTREAM:
        said.append(
            "packets corrupted upstream (EBP-marked): look for the bad link on the path, not this one"
        )
    if names & _DISCARD:
        said.append("outbound packets discarded: the port was down or congested")
    return "; ".join(said)


def _roce_findings(p: int, d: pc.RailDelta) -> tuple[dict[str, int], int, int]:
    """(finding -> count, bytes on the lossless priority, bytes on all priorities) of one interval."""
    e = d.ethtool
    if e is None:
        return {}, 0, 0
    found = {
        f"pause frames on priority {q} (not the lossless {p})": n
        for q in range(8)
        if q != p
        for n in [(e.rx_prio_pause(q) or 0) + (e.tx_prio_pause(q) or 0)]
        if n
    }
    drops = sum(v or 0 for v in (e.rx_prio_discards(p), e.rx_prio_buf_discard(p), e.rx_prio_cong_discard(p)))
    if drops:
        found[f"discards on the lossless priority {p}"] = drops
    if e.rx_discards_phy:
        found["rx_discards_phy (the port dropped for lack of buffers)"] = e.rx_discards_phy
    per_prio = [(e.get(f"rx_prio{q}_bytes") or 0) + (e.get(f"tx_prio{q}_bytes") or 0) for q in range(8)]
    return found, per_prio[p], sum(per_prio)


def roce_counters(roce: Roce, where: str, rail: int, subject: str, node_ivs: Intervals) -> Verdict:
    """``roce.counters``: nothing lossy happened on the port while traffic (or the idle window) ran.
    ``node_ivs``: the node's :func:`intervals`, read once for all its rails."""
    check, p = "roce.counters", roce.lossless_priority
    ivs, problems = node_ivs
    used, window = _windows(ivs, rail)
    used = [i for i in used if i.rails[rail].ethtool is not None]
    if not used:
        if problems:
            return error(check, "roce", subject, f"{where}: {'; '.join(problems[:2])}")
        why = "no traffic test in this run (no before/after counter snapshots with ethtool -S)"
        return skip(check, "roce", subject, f"{why} on {where}")
    back = sorted({n for i in used for n in i.rails[rail].went_backwards})
    if back:
        why = f"{where}: counters went backwards between snapshots ({', '.join(back[:4])}): reset or reload"
        return error(check, "roce", subject, why, _paths(used))
    totals: dict[str, int] = defaultdict(int)
    seen_in: dict[str, int] = defaultdict(int)  # intervals in which each finding occurred
    first: dict[str, str] = {}
    lossless_B = total_B = 0
    for i in used:
        f, lb, tb = _roce_findings(p, i.rails[rail])
        lossless_B, total_B = lossless_B + lb, total_B + tb
        for what, n in f.items():
            totals[what] += n
            seen_in[what] += 1  # findings are non-zero counts only
            first.setdefault(what, i.steps_on(rail) if window == "traffic" else "")
    found = []
    if window == "traffic" and total_B >= MIN_TRAFFIC_B and lossless_B < total_B / 2:
        found.append(
            f"only {100 * lossless_B / total_B:.0f}% of the port's bytes travelled on the lossless "
            f"priority {p} while the campaign ran (RoCE classified onto another priority: trust/DSCP map)"
        )
    for what, n in totals.items():
        where_first = f", first during {first[what]}" if first[what] else ""
        found.append(f"{what}: +{n} in {seen_in[what]} of {len(used)} intervals{where_first}")
    eth = [i.rails[rail].ethtool for i in used]
    pauses = sum((e.rx_prio_pause(p) or 0) + (e.tx_prio_pause(p) or 0) for e in eth if e)
    cnp = {n: sum(i.rails[rail].hw.get(n, 0) for i in used) for n in ("np_cnp_sent", "rp_cnp_handled")}
    seen = f"pause on priority {p}: +{pauses}, " + ", ".join(f"{n} +{v}" for n, v in cnp.items())
    span = f"{sum(i.span_s for i in used):.1f} s"
    if found:
        msg = f"{where}: {' | '.join(found)} in the {span} {window} window, expected none"
        return expect(check, "roce", subject, False, msg, value=len(found), evidence=_paths(used))
    counted = all(e is not None and e.get(f"rx_prio{p}_bytes") is not None for e in eth)
    if window == "traffic" and counted and total_B == 0:
        why = f"{where}: no RoCE traffic crossed this port while the campaign ran (per-priority bytes still)"
        return skip(check, "roce", subject, why, _paths(used))
    if window == "idle":
        return skip(
            check,
            "roce",
            subject,
            "no traffic test in this run (select the nccl campaign with it, e.g. -m 'roce or nccl'); "
            f"idle {span} window clean: {seen}",
            _paths(used),
        )
    share = f", {100 * lossless_B / total_B:.0f}% of bytes on priority {p}" if total_B else ""
    msg = (
        f"{where}: no pause frames off priority {p}, no discards over {len(used)} traffic intervals"
        f"{share} ({seen})"
    )
    return expect(check, "roce", subject, True, msg, value=0, evidence=_paths(used))
