"""The PyTorch NCCL fallback collector's output (``python -m clusteraccept.probes.torch_nccl``): JSON lines.

The format is this project's own (documented in :mod:`clusteraccept.probes.torch_nccl`): a header record
(``"format": "clusteraccept.torch-nccl"``, version 1, collective, nranks, ranks...), one record per size
(size_B, count, in_place, time_us, algbw_GBps, busbw_GBps, wrong), an end record (``"end": true``), or an
error record (``{"error": ...}``). Lines that do not start with ``{`` are noise (NCCL INFO lines when
NCCL_DEBUG=INFO, launcher output); a line that starts with ``{`` and is not such a record is a ParseError.

:func:`as_nccl_tests` gives the result in nccl-tests' shape (rows and ranks), so the nccl judge applies the
same launch self-checks and baselines to it; its ``source_format`` stays ``"torch-nccl"``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from clusteraccept.errors import ParseError
from clusteraccept.parsers.nccl_tests_result import Measurement, NcclTestsResult, RankInfo, Row

FORMAT = "clusteraccept.torch-nccl"
VERSIONS = (1,)
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")


@dataclass(frozen=True)
class TorchNcclResult:
    collective: str | None
    nranks: int | None
    torch_version: str | None
    nccl_version: str | None
    iters: int | None
    warmup_iters: int | None
    check: bool | None
    ranks: tuple[RankInfo, ...]
    rows: tuple[Row, ...]
    complete: bool  # the end record was seen
    avg_busbw_GBps: float | None
    wrong_total: int | None
    error: str | None  # the error record's message, None if none
    runs: int = 1  # header records found (>1: several independent runs in one output)


def _num(rec: dict[str, Any], key: str, no: int, *, integer: bool = False, null: bool = False) -> Any:
    value = rec.get(key)
    if value is None and null:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or not math.isfinite(value) or value < 0:  # type: ignore[arg-type,operator]
        kind = "an integer >= 0" if integer else "a number >= 0"
        raise ParseError(no, f"{key}: {kind}{' or null' if null else ''}", repr(value)[:80])
    return value


def _str(rec: dict[str, Any], key: str, no: int, *, null: bool = True) -> str | None:
    value = rec.get(key)
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise ParseError(no, f"{key}: a string", repr(value)[:80])
    return value


def _rank(item: Any, no: int) -> RankInfo:
    if not isinstance(item, dict):
        raise ParseError(no, "ranks: objects {rank, host, device, bus_id, gpu_name}", repr(item)[:80])
    return RankInfo(
        rank=_num(item, "rank", no, integer=True),
        group=None,
        pid=None,
        host=_str(item, "host", no, null=False) or "",
        device=_num(item, "device", no, integer=True),
        bus_id=_str(item, "bus_id", no) or "",
        gpu_name=_str(item, "gpu_name", no) or "",
    )


def _row(rec: dict[str, Any], no: int) -> Row:
    in_place = rec.get("in_place", False)
    if not isinstance(in_place, bool):
        raise ParseError(no, "in_place: true or false", repr(in_place)[:80])
    m = Measurement(
        time_us=_num(rec, "time_us", no),
        algbw_GBps=_num(rec, "algbw_GBps", no),
        busbw_GBps=_num(rec, "busbw_GBps", no),
        wrong=_num(rec, "wrong", no, integer=True, null=True),
    )
    return Row(
        size_B=_num(rec, "size_B", no, integer=True),
        count=_num(rec, "count", no, integer=True),
        type="float",
        redop=None,
        root=None,
        out_of_place=None if in_place else m,
        in_place=m if in_place else None,
    )


def _record(line: str, no: int) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise ParseError(no, "a JSON object on one line", f"{line[:60]!r} ({exc})") from None
    if not isinstance(rec, dict):
        raise ParseError(no, "a JSON object on one line", line[:60])
    return rec


def parse(text: str) -> TorchNcclResult:
    """Parse the fallback collector's stdout (noise lines tolerated)."""
    header: dict[str, Any] | None = None
    header_no = 0
    runs = 0
    ranks: tuple[RankInfo, ...] = ()
    rows: list[Row] = []
    end: dict[str, Any] | None = None
    error: str | None = None
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line.startswith("{"):
            continue
        rec = _record(line, no)
        if "error" in rec:
            error = error or str(rec["error"])
        elif "format" in rec:
            if rec["format"] != FORMAT:
                raise ParseError(no, f"format {FORMAT!r}", repr(rec["format"])[:80])
            if rec.get("version") not in VERSIONS:
                raise ParseError(no, f"version among {VERSIONS}", repr(rec.get("version"))[:40])
            if rec.get("collective") not in COLLECTIVES:
                raise ParseError(
                    no, f"collective among {', '.join(COLLECTIVES)}", repr(rec.get("collective"))
                )
            items = rec.get("ranks", [])
            if not isinstance(items, list):
                raise ParseError(no, "ranks: a list", repr(items)[:80])
            header, header_no, runs = rec, no, runs + 1
            ranks = tuple(_rank(item, no) for item in items)
            _num(rec, "nranks", no, integer=True)
        elif "size_B" in rec:
            if header is None:
                raise ParseError(no, "the header record before the first size", line[:60])
            rows.append(_row(rec, no))
        elif rec.get("end") is True:
            end = rec
            _num(rec, "avg_busbw_GBps", no)
            _num(rec, "wrong", no, integer=True)
        else:
            raise ParseError(no, "a torch-nccl record (format, size_B, end or error)", line[:60])
    if header is None and error is None:
        raise ParseError(0, f"a {FORMAT} header record", "none (is this the fallback collector's output?)")
    h = header or {}
    check = h.get("check")
    return TorchNcclResult(
        collective=h.get("collective"),
        nranks=h.get("nranks"),
        torch_version=_str(h, "torch", header_no),
        nccl_version=_str(h, "nccl", header_no),
        iters=_num(h, "iters", header_no, integer=True, null=True),
        warmup_iters=_num(h, "warmup_iters", header_no, integer=True, null=True),
        check=check if isinstance(check, bool) else None,
        ranks=ranks,
        rows=tuple(rows),
        complete=end is not None,
        avg_busbw_GBps=None if end is None else float(end["avg_busbw_GBps"]),
        wrong_total=None if end is None else int(end["wrong"]),
        error=error,
        runs=max(runs, 1),
    )


def as_nccl_tests(result: TorchNcclResult) -> NcclTestsResult:
    """The result in nccl-tests' shape, for the same launch self-checks and baselines (the caller says
    where it came from: ``source_format`` is ``"torch-nccl"``). No out-of-bounds check exists here."""
    failure = result.error or (None if result.complete else "no end record (the collector did not finish)")
    return NcclTestsResult(
        collective=result.collective,
        version=None,
        nccl_version=result.nccl_version,
        nthreads=None,
        ngpus=None,
        nranks=result.nranks,
        ranks=result.ranks,
        ranks_elided=False,
        rows=result.rows,
        avg_busbw_GBps=result.avg_busbw_GBps,
        avg_busbw_verdict=None,
        out_of_bounds=None,
        out_of_bounds_ok=None,
        failure=failure,
        failures=(failure,) if failure else (),
        runs=result.runs,
        source_format="torch-nccl",
    )
