"""The run's raw/ archive: every Evidence written on the submit host BEFORE any parser sees it, and read back
for ``--rejudge``, ``--resume`` and the report's excerpts.

Evidence is written in bundles, one gzip'd JSON-lines file per job and part: a campaign's round
(``raw/campaign-leaf1/r003.jsonl.gz``), its counter snapshots (``.../counters.jsonl.gz``), a probe job's
node (``raw/probe-nodes/node07.jsonl.gz``). One file per Evidence does not scale: a per-rail pair campaign
at 16,384 nodes in blocks of 32 is ~4 million steps, tens of millions of files with the counters and the
probes, which no parallel file system serves well; a bundle is a few hundred steps of one round, and the
NCCL INFO logs that fill it (similar lines, rank after rank) compress ~18x as one stream where one file at
a time gets ~4x (measured on the demo's raw/nccl: 275 KB -> 15 KB as one stream, 70 KB file by file).

An Evidence is named by its reference ``raw/<bundle>.jsonl.gz#<check>/<host>/<name>.json``: verdicts quote
it, and :func:`read` finds it. Runs archived before bundles (``raw/<check>/<host>/<name>.json``, one file
each) are read as they are.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from clusteraccept.errors import ArchiveError
from clusteraccept.evidence import Evidence, slug
from clusteraccept.parsers import stored

SUFFIX = ".jsonl.gz"
LEVEL = 3  # gzip level: ~3x faster than the default 6 on these logs for a few % more bytes


def archive_name(ev: Evidence) -> str | None:
    """The member name of a campaign's evidence: per step, or per counter snapshot; None: default."""
    if "subject" in ev.meta:
        return f"{ev.meta['collective']}_{ev.meta['subject']}"
    if ev.meta.get("role") == "counters" and "snapshot" in ev.meta:
        return f"counters_{ev.meta['snapshot']}"
    return None


def _bundle_of(job: str, ev: Evidence) -> str:
    if ev.meta.get("role") == "counters":
        return f"{slug(job)}/counters"
    if ev.meta.get("round_index", "").isdigit():
        return f"{slug(job)}/r{int(ev.meta['round_index']):03d}"
    return f"{slug(job)}/{slug(ev.host)}"


def _member_of(ev: Evidence) -> str:
    name = archive_name(ev)
    base = name or ev.source + ("_" + "_".join(ev.argv[1:]) if ev.argv else "_" + ev.path)
    return f"{slug(ev.meta.get('check', 'misc'))}/{slug(ev.host)}/{slug(base)}.json"


def archive_job(run_dir: Path, job: str, evidence: Iterable[Evidence]) -> list[tuple[Evidence, str]]:
    """Write one job's evidence (redacted) into its bundles under ``raw/<job>/`` and return each Evidence as
    archived with its reference. Called on the submit host BEFORE any parser sees the evidence, so a parse
    error never loses it. A bundle that exists already (``--resume`` reruns a round) is never appended to:
    the new one is numbered (``r003.2.jsonl.gz``)."""
    from clusteraccept.redact import redact_evidence

    by_bundle: dict[str, list[Evidence]] = {}
    for ev in evidence:
        ev = redact_evidence(ev)
        by_bundle.setdefault(_bundle_of(job, ev), []).append(ev)
    out: list[tuple[Evidence, str]] = []
    raw = run_dir / "raw"
    for bundle, evs in by_bundle.items():
        path = raw / f"{bundle}{SUFFIX}"
        n = 1
        while path.exists():
            n += 1
            path = raw / f"{bundle}.{n}{SUFFIX}"
        path.parent.mkdir(parents=True, exist_ok=True)
        rel = path.relative_to(run_dir)
        seen: dict[str, int] = {}
        lines = []
        for ev in evs:
            member = _member_of(ev)
            k = seen[member] = seen.get(member, 0) + 1
            if k > 1:  # the same command twice on a host: both kept, numbered as the files were
                member = f"{member.removesuffix('.json')}.{k}.json"
            lines.append(_line(member, ev.to_dict()))
            out.append((ev, f"{rel}#{member}"))
        _write(path, lines)
    return out


def _line(member: str, ev: dict[str, Any]) -> str:
    return json.dumps({"member": member, **ev}, separators=(",", ":"))


def _write(path: Path, lines: list[str], what: str = "archive evidence") -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with (
            tmp.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=LEVEL, mtime=0) as gz,
            io.TextIOWrapper(gz, encoding="utf-8") as fh,
        ):
            for line in lines:
                fh.write(line + "\n")
        tmp.replace(path)  # a reader never sees half a bundle
    except OSError as exc:  # a full reports filesystem (ENOSPC), a quota: no half bundle stays behind
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"{path}: could not {what}: {exc.strerror or exc}") from None


def _bundles(run_dir: Path) -> list[Path]:
    return sorted((run_dir / "raw").glob(f"*/*{SUFFIX}"))


def _one_file_each(run_dir: Path) -> list[Path]:
    """The evidence of a run archived before bundles: ``raw/<check>/<host>/<name>.json``."""
    return sorted((run_dir / "raw").glob("*/*/*.json"))


def _members(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A bundle's members, read whole before any is returned: a bundle cut off (a disk that filled, a copy
    that stopped) is an error naming it, never read as a complete one."""
    try:
        members = _decoded(gzip.decompress(path.read_bytes()).decode("utf-8"))
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError) as exc:
        raise ArchiveError(
            f"{path}: evidence bundle cut off or corrupt ({exc}): {_what(path)} is incomplete, not read"
        ) from None
    for n, d in enumerate(members, 1):
        if not isinstance(d, dict) or not isinstance(d.get("member"), str):
            got = f"a {type(d).__name__}" + (f" with keys {sorted(d)[:6]}" if isinstance(d, dict) else "")
            raise ArchiveError(
                f"{path}: line {n}: expected an archived evidence (a JSON object with 'member'), got {got}: "
                f"{_what(path)} not read"
            )
        yield d.pop("member"), d


def _decoded(text: str) -> list[Any]:
    """A bundle's JSON lines, decoded as one JSON array: one call into json's C decoder per bundle instead
    of a ``json.loads`` per line (and gzip's line-by-line text reader: together ~20% of reading a 256-node
    run's raw/). A line that is not JSON is found line by line, so that its error names it as before. The
    lines are split at "\\n" only: JSON escapes every control character inside a string."""
    lines = text.split("\n")
    if lines and not lines[-1]:
        lines.pop()  # the last line's end
    try:
        members: list[Any] = json.loads("[" + ",".join(lines) + "]")
    except ValueError:
        members = []
    if len(members) == len(lines):
        return members
    # Some line is not one JSON value alone (lines that each are join into an array of as many): say which.
    for n, line in enumerate(lines, 1):
        try:
            json.loads(line)
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from None
    raise AssertionError("bundle lines that each decode alone did not decode as an array of as many")


def _evidence(path: Path, member: str, d: dict[str, Any]) -> Evidence:
    """An archived member as Evidence, or one line naming the bundle and member where it is none (a line
    edited or written by something other than this archive)."""
    try:
        return Evidence.from_dict(d)
    except (TypeError, AttributeError) as exc:
        raise ArchiveError(
            f"{path}: member {member!r}: expected an archived evidence (host, source, argv or path...), "
            f"got keys {sorted(d)[:8]} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}): "
            f"{_what(path)} not read"
        ) from None


def _what(path: Path) -> str:
    """``raw/campaign-leaf1/r003.jsonl.gz`` -> "round 3 of campaign-leaf1's evidence"."""
    stem = path.name.removesuffix(SUFFIX)
    m = re.fullmatch(r"r(\d+)(?:\.\d+)?", stem)
    what = f"round {int(m[1])}" if m else stem
    return f"{what} of {path.parent.name}'s evidence"


def load_all(run_dir: Path) -> Iterator[tuple[Evidence, str]]:
    """Every archived Evidence of the run with its reference, bundle by bundle (and the one-file-each
    evidence of runs archived before bundles)."""
    for path in _bundles(run_dir):
        rel = path.relative_to(run_dir)
        for member, d in _members(path):
            yield _evidence(path, member, d), f"{rel}#{member}"
    for path in _one_file_each(run_dir):
        yield load(path), str(path.relative_to(run_dir))


def read(run_dir: Path, ref: str) -> dict[str, Any]:
    """One archived Evidence (as its dict) by reference; OSError/KeyError/ValueError when it is not there."""
    if "#" not in ref:
        data: dict[str, Any] = json.loads((run_dir / ref).read_text())
        return data
    bundle, member = ref.split("#", 1)
    return _bundle_index(str((run_dir / bundle).resolve()))[member]


@lru_cache(maxsize=8)  # the report reads a few members of each of a few bundles
def _bundle_index(path: str) -> dict[str, dict[str, Any]]:
    return dict(_members(Path(path)))


def supersede(run_dir: Path, gone: Callable[[Evidence], bool], dest: Path) -> list[str]:
    """Move the evidence ``gone`` picks out of raw/ into ``dest`` (same layout): ``--resume`` replaces it.
    Each bundle holding some is rewritten without it; the moved members go to a bundle of the same name
    under ``dest``. Returns the new references of what moved."""
    moved: list[str] = []
    for path in _bundles(run_dir):
        members = list(_members(path))
        out = [(m, d) for m, d in members if gone(_evidence(path, m, d))]
        if not out:
            continue
        rel = path.relative_to(run_dir / "raw")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        _write(target, [_line(m, d) for m, d in out])
        names = {m for m, _ in out}
        keep = [_line(m, d) for m, d in members if m not in names]
        if keep:
            _write(path, keep)
        else:
            path.unlink()
        moved += [f"{target.relative_to(run_dir)}#{m}" for m, _ in out]
    _bundle_index.cache_clear()
    for path in _one_file_each(run_dir):
        if gone(load(path)):
            target = dest / path.relative_to(run_dir / "raw")
            target.parent.mkdir(parents=True, exist_ok=True)
            path.replace(target)
            moved.append(str(target.relative_to(run_dir)))
    return moved


# -- the steps' stored parses (parsers/stored.py): derived from raw/, beside it ----------------------------
# ``parsed/<job>/<bundle>.jsonl.gz`` holds the parses of ``raw/<job>/<bundle>.jsonl.gz``'s steps: a first
# line with the parsers' version, then one ``<member>\t<line>`` per step (``stored.pack``). Never evidence: a
# file that is missing, stale or damaged only means the steps are parsed from raw/ again.
PARSED = "parsed"


def _parsed_path(run_dir: Path, bundle: str) -> Path:
    return run_dir / PARSED / Path(bundle).relative_to("raw")


def parsed_bundle(run_dir: Path, version: str, bundle: str) -> dict[str, str]:
    """The stored parses of one bundle's steps (``bundle``: ``raw/<job>/<bundle>.jsonl.gz``, as its
    evidence references begin) made by parsers of ``version``, by member; empty where there are none, or
    none of that version, or the file is damaged (its steps are parsed again, and stored anew). The lines
    are not decoded: the judge decodes each where it needs it."""
    if not bundle.startswith("raw/"):  # evidence archived one file each (no bundle), or not raw/'s
        return {}
    try:
        with gzip.open(_parsed_path(run_dir, bundle), "rt", encoding="utf-8") as fh:
            if json.loads(fh.readline()).get("parser") != version:
                return {}
            return stored.unpack(fh.read().splitlines())
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, AttributeError):
        return {}


def write_parsed(run_dir: Path, version: str, bundle: str, members: Iterable[bytes]) -> None:
    """Store the parses of ``bundle``'s steps: its file whole (never appended to), replacing what was there,
    from ``members`` (``stored.pack``'s gzip members, in order) after the version's line."""
    path = _parsed_path(run_dir, bundle)
    head = gzip.compress((json.dumps({"parser": version}) + "\n").encode(), mtime=0)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as fh:
            fh.write(head)
            for member in members:
                fh.write(member)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # no half file stays behind, where there could be one at all
            tmp.unlink()
        raise ArchiveError(f"{path}: could not store the steps' parses: {exc.strerror or exc}") from None


# A family's kept verdicts (checks/kept.py): ``parsed/<family>.verdicts.json.gz``, one line. Beside the jobs'
# folders of parsed/, never one of them (a file, not a folder). Like the parses: derived, never evidence.
def _kept_path(run_dir: Path, family: str) -> Path:
    return run_dir / PARSED / f"{slug(family)}.verdicts.json.gz"


def kept_verdicts(run_dir: Path, family: str) -> str | None:
    """The line of ``family``'s kept verdicts, or None where there is none (or it does not read back)."""
    try:
        with gzip.open(_kept_path(run_dir, family), "rt", encoding="utf-8") as fh:
            return fh.read()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError):
        return None


def keep_verdicts(run_dir: Path, family: str, line: str) -> None:
    """Store ``family``'s verdicts (checks/kept.dumps's line), replacing what was there."""
    path, what = _kept_path(run_dir, family), f"keep the {family} verdicts"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArchiveError(f"{path.parent}: could not {what}: {exc.strerror or exc}") from None
    _write(path, [line], what=what)


def load(path: Path) -> Evidence:
    """Read back one Evidence archived as its own file (runs of before bundles)."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArchiveError(f"{path}: archived evidence unreadable ({exc}): not read") from None
    if not isinstance(d, dict):
        raise ArchiveError(f"{path}: expected an archived evidence (a JSON object), got a {type(d).__name__}")
    return _evidence(path, path.name, d)
