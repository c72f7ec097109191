"""One RoCE rail's evidence as the roce judges read it (checks/roce.py). Pure.

The QoS state comes from ``mlnx_qos -i <netdev>``, or from iproute2 ``dcb`` where mlnx_qos is not installed;
the ECN/CNP/MTU/RDMA-CM facts from the sysfs files probes/roce.py read. ``Unavailable`` says a check cannot
be judged on the rail: SKIP (it does not apply) or ERROR (evidence missing or unparsable).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

from clusteraccept.checks.counters import Intervals, intervals
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.parsers import dcb, mlnx_qos, roce_sysfs
from clusteraccept.site.nodes import Rail

Archived = tuple[Evidence, str]


class Unavailable(Exception):
    """A check cannot be judged on this rail: SKIP (does not apply) or ERROR (evidence missing/unparsable)."""

    def __init__(self, message: str, *, skipped: bool = False, paths: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.message, self.skipped, self.paths = message, skipped, paths


def tail(ev: Evidence) -> str:
    """The last line of a command's stderr (else stdout), for a message."""
    lines = (ev.stderr or ev.stdout).strip().splitlines()
    return lines[-1][:160] if lines else "no output"


def unparsable(tool: str, path: str, exc: ParseError) -> Unavailable:
    """The ERROR for a tool output its parser rejected."""
    return Unavailable(f"could not parse {tool} output ({path}): {exc}", paths=(path,))


@dataclass(frozen=True)
class Qos:
    """A rail's QoS state: trust, PFC priorities, DSCP -> priorities; from mlnx_qos or dcb."""

    tool: str
    trust: str | None
    trust_note: str
    pfc: tuple[int, ...]
    dscp_map: dict[int, tuple[int, ...]]
    paths: tuple[str, ...]


@dataclass
class RailEvidence:
    """One rail's archived evidence by probe role (qos, dcb-pfc, dcb-app, sysfs, link_layer, ndev, ...)."""

    node: str
    rail: Rail
    roles: dict[str, list[Archived]]
    gids: list[Archived]
    # the node's counter snapshots as intervals, read once for all its rails (rails_of); each rail read
    # them again: 8x the parsing on an 8-rail node
    node_counters: Callable[[], Intervals] | None = field(default=None, repr=False)

    def counters(self) -> Intervals:
        """The counter snapshots' intervals (the node's, shared by its rails where rails_of made them)."""
        if self.node_counters is not None:
            return self.node_counters()
        return intervals(self.roles.get("counters", []), nvlink=False)

    @property
    def netdev(self) -> str | None:
        names = [ev.meta["netdev"] for evs in self.roles.values() for ev, _ in evs if ev.meta.get("netdev")]
        return names[0] if names else self.rail.netdev

    @property
    def where(self) -> str:
        return f"{self.node} rail{self.rail.index} ({self.netdev or self.rail.hca})"

    def paths(self, *roles: str) -> tuple[str, ...]:
        return tuple(p for role in roles for _, p in self.roles.get(role, []))

    def one(self, role: str) -> Archived | None:
        return next(iter(self.roles.get(role, [])), None)


def rails_of(node: str, rails: Sequence[Rail], evs: Sequence[Archived]) -> list[RailEvidence]:
    """``node``'s RoCE probe evidence per rail (by the hca and port the probe tagged it with); the node's
    GID table and counter snapshots go with every rail."""
    gids = [a for a in evs if a[0].meta.get("role") == "gids"]
    snaps = [a for a in evs if a[0].source == "counters"]  # one per node and snapshot, every rail
    counters = cache(lambda: intervals(snaps, nvlink=False))
    out = []
    for rail in rails:
        roles: dict[str, list[Archived]] = defaultdict(list, counters=snaps)
        for ev, path in evs:
            if ev.meta.get("hca") == rail.hca and ev.meta.get("port") == str(rail.port):
                roles[ev.meta.get("role", "")].append((ev, path))
        out.append(RailEvidence(node, rail, roles, gids, counters))
    return out


def read_qos(r: RailEvidence) -> Qos:
    """The rail's QoS state from mlnx_qos, or from dcb where mlnx_qos is not found (exit 127)."""
    got = r.one("qos")
    if got is None:
        raise Unavailable(f"{r.where}: no mlnx_qos evidence came back")
    ev, path = got
    if ev.returncode == 127:  # mlnx_qos absent: the probe asked iproute2 dcb instead
        dcbs = [r.one("dcb-pfc"), r.one("dcb-app")]
        paths = (path, *(a[1] for a in dcbs if a))
        failed = [a for a in dcbs if a is None or not a[0].ok]
        if failed:
            why = "; ".join(tail(a[0]) if a else "no evidence" for a in failed)
            raise Unavailable(f"{r.where}: neither mlnx_qos (not found) nor dcb worked: {why}", paths=paths)
        text = "\n".join(a[0].stdout for a in dcbs if a)
        try:
            info = dcb.parse(text)
        except ParseError as exc:
            raise unparsable("dcb", paths[1], exc) from None
        if info.pfc_enabled is None:
            raise Unavailable(f"{r.where}: dcb pfc printed no prio-pfc line", paths=paths)
        table: dict[int, list[int]] = defaultdict(list)
        for d, p in info.dscp_prio:
            table[d].append(p)
        # mlx5 en_dcbnl.c mlx5e_dcbnl_dscp_app(): "No SEL_DSCP entry in non DSCP state"; ieee_setapp/delapp
        # switch the trust state to DSCP on the first DSCP entry and back to PCP on the last one.
        return Qos(
            "dcb",
            "dscp" if table else "pcp",
            " (dcb: DSCP entries in the APP table on mlx5)",
            info.pfc_priorities(),
            {d: tuple(ps) for d, ps in table.items()},
            paths,
        )
    if not ev.ok:
        raise Unavailable(
            f"{r.where}: mlnx_qos -i {r.netdev} failed (rc {ev.returncode}): {tail(ev)}", paths=(path,)
        )
    try:
        q = mlnx_qos.parse(ev.stdout)
    except ParseError as exc:
        raise unparsable("mlnx_qos", path, exc) from None
    dmap: dict[int, tuple[int, ...]] = {d: (p,) for d, p in enumerate(q.dscp2prio) if p is not None}
    return Qos("mlnx_qos", q.trust, "", q.pfc_priorities(), dmap, (path,))


def read_sysfs(r: RailEvidence) -> tuple[roce_sysfs.RoceSysfs, tuple[str, ...]]:
    """The rail's RoCE sysfs facts and the archived paths they come from."""
    evs = r.roles.get("sysfs", [])
    if not evs:
        raise Unavailable(f"{r.where}: no RoCE sysfs evidence came back")
    try:
        return roce_sysfs.parse({ev.path: ev.stdout for ev, _ in evs if ev.ok}), tuple(p for _, p in evs)
    except ParseError as exc:
        raise Unavailable(f"could not parse RoCE sysfs files of {r.where}: {exc}") from None


def optional_sysfs(r: RailEvidence) -> roce_sysfs.RoceSysfs:
    """The sysfs facts for a secondary look (RDMA-CM defaults): all None where they cannot be had."""
    try:
        return read_sysfs(r)[0]
    except Unavailable:
        return roce_sysfs.parse({})


def file_outcome(r: RailEvidence, path: str) -> str:
    """One node file's read outcome, for a message."""
    got = next((ev for ev, _ in r.roles.get("sysfs", []) if ev.path == path), None)
    return f"{path}: {tail(got) if got else 'not read'}"
