"""NVLink domains that span nodes (GB200/GB300 NVL72: 18 compute trays, one NVSwitch domain per rack),
judged per domain (``nvlink_domains``) from its nodes' probes and its campaign's domain collective.

- ``nvlink.clique[domain]``: every GPU of every node of the domain reports the same ``ClusterUUID`` (not
  all zeros: "not in an NVLink domain") and ``CliqueId`` in ``nvidia-smi -q``'s Fabric section (nvidia-smi(1)
  "GPU Fabric information"; NCCL's multi-node NVLink groups ranks by exactly these two, src/mnnvl.cc). A
  tray in another clique is named, against the clique the rest of the domain is in. A node whose fabric
  is not up is nvlink.fabric's finding (checks/nvlink.py) and is left out here, saying so.
- ``nvlink.imex[domain]``: the IMEX service (``nvidia-imex``) is active on every node, and each node's
  ``nvidia-imex-ctl -N`` lists as many nodes as the domain has, all READY, every matrix cell C and
  ``Domain State: UP`` (IMEX guide; NCCL env docs, NCCL_MNNVL_ENABLE: multi-node NVLink "requires a fully
  configured and operational IMEX domain for all the nodes that form the NVLink domain"). A node whose
  service is down is the cause; the others' view of it is quoted as the consequence.
- ``nvlink.mnnvl[domain]``: the domain-wide all_reduce the campaign ran with NCCL_MNNVL_ENABLE=1 (plan/
  jobs.domain_rounds) exited 0, its NCCL INFO channels between nodes run ``via P2P/MNNVL`` (src/transport/
  p2p.cc) and none via NET, and its busbw at the largest size is judged against the baseline
  ``nvlink.mnnvl.busbw.all_reduce.<domain>``; with none, it must at least exceed what the network could
  carry per GPU (``nccl.rail_ceiling_GBps``, else the rail's rate): a number the rails cannot reach is
  NVLink's. Where clique or IMEX failed, or a node's fabric is down, it is "not judged: <that cause>".
Pure: parses the archived evidence handed in.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace

from clusteraccept.checks.hostfacts import CANNOT_RUN, failure
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Verdict, error, expect, judge, skip
from clusteraccept.parsers import nccl_debug, nccl_tests, nvidia_imex_ctl, nvidia_smi_q
from clusteraccept.site.baselines import lookup
from clusteraccept.site.model import Site

FAMILY = "nvlink"
CHECKS = ("nvlink.clique", "nvlink.imex", "nvlink.mnnvl")
Archived = tuple[Evidence, str]
NO_DOMAIN = "00000000-0000-0000-0000-000000000000"  # a GPU not in any NVLink domain (its ClusterUUID)


def _clique_of(ev: Evidence) -> tuple[set[tuple[str, str]], list[str], str | None]:
    """The node's GPUs' (ClusterUUID, CliqueId) pairs; what is wrong with the tray (a GPU in no domain:
    ClusterUUID all zeros); and why the output cannot be judged at all (unreadable, or a driver that
    prints no Fabric ClusterUUID), which is no finding against the tray."""
    try:
        query = nvidia_smi_q.parse(ev.stdout)
    except ParseError as exc:
        return set(), [], f"nvidia-smi -q unreadable: {exc}"
    pairs, bad, unknown = set(), [], []
    for k, g in enumerate(query.gpus):
        f = g.fabric
        if f is None or f.cluster_uuid in (None, "", "N/A", "Not Supported"):
            unknown.append(k)
        elif f.cluster_uuid == NO_DOMAIN:
            bad.append(f"GPU {k} in no NVLink domain (ClusterUUID {NO_DOMAIN})")
        else:
            pairs.add((str(f.cluster_uuid), str(f.clique_id)))
    if unknown:
        return set(), [], f"nvidia-smi -q prints no Fabric ClusterUUID for GPU {unknown[0]} (driver too old?)"
    return pairs, bad, None


def culprits(nodes: Sequence[str]) -> dict[str, str]:
    """The trays a domain verdict blames, as localization names its culprits (``node:<name>|...``)."""
    return {"culprits": "|".join(f"node:{n}" for n in dict.fromkeys(nodes))} if nodes else {}


def judge_clique(
    domain: str, members: Sequence[str], by_host: dict[str, list[Archived]], fabric_down: dict[str, str]
) -> Verdict:
    check = "nvlink.clique"
    cliques: dict[str, set[tuple[str, str]]] = {}
    problems: list[str] = []
    missing: list[str] = []
    paths: list[str] = []
    blamed: list[str] = []  # trays whose own Fabric section is wrong (drained on: ops/drain.py)
    for node in members:
        if node in fabric_down:
            continue
        got = next(((ev, p) for ev, p in by_host.get(node, []) if ev.source == "nvidia-smi-q"), None)
        if got is None or got[0].returncode != 0:
            missing.append(node if got is None else f"{node} ({failure('nvidia-smi -q', got[0])})")
            continue
        paths.append(got[1])
        pairs, bad, unjudged = _clique_of(got[0])
        if unjudged:
            missing.append(f"{node} ({unjudged})")
            continue
        problems += [f"{node}: {b}" for b in bad]
        if len(pairs) > 1:
            problems.append(f"{node}: its GPUs in {len(pairs)} cliques {sorted(pairs)}")
        if bad or len(pairs) > 1:
            blamed.append(node)
        if pairs:
            cliques[node] = pairs
    votes = Counter(p for ps in cliques.values() for p in ps if len(ps) == 1)
    if votes:
        (uuid, clique), n = votes.most_common(1)[0]
        odd = [(node, ps) for node, ps in cliques.items() if ps != {(uuid, clique)} and len(ps) == 1]
        for node, ps in odd:
            other_uuid, other = next(iter(ps))
            where = f"clique {other}" + ("" if other_uuid == uuid else f" of cluster {other_uuid}")
            problems.append(
                f"{node} in {where}, the domain's other {n} nodes in clique {clique} (cluster {uuid})"
            )
        if n * 2 > len(members):  # a strict majority says which trays are the odd ones; a split says not
            blamed += [node for node, _ in odd]
    left_out = "".join(f"; {node} not judged: {why}" for node, why in fabric_down.items() if node in members)
    if problems:
        msg = (
            f"NVLink domain {domain} is not one clique: {'; '.join(problems[:4])}{left_out}: a TP job across "
            f"the rack would fail or fall back to the network; check the trays' NVLink cabling and the "
            f"fabric manager's partition [{domain}]"
        )
        return expect(check, FAMILY, domain, False, msg, evidence=tuple(paths[:8]), labels=culprits(blamed))
    if missing:
        return error(check, FAMILY, domain, f"no readable nvidia-smi -q from {', '.join(missing[:4])}")
    if not votes:
        return skip(check, FAMILY, domain, f"not judged: every node's fabric is down{left_out}")
    (uuid, clique), n = votes.most_common(1)[0]
    whose = "the node's GPUs" if n == 1 else f"all {n} nodes' GPUs"
    msg = f"{whose} in clique {clique} of cluster {uuid}{left_out} [{domain}]"
    return expect(check, FAMILY, domain, True, msg, evidence=tuple(paths[:8]))


def _imex_view(ev: Evidence, size: int) -> list[str]:
    """What one node's ``nvidia-imex-ctl -N`` shows wrong ("sees ..." without the node's name)."""
    try:
        d = nvidia_imex_ctl.parse(ev.stdout)
    except ParseError as exc:
        return [f"printed an unreadable nvidia-imex-ctl -N ({exc})"]
    out = []
    if len(d.nodes) != size:
        out.append(f"sees an IMEX domain of {len(d.nodes)} nodes, the NVLink domain has {size}")
    down = [f"Node #{n.index} ({n.address}) {n.status}" for n in d.nodes if n.status != "READY"]
    links = d.not_connected()
    if d.state != "UP" or down or links:
        what = down[:3] + ([f"{len(links)} links not C (connected)"] if links and not down else [])
        out.append(f"sees Domain State {d.state}" + (f": {', '.join(what)}" if what else ""))
    return out


def _grouped_views(views: dict[str, list[str]]) -> list[str]:
    """One line per finding, with the nodes that see it: 17 trays seeing one tray down is one line."""
    nodes: dict[str, list[str]] = defaultdict(list)
    for node, found in views.items():
        for what in found:
            nodes[what].append(node)
    out = []
    for what, who in nodes.items():
        names = ", ".join(who[:3]) + (", ..." if len(who) > 3 else "")
        plural = "see " + what.removeprefix("sees ") if what.startswith("sees ") else what
        out.append(f"{who[0]} {what}" if len(who) == 1 else f"{len(who)} nodes ({names}) {plural}")
    return out


def judge_imex(domain: str, members: Sequence[str], by_host: dict[str, list[Archived]], size: int) -> Verdict:
    """``members``: the trays judged; ``size``: the domain's tray count (untested trays included), which
    every tray's IMEX view must list."""
    check = "nvlink.imex"
    causes: list[str] = []
    down: list[str] = []  # trays whose service is not active: the cause, not the trays that see it
    views: dict[str, list[str]] = {}
    missing: list[str] = []
    paths: list[str] = []
    for node in members:
        evs = by_host.get(node, [])
        service = next(
            (e for e in evs if e[0].source == "systemctl" and e[0].argv[-1:] == ("nvidia-imex",)), None
        )
        ctl = next((e for e in evs if e[0].source == "nvidia-imex-ctl"), None)
        if service is None or ctl is None:
            missing.append(node)
            continue
        paths += [service[1], ctl[1]]
        if service[0].returncode in CANNOT_RUN:  # systemctl itself did not answer: nothing is known
            missing.append(f"{node} ({failure('systemctl is-active nvidia-imex', service[0])})")
            continue
        if service[0].returncode != 0:  # systemctl(1): is-active exits non-zero unless the unit is active
            state = service[0].stdout.strip() or "not active"
            causes.append(f"nvidia-imex {state} on {node}")
            down.append(node)
            continue  # its own nvidia-imex-ctl has no daemon to ask: the service is the finding
        if ctl[0].returncode in CANNOT_RUN:
            missing.append(f"{node} ({failure('nvidia-imex-ctl -N', ctl[0])})")
            continue
        if ctl[0].returncode != 0:
            views[node] = [f"had {failure('nvidia-imex-ctl -N', ctl[0])}"]
            continue
        if found := _imex_view(ctl[0], size):
            views[node] = found
    if causes or views:
        seen = f"; {'; '.join(_grouped_views(views)[:3])}" if views else ""
        msg = (
            f"IMEX domain {domain} not up: {', '.join(causes) or 'every service active'}{seen}: multi-node "
            "NVLink needs IMEX on every node of the domain (systemctl start nvidia-imex; nvidia-imex-ctl -N) "
            f"[{domain}]"
        )
        return expect(check, FAMILY, domain, False, msg, evidence=tuple(paths[:8]), labels=culprits(down))
    if missing:
        return error(check, FAMILY, domain, f"no IMEX evidence to judge from {', '.join(missing[:4])}")
    where = "on its node" if len(members) == 1 else f"on all {len(members)} nodes, each sees them READY,"
    msg = f"nvidia-imex active {where} Domain State UP [{domain}]"
    return expect(check, FAMILY, domain, True, msg, evidence=tuple(paths[:8]))


def _network_GBps(site: Site, node: str) -> float | None:
    if site.nccl.rail_ceiling_GBps:
        return site.nccl.rail_ceiling_GBps
    nt = site.node_type(node)
    rates = [line for r in nt.rails if (line := nt.rail_line_Gbps(r))]
    return max(rates) / 8 if rates else None


def _untested(v: Verdict, untested: Sequence[str]) -> Verdict:
    if not untested:
        return v
    names = ", ".join(untested[:4]) + (", ..." if len(untested) > 4 else "")
    return replace(v, message=f"{v.message}; not tested: {names} (no evidence came back)")


def judge_mnnvl(site: Site, domain: str, run: Archived | None, blocked: str | None) -> Verdict:
    check = "nvlink.mnnvl"
    if blocked:
        return skip(check, FAMILY, domain, f"not judged: {blocked}")
    if run is None:
        if len(site.nvlink_domains[domain]) < 2:
            return skip(check, FAMILY, domain, "a 1-node domain: no collective crosses nodes in it")
        item = f"test_nvlink_domain[{domain}]"
        why = f"no domain collective in this run (its block's campaign runs it for {item})"
        return skip(check, FAMILY, domain, why)
    ev, path = run
    if ev.meta.get("killed_with_job") and ev.returncode != 0:  # spool.mark_killed, as checks/nccl.py
        why = (
            f"not tested: the domain all_reduce ended with its Slurm job ({ev.meta['killed_with_job']}) "
            "before it finished; that says nothing about the hardware"
        )
        return error(check, FAMILY, domain, why, (path,))
    if ev.returncode != 0:
        what = failure("the domain all_reduce with NCCL_MNNVL_ENABLE=1", ev)
        return expect(check, FAMILY, domain, False, f"{what} [{domain}]", evidence=(path,))
    try:
        result = nccl_tests.parse(ev.stdout)
        info = nccl_debug.parse(ev.stdout)
    except ParseError as exc:
        return error(check, FAMILY, domain, f"could not parse the domain all_reduce ({path}): {exc}", (path,))
    hosts = {r: h for h, r in ((c.host, c.src_rank) for c in info.connections)}
    between = [c for c in info.connections if c.dst_rank is not None and hosts.get(c.dst_rank) != c.host]
    if not between:
        why = "no NCCL INFO channel lines between nodes (NCCL_DEBUG=INFO in the site's env shows them)"
        return error(check, FAMILY, domain, why, (path,))
    net = [c for c in between if c.family == "NET"]
    if net or not any(c.via.startswith("P2P/MNNVL") for c in between):
        via = net[0].via if net else between[0].via
        msg = f"the domain all_reduce crossed nodes via {via}, not P2P/MNNVL: NCCL did not use the NVLink"
        return expect(check, FAMILY, domain, False, f"{msg} [{domain}]", evidence=(path,))
    if not result.rows:
        return error(check, FAMILY, domain, f"the domain all_reduce printed no result rows ({path})", (path,))
    row = max(result.rows, key=lambda r: r.size_B)
    busbw = row.out_of_place.busbw_GBps if row.out_of_place else 0.0
    key = f"nvlink.mnnvl.busbw.all_reduce.{domain}"
    nt = site.node_type(site.nvlink_domains[domain][0])
    line = nt.nvlink_line_GBps or 0.0
    ctx = (
        f"{domain}, {row.size_B} B, {busbw / line:.0%} of NVLink's {line:g} GB/s per GPU" if line else domain
    )
    reference = lookup(site.baselines, key)
    if reference is not None:
        return judge(
            check, FAMILY, domain, busbw, reference, what="busbw_GBps", context=ctx, evidence=(path,)
        )
    # no baseline (bring-up day one): NVLink's line rate times the intra-node floor, and above anything the
    # network could carry (a result the rails could have produced is no proof NVLink carried it)
    network = _network_GBps(site, site.nvlink_domains[domain][0])
    share = site.nccl.floor("all_reduce", "nvlink_domain")
    if network is None and not line:
        return judge(check, FAMILY, domain, busbw, None, what="busbw_GBps", context=ctx, evidence=(path,))
    short = []
    if line and busbw < share * line:
        short.append(f"below {share:.0%} of NVLink's {line:g} GB/s (nccl.line_rate_floor.intra_node)")
    if network is not None and busbw <= network:
        short.append(f"not above the network's {network:g} GB/s per GPU")
    bars = [f"{share:.0%} of NVLink" if line else "", f"the network's {network:g} GB/s" if network else ""]
    verdict = "; ".join(short) if short else "at least " + " and above ".join(b for b in bars if b)
    msg = f"busbw_GBps={busbw:.1f} GB/s via P2P/MNNVL, {verdict} (no baseline {key}) [{ctx}]"
    return expect(check, FAMILY, domain, not short, msg, value=busbw, evidence=(path,))


def judge_domains(
    site: Site, evidence: Sequence[Archived], fabric_down: dict[str, str], nodes: Sequence[str]
) -> list[Verdict]:
    """The domains whose trays are all among ``nodes`` (the judged nodes: -k, --nodes, --only-due choose);
    a tray that gave no evidence at all (left out by the preflight, its probe job lost) is not tested, said
    in each verdict, and the domain is judged on the others."""
    by_host: dict[str, list[Archived]] = defaultdict(list)
    runs: dict[str, Archived] = {}
    for ev, path in evidence:
        if ev.meta.get("kind") == "domain":
            runs[ev.meta.get("subject", ev.host)] = (ev, path)
        else:
            by_host[ev.host].append((ev, path))
    judged = set(nodes)
    out: list[Verdict] = []
    for domain, all_members in site.nvlink_domains.items():
        if not judged.issuperset(all_members):
            continue
        members = [n for n in all_members if by_host.get(n)]
        untested = [n for n in all_members if not by_host.get(n)]
        if not members:
            lost = "not tested: no evidence came back from any node of the domain"
            out += [error(c, FAMILY, domain, lost) for c in CHECKS]
            continue
        clique = _untested(judge_clique(domain, members, by_host, fabric_down), untested)
        imex = _untested(judge_imex(domain, members, by_host, len(all_members)), untested)
        down = next((why for n, why in fabric_down.items() if n in members), None)
        failed = [v for v in (clique, imex) if v.outcome.value in ("fail", "error")]
        why = f"{failed[0].check}[{domain}] ({failed[0].message[:160]})" if failed else None
        blocked = down or why
        out += [clique, imex, judge_mnnvl(site, domain, runs.get(domain), blocked)]
    return out
