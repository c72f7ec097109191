"""``nvidia-smi -q``: the driver version and, per GPU, its identity and its ``Fabric`` section.

Layout (nvidia-smi(1), "-q"; real captures in tests/data/nvidia-smi-q/): a banner ``==============NVSMI
LOG==============``, top-level ``Key : Value`` lines (``Driver Version``, ``Attached GPUs``), then one block
per GPU headed ``GPU 00000000:19:00.0`` with its facts indented by four spaces and sub-sections by four
more. Only what the NVLink checks read is kept: ``Product Name``, ``GPU UUID`` and the ``Fabric``
section (``State``, ``Status``; newer drivers add ``CliqueId``, ``ClusterUUID`` and a ``Health``
sub-section), each value as printed (``N/A`` included). Every other line is passed over, but a
GPU count that does not match ``Attached GPUs`` (a cut output) and a Fabric line that is not
``Key : Value`` are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_BANNER = re.compile(r"=+NVSMI LOG=+")
_GPU = re.compile(r"GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
_KV = re.compile(r"(?P<indent> *)(?P<key>\S(?:.*?\S)?)\s+: ?(?P<value>.*?)\s*")


@dataclass(frozen=True)
class Fabric:
    state: str  # "Completed", "In Progress", "Not Started", "Not Supported", "N/A" (as printed)
    status: str  # "Success", or the error NVML reports ("N/A" where the state has none)
    clique_id: str | None = None  # None: this driver prints no such line
    cluster_uuid: str | None = None
    health: tuple[tuple[str, str], ...] = ()  # the Health sub-section, (key, value) as printed


@dataclass(frozen=True)
class GpuQuery:
    bus_id: str  # as the block's header prints it: "00000000:19:00.0"
    product: str | None
    uuid: str | None
    fabric: Fabric | None  # None: this driver prints no Fabric section


@dataclass(frozen=True)
class Query:
    driver_version: str | None
    gpus: tuple[GpuQuery, ...]


def _fabric(no: int, entries: dict[str, str], health: list[tuple[str, str]]) -> Fabric:
    for key in ("State", "Status"):
        if key not in entries:
            raise ParseError(no, f"a '{key} : ...' line in the Fabric section", "none")
    return Fabric(
        entries["State"],
        entries["Status"],
        entries.get("CliqueId"),
        entries.get("ClusterUUID"),
        tuple(health),
    )


def parse(text: str) -> Query:
    """Parse the whole ``-q`` output; ParseError names the line of a cut or damaged one."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if _BANNER.fullmatch(ln.strip())), None)
    if start is None:
        first = next(((i, ln) for i, ln in enumerate(lines, 1) if ln.strip()), (0, ""))
        raise ParseError(
            first[0], "the '==============NVSMI LOG==============' banner", first[1] or "nothing"
        )
    top: dict[str, str] = {}
    gpus: list[GpuQuery] = []
    gpu: dict[str, str] | None = None
    fabric: dict[str, str] | None = None  # the current GPU's Fabric entries
    health: list[tuple[str, str]] = []
    section = sub = ""  # the GPU's section (indent 4) and its sub-section (indent 8) being read
    fabric_no = 0

    def close() -> None:
        if gpu is not None:
            fab = _fabric(fabric_no, fabric, health) if fabric is not None else None
            gpus.append(GpuQuery(gpu["bus"], gpu.get("Product Name"), gpu.get("GPU UUID"), fab))

    for no, raw in enumerate(lines[start + 1 :], start + 2):
        line = raw.rstrip()
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent > 4 and section != "Fabric" and gpu is not None:
            continue  # any other section's facts: ~90% of the ~250 lines a GPU prints
        # a section's header has no colon: the pattern, which needs one, is not tried on it
        kv = _KV.fullmatch(line) if ":" in line else None
        if indent == 0:
            head = _GPU.fullmatch(line)
            if head:
                close()
                gpu, fabric, health, section, sub = {"bus": head["bus"]}, None, [], "", ""
            elif kv is not None and gpu is None:
                top[kv["key"]] = kv["value"]
            else:
                raise ParseError(no, "'GPU <bus id>', or 'Key : Value' before the first GPU", line)
            continue
        if gpu is None:
            raise ParseError(no, "'GPU <bus id>' before an indented line", line)
        if indent == 4:
            section, sub = ("", "") if kv is not None else (line.strip(), "")
            if kv is not None:
                gpu.setdefault(kv["key"], kv["value"])
            elif section == "Fabric":
                if fabric is not None:
                    raise ParseError(no, "one Fabric section per GPU", section)
                fabric, fabric_no = {}, no
            continue
        if section != "Fabric" or fabric is None:
            continue  # any other section: not read here
        if indent == 8:
            sub = "" if kv is not None else line.strip()
            if kv is not None:
                fabric[kv["key"]] = kv["value"]
            elif sub != "Health":  # the one sub-section nvidia-smi prints under Fabric
                raise ParseError(no, "'Key : Value' or 'Health' in the Fabric section", line.strip())
        elif indent == 12 and sub == "Health" and kv is not None:
            health.append((kv["key"], kv["value"]))
        elif sub == "Health" or sub == "":
            raise ParseError(no, "'Key : Value' indented by 8 in Fabric (12 under its Health)", line)
    close()
    want = top.get("Attached GPUs")
    if want is not None and want.isdigit() and int(want) != len(gpus):
        last = max((i for i, ln in enumerate(lines, 1) if ln.strip()), default=0)
        raise ParseError(last, f"{want} GPU blocks (Attached GPUs)", f"{len(gpus)} (a cut output?)")
    return Query(top.get("Driver Version"), tuple(gpus))


def fabric_section(text: str) -> Fabric:
    """The ``Fabric`` section alone, as an excerpt of ``nvidia-smi -q`` quotes it (``grep -A``, or copied
    from a report: any indent, a ``# command`` line before it, grep's ``--`` after it)."""
    lines = text.splitlines()
    at = next((i for i, ln in enumerate(lines) if ln.strip() == "Fabric"), None)
    if at is None:
        first = next(((i, ln) for i, ln in enumerate(lines, 1) if ln.strip()), (0, ""))
        raise ParseError(first[0], "a 'Fabric' section", first[1] or "nothing")
    base = len(lines[at]) - len(lines[at].lstrip(" "))
    entries: dict[str, str] = {}
    health: list[tuple[str, str]] = []
    level, sub = 0, ""
    for no, raw in enumerate(lines[at + 1 :], at + 2):
        line = raw.rstrip()
        indent = len(line) - len(line.lstrip(" "))
        if not line.strip() or line.strip() == "--" or indent <= base:
            break
        level = level or indent
        kv = _KV.fullmatch(line)
        if indent == level:
            sub = "" if kv is not None else line.strip()
            if kv is not None:
                entries[kv["key"]] = kv["value"]
            elif sub != "Health":
                raise ParseError(no, "'Key : Value' or 'Health' in the Fabric section", line.strip())
        elif sub == "Health" and kv is not None:
            health.append((kv["key"], kv["value"]))
        elif sub in ("", "Health"):
            raise ParseError(no, "'Key : Value' in the Fabric section", line.strip())
    return _fabric(at + 1, entries, health)
