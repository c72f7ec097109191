"""The launch records of a campaign step's output (probes/launch.py): one ``CLUSTERACCEPT-LAUNCH {json}``
line per rank, printed before the benchmark, among the benchmark's own lines (which are ignored).

A record longer than a line srun keeps whole is written as parts, ``CLUSTERACCEPT-LAUNCH part KEY K/N
PIECE``, one line each (:func:`lines`): slurmstepd forwards a task's output line by line only for lines
shorter than SLURM_IO_MAX_MSG_LEN (1024 bytes, Slurm src/common/io_hdr.h); a longer one is cut into
1024-byte messages (src/slurmd/slurmstepd/io.c, _task_build_message) that srun writes as they come from
each task, so two ranks' long records interleave mid-line (seen on the virtual cluster: a 32-rank step's
records of ~1.9 KB). The parts of one rank come in order; other ranks' lines may fall between them.

Strict about the records themselves: a marked line that is not a JSON object with the record's keys is a
ParseError at its line (a truncated write, a rank killed mid-line); ``parse`` refuses a text without any
record, ``records`` returns none (a step of a run made before the launch record existed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._cpulist import parse_ids

MARK = "CLUSTERACCEPT-LAUNCH "
_PART = "part "
LINE_MAX = 1000  # bytes of a line srun forwards whole: under SLURM_IO_MAX_MSG_LEN (1024) with its newline


def lines(doc_json: str, key: str) -> list[str]:
    """The lines that print one record (``doc_json``: ASCII, one line, as ``json.dumps`` writes it):
    itself, or its parts under ``key`` (unique in the step: host and pid) when it is too long."""
    whole = f"{MARK}{doc_json}\n"
    if len(whole.encode()) <= LINE_MAX:
        return [whole]
    size = LINE_MAX - len(f"{MARK}{_PART}{key} 999/999 \n".encode())
    pieces = [doc_json[i : i + size] for i in range(0, len(doc_json), size)]
    return [f"{MARK}{_PART}{key} {k}/{len(pieces)} {piece}\n" for k, piece in enumerate(pieces, start=1)]


@dataclass(frozen=True)
class LaunchRecord:
    line_no: int
    host: str
    procid: int | None
    cuda_index: int | None
    cuda_device_order: str | None
    gpu_bus_id: str | None  # nvidia-smi's bus id of GPU <cuda_index> (the rail map's numbering)
    cuda_bus_id: str | None  # the cuda_index-th GPU by bus id (CUDA's device under PCI_BUS_ID)
    gpu_count: int | None  # GPUs nvidia-smi listed; None when it did not answer
    numa_node: int | None
    local_cpus: tuple[int, ...] | None  # the GPU's local_cpulist
    allowed_cpus: tuple[int, ...]  # what the rank might use (the step's CPUs on that node)
    bound_cpus: tuple[int, ...]  # what it ran the benchmark with
    bind_error: str | None
    nccl_env: tuple[tuple[str, str], ...]
    nccl_conf: tuple[tuple[str, str], ...]  # (file, contents) of the NCCL config files that exist
    error: str | None  # the record itself failed (probes/launch.py caught it)
    # the node's boot id, kernel, NVIDIA module line and ``hca_fw:<hca>`` firmware, as found (none: a record
    # made before it carried them)
    identity: tuple[tuple[str, str], ...] = ()

    def conf_settings(self) -> dict[str, tuple[str, str]]:
        """``NAME -> (value, file)`` of the NCCL config files (``NAME=value`` lines, '#' comments)."""
        out: dict[str, tuple[str, str]] = {}
        for path, text in self.nccl_conf:
            for line in text.splitlines():
                name, sep, value = line.split("#", 1)[0].strip().partition("=")
                if sep and name.strip().startswith("NCCL_"):
                    out.setdefault(name.strip(), (value.strip(), path))
        return out


@dataclass(frozen=True)
class LaunchRecords:
    records: tuple[LaunchRecord, ...]


def _cpus(value: object, line_no: int, key: str) -> tuple[int, ...]:
    ids = parse_ids(value) if isinstance(value, str) else None
    if ids is None:
        raise ParseError(line_no, f"{key}: a cpulist like '0-47,96-143'", repr(value)[:60])
    return ids


def _opt_int(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdecimal():
        return int(value)
    return None


def _record(doc: object, line_no: int) -> LaunchRecord:
    if not isinstance(doc, dict) or not isinstance(doc.get("host"), str):
        raise ParseError(line_no, "a launch record object with a 'host'", repr(doc)[:80])
    error = doc.get("error")
    if error is not None:
        return LaunchRecord(
            line_no=line_no,
            host=doc["host"],
            procid=None,
            cuda_index=None,
            cuda_device_order=None,
            gpu_bus_id=None,
            cuda_bus_id=None,
            gpu_count=None,
            numa_node=None,
            local_cpus=None,
            allowed_cpus=(),
            bound_cpus=(),
            bind_error=None,
            nccl_env=(),
            nccl_conf=(),
            error=str(error),
        )
    missing = [k for k in ("allowed", "bound", "nccl_env", "nccl_conf", "cuda_index") if k not in doc]
    if missing:
        raise ParseError(line_no, f"launch record keys {missing}", repr(sorted(doc))[:80])
    env, conf = doc["nccl_env"], doc["nccl_conf"]
    if not isinstance(env, dict) or not isinstance(conf, dict):
        raise ParseError(line_no, "nccl_env and nccl_conf objects", repr((env, conf))[:80])
    local = doc.get("local_cpulist")
    return LaunchRecord(
        line_no=line_no,
        host=doc["host"],
        procid=_opt_int(doc.get("procid")),
        cuda_index=_opt_int(doc.get("cuda_index")),
        cuda_device_order=doc.get("cuda_device_order"),
        gpu_bus_id=doc.get("gpu_bus_id"),
        cuda_bus_id=doc.get("cuda_bus_id"),
        gpu_count=len(doc["gpus"]) if isinstance(doc.get("gpus"), list) else None,
        numa_node=_opt_int(doc.get("numa_node")),
        local_cpus=_cpus(local, line_no, "local_cpulist") if local is not None else None,
        allowed_cpus=_cpus(doc["allowed"], line_no, "allowed"),
        bound_cpus=_cpus(doc["bound"], line_no, "bound"),
        bind_error=doc.get("bind_error"),
        nccl_env=tuple((str(k), str(v)) for k, v in env.items()),
        nccl_conf=tuple((str(k), str(v)) for k, v in conf.items() if v is not None),
        error=None,
        identity=_identity(doc.get("node"), line_no),
    )


def _identity(node: object, line_no: int) -> tuple[tuple[str, str], ...]:
    if node is None:
        return ()
    if not isinstance(node, dict) or not isinstance(node.get("hca_fw", {}), dict):
        raise ParseError(line_no, "a 'node' object with an 'hca_fw' object", repr(node)[:80])
    out = [(k, str(v).strip()) for k, v in node.items() if k != "hca_fw" and v is not None]
    fw = node.get("hca_fw", {})
    out += [(f"hca_fw:{hca}", str(v).strip()) for hca, v in fw.items() if v is not None]
    return tuple(sorted(out))


def _json(text: str, line_no: int, shown: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ParseError(line_no, "a JSON launch record", f"{shown[:60]} ({exc.msg})") from None


def records(text: str) -> tuple[LaunchRecord, ...]:
    """Every launch record of ``text``, in the order of their first lines (none in a text that has no
    marked line); a record in parts is joined, and one with a part missing is a ParseError at its first."""
    out: list[LaunchRecord] = []
    parts: dict[str, tuple[int, int, list[str]]] = {}  # key -> (first line, parts expected, pieces)
    for line_no, line in enumerate(text.splitlines(), start=1):
        at = line.find(MARK)
        if at < 0:
            continue
        rest = line[at + len(MARK) :]
        if not rest.startswith(_PART):
            out.append(_record(_json(rest, line_no, line[at:]), line_no))
            continue
        key, k_of_n, piece = [*rest[len(_PART) :].split(" ", 2), "", ""][:3]
        k, _, n = k_of_n.partition("/")
        if not (k.isdecimal() and n.isdecimal()):
            raise ParseError(line_no, "'part KEY K/N PIECE' of a launch record", line[at:][:60])
        first, expected, pieces = parts.setdefault(key, (line_no, int(n), []))
        if int(k) != len(pieces) + 1:
            raise ParseError(first, f"part {len(pieces) + 1} of launch record {key}", f"part {k}")
        pieces.append(piece)
        if len(pieces) == expected:
            del parts[key]
            out.append(_record(_json("".join(pieces), first, MARK + "".join(pieces)), first))
    for key, (first, expected, pieces) in parts.items():
        raise ParseError(first, f"{expected} parts of launch record {key}", f"{len(pieces)} (cut off)")
    return tuple(sorted(out, key=lambda r: r.line_no))


def parse(text: str) -> LaunchRecords:
    """The launch records of a step's output; ParseError when there is none, or one is garbage."""
    found = records(text)
    if not found:
        raise ParseError(0, f"'{MARK.strip()} {{...}}' lines (probes/launch.py)", text[:80])
    return LaunchRecords(found)


def benchmark_began(stdout: str) -> bool:
    """Did the step's benchmark print anything (a line that is not a launch record)? nccl-tests prints
    nothing before MPI_Init but option warnings (src/common.cu), so a step that timed out without such a
    line hung in its launch (the PMI fence), not in NCCL."""
    return any(line.strip() and not line.startswith(MARK) for line in stdout.splitlines())


def launched(stdout: str) -> bool:
    """Did any rank of the step start (print its launch record)? A step that failed without one never ran
    its program: srun could not create it (e.g. "Unable to contact slurm controller" while slurmctld
    restarts, once its MessageTimeout of retries is spent)."""
    return any(line.startswith(MARK) for line in stdout.splitlines())


# slurmstepd's words when a step's time limit ends it (src/slurmd/slurmstepd/req.c: "*** %s ON %s
# CANCELLED AT %s DUE TO TIME LIMIT ***", the entity "STEP <job>.<step>"; srun's own, older, without " ON %s")
# (the time as slurm_make_time_str writes it, which SLURM_TIME_FORMAT may give spaces). slurmd signals every
# step so when the *job's* time limit is reached too: the driver then gets its own SIGTERM (node_entry's
# "ending"), which is what tells the two apart
_STEP_TIME_LIMIT = re.compile(r"\*\*\* STEP \S+ (?:ON \S+ )?CANCELLED AT .+? DUE TO TIME LIMIT \*\*\*")


def step_time_limit_line(line: str) -> bool:
    """Is ``line`` slurmstepd's (or srun's) word that a step's time limit ended it?"""
    return _STEP_TIME_LIMIT.search(line) is not None


def step_time_limit(returncode: int | None, stderr: str) -> bool:
    """Did Slurm end the step at its time limit: it failed (a step that exited 0 is a result, and one the
    driver's timeout ended has no returncode) and slurmstepd says so in its stderr? Its srun
    --time is the driver's step timeout rounded up to whole minutes (srun_step.j2), and slurmctld counts
    it from the step's start in whole seconds: a step hung at launch was seen ended by it at 119.7 s of a
    120-s driver timeout (the demo, Slurm 24.11). A relaunch after a controller wait, whose driver
    timeout is longer, or a site srun_options -t, meets it first as a rule."""
    return returncode not in (None, 0) and step_time_limit_line(stderr)
