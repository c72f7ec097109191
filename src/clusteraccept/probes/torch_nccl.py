"""The PyTorch NCCL fallback collector: nccl-tests' measurements through torch.distributed's NCCL backend.

For hosts without nccl-tests binaries (site: ``tools.nccl_tests_bin`` absent and ``nccl.fallback: torch``).
It takes the nccl-tests flags the campaign step passes (``-b -e -f -g -n -w -c``, nccl-tests README
"Arguments") plus ``--collective``, and prints ITS OWN format, never nccl-tests': JSON lines, parsed by
:mod:`clusteraccept.parsers.torch_nccl`, each a JSON object on one line, from global rank 0 only:

    {"format": "clusteraccept.torch-nccl", "version": 1, "collective": "all_reduce", "nranks": 2,
     "dtype": "float", "iters": 20, "warmup_iters": 5, "check": true, "torch": "2.11.0", "nccl": "2.28.9",
     "ranks": [{"rank": 0, "host": "vm", "device": 0, "bus_id": "0000:00:06", "gpu_name": "NVIDIA H200"}]}
    {"size_B": 1073741824, "count": 268435456, "in_place": true, "time_us": 6521.3,
     "algbw_GBps": 164.65, "busbw_GBps": 164.65, "wrong": 0}          (one line per size)
    {"end": true, "avg_busbw_GBps": 101.2, "wrong": 0}
    {"error": "..."}                                                  (instead of the rest, exit 1)

Sizes, counts and bandwidths follow nccl-tests (src/<coll>.cu GetCollByteCount/GetBw, src/common.cu):
size_B is the larger per-rank buffer (all_gather/reduce_scatter/alltoall round the per-rank count down to
a multiple of 16 bytes; sizes where it is 0 are left out), algbw = size_B / time, busbw = algbw x 2(n-1)/n
(all_reduce), (n-1)/n (all_gather, reduce_scatter, alltoall), 1 (sendrecv: rank r sends to r+1, receives
from r-1). time is the mean over ranks of the CUDA-event time of ``-n`` back-to-back calls divided by
``-n``, after ``-w`` warm-up calls at the largest and the smallest size (as nccl-tests). all_reduce runs
in place (torch's all_reduce has no output buffer); the others out of place. ``-c 1`` checks one extra
call per size: inputs hold rank+1, so every expected value is exact in float32.

Launch: under torchrun (RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR set) or srun with several tasks
(SLURM_PROCID/SLURM_STEP_NUM_TASKS/SLURM_LOCALID, rendezvous on the step's first node) each process is one
rank; otherwise one process starts ``-g`` ranks on this host, one per GPU (the ``local`` executor).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from typing import Any

FORMAT = "clusteraccept.torch-nccl"
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
WORD_B = 4  # float32, nccl-tests' default type (-d float)


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' busbw factor (doc/PERFORMANCE.md; src/<coll>.cu GetBw)."""
    if collective == "all_reduce":
        return 2 * (n - 1) / n
    if collective == "sendrecv":
        return 1.0
    return (n - 1) / n


def counts(collective: str, size_B: int, n: int) -> tuple[int, int]:
    """(per-rank piece count, whole-buffer bytes) as nccl-tests' GetCollByteCount gives them for a size."""
    count = size_B // WORD_B
    if collective in ("all_reduce", "sendrecv"):
        return count, count * WORD_B
    base = (count // n) & ~(16 // WORD_B - 1)
    return base, base * n * WORD_B


def sizes(min_B: int, max_B: int, factor: int) -> list[int]:
    out, size = [], min_B
    while size <= max_B:
        out.append(size)
        size = size * factor if factor > 1 else size + 1
    return out


def parse_bytes(text: str) -> int:
    """``8``, ``64M``, ``8G`` (nccl-tests src/common.cu parsesize(): K, M, G suffixes, powers of 1024)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(text[:-1] if mult > 1 else text) * mult


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _launch_env() -> tuple[int, int, int, str, int] | None:
    """(rank, world, local rank, master address, port) when a launcher started one process per rank."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and "MASTER_ADDR" in env:
        port = int(env.get("MASTER_PORT", "29500"))
        return (
            int(env["RANK"]),
            int(env["WORLD_SIZE"]),
            int(env.get("LOCAL_RANK", "0")),
            env["MASTER_ADDR"],
            port,
        )
    world = int(env.get("SLURM_STEP_NUM_TASKS", env.get("SLURM_NTASKS", "1")))
    if world > 1 and "SLURM_PROCID" in env:
        import hostlist

        first = hostlist.expand_hostlist(env.get("SLURM_STEP_NODELIST", env.get("SLURM_NODELIST", "")))[0]
        port = 20000 + int(env.get("SLURM_JOB_ID", "0")) % 20000 + int(env.get("SLURM_STEP_ID", "0")) % 997
        return int(env["SLURM_PROCID"]), world, int(env.get("SLURM_LOCALID", "0")), first, port
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _call(dist: Any, collective: str, send: Any, recv: Any, rank: int, n: int) -> None:
    if collective == "all_reduce":
        dist.all_reduce(recv)
    elif collective == "all_gather":
        dist.all_gather_into_tensor(recv, send)
    elif collective == "reduce_scatter":
        dist.reduce_scatter_tensor(recv, send)
    elif collective == "alltoall":
        dist.all_to_all_single(recv, send)
    else:  # sendrecv: a ring, as nccl-tests' SendRecvRunColl
        ops = [dist.P2POp(dist.isend, send, (rank + 1) % n), dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()


def _views(collective: str, send: Any, recv: Any, piece: int, n: int) -> tuple[Any, Any]:
    if collective in ("all_reduce", "sendrecv"):
        return send[:piece], recv[:piece]
    if collective == "all_gather":
        return send[:piece], recv[: piece * n]
    if collective == "reduce_scatter":
        return send[: piece * n], recv[:piece]
    return send[: piece * n], recv[: piece * n]  # alltoall


def _wrong(torch: Any, collective: str, out: Any, rank: int, n: int, piece: int) -> int:
    """Mismatches after one call with inputs = rank+1 (exact in float32)."""
    total = float(n * (n + 1) // 2)
    if collective in ("all_reduce", "reduce_scatter"):
        return int((out != total).sum().item())
    if collective == "sendrecv":
        return int((out != float((rank - 1) % n + 1)).sum().item())
    expected = torch.arange(1, n + 1, dtype=out.dtype, device=out.device).repeat_interleave(piece)
    return int((out != expected).sum().item())  # all_gather, alltoall: chunk j comes from rank j


def run_rank(rank: int, world: int, local: int, addr: str, port: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(local)
    device = torch.device("cuda", local)
    dist.init_process_group(
        "nccl", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world, device_id=device
    )
    try:
        _measure(torch, dist, rank, world, local, device, args)
    finally:
        dist.destroy_process_group()


def _measure(
    torch: Any, dist: Any, rank: int, n: int, local: int, device: Any, args: argparse.Namespace
) -> None:
    c = args.collective
    props = torch.cuda.get_device_properties(device)
    bus = getattr(props, "pci_bus_id", None)
    info = {
        "rank": rank,
        "host": socket.gethostname().split(".")[0],
        "device": local,
        "bus_id": ""
        if bus is None
        else f"{getattr(props, 'pci_domain_id', 0):04x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}",
        "gpu_name": props.name,
    }
    ranks: list[Any] = [None] * n
    dist.all_gather_object(ranks, info)
    todo = [(s, *counts(c, s, n)) for s in sizes(args.minbytes, args.maxbytes, args.stepfactor)]
    todo = [t for t in todo if t[1] > 0]
    top = max((t[2] for t in todo), default=0) // WORD_B
    send = torch.full((max(top, 1),), float(rank + 1), dtype=torch.float32, device=device)
    recv = torch.empty_like(send)
    if rank == 0:
        v = torch.cuda.nccl.version()  # a tuple (2, 28, 9); an int code in old releases
        version = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        emit(
            {
                "format": FORMAT,
                "version": 1,
                "collective": c,
                "nranks": n,
                "dtype": "float",
                "iters": args.iters,
                "warmup_iters": args.warmup_iters,
                "check": bool(args.check),
                "torch": torch.__version__,
                "nccl": version,
                "ranks": ranks,
            }
        )
    for _, piece, _ in [todo[-1], todo[0]] if todo else []:  # warm-up: largest, then smallest (nccl-tests)
        s, r = _views(c, send, recv, piece, n)
        for _ in range(args.warmup_iters):
            _call(dist, c, s, r, rank, n)
    torch.cuda.synchronize(device)
    busbws, wrong_total = [], 0
    for _, piece, size_B in todo:
        s, r = _views(c, send, recv, piece, n)
        dist.barrier(device_ids=[local])
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            _call(dist, c, s, r, rank, n)
        end.record()
        end.synchronize()
        t = torch.tensor([start.elapsed_time(end) / args.iters / 1e3], dtype=torch.float64, device=device)
        dist.all_reduce(t)  # the mean over ranks, as nccl-tests' Allreduce(args, &deltaSec, average)
        sec = float(t.item()) / n
        wrong = None
        if args.check:
            s.fill_(float(rank + 1))
            r.fill_(float(rank + 1) if c == "all_reduce" else -1.0)
            _call(dist, c, s if c != "all_reduce" else r, r, rank, n)
            torch.cuda.synchronize(device)
            wrong = _wrong(torch, c, r, rank, n, piece)
            w = torch.tensor([wrong], dtype=torch.int64, device=device)
            dist.all_reduce(w)
            wrong = int(w.item())
            wrong_total += wrong
        algbw = size_B / sec / 1e9
        busbw = algbw * bus_factor(c, n)
        busbws.append(busbw)
        if rank == 0:
            emit(
                {
                    "size_B": size_B,
                    "count": piece,
                    "in_place": c == "all_reduce",
                    "time_us": round(sec * 1e6, 2),
                    "algbw_GBps": round(algbw, 3),
                    "busbw_GBps": round(busbw, 3),
                    "wrong": wrong,
                }
            )
    if rank == 0:
        avg = sum(busbws) / len(busbws) if busbws else 0.0
        emit({"end": True, "avg_busbw_GBps": round(avg, 4), "wrong": wrong_total})


def _spawned(index: int, port: int, args: argparse.Namespace) -> None:
    run_rank(index, args.ngpus, index, "127.0.0.1", port, args)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clusteraccept.probes.torch_nccl", description=__doc__)
    p.add_argument("--collective", required=True, choices=COLLECTIVES)
    p.add_argument("-b", "--minbytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-e", "--maxbytes", type=parse_bytes, default=32 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=2)
    p.add_argument("-g", "--ngpus", type=int, default=1)
    p.add_argument("-n", "--iters", type=int, default=20)
    p.add_argument("-w", "--warmup_iters", type=int, default=5)
    p.add_argument("-c", "--check", type=int, default=1)
    args = p.parse_args(argv)
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError as exc:
        emit({"error": f"PyTorch is not importable here: {exc}"})
        return 1
    launched = _launch_env()
    try:
        if launched is not None:
            run_rank(*launched, args)
        elif args.ngpus < 2 or torch.cuda.device_count() < args.ngpus:
            emit({"error": f"-g {args.ngpus}: needs 2 or more GPUs, {torch.cuda.device_count()} visible"})
            return 1
        else:
            mp.spawn(_spawned, args=(_free_port(), args), nprocs=args.ngpus, join=True)
    except Exception as exc:  # a rank's failure, reported in this format rather than as a traceback
        last = (str(exc).strip().splitlines() or [""])[-1]
        emit({"error": f"{type(exc).__name__}: {last}"})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
