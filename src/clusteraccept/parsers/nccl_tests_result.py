"""What nccl-tests printed, as data: the result model both of its formats parse into (the text, read by
:mod:`.nccl_tests`, and the ``-J`` JSON, read by :mod:`.nccl_tests_json`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class RankInfo:
    rank: int
    group: int | None  # None before v2.14 (no "Group" on the line)
    pid: int | None  # None in v1.x
    host: str  # short host name (nccl-tests cuts the name at the first '.')
    device: int  # CUDA device index on that host
    bus_id: str  # "0000:00:06" (v2.16+) or "0x0f"
    gpu_name: str


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    wrong: int | None  # #wrong elements; None for "N/A" (data check off / alltoall+sendrecv in-place)
    max_error: float | None = None  # v2.0-2.12 "error" column (max deviation), instead of #wrong


@dataclass(frozen=True)
class Row:
    size_B: int
    count: int
    type: str
    redop: str | None  # None where the layout has no redop column
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None


@dataclass(frozen=True)
class NcclTestsResult:
    collective: str | None  # "all_reduce", "all_gather", ... (binary name without "_perf")
    version: str | None  # nccl-tests version (v2.18+ header)
    nccl_version: str | None  # NCCL library version "2.28.9" (header, JSON or NCCL's own version line)
    nthreads: int | None
    ngpus: int | None  # GPUs per thread (-g)
    nranks: int | None  # ranks in the whole run (max rank + 1; JSON: processes x threads x GPUs)
    ranks: tuple[RankInfo, ...]
    ranks_elided: bool  # the rank list is incomplete (cut lines, "..." lines, gaps)
    rows: tuple[Row, ...]
    avg_busbw_GBps: float | None
    avg_busbw_verdict: str | None  # "OK"/"FAILED" only when NCCL_TESTS_MIN_BW was set
    out_of_bounds: int | None
    out_of_bounds_ok: bool | None
    failure: str | None  # the first failure line (the root cause), None if none
    failures: tuple[str, ...] = ()
    runs: int = 1  # separate runs found in the text (>1: independent processes, e.g. a non-MPI build)
    env: tuple[tuple[str, str], ...] = ()  # JSON only, secrets redacted
    source_format: str = "text"
    hosts: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        seen = dict.fromkeys(r.host for r in self.ranks)
        object.__setattr__(self, "hosts", tuple(seen))

    def row(self, size_B: int) -> Row | None:
        return next((r for r in self.rows if r.size_B == size_B), None)

    @property
    def peak_busbw_GBps(self) -> float | None:
        vals = [m.busbw_GBps for r in self.rows for m in (r.out_of_place, r.in_place) if m is not None]
        return max(vals) if vals else None


_WORD_SIZE = {
    "int8": 1,
    "uint8": 1,
    "char": 1,
    "f8e4m3": 1,
    "f8e5m2": 1,
    "half": 2,
    "bfloat16": 2,
    "int32": 4,
    "uint32": 4,
    "int": 4,
    "float": 4,
    "int64": 8,
    "uint64": 8,
    "double": 8,
}


def nccl_version_of(code: int) -> str:
    """NCCL_VERSION_CODE -> "X.Y.Z" (X*10000+Y*100+Z since 2.9, X*1000+Y*100+Z before)."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def collective_of(binary: str) -> str | None:
    """ "/opt/nccl-tests/build/all_reduce_perf_mpi" -> "all_reduce" (NAME_SUFFIX tolerated)."""
    m = re.search(r"([A-Za-z0-9_]+?)_perf", binary.rsplit("/", 1)[-1])
    return m.group(1) if m else None


def infer_collective(rows: tuple[Row, ...], nranks: int | None) -> str | None:
    """The collective, from the columns alone, where only one fits (None where ambiguous).

    Sizes per collective (``*GetCollByteCount``/``*GetBw`` in src/<coll>.cu): all_reduce, sendrecv and
    broadcast print size = count x wordsize; all_gather, reduce_scatter and alltoall size = count x wordsize
    x nranks; busbw/algbw is 2(n-1)/n for all_reduce, 1 for sendrecv.
    """
    big = [r for r in rows if r.out_of_place is not None and r.out_of_place.algbw_GBps >= 1.0]
    if not big or nranks is None or nranks < 2 or big[-1].type not in _WORD_SIZE:
        return None
    r, m = big[-1], big[-1].out_of_place
    assert m is not None
    per_rank = r.size_B == r.count * _WORD_SIZE[r.type] * nranks
    whole = r.size_B == r.count * _WORD_SIZE[r.type]
    reduces = r.redop not in (None, "none")
    if r.root is not None and r.root >= 0:
        return ("reduce" if reduces else "broadcast") if whole else None
    ratio = m.busbw_GBps / m.algbw_GBps
    if per_rank and reduces:
        return "reduce_scatter"
    if whole and reduces and nranks > 2:
        if abs(ratio - 2 * (nranks - 1) / nranks) < 0.03:
            return "all_reduce"
        if abs(ratio - 1) < 0.03:
            return "sendrecv"
    return None
