"""The run's canonical record, in two parts: ``results.json`` (the run's facts: site, plan, jobs, fingerprint,
counts) and ``verdicts.sqlite`` (one row per verdict); the names of the planned steps beside them, in
``plan-steps.json.gz`` (and ``confirmation-steps.json.gz``, and each resume's ``resume-r<N>-steps.json.gz``).

One JSON document does not scale: a 4,096-node run has ~10^6 verdicts (hundreds of MB of JSON that every
reader parses whole), 16,384 nodes ~10^7. SQLite rather than Parquet: it is in Python's standard library
(nothing to install on a submit host), it answers the narrow questions most readers ask through an index
without reading the rest (the pytest items and junit.xml want each item's verdicts and the pairs that did
not pass, drain and attest the failures; see :data:`SELECTIONS`), many processes may read it while none
writes, and ``sqlite3 verdicts.sqlite`` lets a person query it. The history store is SQLite already.

Runs written before the split (verdicts inside results.json) are read as they are.

The planned steps' names (:func:`step_names`) are what ``--resume`` asks of a job that Slurm ended early:
which steps it held. At 16,384 nodes they are 4.3 million names, 132 MB of JSON: inside results.json they
were 97% of it, parsed by every reader (the report, compare, history, drain) and held by the dry run to its
end; gzip'd apart (level 1: 13 MB in 0.4 s) only ``--resume`` reads them. A resume's steps (what it reran, the
steps of each job it submitted) are apart too: a resume of a whole campaign names all of them twice. Runs
that recorded them in results.json (each round's ``steps``, a resume's ``rerun_steps`` and ``job_steps``)
are read as they are.
"""

from __future__ import annotations

import gzip
import io
import json
import sqlite3
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from clusteraccept.errors import ArchiveError
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.rundir import read_json, write_json

RESULTS = "results.json"
STORE = "verdicts.sqlite"
STEP_NAMES = "{}-steps.json.gz"  # "plan" (the run's), "confirmation" (its confirmation job's), "resume-r<N>"
SCHEMA = 2  # 1: evidence and labels inline (never released)
_COLUMNS = (
    "seq", "check_id", "family", "subject", "owner", "outcome", "message", "value_num", "value_text",
    "ref", "lower", "upper", "unit", "evidence_id", "labels_id",
)  # fmt: skip
_INSERT = f"INSERT INTO verdicts VALUES ({','.join('?' * len(_COLUMNS))})"
# A pair step's evidence is shared by its ~5 verdicts and a few hundred label sets cover millions of
# verdicts: both are stored once, in their own tables (550 -> ~250 bytes a verdict at 256 nodes).
_SELECT = (
    "SELECT v.seq, v.check_id, v.family, v.subject, v.owner, v.outcome, v.message, v.value_num,"
    " v.value_text, v.ref, v.lower, v.upper, v.unit, e.refs, l.json FROM verdicts v"
    " LEFT JOIN evidence e ON e.id = v.evidence_id LEFT JOIN labels l ON l.id = v.labels_id"
)
# What a reader needs: "all" every verdict; "items" what the items and junit.xml show: every verdict a node
# or block owns, and the pairs' verdicts that did not pass (their evidence, judge/items.py); "bad" the
# failures and errors only.
SELECTIONS = ("all", "items", "bad")
_OUTCOME = {o: o.value for o in Outcome}


class _Interned:
    """Strings stored once in a table of their own, by id."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id_of(self, text: str) -> int | None:
        if not text:
            return None
        got = self.ids.get(text)
        if got is None:
            got = self.ids[text] = len(self.ids) + 1
        return got

    def rows(self) -> Iterator[tuple[int, str]]:
        return ((i, t) for t, i in self.ids.items())


def _labels_json(labels: Mapping[str, Any], seen: dict[Any, Any]) -> str:
    """``labels`` as stored: JSON, its keys sorted; remembered by identity (one set shared by every verdict
    of a busbw combination, checks/nccl._combo) and by content (a few hundred distinct label sets among a
    million verdicts, ~3 us each to dump). Labels are strings; any other value is dumped each time (1, 1.0
    and True are one key to a set, and three texts in JSON)."""
    same = seen.get(id(labels))
    if same is not None and same[0] is labels:  # held below, so its id is not another's while remembered
        return str(same[1])
    if not all(x.__class__ is str for x in labels.values()):
        return json.dumps(labels, separators=(",", ":"), sort_keys=True)
    key = frozenset(labels.items())
    got = seen.get(key)
    if got is None:
        got = seen[key] = json.dumps(labels, separators=(",", ":"), sort_keys=True)
    seen[id(labels)] = (labels, got)
    return str(got)


def _row(
    seq: int,
    b: Brief,
    evidence: _Interned,
    labels_of: _Interned,
    dumped: dict[Any, Any],
) -> tuple[Any, ...]:
    check, family, subject, outcome, message, value, ref, lower, upper, unit, refs, labels = b
    num = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    text = None if num is not None or value is None else str(value)
    return (
        seq,
        check,
        family,
        subject,
        subject.split(":", 1)[0],
        outcome,
        message or "",
        num,
        text,
        ref,
        lower,
        upper,
        unit or "",
        evidence.id_of(refs),
        labels_of.id_of(_labels_json(labels, dumped) if labels else ""),
    )


def _verdict(r: tuple[Any, ...], parsed: dict[str, dict[str, str]]) -> dict[str, Any]:
    _, check, family, subject, _, outcome, message, num, text, ref, lo, hi, unit, evidence, labels = r
    got = parsed.get(labels) if labels else None
    if labels and got is None:
        got = parsed[labels] = json.loads(labels)  # a few hundred distinct label sets: parsed once each
    value = num if num is not None else text
    return as_dict((check, family, subject, outcome, message, value, ref, lo, hi, unit, evidence, got or {}))


def write(
    run_dir: Path, results: dict[str, Any], verdicts: Iterable[Mapping[str, Any] | Verdict]
) -> dict[str, Any]:
    """Write the verdicts to verdicts.sqlite, then results.json without them (its ``record`` says where
    they are and how many). Both atomically: a reader sees the old record or the new one."""
    tmp = run_dir / f".{STORE}.tmp"
    tmp.unlink(missing_ok=True)
    counts: Counter[str] = Counter()
    con = sqlite3.connect(tmp)
    try:
        con.executescript(
            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
            "CREATE TABLE verdicts (seq INTEGER PRIMARY KEY, check_id TEXT NOT NULL, family TEXT NOT NULL,"
            " subject TEXT NOT NULL, owner TEXT NOT NULL, outcome TEXT NOT NULL, message TEXT NOT NULL,"
            " value_num, value_text TEXT, ref REAL, lower REAL, upper REAL, unit TEXT NOT NULL,"
            " evidence_id INTEGER, labels_id INTEGER);"
            "CREATE TABLE evidence (id INTEGER PRIMARY KEY, refs TEXT NOT NULL);"
            "CREATE TABLE labels (id INTEGER PRIMARY KEY, json TEXT NOT NULL);"
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"
        )
        evidence, labels = _Interned(), _Interned()
        dumped: dict[Any, Any] = {}  # _labels_json's
        rows = []
        for seq, v in enumerate(verdicts):
            # from the Verdict itself (the judges') or its dict: making the dicts of a 256-node run's
            # 360,000 verdicts only to read them here took 1.8 s
            row = _row(seq, brief_of(v), evidence, labels, dumped)
            counts[row[5]] += 1
            rows.append(row)
            if len(rows) >= 50_000:
                con.executemany(_INSERT, rows)
                rows.clear()
        con.executemany(_INSERT, rows)
        con.executemany("INSERT INTO evidence VALUES (?, ?)", evidence.rows())
        con.executemany("INSERT INTO labels VALUES (?, ?)", labels.rows())
        con.execute("CREATE INDEX by_owner ON verdicts (owner, family)")
        con.execute("CREATE INDEX by_outcome ON verdicts (outcome)")
        con.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA),))
        con.commit()
    except (sqlite3.Error, OSError) as exc:  # a full reports filesystem ("database or disk is full")
        con.close()
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"{run_dir / STORE}: could not write the verdicts: {exc}") from None
    finally:
        con.close()
    tmp.replace(run_dir / STORE)
    doc = {k: v for k, v in results.items() if k != "verdicts"}
    doc["record"] = {"verdicts": STORE, "schema": SCHEMA, "counts": dict(sorted(counts.items()))}
    write_json(run_dir / RESULTS, doc)
    return doc


def _open(run_dir: Path) -> sqlite3.Connection:
    """The run's verdict store, read-only, once it is known to be of this schema."""
    con = sqlite3.connect(f"{(run_dir / STORE).resolve().as_uri()}?mode=ro", uri=True)  # '#' in a path
    try:
        got = con.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    except sqlite3.Error:
        con.close()
        raise
    if got is None or int(got[0]) != SCHEMA:
        con.close()
        raise ValueError(
            f"{run_dir / STORE}: expected a verdict store of schema {SCHEMA}, got {got and got[0]}"
        )
    return con


def rows(run_dir: Path, select: str = "all", nodes: Iterable[str] = ()) -> Iterator[dict[str, Any]]:
    """The run's verdicts (dicts as ``Verdict.to_dict``) in the judges' order. ``select``: one of
    :data:`SELECTIONS`; ``items`` needs the node and block names (``nodes``) to tell a pair from an owner."""
    if select not in SELECTIONS:
        raise ValueError(f"select: expected one of {', '.join(SELECTIONS)}, got {select!r}")
    con = _open(run_dir)
    try:
        if select == "all":
            cur = con.execute(f"{_SELECT} ORDER BY v.seq")
        elif select == "bad":
            cur = con.execute(f"{_SELECT} WHERE v.outcome IN ('fail', 'error') ORDER BY v.seq")
        else:
            con.execute("CREATE TEMP TABLE owners (name TEXT PRIMARY KEY)")
            con.executemany("INSERT OR IGNORE INTO temp.owners VALUES (?)", ((n,) for n in nodes))
            # "outcome IN (every other outcome)", not "!= 'pass'": SQLite then reads both indexes (its
            # MULTI-INDEX OR) instead of scanning every verdict
            others = ", ".join(f"'{o.value}'" for o in Outcome if o is not Outcome.PASS)
            owned = "v.owner IN (SELECT name FROM temp.owners)"
            cur = con.execute(f"{_SELECT} WHERE v.outcome IN ({others}) OR {owned} ORDER BY v.seq")
        parsed: dict[str, dict[str, str]] = {}
        for r in cur:
            yield _verdict(r, parsed)
    finally:
        con.close()


# A verdict as the reports' one pass reads it (report/model.digest): a tuple in Verdict's field order, its
# evidence references joined by "\n", its labels a dict (from the store: one dict shared by every verdict
# with the same set; a reader never changes it). The 360,000 verdicts of a 256-node run read from the
# store as dicts take 2.6 s, as briefs ~1.5 s; only the few that did not pass are made dicts (as_dict).
Brief = tuple[str, str, str, str, str, Any, Any, Any, Any, str, str, Mapping[str, str]]
_BRIEF = (
    "SELECT v.check_id, v.family, v.subject, v.outcome, v.message, COALESCE(v.value_num, v.value_text),"
    " v.ref, v.lower, v.upper, v.unit, COALESCE(e.refs, ''), v.labels_id FROM verdicts v"
    " LEFT JOIN evidence e ON e.id = v.evidence_id ORDER BY v.seq"
)


def stored(results: Mapping[str, Any]) -> bool:
    """Whether the run's verdicts are in its store (else inside ``results``: a run written before the split,
    a document made in memory)."""
    return "verdicts" not in results and bool((results.get("record") or {}).get("verdicts"))


def briefs(run_dir: Path, results: Mapping[str, Any]) -> Iterator[Brief]:
    """Every verdict of the run as a :data:`Brief`, in the judges' order: from the store, or from
    ``results`` itself where its verdicts are inside it (:func:`stored`)."""
    if not stored(results):
        return briefs_of(results.get("verdicts", []))
    return _briefs(_open(run_dir))


def _briefs(con: sqlite3.Connection) -> Iterator[Brief]:
    try:
        labels: dict[int | None, Mapping[str, str]] = {None: {}}
        labels.update((i, json.loads(text)) for i, text in con.execute("SELECT id, json FROM labels"))
        for r in con.execute(_BRIEF):
            yield (*r[:11], labels[r[11]])
    finally:
        con.close()


def briefs_of(verdicts: Iterable[Mapping[str, Any]]) -> Iterator[Brief]:
    """Verdict dicts (``Verdict.to_dict``'s), each as a :data:`Brief`."""
    return map(brief_of, verdicts)


def brief_of(v: Mapping[str, Any] | Verdict) -> Brief:
    """A Verdict, or its dict (``Verdict.to_dict``'s), as a :data:`Brief`."""
    if isinstance(v, Verdict):
        return (
            v.check,
            v.family,
            v.subject,
            _OUTCOME[v.outcome],
            v.message,
            v.value,
            v.ref,
            v.lower,
            v.upper,
            v.unit,
            "\n".join(v.evidence),
            v.labels,
        )
    return (
        v["check"],
        v["family"],
        v["subject"],
        v["outcome"],
        v.get("message") or "",
        v.get("value"),
        v.get("ref"),
        v.get("lower"),
        v.get("upper"),
        v.get("unit") or "",
        "\n".join(v.get("evidence") or ()),
        v.get("labels") or {},
    )


def as_dict(b: Brief) -> dict[str, Any]:
    """A :data:`Brief` as the dict :func:`rows` gives (``Verdict.to_dict``'s)."""
    check, family, subject, outcome, message, value, ref, lo, hi, unit, evidence, labels = b
    return {
        "check": check,
        "family": family,
        "subject": subject,
        "outcome": outcome,
        "message": message,
        "value": value,
        "ref": ref,
        "lower": lo,
        "upper": hi,
        "unit": unit,
        "evidence": evidence.split("\n") if evidence else [],
        "labels": dict(labels),
    }


def load(run_dir: Path, select: str = "all", owners: Iterable[str] = ()) -> dict[str, Any]:
    """results.json with its ``verdicts`` (``select``, see :func:`rows`); a run written before the split
    comes back as it was written (every verdict)."""
    results: dict[str, Any] = read_json(run_dir / RESULTS)
    if stored(results):
        results["verdicts"] = list(rows(run_dir, select, owners))
    return results


def write_step_names(
    run_dir: Path,
    section: str,
    jobs: Iterable[tuple[str, list[list[str]]]],
    rerun_steps: Iterable[str] | None = None,
) -> None:
    """The step names of ``section``'s campaign jobs (plan/jobs.step_names: each job's rounds), written job
    by job into ``<section>-steps.json.gz``, atomically: ``{"campaign_jobs": {job: [[step, ...], ...]}}``;
    a resume's (section ``resume-r<N>``) also ``"rerun_steps": [step, ...]``: what it set out to rerun."""
    path = run_dir / STEP_NAMES.format(section)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        # no time or temporary name in the gzip header (as archive._write's bundles): the same plan, the
        # same bytes
        with (
            tmp.open("wb") as raw,
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=1, mtime=0) as gz,
            io.TextIOWrapper(gz, encoding="utf-8") as out,
        ):
            out.write('{"campaign_jobs":{')
            for i, (name, rounds) in enumerate(jobs):
                out.write(f"{',' if i else ''}{json.dumps(name)}:{json.dumps(rounds, separators=(',', ':'))}")
            out.write("}")
            if rerun_steps is not None:
                out.write(f',"rerun_steps":{json.dumps(list(rerun_steps), separators=(",", ":"))}')
            out.write("}")
        tmp.replace(path)
    except OSError as exc:  # a full reports filesystem: the old file (or none), never half of the new one
        tmp.unlink(missing_ok=True)
        raise ArchiveError(f"{path}: could not write: {exc.strerror or exc}") from None


def step_names(
    run_dir: Path, results: Mapping[str, Any], section: str = "plan"
) -> dict[str, list[list[str]]]:
    """Each campaign job of ``section`` (results.json ``plan``, or ``confirmation``'s) -> its rounds' step
    names, from ``<section>-steps.json.gz``, or from results.json itself for a run that recorded them."""
    jobs = (
        (results.get("plan") or {}).get("campaign_jobs", [])
        if section == "plan"
        else (results.get(section) or {}).get("plan", [])
    )
    if not jobs:
        return {}
    if any("steps" in r for j in jobs for r in j.get("rounds", ())):  # recorded in results.json itself
        return {str(j["name"]): [list(r["steps"]) for r in j["rounds"]] for j in jobs}
    return _read_step_names(run_dir / STEP_NAMES.format(section), f"results.json {section}")[0]


def resume_step_names(run_dir: Path, results: Mapping[str, Any]) -> dict[str, list[list[str]]]:
    """Each campaign job the run's resumes submitted (``campaign-leaf2-r1``, its shards) -> its rounds' step
    names, from ``resume-r<N>-steps.json.gz``; a resume that recorded them in results.json
    (``job_steps``) or not at all (only ``rerun_steps``) gives none here: ops/resume.job_steps reads those."""
    out: dict[str, list[list[str]]] = {}
    for entry in results.get("resumes", []):
        if "job_step_counts" in entry:
            where = f"results.json resumes[{entry['resume']}]"
            out.update(
                _read_step_names(run_dir / STEP_NAMES.format(resume_section(entry["resume"])), where)[0]
            )
    return out


def rerun_steps(run_dir: Path, results: Mapping[str, Any], n: int) -> list[str]:
    """The steps resume ``n`` set out to rerun: from its file, or results.json where it recorded them."""
    entry = next((e for e in results.get("resumes", []) if e.get("resume") == n), None)
    if entry is None:
        found = [e.get("resume") for e in results.get("resumes", [])]
        raise ArchiveError(f"{run_dir / RESULTS}: resumes: expected resume {n}, found {found}")
    if "rerun_steps" in entry:
        return list(entry["rerun_steps"])
    if not entry.get("n_rerun_steps"):  # a resume that found nothing to rerun wrote no file
        return []
    path = run_dir / STEP_NAMES.format(resume_section(n))
    names = _read_step_names(path, f"results.json resumes[{n}]")[1]
    if names is None:
        raise ArchiveError(
            f'{path}: expected "rerun_steps" (results.json resumes[{n}] counts {entry["n_rerun_steps"]})'
        )
    return names


def resume_section(n: int) -> str:
    """The step-names section of resume ``n`` (its file: ``STEP_NAMES.format(resume_section(n))``)."""
    return f"resume-r{n}"


def _read_step_names(path: Path, whose: str) -> tuple[dict[str, list[list[str]]], list[str] | None]:
    """A step-names file's campaign jobs, and its ``rerun_steps`` (a resume's; None in a plan's)."""
    try:
        got = json.loads(gzip.decompress(path.read_bytes()))
    except FileNotFoundError:
        raise ArchiveError(f"{path}: missing: {whose} counts its steps and names them in this file") from None
    except (OSError, EOFError, zlib.error, ValueError) as exc:
        raise ArchiveError(f"{path}: not the run's step names (gzip'd JSON): {exc}") from None
    names = got.get("campaign_jobs") if isinstance(got, dict) else None
    rerun = got.get("rerun_steps") if isinstance(got, dict) else None
    if (
        not isinstance(names, dict)
        or not all(
            isinstance(rounds, list) and all(isinstance(r, list) for r in rounds) for rounds in names.values()
        )
        or not (rerun is None or isinstance(rerun, list))
    ):
        found = sorted(got)[:5] if isinstance(got, dict) else type(got).__name__
        raise ArchiveError(
            f'{path}: expected {{"campaign_jobs": {{job: [[step, ...], ...]}}}}, found {found}'
        )
    return names, rerun
