"""A drop-in simulated nccl-tests: ``python -m clusteraccept.sim.nccl_tests all_reduce_perf -b 1G -e 8G``.

Prints, byte for byte, what nccl-tests v2.19.6 prints (src/util.cu ``writeDeviceReport()``,
``writeResultHeader()``, ``writeBenchmarkLine*()``, ``getFloatStr()``, ``writeResultFooter()``,
``writeErrors()``; src/common.cu ``run()``/``TimeTest()``; see tests/data/nccl-tests/*-v2.19.6.txt), with
numbers from the fabric model of :mod:`clusteraccept.sim.fabric`. Flags are nccl-tests' own (README.md
"Arguments"; ``getopt_long`` string in src/common.cu): -t -g -b -e -i -f -n -m -w -N -p -c -o -d -r -z -y
-T -G -C -a -R -x -D -V -J -S -M -u -I -K -h; those that only tune a real run are accepted and ignored.

Environment:
- ``CLUSTERACCEPT_FABRIC``: path of the fabric JSON (below). Required.
- hosts: ``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST``, else ``CLUSTERACCEPT_SIM_HOSTS`` (hostlists),
  else this host's name. Tasks: ``SLURM_STEP_NUM_TASKS``, else ``SLURM_NTASKS``, else one per host, spread
  as ``SLURM_STEP_TASKS_PER_NODE`` says (``2(x3),1``) or in blocks. ``SLURM_PROCID``/``SLURM_NODEID``:
  only task 0 prints, like the MPI ranks of the real binary (with the ``non_mpi`` fault every task prints
  its own 1-process run). nranks = tasks x -t x -g.
- ``NCCL_IB_HCA``: which rails (HCAs) are used, NCCL's syntax (NVIDIA/nccl docs/userguide/source/env.rst
  "NCCL_IB_HCA"; src/transport/net_ib/init.cc, src/misc/utils.cc ``parseStringList()``/``matchIf()``):
  comma-separated ``<hca>[:<port>...]`` prefixes, ``^`` = exclude list, ``=`` = exact names.
- ``NCCL_TESTS_MIN_BW``: as in nccl-tests, the average busbw below 0.9 x this value fails the run.

Fabric JSON (:func:`clusteraccept.sim.fabric.fabric_from_dict`)::

    {"seed": 7, "latency_us": 20, "noise": 0.01, "efficiency": {"alltoall": 0.85},
     "defaults": {"gpus": 8, "rails": ["mlx5_0", ..., "mlx5_7"], "rail_GBps": 50, "nvlink_GBps": 450,
                  "gpu_name": "NVIDIA H100 80GB HBM3", "bus_ids": ["0000:18:00", ...]},
     "leaves": [{"name": "leaf1", "nodes": "node[01-16]", "uplink_GBps": 6400}, ...],
     "nodes": {"node[01-02]": {"rail_GBps": 25}},                     (overrides, hostlist keys)
     "faults": {"slow_rail": [{"node": "node03", "rail": 5, "factor": 0.5}],
                "bad_cable": [{"a": "node03", "b": "node07", "rail": 2, "factor": 0.3}],
                "slow_uplink": {"leaf": "leaf2", "factor": 0.25},
                "slow_node": {"node": "node09", "factor": 0.7},
                "non_mpi": false, "wrong": [{"node": "node05"}]}}
"""

from __future__ import annotations

import getopt
import json
import os
import re
import shlex
import socket
import stat
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hostlist

from clusteraccept.sim.fabric import BUS_FACTOR, Fabric, busbw_GBps, load_fabric
from clusteraccept.sim.nccl_info import collnet_uplift

BINARIES = ("all_reduce_perf", "all_gather_perf", "reduce_scatter_perf", "alltoall_perf", "sendrecv_perf")
VERSION, NCCL_CODE = "2.19.6", 22809  # the nccl-tests and NCCL of the real captures
_SHORT = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
_LONG = [
    "nthreads=",
    "ngpus=",
    "minbytes=",
    "maxbytes=",
    "stepbytes=",
    "stepfactor=",
    "iters=",
    "agg_iters=",
    "warmup_iters=",
    "run_cycles=",
    "parallel_init=",
    "check=",
    "op=",
    "datatype=",
    "root=",
    "blocking=",
    "stream_null=",
    "timeout=",
    "cudagraph=",
    "report_cputime=",
    "report_timestamps=",
    "output_file=",
    "average=",
    "local_register=",
    "cta_policy=",
    "device_implementation=",
    "device_cta_count=",
    "memory=",
    "unalign=",
    "per_iter_timing=",
    "per_iter_skip=",
    "help",
]
_LONG_TO_SHORT = {
    n.rstrip("="): _SHORT[_SHORT.index(c)]
    for n, c in zip(_LONG, "tgbeifnmwNpcodrzyTGCSJaRxDVMuIKh", strict=True)
}
_TYPES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}
_OPS = ("sum", "prod", "max", "min", "avg", "mulsum")


@dataclass
class Options:  # defaults: src/common.cu globals of v2.19.6
    nthreads: int = 1
    ngpus: int = 1
    minbytes: int = 32 << 20
    maxbytes: int = 32 << 20
    stepbytes: int = 1 << 20
    stepfactor: int = 1
    iters: int = 20
    agg_iters: int = 1
    warmup: int = 1
    datacheck: int = 1
    cudagraph: int = 0
    unalign: int = 0
    dtype: str = "float"
    op: str = "sum"
    output_file: str | None = None  # -J


def _printf(fmt: str, *args: object) -> str:
    return fmt % args  # nccl-tests' own printf formats, kept verbatim


def parsesize(value: str) -> int:
    """nccl-tests ``parsesize()``: a number with an optional K/M/G suffix (binary units); -1 if invalid."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(\S?)\S*\s*", value)
    if not m:
        return -1
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(m.group(2).lower())
    return -1 if units is None else int(float(m.group(1)) * units)


def float_str(value: float, width: int) -> str:
    """nccl-tests ``getFloatStr()``: %.2f, else %.1f, else %.0f, else an exponent, cut to ``width``."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = _printf(fmt, width, value)
        if len(s) <= width:
            return s
    return _printf("%*.1e" if width >= 7 else "%*.0e", width, value)[:width]  # snprintf() truncates


def rails_from_hca(env: str | None, hcas: tuple[str, ...]) -> tuple[int, ...]:
    """Rail indices selected by an NCCL_IB_HCA value (None/empty: all)."""
    if not env:
        return tuple(range(len(hcas)))
    exclude = env.startswith("^")
    env = env[1:] if exclude else env
    exact = env.startswith("=")
    env = env[1:] if exact else env
    names = [e.split(":", 1)[0] for e in env.split(",") if e.split(":", 1)[0]]
    hit = [any(h == n if exact else h.startswith(n) for n in names) for h in hcas]
    return tuple(k for k, h in enumerate(hit) if h != exclude)


def _counts(coll: str, size: int, ws: int, nranks: int) -> tuple[int, int]:
    """(printed size, printed count) for a requested size (``setupArgs()`` + ``*GetCollByteCount()``)."""
    count = size // ws
    if coll in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // nranks) & ~(16 // ws - 1)
        return base * nranks * ws, base
    return count * ws, count


def _tasks_per_node(env: dict[str, str], hosts: list[str], tasks: int) -> list[int]:
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    if spec:
        out: list[int] = []
        for part in spec.split(","):
            m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
            if m:
                out += [int(m.group(1))] * int(m.group(2) or 1)
        if len(out) == len(hosts) and sum(out) == tasks:
            return out
    per, extra = divmod(tasks, len(hosts))
    return [per + (i < extra) for i in range(len(hosts))]


def _pid(host: str, local: int) -> int:
    return 1000 + zlib.crc32(host.encode()) % 60000 + local


def render(
    name: str, opts: Options, fab: Fabric, hosts: list[str], tasks_per_node: list[int], env: dict[str, str]
) -> tuple[str, int]:
    """The stdout and exit code of rank 0 of one run over ``hosts`` (pure: no I/O)."""
    text, rc, _ = render_run(name, opts, fab, hosts, tasks_per_node, env)
    return text, rc


def render_run(
    name: str,
    opts: Options,
    fab: Fabric,
    hosts: list[str],
    tasks_per_node: list[int],
    env: dict[str, str],
    json_path: str | None = None,
    argv: tuple[str, ...] = (),
) -> tuple[str, int, dict[str, Any] | None]:
    """:func:`render` plus the -J JSON document (schema 3) when ``json_path`` is given (no I/O)."""
    coll = name.removesuffix("_perf")
    per_proc = opts.nthreads * opts.ngpus
    nprocs = sum(tasks_per_node)
    nranks = nprocs * per_proc
    step = f"{opts.stepfactor}(factor)" if opts.stepfactor > 1 else f"{opts.stepbytes}(bytes)"
    out = [f"# Writing JSON output to {json_path}\n"] if json_path else []
    out += [
        f"# nccl-tests version {VERSION} nccl-headers={NCCL_CODE} nccl-library={NCCL_CODE}\n",
        f"# Collective test starting: {name}\n",
        f"# nThread {opts.nthreads} nGpus {opts.ngpus} minBytes {opts.minbytes} maxBytes {opts.maxbytes} "
        f"step: {step} warmup iters: {opts.warmup} iters: {opts.iters} agg iters: {opts.agg_iters} "
        f"validation: {opts.datacheck} graph: {opts.cudagraph} unalign: {opts.unalign}\n",
        "#\n",
        "# Using devices\n",
    ]
    rank, devices, results = 0, list[dict[str, Any]](), list[dict[str, Any]]()
    for host, ntasks in zip(hosts, tasks_per_node, strict=True):
        node = fab.node(host)
        short = host.split(".", 1)[0]
        for local in range(ntasks):
            for i in range(per_proc):
                dev = local * per_proc + i
                if dev >= node.gpus:
                    sys.stderr.write(
                        f"Invalid number of GPUs: {dev + 1} requested but only {node.gpus} were "
                        "found.\nPlease check the number of processes and GPUs per process.\n"
                    )
                    out.append(f" .. {short} pid {_pid(host, local)}: Test failure common.cu:1454\n")
                    return "".join(out), 5, None
                bus_id = node.bus_ids[dev] if dev < len(node.bus_ids) else f"0000:{0x18 + 0x10 * dev:02x}:00"
                if i == 0:  # the JSON gets the first line of each process's report (parseRankInfo())
                    devices.append(
                        {
                            "rank": rank,
                            "group": 0,
                            "pid": _pid(host, local),
                            "hostname": short,
                            "device": dev,
                            "device_hex": bus_id,
                            "device_info": node.gpu_name,
                        }
                    )
                out.append(
                    f"#  Rank {rank:2d} Group {0:2d} Pid {_pid(host, local):6d} on {short:>10s} "
                    f"device {dev:2d} [{bus_id}] {node.gpu_name}\n"
                )
                rank += 1
    cols = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n"
    out += [
        "#\n",
        _printf(
            "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
            "",
            "",
            "",
            "",
            "",
        ),
        _printf(
            cols,
            "size",
            "count",
            "type",
            "redop",
            "root",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            "time",
            "algbw",
            "busbw",
            "#wrong",
            0,
            "",
        ),
        _printf(
            cols,
            "(B)",
            "(elements)",
            "",
            "",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            "(us)",
            "(GB/s)",
            "(GB/s)",
            "",
            0,
            "",
        ),
    ]
    hca = rails_from_hca(env["NCCL_IB_HCA"], fab.node(hosts[0]).rails) if env.get("NCCL_IB_HCA") else None
    ws = _TYPES[opts.dtype]
    redop = "none" if coll in ("all_gather", "alltoall") else opts.op
    factor = BUS_FACTOR[coll](nranks)
    wrong_here = any(h in fab.faults.wrong for h in hosts)
    bw_sum, bw_n, errors = 0.0, 0, 0
    size = opts.minbytes
    while size <= opts.maxbytes:
        nbytes, count = _counts(coll, size, ws, nranks)
        row = _printf("%12li  %12li  %8s  %6s  %6s", nbytes, count, opts.dtype, redop, _printf("%6i", -1))
        record: dict[str, Any] = {
            "size": nbytes,
            "count": count,
            "type": opts.dtype,
            "redop": redop,
            "root": _printf("%6i", -1),
        }
        for in_place in (False, True):
            if nbytes == 0:
                sec = (0.4 + 0.4 * (zlib.crc32(f"{size}{in_place}".encode()) / 0xFFFFFFFF)) * 1e-6
            elif nranks == 1:  # a rank alone: a local copy (nccl-tests still divides by its own time)
                sec = 1.0e-6 + nbytes / 2.0e12
            else:
                bus = busbw_GBps(
                    fab,
                    coll,
                    hosts,
                    hca,
                    nbytes,
                    ranks_per_node=max(tasks_per_node) * per_proc,
                    in_place=in_place,
                )
                bus *= collnet_uplift(fab, coll, hosts, env)
                sec = nbytes * factor / (bus * 1e9)
            algbw = nbytes / 1e9 / sec
            busbw = algbw * factor
            report = opts.datacheck > 0 and not (in_place and coll in ("alltoall", "sendrecv"))
            wrong = count // 1000 + 1 if wrong_here and count > 0 else 0
            errors += nprocs * opts.nthreads if report and wrong else 0
            row += _printf(
                "  %7s  %6s  %6s", float_str(sec * 1e6, 7), float_str(algbw, 6), float_str(busbw, 6)
            )
            row += _printf("  %6g", wrong) if report else "    N/A"
            record["in_place" if in_place else "out_of_place"] = {
                "time": sec * 1e6,
                "alg_bw": algbw,
                "bus_bw": busbw,
                "nwrong": float(wrong) if report else None,
            }
            bw_sum, bw_n = bw_sum + busbw, bw_n + 1
        out.append(row + "\n")
        results.append({**record, "actual_iterations": opts.iters, "experiment_name": ""})
        if opts.stepfactor > 1 and size == 0:
            break  # (the real binary would loop forever on 0 x factor)
        size = size * opts.stepfactor if opts.stepfactor > 1 else size + opts.stepbytes
    avg = bw_sum / bw_n if bw_n else float("nan")
    min_bw = float(env["NCCL_TESTS_MIN_BW"]) if env.get("NCCL_TESTS_MIN_BW") else -1.0
    verdict = "" if min_bw == -1 else ("FAILED" if avg < min_bw * 0.9 else "OK")
    out += [
        _printf("# %-20s : %d %s\n", "Out of bounds values", errors, "FAILED" if errors else "OK"),
        _printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg, verdict),
        "#\n",
        f"# Collective test concluded: {name}\n",
        "#\n",
        "\n",
    ]
    doc = None
    if json_path:  # src/util.cu jsonOutputInit() ... writeErrors(); the env is the whole environment
        now = time.strftime("%Y-%m-%d %H:%M:%S")
        step_key = "step_factor" if opts.stepfactor > 1 else "step_bytes"
        doc = {
            "version": 3,
            "start_time": now,
            "args": [name, *argv],
            "env": [f"{k}={v}" for k, v in env.items()],
            "nccl_version": NCCL_CODE,
            "config": {
                "nthreads": opts.nthreads,
                "ngpus": opts.ngpus,
                "minimum_bytes": opts.minbytes,
                "maximum_bytes": opts.maxbytes,
                step_key: opts.stepfactor if opts.stepfactor > 1 else opts.stepbytes,
                "warmup_iters": opts.warmup,
                "iterations": opts.iters,
                "aggregated_iterations": opts.agg_iters,
                "validation": opts.datacheck,
                "graph": opts.cudagraph,
                "blocking_collectives": "false",
                "per_iter_timing": "false",
                "per_iter_skip": 0,
                "parallel_init": "false",
                "devices": devices,
            },
            "results": results,
            "out_of_bounds": {"count": errors, "okay": "false" if errors else "true"},
            "average_bus_bandwidth": {
                "bandwidth": avg,
                "okay": "unchecked" if not verdict else ("true" if verdict == "OK" else "false"),
            },
            "errors": [],
            "end_time": now,
        }
    if errors or verdict == "FAILED":
        out.append(f" .. {hosts[0].split('.', 1)[0]} pid {_pid(hosts[0], 0)}: Test failure common.cu:1454\n")
        return "".join(out), 7, doc  # testNumResults
    return "".join(out), 0, doc


def parse_args(argv: list[str]) -> Options | str:
    """nccl-tests' options; a string is the text nccl-tests prints for a bad command line."""
    try:
        pairs, _ = getopt.gnu_getopt(argv, _SHORT, _LONG)
    except getopt.GetoptError as exc:
        return f"invalid option '{exc.opt}'\n"
    o = Options()
    ints = {
        "t": "nthreads",
        "g": "ngpus",
        "f": "stepfactor",
        "n": "iters",
        "m": "agg_iters",
        "w": "warmup",
        "c": "datacheck",
        "G": "cudagraph",
        "u": "unalign",
    }
    for flag, val in pairs:
        c = _LONG_TO_SHORT.get(flag.lstrip("-"), flag.lstrip("-"))
        if c in ints:
            try:
                setattr(o, ints[c], int(val, 0))
            except ValueError:
                setattr(o, ints[c], 0)  # strtol() of garbage
        elif c in "bei":
            size = parsesize(val)
            if size < 0:
                what = {"b": "minbytes", "e": "maxbytes"}.get(c, "stepBytes")
                return f"invalid size specified for '{what}'\n"
            setattr(o, {"b": "minbytes", "e": "maxbytes", "i": "stepbytes"}[c], size)
        elif c == "d":
            o.dtype = val if val in _TYPES else "float"
        elif c == "o":
            o.op = val if val in _OPS else "sum"
        elif c == "J":
            o.output_file = val
        elif c == "h":
            return "USAGE: nccl-tests (simulated) [-t -g -b -e -i -f -n -m -w -c -o -d ...]\n"
    if o.minbytes > o.maxbytes:
        return f"invalid sizes for 'minbytes' and 'maxbytes': {o.minbytes} > {o.maxbytes}\n"
    return o


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] not in BINARIES:
        sys.stderr.write(f"usage: python -m clusteraccept.sim.nccl_tests {{{','.join(BINARIES)}}} [flags]\n")
        return 2
    env = dict(os.environ)
    opts = parse_args(args[1:])
    if isinstance(opts, str):
        sys.stdout.write(opts)
        return 0 if opts.startswith(("USAGE", "invalid option")) else 255
    if "CLUSTERACCEPT_FABRIC" not in env:
        sys.stderr.write("clusteraccept.sim.nccl_tests: CLUSTERACCEPT_FABRIC (fabric JSON path) is not set\n")
        return 2
    fab = load_fabric(env["CLUSTERACCEPT_FABRIC"])
    expr = next(
        (
            env[k]
            for k in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "CLUSTERACCEPT_SIM_HOSTS")
            if env.get(k)
        ),
        None,
    )
    hosts = list(dict.fromkeys(hostlist.expand_hostlist(expr))) if expr else [socket.gethostname()]
    tasks = int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or len(hosts))
    procid, nodeid = int(env.get("SLURM_PROCID", "0")), int(env.get("SLURM_NODEID", "0"))
    if fab.faults.non_mpi:  # every task is a world of its own, on its own node
        hosts, per_node = [hosts[min(nodeid, len(hosts) - 1)]], [1]
    elif procid != 0:
        return 0  # the other MPI ranks print nothing
    else:
        per_node = _tasks_per_node(env, hosts, max(tasks, 1))
    if not rails_from_hca(env.get("NCCL_IB_HCA"), fab.node(hosts[0]).rails) and len(hosts) > 1:
        sys.stderr.write(
            f"clusteraccept.sim.nccl_tests: NCCL_IB_HCA={env['NCCL_IB_HCA']} matches no HCA "
            f"of {hosts[0]} {fab.node(hosts[0]).rails}\n"
        )
        return 3
    json_path = _json_path(opts.output_file) if opts.output_file else None
    text, rc, doc = render_run(args[0], opts, fab, hosts, per_node, env, json_path, tuple(args[1:]))
    if json_path and doc is not None:
        Path(json_path).write_text(json.dumps(doc, separators=(",", ":")))
    from clusteraccept.sim.nccl_info import with_info

    sys.stdout.write(with_info(text, fab, hosts, env, args[0].removesuffix("_perf")))
    sys.stdout.flush()
    if len(hosts) > 1 and env.get("CLUSTERACCEPT_HOST_PROFILE"):  # traffic crossed the NICs
        from clusteraccept.sim.traffic import bump

        rails = fab.node(hosts[0]).rails
        used = rails_from_hca(env.get("NCCL_IB_HCA"), rails) or range(len(rails))
        bump(Path(env["CLUSTERACCEPT_HOST_PROFILE"]), hosts, [rails[i] for i in used])
    return rc


def _json_path(path: str) -> str | None:
    """jsonOutputInit(): the path, else path.0, path.1, ... (never overwrites); None if not writable."""
    try_path, n = path, 0
    while Path(try_path).exists():
        try_path, n = f"{path}.{n}", n + 1
    return try_path if os.access(Path(try_path).parent or ".", os.W_OK) else None


def install_bin_dir(path: Path, python: str) -> None:
    """Write executable wrappers named like the real binaries, running ``<python> -m ...sim.nccl_tests``."""
    path.mkdir(parents=True, exist_ok=True)
    for name in BINARIES:
        f = path / name
        f.write_text(f'#!/bin/sh\nexec {shlex.quote(python)} -m clusteraccept.sim.nccl_tests {name} "$@"\n')
        f.chmod(f.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


if __name__ == "__main__":
    sys.exit(main())
