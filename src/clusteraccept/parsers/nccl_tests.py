"""nccl-tests (``all_reduce_perf`` & co.): header, ranks, the result table, footer, failures; or ``-J`` JSON.

Layout, from NVIDIA/nccl-tests (v2.19.6: src/util.cu ``writeDeviceReport()``, ``writeResultHeader()``,
``writeBenchmarkLinePreamble()``/``writeBenchmarkLineBody()``, ``writeResultFooter()``; src/common.h
CUDACHECK/NCCLCHECK/TESTCHECK; older layouts from tags v1.0.0, v2.0.0, v2.13.0, v2.14.0, v2.16.0)::

    # nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809   (v2.18+)
    # Collective test starting: all_reduce_perf                          (v2.17+)
    # nThread 1 nGpus 2 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 1 iters: 20 ...
    # Using devices
    #  Rank  0 Group  0 Pid   1396 on         vm device  0 [0000:00:06] NVIDIA H200
          (v2.0-2.13: "#   Rank  0 Pid ... [0x0f] ..."; a line cut at 2048 bytes ends in "...")
    #       size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong
          (v2.0-2.12: "error" column (max deviation) and no redop/root for all_gather; -C: "cputime";
           -I 1: i_min i_max i_p99 i_cv% after each #wrong; -S 1: a "timestamp" column at the end)
           8             2     float     sum      -1    14.61    0.00    0.00       0 ...    N/A
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 111.696            (" OK"/" FAILED" when NCCL_TESTS_MIN_BW is set)
    # Collective test concluded: all_reduce_perf
    node1: Test CUDA failure common.cu:891 'out of memory'        (failures: CUDACHECK/NCCLCHECK/TESTCHECK)
     .. node1 pid 123: Test failure common.cu:1454

Noise (launcher output, NCCL INFO/WARN lines, srun ``-l`` / mpirun ``--tag-output`` prefixes) is skipped;
a leading ``#`` is optional everywhere. The JSON of ``-J`` is parsed by :mod:`.nccl_tests_json`; both
formats parse into :mod:`.nccl_tests_result`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers.nccl_tests_result import (
    Measurement,
    NcclTestsResult,
    RankInfo,
    Row,
    collective_of,
    infer_collective,
    nccl_version_of,
)

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )")  # mpirun --tag-output, srun -l
_VERSION = re.compile(r"nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
_STARTING = re.compile(r"Collective test (?:starting|concluded): ([A-Za-z0-9_]+)")
_NTHREAD = re.compile(r"nThread (\d+) nGpus (\d+) minBytes \d+ maxBytes \d+")
_RANK = re.compile(
    r"Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s?(.*)"
)
_NCCL_VERSION = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s+(OK|FAILED)\b")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)(?:\s+(OK|FAILED))?\s*$")
# NCCL's debug line (host:pid:tid [dev] NCCL INFO ...), behind a launcher's prefix: only a whole line is
# one (a result row with an INFO line glued to it by an unbuffered launcher is not, and must not parse)
_INFO_LINE = re.compile(r"(?:\[\d+,\d+\]<std(?:out|err)>:|\d+: )?\s*\S+ \[\d+\] NCCL INFO ")
# "host:pid:tid [dev] <where> NCCL WARN msg": <where> is NCCL's file:line or a plugin's own (TCPX passes
# __PRETTY_FUNCTION__, spaces and all: tcpx src/adapter/nccl/debug.h)
_WARN_LINE = re.compile(r"\S+ \[-?\d+\] .*?NCCL WARN (.*)")
_FAILURE = re.compile(r"Test (?:CUDA |NCCL )?failure\b")
_ROW_START = re.compile(r"[0-9]+\s+[0-9]+\s")
# The binaries of nccl-tests (src/Makefile BIN_FILES_LIST), named on a launcher's echoed command line.
_BINARY = re.compile(
    r"\b(all_reduce|all_gather|broadcast|reduce_scatter|reduce|alltoallv|alltoall|scatter"
    r"|gather|sendrecv|hypercube)_perf\b"
)
_SIZE_COLUMNS = ("size", "bytes")
_SIDE_START = ("time", "cputime")


def parse(text: str) -> NcclTestsResult:
    """Parse nccl-tests stdout (any version since 2.0, noise tolerated) or its ``-J`` JSON file."""
    if text.lstrip().startswith("{"):
        from clusteraccept.parsers.nccl_tests_json import parse_json

        return parse_json(text)
    return _TextParser().run(text)


def _num(tok: str, line_no: int, what: str, *, integer: bool = False) -> float:
    try:
        return int(tok) if integer else float(tok)
    except ValueError:
        raise ParseError(line_no, what, tok) from None


@dataclass
class _Columns:
    prefix: list[str]
    sides: list[list[str]]
    timestamp: bool
    time_ms: bool  # v1.x printed milliseconds under a plain "time" with "bytes"/"N" columns

    def __post_init__(self) -> None:
        # where each column is, found once per table and not per row (a name printed twice: its last)
        self.widths = [len(side) for side in self.sides]
        self.at = [{name: i for i, name in enumerate(side)} for side in self.sides]
        self.pre_at = {name: i for i, name in enumerate(self.prefix)}


def _columns(tokens: list[str]) -> _Columns | None:
    if not tokens or tokens[0] not in _SIZE_COLUMNS or "busbw" not in tokens:
        return None
    timestamp = tokens[-1] == "timestamp"
    if timestamp:
        tokens = tokens[:-1]
    starts = [i for i, t in enumerate(tokens) if t in _SIDE_START]
    if not starts or starts[0] < 3:
        return None
    sides = [tokens[a:b] for a, b in zip(starts, [*starts[1:], len(tokens)], strict=True)]
    if any("algbw" not in s or "busbw" not in s for s in sides) or len(sides) > 2:
        return None
    return _Columns(tokens[: starts[0]], sides, timestamp, tokens[0] == "bytes")


class _TextParser:
    def __init__(self) -> None:
        self.version: str | None = None
        self.nccl_version: str | None = None
        self.collective: str | None = None
        self.named: str | None = None  # a binary named in noise before the table (a command line)
        self.nthreads: int | None = None
        self.ngpus: int | None = None
        self.ranks: dict[int, RankInfo] = {}
        self.elided = False
        self.max_rank = -1
        self.cols: _Columns | None = None
        self.rows: list[Row] = []
        self.footer_seen = False
        self.runs = 0
        self.in_devices = False
        self.avg: float | None = None
        self.avg_verdict: str | None = None
        self.oob: int | None = None
        self.oob_ok: bool | None = None
        self.failures: list[str] = []

    def run(self, text: str) -> NcclTestsResult:
        line = self.line
        for no, raw in enumerate(text.splitlines(), 1):
            if " NCCL INFO " not in raw or not _INFO_LINE.match(raw):
                line(no, raw)
            # NCCL's debug lines (NCCL_DEBUG=INFO: 90% of a step's lines): of every rule in line() only
            # these two can match one (the others need a '#' line, a table row or nccl-tests' own text)
            elif "failure" in raw and _FAILURE.search(raw):
                self.failures.append(_PREFIX.sub("", raw.strip()).strip())
            elif self.nccl_version is None and self.runs <= 1 and (m := _NCCL_VERSION.search(raw)):
                self.nccl_version = m.group(1)
        if self.runs == 0 and not (self.failures or self.ranks or self.version or self.nthreads):
            # NCCL's own WARN lines and nothing of nccl-tests: the process died in NCCL's init before
            # its buffered stdout was flushed (NCCL flushes every debug line; a net plugin that aborts,
            # Google's FasTrak without its RxDM, leaves only those): the first WARN is the failure
            warns = [m.group(1).strip() for r in text.splitlines() if (m := _WARN_LINE.search(r))]
            if warns:
                self.failures.append(f"NCCL WARN {warns[0]}")
                return self.result()
            first = next((s for s in text.splitlines() if s.strip()), "")
            raise ParseError(0, "nccl-tests output (a result table, rank list or failure line)", first[:80])
        return self.result()

    def line(self, no: int, raw: str) -> None:
        s = _PREFIX.sub("", raw.strip()).strip()
        hashed = s.startswith("#")
        body = s.lstrip("#").strip() if hashed else s
        if not body:
            self.in_devices = self.in_devices and not hashed
            return
        if _FAILURE.search(body) or (hashed and body.startswith("error: ")):  # writeErrors(): "# error: ..."
            self.failures.append(body)
            return
        if self.runs > 1:  # a later, independent run: counted, not merged
            return
        table = not hashed and self.cols is not None and self.runs == 1 and not self.footer_seen
        if table and _ROW_START.match(s):  # a result row: no rule before the table's own can match one
            self.rows.append(self.row(no, body.split()))
            return
        if self.in_devices and body.startswith("Rank") and (m := _RANK.match(body)):
            self.rank_line(no, m)  # the device list: one line per rank, before the table
            return
        if m := _VERSION.search(body):
            self.version, self.nccl_version = m.group(1), nccl_version_of(int(m.group(3)))
        elif m := _STARTING.search(body):
            self.collective = self.collective or collective_of(m.group(1)) or m.group(1)
        elif m := _NTHREAD.search(body):
            self.nthreads, self.ngpus = int(m.group(1)), int(m.group(2))
        elif body == "Using devices":
            self.in_devices = True
        elif (m := _RANK.match(body)) and (self.in_devices or hashed):
            self.rank_line(no, m)
        elif self.in_devices and hashed and (body.startswith("...") or body.endswith("...")):
            # a line cut at 2048 bytes (writeDeviceReport() MAX_LINE) or elided by hand; its rank still counts
            self.elided = True
            if m := re.match(r"Rank\s+(\d+)", body):
                self.max_rank = max(self.max_rank, int(m.group(1)))
        elif m := _OOB.search(body):
            self.oob, self.oob_ok = int(m.group(1)), m.group(2) == "OK"
            self.footer_seen = True
        elif m := _AVG.search(body):
            self.avg = _num(m.group(1), no, "an average bus bandwidth")
            self.avg_verdict = m.group(2)
        elif (cols := _columns(body.split())) is not None:
            self.in_devices = False
            self.runs += 1
            if self.runs == 1:
                self.cols = cols
        elif self.cols is not None and self.runs == 1 and not self.footer_seen and _ROW_START.match(s):
            self.rows.append(self.row(no, body.split()))  # (other lines with digits first are noise)
        elif m := _NCCL_VERSION.search(body):
            self.nccl_version = self.nccl_version or m.group(1)
        elif self.cols is None and self.named is None and (m := _BINARY.search(body)):
            self.named = m.group(1)

    def rank_line(self, no: int, m: re.Match[str]) -> None:
        rank, group, pid = int(m.group(1)), m.group(2), m.group(3)
        name = m.group(7).strip()
        if name.endswith("..."):  # the gathered device report is cut at 2048 bytes per process
            self.elided = True
            name = name[:-3].rstrip()
        self.ranks.setdefault(
            rank,
            RankInfo(
                rank,
                int(group) if group else None,
                int(pid) if pid else None,
                m.group(4),
                int(m.group(5)),
                m.group(6),
                name,
            ),
        )

    def measurement(
        self, no: int, cols: list[str], at: dict[str, int], toks: list[str], time_ms: bool
    ) -> Measurement:
        """One side of a row: ``toks`` under the columns ``cols`` (``at``: where each is)."""
        t = _num(toks[at[cols[0]]], no, "a time")
        wrong: int | None = None
        err: float | None = None
        for key in ("#wrong", "error", "res"):
            i = at.get(key)
            tok = None if i is None else toks[i]
            if tok is None or tok == "N/A":
                continue
            if key == "#wrong":  # printed with "%6g": large counts come as 1.2e+06
                count = _num(tok, no, "a #wrong count")
                if not math.isfinite(count) or count < 0 or count != int(count):
                    raise ParseError(no, "a #wrong count", tok)
                wrong = int(count)
            else:
                err = _num(tok, no, "an error value")
        return Measurement(
            t * 1000 if time_ms else t,
            _num(toks[at["algbw"]], no, "an algbw"),
            _num(toks[at["busbw"]], no, "a busbw"),
            wrong,
            err,
        )

    def row(self, no: int, toks: list[str]) -> Row:
        c = self.cols
        assert c is not None
        if c.timestamp:
            toks = toks[:-2]
        n_pre, widths = len(c.prefix), c.widths
        sides: list[Measurement | None] = [None] * len(c.sides)
        if len(toks) == n_pre + sum(widths):
            at = n_pre
            for i, side in enumerate(c.sides):
                sides[i] = self.measurement(no, side, c.at[i], toks[at : at + widths[i]], c.time_ms)
                at += widths[i]
        elif len(c.sides) == 2 and len(toks) == n_pre + widths[1]:  # no out-of-place (trace replay)
            sides[1] = self.measurement(no, c.sides[1], c.at[1], toks[n_pre:], c.time_ms)
        else:
            want = n_pre + sum(widths)
            raise ParseError(no, f"a result row of {want} columns ({' '.join(c.prefix)} ...)", " ".join(toks))
        size = int(_num(toks[0], no, "a size in bytes", integer=True))
        count = int(_num(toks[1], no, "an element count", integer=True))
        pre = c.pre_at
        redop = toks[pre["redop"]] if "redop" in pre else (toks[pre["op"]] if "op" in pre else None)
        root = toks[pre["root"]] if "root" in pre else None
        return Row(
            size,
            count,
            toks[2],
            redop,
            int(_num(root, no, "a root rank", integer=True)) if root is not None else None,
            sides[0],
            sides[1] if len(sides) > 1 else None,
        )

    def result(self) -> NcclTestsResult:
        ranks = tuple(self.ranks[k] for k in sorted(self.ranks))
        top = max(self.max_rank, ranks[-1].rank if ranks else -1)
        # Each process lists nThread x nGpus consecutive ranks, so the last one seen fixes the count
        # even when the end of the list is cut.
        per_proc = (self.nthreads or 1) * (self.ngpus or 1)
        nranks = (top // per_proc + 1) * per_proc if top >= 0 else None
        if ranks and len(ranks) != nranks:
            self.elided = True
        rows = tuple(self.rows)
        collective = self.collective or self.named or infer_collective(rows, nranks)
        return NcclTestsResult(
            collective,
            self.version,
            self.nccl_version,
            self.nthreads,
            self.ngpus,
            nranks,
            ranks,
            self.elided,
            rows,
            self.avg,
            self.avg_verdict,
            self.oob,
            self.oob_ok,
            self.failures[0] if self.failures else None,
            tuple(self.failures),
            max(self.runs, 1),
        )
