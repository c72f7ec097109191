"""``nvidia-smi nvlink --status`` and ``nvidia-smi nvlink -e``: every GPU's NVLinks, speed or error counters.

Both subcommands print the same layout (nvidia-smi(1), "NVLINK"; real captures in
tests/data/nvidia-smi-nvlink/): a line per GPU, ``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-2e37...)``, then
one indented line per link and fact, ``<TAB> Link 0: 26.562 GB/s`` (``--status``: the link's speed, or
``<inactive>``) or ``<TAB> Link 0: Replay Errors: 0`` (``-e``: a counter per line, its name as printed;
newer drivers print more counters, some of them rates such as ``Effective BER: 1.5e-254``). Indent is a
tab and a space as nvidia-smi writes it, or spaces when copied from a terminal. A GPU with no NVLink
prints its GPU line alone, or followed by NVML's reason (``NVML: Unable to retrieve NVLink information as
all links are inActive``, a real B200 capture), kept as the GPU's ``note``. Lines before the first GPU line
that are not link lines (a command line) are kept as ``notes``; a poster's elision mark (``[...]``,
``...``) anywhere sets ``elided``; anything else that is not a
GPU, link or NVML line is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_GPU = re.compile(r"GPU (?P<index>\d+): (?P<name>.*?) \(UUID: (?P<uuid>[^()]*)\)\s*$")
_LINK = re.compile(r"\s+Link (?P<link>\d+): (?P<rest>.*?)\s*$")
_SPEED = re.compile(r"(?P<speed>\d+(?:\.\d+)?) GB/s")
_COUNTER = re.compile(r"(?P<name>[A-Za-z][A-Za-z0-9 ._()/+-]*?)\s*: (?P<value>\S+)")
_ELISION = re.compile(r"\s*(?:\[\.\.\.\]|\.{3,})\s*")  # "[...]", "...", "....": a poster cut lines
_NUMBER = re.compile(r"[0-9]+|[0-9]*\.[0-9]+(?:[eE][-+]?[0-9]+)?|[0-9]+(?:\.[0-9]+)?[eE][-+]?[0-9]+")
Value = int | float | None  # None: printed as N/A


@dataclass(frozen=True)
class Link:
    index: int
    # --status: the speed in GB/s per direction as printed (None: ``<inactive>``, or not in this output)
    speed_GBps: float | None = None
    inactive: bool = False
    counters: tuple[tuple[str, Value], ...] = ()  # -e: (name as printed, value), in printed order

    def counter(self, name: str) -> Value:
        return dict(self.counters).get(name)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    uuid: str  # as printed: "GPU-2e37c77d-..." (a capture may have it elided)
    links: tuple[Link, ...]
    note: str = ""  # NVML's line under the GPU, where it printed one instead of links

    @property
    def all_inactive(self) -> bool:
        """NVML said every link is inactive (it then lists none)."""
        return "all links are inactive" in self.note.lower()

    def link(self, index: int) -> Link | None:
        return next((lk for lk in self.links if lk.index == index), None)


@dataclass(frozen=True)
class NvlinkReport:
    gpus: tuple[Gpu, ...]
    notes: tuple[str, ...] = ()
    elided: bool = False  # the text has a poster's elision mark ("[...]", "..."): links may be missing

    def gpu(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def _value(no: int, text: str) -> Value:
    if text == "N/A":
        return None
    if not _NUMBER.fullmatch(text):
        raise ParseError(no, "a counter value: an unsigned number or N/A", text)
    return int(text) if text.isdigit() else float(text)


def _fact(no: int, rest: str) -> tuple[str, object]:
    """One link line's fact: ("speed", GB/s), ("inactive", True) or ("counter", (name, value))."""
    if rest == "<inactive>":
        return "inactive", True
    m = _SPEED.fullmatch(rest)
    if m:
        return "speed", float(m["speed"])
    m = _COUNTER.fullmatch(rest)
    if m:
        return "counter", (m["name"], _value(no, m["value"]))
    raise ParseError(no, "'<speed> GB/s', '<inactive>' or '<counter>: <value>' after 'Link N:'", rest)


def _close(
    gpus: list[Gpu], head: re.Match[str] | None, links: dict[int, dict[str, object]], note: str = ""
) -> None:
    if head is None:
        return
    out = []
    for index, facts in links.items():
        counters = facts.get("counters", [])
        assert isinstance(counters, list)
        speed = facts.get("speed")
        out.append(
            Link(
                index,
                speed if isinstance(speed, float) else None,
                bool(facts.get("inactive")),
                tuple(counters),
            )
        )
    gpus.append(Gpu(int(head["index"]), head["name"], head["uuid"].strip(), tuple(out), note))


def parse(text: str) -> NvlinkReport:
    """Parse either listing; ParseError names the line for anything outside the layout above."""
    gpus: list[Gpu] = []
    notes: list[str] = []
    head: re.Match[str] | None = None
    links: dict[int, dict[str, object]] = {}
    note = ""
    elided = False
    seen: set[int] = set()
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        if _ELISION.fullmatch(line):
            elided = True
            continue
        gpu = _GPU.match(line)
        if gpu:
            _close(gpus, head, links, note)
            if int(gpu["index"]) in seen:
                raise ParseError(no, "each GPU once", line)
            seen.add(int(gpu["index"]))
            head, links, note = gpu, {}, ""
            continue
        link = _LINK.fullmatch(line)
        if link is None and head is not None and line.strip().startswith("NVML:") and not links:
            if note:
                raise ParseError(no, "one NVML line per GPU", line.strip())
            note = line.strip()
            continue
        if link is not None and note:
            raise ParseError(no, "no link lines after NVML's reason for printing none", line.strip())
        if link is None:
            if head is None:  # before any GPU: an NVML message ("... all links are inActive"), kept
                notes.append(line.strip())
                continue
            raise ParseError(no, "'Link N: ...' under a 'GPU N: <name> (UUID: ...)' line", line)
        if head is None:
            raise ParseError(no, "a 'GPU N: <name> (UUID: ...)' line before its links", line)
        kind, value = _fact(no, link["rest"])
        facts = links.setdefault(int(link["link"]), {})
        if kind == "counter":
            counters = facts.setdefault("counters", [])
            assert isinstance(counters, list) and isinstance(value, tuple)
            if any(name == value[0] for name, _ in counters):
                raise ParseError(no, "each counter once per link", line.strip())
            counters.append(value)
        elif kind in facts or ("speed" if kind == "inactive" else "inactive") in facts:
            raise ParseError(no, "one status per link", line.strip())
        else:
            facts[kind] = value
    _close(gpus, head, links, note)
    if not gpus and notes:
        # nothing but text: not this tool's output (an empty output is a host without NVLink: no GPUs)
        raise ParseError(1, "'GPU N: <name> (UUID: ...)' lines", notes[0])
    return NvlinkReport(tuple(gpus), tuple(notes), elided)
