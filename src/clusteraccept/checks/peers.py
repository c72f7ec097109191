"""Judging busbw with no baseline (bring-up day one): against the same results of the same run, and against
the fabric's line rate. Pure (rows in, verdicts out).

Peers are the results of the same collective, scope, node type (the rails of one node type are alike), node
count and size. A result is slow when it is more than ``nccl.peers.below`` *and* more than ``mad_z`` robust
standard deviations (1.4826 x MAD) below their median: the median and the MAD ignore up to half the results
being bad, so a slow rail does not move its own bar. A group smaller than ``min_peers`` is judged by the line
rate only. The line rate is the rail's ``rate_Gbps`` / 8 (GB/s) for a pair (times its devices: 4 on a p5's EFA
rail; halved for a device two rails share), a rank's share of its node's
rails for a block collective, the node type's NVLink intra-node (``nvlink_GBps``, else its ``nvlink``
section); below ``nccl.line_rate_floor`` of it a result of 1 GiB or more fails whatever its peers did.
The message says which judged it:
``busbw_GBps=41.2 GB/s is 17% below the median of 992 peers (49.6) and 82% of 400 Gb/s line rate (50 GB/s)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.site.model import Site

MAD_SIGMA = 1.4826  # MAD x this = the standard deviation of a normal distribution
GROUP = ["collective", "scope", "node_type", "n_nodes", "size_B"]
# The line rate judges sizes from 1 GiB: below, latency and NCCL's protocol choice weigh (on 2x H200,
# all_reduce ran at 0.69 of NVLink at 1 GiB and 0.73 at 8 GiB, docs/examples/h200x2/fidelity.md; every
# size below 64 MiB spread by up to 67% run to run). The peers judge every size, like against like.
LINE_RATE_MIN_B = 1 << 30


@dataclass(frozen=True)
class PeerStats:
    """The peers' median and robust spread per group (the first pass's: a retest is judged by them too)."""

    median_GBps: Mapping[tuple[Any, ...], float]
    sigma_GBps: Mapping[tuple[Any, ...], float]
    count: Mapping[tuple[Any, ...], int]


def line_rate_GBps(site: Site, row: Mapping[str, Any]) -> tuple[float, str] | None:
    """The line rate a result is bounded by, and how to name it; None where the site does not say."""
    nodes = row["nodes"]
    if row["kind"] == "node":
        nv = site.node_type(nodes[0]).nvlink_line_GBps
        return None if nv is None else (nv, "NVLink")
    if row["kind"] == "pair":
        rates = []
        for n in nodes:
            rails = {r.index: r for r in site.node_type(n).rails}
            rail = rails.get(int(row["rail"]))
            line = None if rail is None else site.node_type(n).rail_line_Gbps(rail)
            if line is None:
                return None
            rates.append(line)
        rate = min(rates)
        return rate / 8.0, f"{rate:g} Gb/s"
    shares = []
    for n in dict.fromkeys(nodes):
        t = site.node_type(n)
        if not t.rails or any(r.rate_Gbps is None for r in t.rails):
            return None
        # a block collective's rank drives its share of the node's rails (busbw is per rank)
        shares.append(sum(t.rail_line_Gbps(r) or 0.0 for r in t.rails) / t.gpus)
    share = min(shares)
    return share / 8.0, f"{share:g} Gb/s per GPU"


def _frame(site: Site, rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "collective": [r["collective"] for r in rows],
            "scope": [r["scope"] for r in rows],
            "node_type": [site.node_type(r["nodes"][0]).name for r in rows],
            "n_nodes": [len(r["nodes"]) for r in rows],
            "size_B": [int(r["size_B"]) for r in rows],
            "busbw_GBps": [float(r["busbw_GBps"]) for r in rows],
        }
    )


def peer_stats(site: Site, rows: Sequence[Mapping[str, Any]]) -> PeerStats:
    """Median, robust sigma and count per group, over the measured rows given."""
    usable = [r for r in rows if not r.get("failed") and r["busbw_GBps"] == r["busbw_GBps"]]
    if not usable:
        return PeerStats({}, {}, {})
    df = _frame(site, usable)
    g = df.groupby(GROUP)["busbw_GBps"]
    median = g.median()
    mad = (df["busbw_GBps"] - g.transform("median")).abs().groupby([df[c] for c in GROUP]).median()
    return PeerStats(
        {tuple(k): float(v) for k, v in median.items()},  # type: ignore[arg-type]
        {tuple(k): float(v) * MAD_SIGMA for k, v in mad.items()},  # type: ignore[arg-type]
        {tuple(k): int(v) for k, v in g.size().items()},  # type: ignore[arg-type]
    )


def judge_row(
    site: Site,
    row: Mapping[str, Any],
    stats: PeerStats,
    *,
    check: str,
    subject: str,
    context: str,
    rates: dict[tuple[Any, ...], tuple[float, str] | None] | None = None,
) -> Verdict:
    """One result with no baseline, judged by its peers and the line rate (never PASS on neither).
    ``rates``: the caller's cache of line rates by (kind, node types, rail), for many rows of one site."""
    value = float(row["busbw_GBps"])
    types = tuple(site.node_type(n).name for n in row["nodes"])
    key = (row["collective"], row["scope"], types[0], len(row["nodes"]), int(row["size_B"]))
    rule = site.nccl.peers
    parts: list[str] = []
    slow = False
    ref = lower = None
    n = stats.count.get(key, 0)
    if n >= rule.min_peers:
        median = stats.median_GBps[key]
        band = max(rule.below, rule.mad_z * stats.sigma_GBps[key] / median if median else 0.0)
        ref, lower = median, median * (1.0 - band)
        pct = (1.0 - value / median) * 100 if median else 0.0
        if value < lower:
            slow = True
            parts.append(f"is {pct:.0f}% below the median of {n} peers ({median:.1f})")
        else:
            parts.append(f"is within {band * 100:.0f}% of the median of {n} peers ({median:.1f})")
    rate_key = (row["kind"], types, row.get("rail"))
    if rates is None or rate_key not in rates:
        line = line_rate_GBps(site, row)
        if rates is not None:
            rates[rate_key] = line
    else:
        line = rates[rate_key]
    if line is not None and int(row["size_B"]) < LINE_RATE_MIN_B:
        line = None  # latency-bound: no size this small gets near the line rate, healthy or not
    if line is not None:
        rate, name = line
        floor = site.nccl.floor(row["collective"], row["scope"])
        eff = value / rate if rate else 0.0
        below_floor = eff < floor
        slow = slow or below_floor
        parts.append(
            f"{eff * 100:.0f}% of {name} line rate ({rate:.3g} GB/s"
            + (f", floor {floor * 100:.0f}%)" if below_floor else ")")
        )
        if lower is None:
            ref, lower = rate, rate * floor
    what = f"busbw_GBps={value:.3g} GB/s"
    ctx = f" [{context}]" if context else ""
    labels = {
        **row.get("labels", {}),
        "judged_by": "+".join(
            x for x, on in (("peers", n >= rule.min_peers), ("line rate", line is not None)) if on
        ),
    }
    if not parts:
        return Verdict(
            check,
            "nccl",
            subject,
            Outcome.SKIP,
            f"{what}: no baseline for this key, {n} peers (fewer than {rule.min_peers}) and no line rate "
            f"in the site (rails' rate_Gbps, nvlink_GBps){ctx}",
            value=value,
            evidence=tuple(row.get("evidence", ())),
            labels=labels,
        )
    text = f"{what} " + " and ".join(parts) + " (no baseline)" + ctx
    return Verdict(
        check,
        "nccl",
        subject,
        Outcome.FAIL if slow else Outcome.PASS,
        text,
        value=value,
        ref=ref,
        lower=lower,
        unit="GB/s",
        evidence=tuple(row.get("evidence", ())),
        labels=labels,
    )
