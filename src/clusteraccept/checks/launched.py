"""A campaign step's judgement up to its baselines, stored: what ``--rejudge`` does not work out again.

``--rejudge`` is above all run after the baselines changed. Everything the nccl judge says of a step before
it reads a baseline (the ``nccl.launch`` verdict, the launch findings of checks/launch.py, whether its
numbers are judged at all, the (size, busbw) results it measured) is the same as the last time unless the
site's other parts, the step's output or the code changed. It was ~45% of judging a step from its stored
parse (the findings alone 35%: ~5 of 15 s over the 67,826 steps of the 256-node run on one core), so it is
stored beside the step's parse (``<member>|launch`` in ``parsed/<job>/<bundle>.jsonl.gz``) as one JSON line:

    [key, crc, verdicts, findings, measured, failed, bad]

A line is used only when its ``key`` is :func:`key_of` now (this code, these parsers, the site as the judge
gives it to ``launch_part``: :func:`unjudged`, without its baselines; the PCI addresses of the run's EFA/cxi
devices) and its ``crc`` is :func:`crc_of` the step (its output, metadata, command line and exit status,
and its stored parse's line); anything else, or a line that does not decode, means the step is judged
from its parse again and the line stored anew. Like the parse, it is derived data, never evidence.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import secrets
import typing
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.checks.launch import Finding
from clusteraccept.evidence import Evidence
from clusteraccept.evidence import crc_of as evidence_crc
from clusteraccept.judge.verdicts import Verdict, from_row, to_row
from clusteraccept.parsers.stored import VERSION as PARSER_VERSION
from clusteraccept.site.model import Site

SUFFIX = "|launch"  # a stored line's member: the step's member and this (members are slugs ending .json)


@dataclass(frozen=True)
class Launched:
    """What the nccl judge says of one parsed step before it reads a baseline.

    ``measured``: its (size_B, busbw_GBps) results, to be judged against the baselines; None: its numbers
    are not judged (unparsable, a launch that makes them meaningless, or gated: the SKIPs are in
    ``verdicts``). ``failed``: the localization row it gives when not judged ("fail", "error" or none);
    ``bad``: it failed a launch check that still lets its numbers be judged (they count as slow)."""

    verdicts: tuple[Verdict, ...]
    findings: tuple[Finding, ...]
    measured: tuple[tuple[int, float], ...] | None
    failed: str = ""
    bad: bool = False


def _code_version() -> str:
    """Every module of the package: what a stored judgement depends on reaches into checks/, site/,
    parsers/ and judge/, and a key on fewer files than it reads would keep a stale finding after an
    upgrade. Installed without its sources: a version of this process alone (nothing stored is trusted)."""
    here = Path(__file__).resolve().parent.parent
    sources = sorted(here.rglob("*.py"))
    if not sources:
        return f"unknown-{secrets.token_hex(8)}"
    h = hashlib.sha256(PARSER_VERSION.encode())
    for path in sources:
        h.update(str(path.relative_to(here)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


CODE = _code_version()


def canon(x: Any) -> Any:
    """A value as plain JSON data that is the same in every process: sets sorted (a set of strings
    iterates in an order of the process's hash seed), dataclasses by field, enums by value."""
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return [type(x).__name__, *([f.name, canon(getattr(x, f.name))] for f in dataclasses.fields(x))]
    if isinstance(x, enum.Enum):
        return canon(x.value)
    if isinstance(x, Mapping):
        return [[canon(k), canon(v)] for k, v in x.items()]
    if isinstance(x, set | frozenset):
        return sorted((canon(v) for v in x), key=repr)
    if isinstance(x, list | tuple):
        return [canon(v) for v in x]
    if x is None or isinstance(x, str | int | float | bool):
        return x
    return repr(x)


def unjudged(site: Site) -> Site:
    """The site as :func:`nccl.launch_part <clusteraccept.checks.nccl.launch_part>` is given it: without its
    baselines (which ``--rejudge`` reads anew), where its file is and its description. What it cannot
    read, a stored judgement cannot have depended on: the key is this site, nothing left out by hand."""
    return dataclasses.replace(site, baselines={}, baselines_file=None, file="", description="")


def key_of(site: Site, nic_pci: Mapping[str, Mapping[str, str]]) -> str:
    """What every stored judgement of this run must have been made under to be used: this code and these
    parsers, ``site`` (:func:`unjudged`'s: any edit but of its baselines judges every step again), and the
    PCI addresses the run's device probes found (node -> address -> device), in no order of theirs (a run
    lists them in the order its jobs ended, a rejudge in its bundles')."""
    pci = sorted((node, sorted(by_address.items())) for node, by_address in nic_pci.items())
    text = json.dumps([CODE, canon(unjudged(site)), pci], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def crc_of(ev: Evidence, parse: str) -> int:
    """The step as judged: every field of its evidence (its output, both streams, metadata, command line and
    exit status: evidence.crc_of), and the stored parse it was judged from (``parse``: its line,
    parsers/stored.dumps), so that a parse stored anew (``--reparse``, an edit) is judged anew."""
    return zlib.crc32(parse.encode(), evidence_crc(ev))


def _evidence(evidence: tuple[str, ...], path: str) -> bool | list[str]:
    """A verdict's evidence: its step's (true), none (false), or as it is (never so far)."""
    return True if evidence == (path,) else False if not evidence else list(evidence)


def _finding(f: Finding) -> list[Any]:
    return [f.check, f.node, f.ok, f.message, f.step, sorted(f.cpus), list(f.versions)]


def dumps(key: str, ev: Evidence, parse: str, path: str, launched: Launched) -> str:
    """``launched`` of ``ev`` (at ``path``), judged under ``key`` from the stored parse ``parse``."""
    return json.dumps(
        [
            key,
            crc_of(ev, parse),
            [to_row(v, _evidence(v.evidence, path)) for v in launched.verdicts],
            [_finding(f) for f in launched.findings],
            None if launched.measured is None else [list(m) for m in launched.measured],
            launched.failed,
            launched.bad,
        ],
        separators=(",", ":"),
    )


def loads(line: str, key: str, ev: Evidence, parse: str, path: str) -> Launched | None:
    """The stored judgement of ``ev`` (at ``path``, its stored parse ``parse``), or None where the line was
    made under another key, of another output or parse, or is damaged: the caller judges the step from
    its parse."""
    try:
        got_key, crc, verdicts, findings, measured, failed, bad = json.loads(line)
        if got_key != key or crc != crc_of(ev, parse):
            return None
        evid = (path,)
        return Launched(
            tuple(from_row(row, evid) for row in verdicts),
            tuple(
                Finding(c, n, ok, m, s, frozenset(cpus), tuple(vs)) for c, n, ok, m, s, cpus, vs in findings
            ),
            None if measured is None else tuple((_size(b), _number(v)) for b, v in measured),
            str(failed),
            bool(bad),
        )
    except (ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def _size(x: Any) -> int:
    if type(x) is not int:
        raise TypeError(f"a size in bytes, got {x!r}")
    return x


def _number(x: Any) -> int | float:
    """A result as it was measured: a float, or an int where the collector printed one (the PyTorch
    fallback may); JSON keeps which, and a verdict's value is recorded as it is."""
    if type(x) not in (int, float):
        raise TypeError(f"a number, got {x!r}")
    return typing.cast(int | float, x)
