"""One node's archived evidence, looked up the way the topology and GPUDirect judges need it. Pure.

Shared by checks/topology.py and checks/gpudirect.py: file reads by path, sysfs listings and links
(probes/topology.py ``listing``/``resolved``), commands by source, the GPU index -> PCI address map of
``nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader``, PCI devices through their sysfs
links (``Pci``), and the per-node frame of both judges (``judge_nodes``, ``every_subject``).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Verdict
from clusteraccept.parsers.lspci import normalize_bdf
from clusteraccept.plan.subjects import gpu_subject, rail_subject
from clusteraccept.site.model import Site

T = TypeVar("T")
Item = tuple[Evidence, str]
# nvidia-smi prints the bus id with an 8-digit domain ("00000000:1B:00.0").
_QUERY = re.compile(r"([0-9]+), ([^,]+), ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def last_line(ev: Evidence) -> str:
    lines = [ln.strip() for ln in (ev.stderr + "\n" + ev.stdout).splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"


# exit statuses of a command that did not run at all: timed out or did not start (hostio), not executable,
# not found (bash(1)); its output says nothing about what it was asked
CANNOT_RUN = (None, 126, 127)


def failure(tool: str, ev: Evidence) -> str:
    """Why a command gave no usable output, in one line."""
    if ev.returncode in CANNOT_RUN[1:]:
        return f"{tool} not found or not executable on this node ({last_line(ev)})"
    if ev.returncode is None:
        return f"{tool} timed out or could not start ({last_line(ev)})"
    return f"{tool} failed (exit {ev.returncode}): {last_line(ev)}"


def parsed(fn: Callable[[str], T], tool: str, item: Item | None) -> tuple[T | None, str | None]:
    """``fn(stdout)`` of a command's evidence, or None and the reason (missing, failed, ParseError)."""
    if item is None:
        return None, f"no {tool} evidence came back"
    ev, path = item
    if ev.returncode != 0:
        return None, failure(tool, ev)
    try:
        return fn(ev.stdout), None
    except ParseError as exc:
        return None, f"could not parse {tool} output ({path}): {exc}"


def parse_gpu_query(text: str) -> dict[int, tuple[str, str]]:
    """``index, name, pci.bus_id`` lines -> {index: (name, normalized bus id)}; ParseError on nonsense."""
    out: dict[int, tuple[str, str]] = {}
    for no, raw in enumerate(text.split("\n"), start=1):
        s = raw.strip()
        if not s:
            continue
        m = _QUERY.fullmatch(s)
        if m is None:
            raise ParseError(no, "'<index>, <name>, <pci.bus_id>'", s)
        k = int(m.group(1))
        if k in out:
            raise ParseError(no, "each GPU index once", s)
        out[k] = (m.group(2).strip(), normalize_bdf(m.group(3)))
    return out


class NodeEvidence:
    """A node's evidence, by file path and by command source; values are (Evidence, archived path)."""

    def __init__(self, items: Sequence[Item]) -> None:
        self.items = list(items)
        self._files: dict[str, Item] = {}
        for ev, path in self.items:
            if ev.path and not ev.argv:
                self._files.setdefault(ev.path, (ev, path))

    def file(self, path: str) -> Item | None:
        return self._files.get(path)

    def archived(self, path: str) -> str | None:
        item = self._files.get(path)
        return item[1] if item else None

    def text(self, path: str) -> str | None:
        """The stripped content of a file read that succeeded."""
        item = self._files.get(path)
        return item[0].stdout.strip() if item and item[0].ok else None

    def link(self, path: str) -> str | None:
        """The resolved target of a sysfs link, None when the link is absent (or not collected)."""
        item = self._files.get(path)
        if item is None or item[0].source != "sysfs-link" or not item[0].ok:
            return None
        return item[0].stdout.strip() or None

    def listing(self, path: str) -> list[str] | None:
        """Names in a listed directory ([] when empty or absent); None when it was not listed."""
        item = self._files.get(path)
        if item is None or item[0].source != "sysfs-listdir":
            return None
        return item[0].stdout.split() if item[0].ok else []

    def commands(self, source: str) -> list[Item]:
        return [(ev, p) for ev, p in self.items if ev.source == source and ev.argv]

    def command(self, source: str) -> Item | None:
        found = self.commands(source)
        return found[0] if found else None

    def archived_command(self, source: str) -> tuple[str, ...]:
        item = self.command(source)
        return (item[1],) if item else ()

    def gpu_query(self) -> tuple[dict[int, tuple[str, str]] | None, str]:
        result, why = parsed(parse_gpu_query, "nvidia-smi --query-gpu", self.command("nvidia-smi-query"))
        return result, why or ""

    def gpu_names(self) -> dict[int, str]:
        q, _ = self.gpu_query()
        return {k: v[0] for k, v in (q or {}).items()}


def gpu_addresses(ne: NodeEvidence) -> tuple[dict[int, str] | None, str]:
    """GPU index -> PCI address (``0000:19:00.0``) per nvidia-smi, or None and why not."""
    q, why = ne.gpu_query()
    return ({k: v[1] for k, v in q.items()} if q is not None else None), why


def by_node(evidence: Sequence[tuple[Any, str]]) -> dict[str, NodeEvidence]:
    grouped: dict[str, list[Item]] = defaultdict(list)
    for ev, path in evidence:
        if isinstance(ev, Evidence):
            grouped[ev.host].append((ev, path))
    return {host: NodeEvidence(items) for host, items in grouped.items()}


def int_or_none(text: str | None) -> int | None:
    """A sysfs attribute's integer (``numa_node``, ``current_link_width``); None when absent or not one."""
    try:
        return int((text or "").strip())
    except ValueError:
        return None


class Pci:
    """One PCI device as the probe read it through a sysfs link (``/sys/bus/pci/devices/<bdf>``)."""

    def __init__(self, ne: NodeEvidence, link: str) -> None:
        self.ne, self.link = ne, link
        self.path = ne.link(link)
        self.bdf = self.path.rsplit("/", 1)[-1] if self.path else link.rsplit("/", 1)[-1]

    def attr(self, name: str) -> str | None:
        return self.ne.text(f"{self.link}/{name}")

    def numa(self) -> int | None:
        """The sysfs NUMA node; None for -1 ("no NUMA information") or when unreadable."""
        n = int_or_none(self.attr("numa_node"))
        return None if n is None or n < 0 else n

    def parent_attr(self, name: str) -> str | None:
        if not self.path:
            return None
        return self.ne.text(f"{self.path.rsplit('/', 1)[0]}/{name}")

    def evidence(self, *names: str) -> tuple[str, ...]:
        paths = [self.link, *(f"{self.link}/{n}" for n in names)]
        return tuple(p for p in (self.ne.archived(x) for x in paths) if p)


def every_subject(
    site: Site, node: str, per_node: Sequence[str], per_gpu: Sequence[str], per_rail: Sequence[str]
) -> list[tuple[str, str]]:
    """(check, subject) for every check of a family on ``node``."""
    nt = site.node_type(node)
    out = [(c, node) for c in per_node]
    out += [(c, gpu_subject(node, k)) for k in range(nt.gpus) for c in per_gpu]
    return out + [(c, rail_subject(node, r.index)) for r in nt.rails for c in per_rail]


def judge_nodes(
    site: Site,
    evidence: Sequence[tuple[Any, str]],
    nodes: Sequence[str],
    family: str,
    per_node: Callable[[Site, str, NodeEvidence], list[Verdict]],
    missing: Callable[[Site, str, str], list[Verdict]],
) -> list[Verdict]:
    """Run ``per_node`` on each node's evidence; nodes without any get ERROR on every subject."""
    grouped = by_node(evidence)
    out: list[Verdict] = []
    for node in nodes:
        ne = grouped.get(node)
        out += (
            per_node(site, node, ne)
            if ne
            else missing(site, node, f"{node}: no {family} evidence came back from this node")
        )
    return out
