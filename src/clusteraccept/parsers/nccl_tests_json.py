"""The ``-J file.json`` output of nccl-tests (v2.17+), schema version 3.

Written by NVIDIA/nccl-tests src/util.cu (v2.19.6): ``jsonOutputInit()`` (version, start_time, args, env,
nccl_version), ``writeDeviceReport()`` (config: nthreads, ngpus, ..., devices[{rank, group, pid, hostname,
device, device_hex, device_info}]), ``writeBenchmarkLinePreamble()``/``writeBenchmarkLineBody()`` (results[
{size, count, type, redop, root (a "%6i" string), out_of_place/in_place {time|cpu_time, alg_bw, bus_bw,
nwrong (null = N/A)}}]), ``writeResultFooter()`` (out_of_bounds {count, okay}, average_bus_bandwidth
{bandwidth, okay}), ``writeErrors()`` (errors [...]). Booleans are written as the strings "true"/"false"
(``jsonBool()`` calls ``jsonStr()``) and NaN as the string "nan" (``jsonDouble()``).

``devices`` holds ONE entry per process (``parseRankInfo()`` reads the first line of each process's
report), so nranks = processes x nthreads x ngpus and the rank list is elided when a process drives more
than one GPU. The whole environment of the run is in ``env``: it is kept only redacted.
"""

from __future__ import annotations

import json
import math
from typing import Any

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
from clusteraccept.redact import redact_env

_WHAT = "nccl-tests -J JSON (schema version 3)"


def _bad(expected: str, got: object) -> ParseError:
    return ParseError(1, f"{_WHAT}: {expected}", repr(got)[:80])


def _obj(v: object, what: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _bad(f"{what} as an object", v)
    return v


def _int(v: object, what: str) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if not isinstance(v, float | str):
        raise _bad(f"{what} as an integer", v)
    try:
        f = float(v)  # nwrong is written as a double ("%lf"), root as a "%6i" string
        if not math.isfinite(f) or f != int(f):
            raise ValueError
        return int(f)
    except (ValueError, OverflowError):
        raise _bad(f"{what} as an integer", v) from None


def _float(v: object, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise _bad(f"{what} as a number", v)
    try:
        return float(v)  # "nan" is how jsonDouble() writes NaN
    except (ValueError, OverflowError):
        raise _bad(f"{what} as a number", v) from None


def _str(v: object, what: str) -> str:
    if not isinstance(v, str):
        raise _bad(f"{what} as a string", v)
    return v


def _list(v: object, what: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _bad(f"{what} as a list", v)
    return v


def _side(v: object, what: str) -> Measurement | None:
    if v is None:
        return None
    d = _obj(v, what)
    t = d.get("time", d.get("cpu_time"))
    nwrong = d.get("nwrong")
    return Measurement(
        _float(t, f"{what}.time"),
        _float(d.get("alg_bw"), f"{what}.alg_bw"),
        _float(d.get("bus_bw"), f"{what}.bus_bw"),
        None if nwrong is None else _int(nwrong, f"{what}.nwrong"),
    )


def _row(v: object, i: int) -> Row:
    d = _obj(v, f"results[{i}]")
    root = d.get("root")
    return Row(
        _int(d.get("size"), "size"),
        _int(d.get("count"), "count"),
        _str(d.get("type"), "type"),
        None if d.get("redop") is None else _str(d.get("redop"), "redop"),
        None if root is None else _int(str(root).strip(), "root"),
        _side(d.get("out_of_place"), f"results[{i}].out_of_place"),
        _side(d.get("in_place"), f"results[{i}].in_place"),
    )


def _rank(v: object, i: int) -> RankInfo:
    d = _obj(v, f"config.devices[{i}]")
    return RankInfo(
        _int(d.get("rank"), "rank"),
        _int(d.get("group"), "group"),
        _int(d.get("pid"), "pid"),
        _str(d.get("hostname"), "hostname"),
        _int(d.get("device"), "device"),
        _str(d.get("device_hex"), "device_hex"),
        _str(d.get("device_info"), "device_info"),
    )


def _okay(v: object) -> bool | None:
    if isinstance(v, bool):
        return v
    return {"true": True, "false": False}.get(v) if isinstance(v, str) else None


def parse_json(text: str) -> NcclTestsResult:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(exc.lineno, _WHAT, exc.msg) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer of more than 4300 digits
        raise ParseError(1, _WHAT, str(exc)[:80]) from None
    d = _obj(doc, "the document")
    if "results" not in d and "config" not in d:
        raise _bad("a 'config' or 'results' key", sorted(d)[:5])
    args = [_str(a, "args[]") for a in _list(d.get("args"), "args")]
    env: dict[str, str] = {}
    for e in _list(d.get("env"), "env"):
        name, _, value = _str(e, "env[]").partition("=")
        env[name] = value
    cfg = _obj(d.get("config", {}), "config")
    nthreads = _int(cfg.get("nthreads", 1), "config.nthreads")
    ngpus = _int(cfg.get("ngpus", 1), "config.ngpus")
    ranks = tuple(
        sorted(
            (_rank(v, i) for i, v in enumerate(_list(cfg.get("devices"), "devices"))), key=lambda r: r.rank
        )
    )
    nranks = len(ranks) * nthreads * ngpus if ranks else None
    rows = tuple(_row(v, i) for i, v in enumerate(_list(d.get("results"), "results")))
    oob = d.get("out_of_bounds")
    avg = d.get("average_bus_bandwidth")
    oob_d = _obj(oob, "out_of_bounds") if oob is not None else {}
    avg_d = _obj(avg, "average_bus_bandwidth") if avg is not None else {}
    avg_ok = _okay(avg_d.get("okay"))
    failures = tuple(_str(e, "errors[]") for e in _list(d.get("errors"), "errors") if e)
    code = d.get("nccl_version")
    return NcclTestsResult(
        collective=(collective_of(args[0]) if args else None) or infer_collective(rows, nranks),
        version=None,  # the JSON names its schema version, not the nccl-tests version
        nccl_version=nccl_version_of(_int(code, "nccl_version")) if code is not None else None,
        nthreads=nthreads,
        ngpus=ngpus,
        nranks=nranks,
        ranks=ranks,
        ranks_elided=nranks is not None and len(ranks) < nranks,
        rows=rows,
        avg_busbw_GBps=_float(avg_d["bandwidth"], "bandwidth") if "bandwidth" in avg_d else None,
        avg_busbw_verdict=None if avg_ok is None else ("OK" if avg_ok else "FAILED"),
        out_of_bounds=_int(oob_d["count"], "out_of_bounds.count") if "count" in oob_d else None,
        out_of_bounds_ok=_okay(oob_d.get("okay")),
        failure=failures[0] if failures else None,
        failures=failures,
        env=tuple(redact_env(env).items()),
        source_format="json",
    )
