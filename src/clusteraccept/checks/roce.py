"""RoCE lossless configuration: probes/roce.py evidence -> verdicts per rail (``node:railK``) and per node.

Per rail: roce.trust, roce.pfc (on exactly the lossless priority), roce.dscp_map (site DSCP and RDMA-CM
default_roce_tos >> 2 map to it), roce.ecn (reaction AND notification point on it), roce.cnp, roce.mtu,
roce.gid (a RoCE v2 GID; the site's NCCL_IB_GID_INDEX is v2; RDMA-CM mode v2), roce.counters (pause frames
off the lossless priority, discards, or traffic off it while the campaign ran: checks/counters.py).
Per node: roce.netdevs.
An InfiniBand-only site (no roce section) and non-Ethernet node types SKIP.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from clusteraccept.checks import counters
from clusteraccept.checks.roce_evidence import (
    Archived,
    RailEvidence,
    Unavailable,
    file_outcome,
    optional_sysfs,
    rails_of,
    read_qos,
    read_sysfs,
    tail,
    unparsable,
)
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Verdict, error, expect, skip
from clusteraccept.parsers import roce_sysfs, show_gids
from clusteraccept.plan.subjects import rail_subject
from clusteraccept.site.fabric import Roce
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import Rail

FAMILY = "roce"
NODE_CHECKS = ("roce.netdevs",)
_Rail = RailEvidence  # its name before it moved to roce_evidence.py: tests build one through this module


def _prios(prios: Sequence[int]) -> str:
    return "none" if not prios else str(prios[0]) if len(prios) == 1 else str(list(prios))


def check_trust(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    q = read_qos(r)
    if q.trust is None:
        raise Unavailable(f"{r.where}: {q.tool} does not print the trust state", paths=q.paths)
    ok = q.trust == roce.trust
    want = "" if ok else f", expected {roce.trust} (site roce.trust)"
    msg = f"{r.where}: trust {q.trust}{q.trust_note}{want}"
    return expect("roce.trust", FAMILY, subject, ok, msg, value=q.trust, evidence=q.paths)


def check_pfc(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    q = read_qos(r)
    p = roce.lossless_priority
    ok = q.pfc == (p,)
    msg = f"on exactly priority [{p}]" if ok else f"on priorities {list(q.pfc)}, expected exactly [{p}]"
    return expect(
        "roce.pfc",
        FAMILY,
        subject,
        ok,
        f"{r.where}: PFC enabled {msg} (the lossless priority)",
        value=",".join(map(str, q.pfc)) or "none",
        evidence=q.paths,
    )


def check_dscp_map(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    if roce.trust != "dscp":
        raise Unavailable("site trusts PCP (roce.trust: pcp): no DSCP map in use", skipped=True)
    q = read_qos(r)
    if q.trust != "dscp":
        raise Unavailable(
            f"{r.where}: trust is {q.trust}, so no DSCP map is in effect (see roce.trust)",
            skipped=True,
            paths=q.paths,
        )
    p, tos = roce.lossless_priority, optional_sysfs(r).default_roce_tos
    dscps = {roce.roce_dscp: "site roce_dscp"}
    if tos is not None:
        cm = f"RDMA-CM default_roce_tos {tos} >> 2"
        dscps[tos >> 2] = f"{dscps[tos >> 2]}; {cm}" if tos >> 2 in dscps else cm
    got = [(d, what, q.dscp_map.get(d, ())) for d, what in dscps.items()]
    bad = [f"DSCP {d} ({what}) maps to priority {_prios(ps)}" for d, what, ps in got if ps != (p,)]
    shown = " and ".join(f"DSCP {d} ({what})" for d, what, _ in got)
    shown += " (RDMA-CM default_roce_tos not readable)" if tos is None else ""
    msg = f"{'; '.join(bad)}, expected {p}" if bad else f"{shown} map{'s' * (len(got) == 1)} to priority {p}"
    tos_path = roce_sysfs.default_roce_tos_path(r.rail.hca, r.rail.port)
    paths = q.paths + tuple(p for ev, p in r.roles.get("sysfs", []) if ev.path == tos_path)
    return expect(
        "roce.dscp_map",
        FAMILY,
        subject,
        not bad,
        f"{r.where}: {msg} (the lossless priority)",
        value=_prios(got[-1][2]),
        evidence=paths,
    )


def check_ecn(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    if not roce.ecn:
        raise Unavailable("site does not require ECN (roce.ecn: false)", skipped=True)
    s, paths = read_sysfs(r)
    p = roce.lossless_priority
    rp, np_ = s.ecn_rp_enabled[p], s.ecn_np_enabled[p]
    if rp is None and np_ is None:
        where = file_outcome(r, roce_sysfs.ecn_rp_enable_path(r.netdev or "_", p))
        raise Unavailable(
            f"{r.where}: ECN settings not readable ({where}; the ecn/ sysfs comes with the "
            "MLNX_OFED mlx5 driver)",
            paths=paths,
        )
    state = {None: "unreadable", True: "enabled", False: "disabled"}
    ok = bool(rp and np_)
    msg = (
        f"{r.where}: ECN on priority {p}: reaction point (roce_rp) {state[rp]}, "
        f"notification point (roce_np) {state[np_]}" + ("" if ok else "; expected both enabled")
    )
    value = f"rp={state[rp]},np={state[np_]}"
    return expect("roce.ecn", FAMILY, subject, ok, msg, value=value, evidence=paths)


def check_cnp(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    if roce.cnp_dscp is None and roce.cnp_priority is None:
        raise Unavailable("site sets no CNP DSCP or priority (roce.cnp_dscp, cnp_priority)", skipped=True)
    s, paths = read_sysfs(r)
    netdev = r.netdev or "_"
    wanted = [
        ("CNP DSCP", roce.cnp_dscp, s.cnp_dscp, roce_sysfs.cnp_dscp_path(netdev)),
        ("CNP priority", roce.cnp_priority, s.cnp_802p_prio, roce_sysfs.cnp_802p_prio_path(netdev)),
    ]
    unreadable = [file_outcome(r, path) for _, want, got, path in wanted if want is not None and got is None]
    if unreadable:
        raise Unavailable(f"{r.where}: CNP settings not readable ({'; '.join(unreadable)})", paths=paths)
    bad = [f"{name} {got}, expected {want}" for name, want, got, _ in wanted if want not in (None, got)]
    shown = ", ".join(f"{name} {got}" for name, want, got, _ in wanted if want is not None)
    msg = f"{r.where}: " + ("; ".join(bad) + " (site roce.cnp_dscp / cnp_priority)" if bad else shown)
    return expect("roce.cnp", FAMILY, subject, not bad, msg, value=shown, evidence=paths)


def check_mtu(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    s, paths = read_sysfs(r)
    if s.mtu_B is None:
        raise Unavailable(
            f"{r.where}: MTU not readable ({file_outcome(r, roce_sysfs.mtu_path(r.netdev or '_'))})",
            paths=paths,
        )
    ok = s.mtu_B == roce.mtu
    want = " as the site says" if ok else f", expected {roce.mtu} (site roce.mtu)"
    msg = f"{r.where}: MTU {s.mtu_B}{want}"
    return expect("roce.mtu", FAMILY, subject, ok, msg, value=s.mtu_B, evidence=paths)


def check_gid(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    if not r.gids:
        raise Unavailable(f"{r.node}: no show_gids evidence came back")
    ev, path = r.gids[0]
    if not ev.ok:
        raise Unavailable(
            f"{r.node}: show_gids (mlnx-tools) failed (rc {ev.returncode}): {tail(ev)}", paths=(path,)
        )
    try:
        table = show_gids.parse(ev.stdout).for_port(r.rail.hca, r.rail.port)
    except ParseError as exc:
        raise unparsable("show_gids", path, exc) from None
    port = f"{r.rail.hca} port {r.rail.port}"
    v2 = [e for e in table if e.roce_version == "v2"]
    bad = (
        []
        if v2
        else [
            f"no RoCE v2 GID on {port} "
            f"({', '.join(f'{e.index} {e.roce_version}' for e in table) or 'no GID at all'})"
        ]
    )
    index = site.env.get("NCCL_IB_GID_INDEX", "")
    if index.isdigit() and v2:
        at = next((e for e in table if e.index == int(index)), None)
        if at is None or at.roce_version != "v2":
            bad.append(
                f"GID index {index} (site NCCL_IB_GID_INDEX) is {at.roce_version if at else 'empty'}"
                f", expected RoCE v2 (v2 at index {', '.join(str(e.index) for e in v2)})"
            )
    mode = optional_sysfs(r).default_roce_mode
    if mode not in (None, "RoCE v2"):
        bad.append(f"RDMA-CM default_roce_mode is {mode!r}, expected 'RoCE v2'")
    if bad:
        return expect("roce.gid", FAMILY, subject, False, f"{r.where}: {'; '.join(bad)}", evidence=(path,))
    best = next((e for e in v2 if e.ipv4), v2[0])
    return expect(
        "roce.gid",
        FAMILY,
        subject,
        True,
        f"{r.where}: RoCE v2 GID index {best.index} ({best.ipv4 or best.gid}) on {port}",
        value=best.index,
        evidence=(path,),
    )


def check_counters(roce: Roce, site: Site, r: RailEvidence, subject: str) -> Verdict:
    """Pause/discard/priority evidence of the port's counters (checks/counters.py): the campaign's
    snapshots around traffic when the run has them, else the probe's idle window."""
    return counters.roce_counters(roce, r.where, r.rail.index, subject, r.counters())


RAIL_CHECKS: dict[str, Callable[[Roce, Site, RailEvidence, str], Verdict]] = {
    "roce.trust": check_trust,
    "roce.pfc": check_pfc,
    "roce.dscp_map": check_dscp_map,
    "roce.ecn": check_ecn,
    "roce.cnp": check_cnp,
    "roce.mtu": check_mtu,
    "roce.gid": check_gid,
    "roce.counters": check_counters,
}


def _port_problem(r: RailEvidence) -> tuple[bool, str] | None:
    """Why this rail is no RoCE port to judge: (is_error, reason without the rail prefix); None if it is."""
    port = f"{r.rail.hca} port {r.rail.port}"
    link = r.one("link_layer")
    if link is None:
        return True, f"no RoCE evidence for {port} came back from {r.node}"
    ev = link[0]
    if not ev.ok:
        return False, f"no RoCE netdev: {port} absent ({ev.path}: {tail(ev)})"
    if ev.stdout.strip() != "Ethernet":
        return False, f"{port} link layer is {ev.stdout.strip() or 'empty'}, not RoCE (Ethernet)"
    if not r.netdev:
        return False, f"no RoCE netdev for {port} (none in the site, no gid_attrs/ndevs/0)"
    return None


def _netdevs(node: str, rails: list[RailEvidence], listing: Evidence | None) -> Verdict:
    present = set(listing.stdout.split()) if listing is not None else None
    bad, good = [], []
    for r in rails:
        problem = _port_problem(r)
        if problem:
            bad.append(f"rail{r.rail.index}: {problem[1]}")
        elif present is not None and r.netdev not in present:
            bad.append(f"rail{r.rail.index}: netdev {r.netdev} absent from /sys/class/net")
        else:
            good.append(r.netdev or "")
    msg = (
        f"{node}: " + "; ".join(bad) + " (the site declares Ethernet rails)"
        if bad
        else f"{node}: {len(good)} RoCE ports with their netdevs ({', '.join(good)})"
    )
    paths = tuple(p for r in rails for p in r.paths("link_layer", "ndev"))
    return expect("roce.netdevs", FAMILY, node, not bad, msg, value=len(good), evidence=paths)


def _all(node: str, rails: Sequence[Rail], why: str, make: Callable[..., Verdict] = skip) -> list[Verdict]:
    """The same verdict for every roce check of a node and its rails."""
    return [make(c, FAMILY, node, why) for c in NODE_CHECKS] + [
        make(c, FAMILY, rail_subject(node, rail.index), why) for rail in rails for c in RAIL_CHECKS
    ]


def judge(site: Site, evidence: Sequence[Archived], nodes: Sequence[str]) -> list[Verdict]:
    verdicts: list[Verdict] = []
    by_host: dict[str, list[Archived]] = defaultdict(list)
    for ev, path in evidence:
        by_host[ev.host].append((ev, path))
    for node in nodes:
        nt = site.node_type(node)
        if site.roce is None:
            verdicts += _all(node, nt.rails, "InfiniBand-only site: no roce section in the site file")
            continue
        if nt.link_layer != "Ethernet":
            reason = f"node type {nt.name} has link layer {nt.link_layer}: no RoCE"
            verdicts += _all(node, nt.rails, reason)
            continue
        evs = by_host.get(node, [])
        if not evs:
            verdicts += _all(node, nt.rails, f"no RoCE evidence came back from {node}", error)
            continue
        listing = next((ev for ev, _ in evs if ev.meta.get("role") == "netdevs"), None)
        rails = rails_of(node, nt.rails, evs)
        verdicts.append(_netdevs(node, rails, listing))
        for r in rails:
            subject = rail_subject(node, r.rail.index)
            problem = _port_problem(r)
            if problem:
                make = error if problem[0] else skip
                paths = r.paths("link_layer", "ndev")
                verdicts += [make(c, FAMILY, subject, f"{r.where}: {problem[1]}", paths) for c in RAIL_CHECKS]
                continue
            for check, fn in RAIL_CHECKS.items():
                try:
                    verdicts.append(fn(site.roce, site, r, subject))
                except Unavailable as u:
                    make = skip if u.skipped else error
                    verdicts.append(make(check, FAMILY, subject, u.message, u.paths))
    return verdicts
