"""Excerpts of archived raw evidence (jobs/archive.py: a bundle's member, or one file of an older run) for
the report's failures.

The lines shown are the ones an engineer would look for: the nccl-tests rows of the failing sizes (with
the table header above them), the lines naming the failing GPU / HCA / PCI device, or the whole output when
it is short (sysfs values); plus the stderr tail when the command failed. Raw files are already redacted
(jobs/archive.py), and the report re-redacts whatever it prints anyway.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clusteraccept.jobs import archive
from clusteraccept.redact import redact_text

CONTEXT = 2
MAX_LINES = 24
MAX_FILES = 6
MAX_CHARS = 240
_GPU = re.compile(r"\bgpu(\d+)\b")
_HCA = re.compile(r"\bmlx\d_\d+\b")
_BDF = re.compile(r"\b(?:[0-9a-f]{4}:)?([0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\b")


@dataclass(frozen=True)
class Line:
    no: int  # 1-based line number in the stream
    text: str
    hit: bool


@dataclass(frozen=True)
class Excerpt:
    path: str
    header: str
    lines: tuple[Line | None, ...]  # None = lines left out
    stderr: tuple[str, ...] = ()
    missing: str = ""


def tokens_of(verdict: Mapping[str, Any]) -> tuple[str, ...]:
    """Words whose lines matter for this verdict: ``GPU3`` for gpu3, HCA names, PCI addresses."""
    text = f"{verdict.get('subject', '')} {verdict.get('message', '')}"
    toks = {f"GPU{g}" for g in _GPU.findall(text)}
    toks |= set(_HCA.findall(text))
    toks |= set(_BDF.findall(text))
    if "ACS" in text:
        toks.add("ACSCtl")
    return tuple(sorted(toks))


def _is_table_header(line: str) -> bool:
    s = line.lstrip()
    return s.startswith("#") and ("out-of-place" in s or ("size" in s and "count" in s) or "(B)" in s)


def _first_token(line: str) -> str:
    parts = line.split(None, 1)
    return parts[0] if parts else ""


def _windows(lines: Sequence[str], hits: set[int], keep: set[int]) -> tuple[Line | None, ...]:
    wanted = set(keep)
    for i in hits:
        wanted.update(range(max(0, i - CONTEXT), min(len(lines), i + CONTEXT + 1)))
    out: list[Line | None] = []
    prev = -1
    for i in sorted(wanted)[: MAX_LINES * 2]:
        if prev >= 0 and i != prev + 1:
            out.append(None)
        out.append(Line(i + 1, redact_text(lines[i][:MAX_CHARS]), i in hits))
        prev = i
    if out and prev < len(lines) - 1:
        out.append(None)
    return tuple(out)


def excerpt(run_dir: Path, path: str, sizes: Iterable[int] = (), tokens: Iterable[str] = ()) -> Excerpt:
    """The relevant lines of one archived evidence file (a missing/unreadable file says so)."""
    try:
        ev = archive.read(run_dir, path)
    except (OSError, ValueError, KeyError) as exc:
        return Excerpt(path, "", (), missing=f"not readable: {type(exc).__name__}")
    argv = ev.get("argv") or []
    what = f"$ {shlex.join(argv)}" if argv else f"read {ev.get('path', '')}"
    if len(what) > 300:
        what = what[:297] + "..."
    header = redact_text(f"{ev.get('host', '?')}: {what} (exit {ev.get('returncode')})")
    lines = str(ev.get("stdout", "")).splitlines()
    size_set = {str(s) for s in sizes}
    toks = tuple(t.lower() for t in tokens)  # nvidia-smi prints 00000000:5D:00.0, sysfs 0000:5d:00.0
    hits = {
        i
        for i, ln in enumerate(lines)
        if (size_set and _first_token(ln) in size_set) or (toks and any(t in ln.lower() for t in toks))
    }
    if hits:
        keep = {i for i, ln in enumerate(lines) if size_set and _is_table_header(ln)}
        shown = _windows(lines, hits, keep)
    elif len(lines) <= MAX_LINES:
        shown = tuple(Line(i + 1, redact_text(ln[:MAX_CHARS]), False) for i, ln in enumerate(lines))
    else:
        shown = _windows(lines, set(), set(range(MAX_LINES // 2)))
    err = str(ev.get("stderr", "")).strip().splitlines()
    tail = (
        tuple(redact_text(ln[:MAX_CHARS]) for ln in err[-6:])
        if err and (ev.get("returncode") != 0 or not lines)
        else ()
    )
    return Excerpt(path, header, shown, tail)


def excerpts_for(run_dir: Path, group: Mapping[str, Any]) -> list[Excerpt]:
    """Excerpts of a failure group's evidence files: files with matching lines first, at most MAX_FILES."""
    sizes = group.get("sizes", ())
    toks = group.get("tokens", ())
    found = [excerpt(run_dir, p, sizes, toks) for p in list(group.get("evidence", ()))[: MAX_FILES * 2]]
    found.sort(key=lambda e: not any(ln is not None and ln.hit for ln in e.lines))
    return found[:MAX_FILES]
