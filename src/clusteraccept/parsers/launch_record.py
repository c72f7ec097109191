"""The launch records of a campaign step's output (probes/launch.py): one ``CLUSTERACCEPT-LAUNCH {json}``
line per rank, printed before the benchmark, among the benchmark's own lines (which are ignored).

Strict about the records themselves: a marked line that is not a JSON object with the record's keys is a
ParseError at its line (a truncated write, a rank killed mid-line); ``parse`` refuses a text without any
record, ``records`` returns none (a step of a run made before the launch record existed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._cpulist import parse_ids

MARK = "CLUSTERACCEPT-LAUNCH "


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
    )


def records(text: str) -> tuple[LaunchRecord, ...]:
    """Every launch record of ``text``, in order (none in a text that has no marked line)."""
    out = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        at = line.find(MARK)
        if at < 0:
            continue
        try:
            doc = json.loads(line[at + len(MARK) :])
        except json.JSONDecodeError as exc:
            raise ParseError(line_no, "a JSON launch record", f"{line[at:][:60]} ({exc.msg})") from None
        out.append(_record(doc, line_no))
    return tuple(out)


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
