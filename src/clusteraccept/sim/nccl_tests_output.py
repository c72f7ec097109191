"""The simulated nccl-tests' output, byte for byte: stdout (and the -J JSON document) of rank 0 of one run.

Layout from nccl-tests v2.19.6: src/util.cu ``writeDeviceReport()``, ``writeResultHeader()``,
``writeBenchmarkLine*()``, ``getFloatStr()``, ``writeResultFooter()``, ``writeErrors()``,
``jsonOutputInit()``; src/common.cu ``run()``/``TimeTest()``; see tests/data/nccl-tests/*-v2.19.6.txt.
The numbers come from the fabric model of :mod:`clusteraccept.sim.fabric` (times the CollNet uplift of
:mod:`clusteraccept.sim.nccl_info`). The command line, the environment and the files written are
:mod:`clusteraccept.sim.nccl_tests`'s.
"""

from __future__ import annotations

import sys
import time
import zlib
from typing import Any

from clusteraccept.sim.fabric import BUS_FACTOR, Fabric, busbw_GBps, gpu_rails, mnnvl, physical_gpu
from clusteraccept.sim.nccl_info import collnet_uplift
from clusteraccept.sim.nccl_tests_options import TYPES, Options, rails_from_hca

VERSION, NCCL_CODE = "2.19.6", 22809  # the nccl-tests and NCCL of the real captures


def _printf(fmt: str, *args: object) -> str:
    return fmt % args  # nccl-tests' own printf formats, kept verbatim


def float_str(value: float, width: int) -> str:
    """nccl-tests ``getFloatStr()``: %.2f, else %.1f, else %.0f, else an exponent, cut to ``width``."""
    for fmt in ("%*.2f", "%*.1f", "%*.0f"):
        s = _printf(fmt, width, value)
        if len(s) <= width:
            return s
    return _printf("%*.1e" if width >= 7 else "%*.0e", width, value)[:width]  # snprintf() truncates


def _counts(coll: str, size: int, ws: int, nranks: int) -> tuple[int, int]:
    """(printed size, printed count) for a requested size (``setupArgs()`` + ``*GetCollByteCount()``)."""
    count = size // ws
    if coll in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // nranks) & ~(16 // ws - 1)
        return base * nranks * ws, base
    return count * ws, count


def _pid(host: str, local: int) -> int:
    return 1000 + zlib.crc32(host.encode()) % 60000 + local


def step_attempt(env: dict[str, str]) -> str:
    """Which attempt of a step this run is: ``SLURM_JOB_ID.SLURM_STEP_ID`` (srun(1) "OUTPUT ENVIRONMENT
    VARIABLES" sets both in every step), so a retest in a new step draws new run-to-run noise; "" outside
    Slurm."""
    job, step = env.get("SLURM_JOB_ID", ""), env.get("SLURM_STEP_ID", "")
    return f"{job}.{step}" if job or step else ""


def render(
    name: str,
    opts: Options,
    fab: Fabric,
    hosts: list[str],
    tasks_per_node: list[int],
    env: dict[str, str],
    *,
    attempt: str | None = None,
) -> tuple[str, int]:
    """The stdout and exit code of rank 0 of one run over ``hosts`` (pure: no I/O)."""
    text, rc, _ = render_run(name, opts, fab, hosts, tasks_per_node, env, attempt=attempt)
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
    pids: tuple[int, ...] = (),
    *,
    attempt: str | None = None,
) -> tuple[str, int, dict[str, Any] | None]:
    """:func:`render` plus the -J JSON document (schema 3) when ``json_path`` is given (no I/O).

    ``pids``: each process's pid in rank order, where MPI told them (else made up from the host name).
    ``attempt``: keys the fabric's run-to-run noise; None: :func:`step_attempt` of ``env``."""
    attempt = step_attempt(env) if attempt is None else attempt
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
    rank, proc, devices, results = 0, 0, list[dict[str, Any]](), list[dict[str, Any]]()
    for host, ntasks in zip(hosts, tasks_per_node, strict=True):
        node = fab.node(host)
        short = host.split(".", 1)[0]
        for local in range(ntasks):
            pid = pids[proc] if proc < len(pids) else _pid(host, local)
            proc += 1
            for i in range(per_proc):
                dev = local * per_proc + i
                if dev >= node.gpus:
                    sys.stderr.write(
                        f"Invalid number of GPUs: {dev + 1} requested but only {node.gpus} were "
                        "found.\nPlease check the number of processes and GPUs per process.\n"
                    )
                    out.append(f" .. {short} pid {pid}: Test failure common.cu:1454\n")
                    return "".join(out), 5, None
                gpu = physical_gpu(fab, host, env, dev)
                bus_id = node.bus_ids[gpu] if gpu < len(node.bus_ids) else f"0000:{0x18 + 0x10 * gpu:02x}:00"
                if i == 0:  # the JSON gets the first line of each process's report (parseRankInfo())
                    devices.append(
                        {
                            "rank": rank,
                            "group": 0,
                            "pid": pid,
                            "hostname": short,
                            "device": dev,
                            "device_hex": bus_id,
                            "device_info": node.gpu_name,
                        }
                    )
                out.append(
                    f"#  Rank {rank:2d} Group {0:2d} Pid {pid:6d} on {short:>10s} "
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
    hca = hca or gpu_rails(fab, hosts[0], env, max(tasks_per_node) * per_proc)
    ws = TYPES[opts.dtype]
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
                    attempt=attempt,
                    nvlink=mnnvl(fab, hosts, env),
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
