"""The ``roce:`` section ``init`` writes (issue 23): what the RoCE rails run with, by majority.

Each rail's QoS and RoCE sysfs state is read as the roce checks read it (checks/roce_evidence.py: mlnx_qos or
dcb, the ECN/CNP/MTU/RDMA-CM files): trust state, the priorities PFC is enabled on, the DSCP of RDMA-CM's
default ToS and the priorities it maps to, ECN on the lossless priority (both DCQCN points), CNP DSCP and
802.1p priority, MTU. The section takes each value most rails show, and says how many agree; a value no
majority decides (PFC on no priority or several, RoCE's DSCP not mapped to the lossless priority) is asked,
and the section is then written commented out (the loader needs every required key): the run's roce checks
SKIP until the user decides. Rails that differ from the majority are the roce checks' findings in the first
run (they are node state, not shape: ops/shape.py).

Pure: rails' evidence in, the section's lines out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from clusteraccept.checks.roce_evidence import RailEvidence, Unavailable, optional_sysfs, read_qos

T = TypeVar("T")


@dataclass(frozen=True)
class RailRoce:
    """One rail's RoCE settings as read; None where its evidence did not say."""

    where: str
    trust: str | None = None
    pfc: tuple[int, ...] | None = None
    roce_dscp: int | None = None  # RDMA-CM default_roce_tos >> 2
    roce_dscp_prios: tuple[int, ...] | None = None  # the priorities that DSCP maps to
    ecn: tuple[bool | None, ...] = ()  # per priority: both DCQCN points enabled
    cnp_dscp: int | None = None
    cnp_priority: int | None = None
    mtu: int | None = None


def observe(r: RailEvidence) -> RailRoce:
    try:
        q = read_qos(r)
        trust, pfc, dmap = q.trust, q.pfc, q.dscp_map
    except Unavailable:
        trust, pfc, dmap = None, None, {}
    s = optional_sysfs(r)
    dscp = s.default_roce_dscp
    return RailRoce(
        where=r.where,
        trust=trust,
        pfc=pfc,
        roce_dscp=dscp,
        roce_dscp_prios=dmap.get(dscp) if dscp is not None and dmap else None,
        ecn=tuple(s.ecn_enabled(p) for p in range(8)),
        cnp_dscp=s.cnp_dscp,
        cnp_priority=s.cnp_802p_prio,
        mtu=s.mtu_B,
    )


def _most(values: Sequence[T | None]) -> tuple[T | None, str]:
    """The most common value that is not None, and "N of M rails" for the comment."""
    seen = Counter(v for v in values if v is not None)
    if not seen:
        return None, f"0 of {len(values)} rails say"
    value, n = seen.most_common(1)[0]
    return value, f"{n} of {len(values)} rails"


def section_lines(rails: Sequence[RailRoce]) -> list[str]:
    """The ``roce:`` section (or, where a required value is undecided, the same commented out, with the
    questions): YAML lines at the top level."""
    out: list[tuple[str, object | None, str]] = []
    questions: list[str] = []
    pfc, pfc_n = _most([r.pfc for r in rails])
    lossless = pfc[0] if isinstance(pfc, tuple) and len(pfc) == 1 else None
    if lossless is None:
        questions.append(f"roce.lossless_priority: PFC is enabled on {list(pfc or ())} ({pfc_n}): which one?")
    out.append(("lossless_priority", lossless, f"PFC enabled on exactly it: {pfc_n}"))
    trust, trust_n = _most([r.trust for r in rails])
    out.append(("trust", trust, trust_n))
    dscp, dscp_n = _most([r.roce_dscp for r in rails])
    prios, _ = _most([r.roce_dscp_prios for r in rails if r.roce_dscp == dscp])
    if dscp is not None and trust == "dscp" and lossless is not None and prios != (lossless,):
        questions.append(
            f"roce.roce_dscp: RDMA-CM's default DSCP {dscp} maps to priority {list(prios or ())}, not the "
            f"lossless {lossless}: which DSCP does RoCE traffic carry (NCCL_IB_TC)?"
        )
        dscp = None
    out.append(("roce_dscp", dscp, f"RDMA-CM default_roce_tos >> 2: {dscp_n}"))
    if lossless is not None:
        ecn, ecn_n = _most([r.ecn[lossless] if r.ecn else None for r in rails])
        out.append(("ecn", ecn, f"DCQCN reaction and notification points on priority {lossless}: {ecn_n}"))
    cnp_dscp, cnp_dscp_n = _most([r.cnp_dscp for r in rails])
    out.append(("cnp_dscp", cnp_dscp, cnp_dscp_n))
    cnp_prio, cnp_prio_n = _most([r.cnp_priority for r in rails])
    out.append(("cnp_priority", cnp_prio, cnp_prio_n))
    mtu, mtu_n = _most([r.mtu for r in rails])
    out.append(("mtu", mtu, mtu_n))
    required = {"lossless_priority", "trust", "roce_dscp", "mtu"}
    missing = [k for k, v, _ in out if k in required and v is None]
    questions += [
        f"roce.{k}: no rail said" for k in missing if not any(q.startswith(f"roce.{k}") for q in questions)
    ]
    lead = "# " if missing else ""
    lines = [f"{lead}roce:  # what the RoCE rails run with (init: the roce probes), by majority"]
    for key, value, said in out:
        if value is None:
            continue
        shown = str(value).lower() if isinstance(value, bool) else str(value)
        lines.append(f"{lead}  {key}: {shown}  # {said}")
    lines += [f"# decide: {q}" for q in questions]
    return lines
