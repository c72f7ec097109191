"""What a simulated nccl-tests run is asked for: nccl-tests' command line and NCCL_IB_HCA's rail selection.

Flags are nccl-tests' own (README.md "Arguments"; ``getopt_long`` string in src/common.cu of v2.19.6), with
the defaults of src/common.cu's globals; those that only tune a real run are accepted and ignored.
``NCCL_IB_HCA`` is NCCL's syntax (NVIDIA/nccl docs/userguide/source/env.rst "NCCL_IB_HCA";
src/transport/net_ib/init.cc, src/misc/utils.cc ``parseStringList()``/``matchIf()``): comma-separated
``<hca>[:<port>...]`` prefixes, ``^`` = exclude list, ``=`` = exact names.
"""

from __future__ import annotations

import getopt
import re
from dataclasses import dataclass

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
TYPES = {  # -d datatype -> element size in bytes
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


def parsesize(value: str) -> int:
    """nccl-tests ``parsesize()``: a number with an optional K/M/G suffix (binary units); -1 if invalid."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(\S?)\S*\s*", value)
    if not m:
        return -1
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(m.group(2).lower())
    return -1 if units is None else int(float(m.group(1)) * units)


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
            o.dtype = val if val in TYPES else "float"
        elif c == "o":
            o.op = val if val in _OPS else "sum"
        elif c == "J":
            o.output_file = val
        elif c == "h":
            return "USAGE: nccl-tests (simulated) [-t -g -b -e -i -f -n -m -w -c -o -d ...]\n"
    if o.minbytes > o.maxbytes:
        return f"invalid sizes for 'minbytes' and 'maxbytes': {o.minbytes} > {o.maxbytes}\n"
    return o
