"""The launch record: what every rank of a campaign step runs before the benchmark (DESIGN.md, Collect).

``python -m clusteraccept.probes.launch -- BINARY ARGS...`` (templates/srun_step.j2), once per rank:

1. the GPU this rank drives, as a CUDA index: the one ``CUDA_VISIBLE_DEVICES`` names (a rail step), else
   ``NCCL_TESTS_DEVICE``, else the rank's ``SLURM_LOCALID`` (nccl-tests src/common.cu: ``cudaDev =
   (gpu0 != -1 ? gpu0 : localRank*nThreads*nGpus) + i``, gpu0 from NCCL_TESTS_DEVICE; -t 1 -g 1 here);
2. the node's GPUs: ``nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader`` (the topology
   probe's command), so the record names the bus id of GPU k as nvidia-smi and the rail map number it;
   under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` CUDA's device k is the k-th of them by bus id;
3. that GPU's NUMA node and the CPUs local to it: ``/sys/bus/pci/devices/<bdf>/numa_node`` and
   ``local_cpulist`` (Documentation/ABI/testing/sysfs-bus-pci);
4. binds itself to the CPUs it may use (what Slurm gave the step) that are local to its GPU
   (sched_setaffinity(2): the benchmark it execs inherits the mask), and records what it then has;
5. the NCCL configuration the rank starts with: every ``NCCL_*`` variable of its environment and the
   files NCCL reads them from (NCCL docs, "Environment Variables": ``NCCL_CONF_FILE``, else
   ``~/.nccl.conf`` and ``/etc/nccl.conf``);
6. the node's identity (``node``): its boot id, kernel release, NVIDIA kernel module and HCA firmware, the
   same facts as the fingerprint probe's (``/proc/sys/kernel/random/boot_id``, random(4);
   ``/proc/sys/kernel/osrelease``, what ``uname -r`` prints, proc(5); the first line of
   ``/proc/driver/nvidia/version``; ``/sys/class/infiniband/<hca>/fw_ver``), so a node that came back
   rebooted or re-imaged between the jobs of a run is seen (checks/fingerprint.changed_mid_run);
7. prints it as one line ``CLUSTERACCEPT-LAUNCH {json}`` (in parts when it is longer than srun keeps a
   line whole, parsers/launch_record.lines) on stdout (the step's output, archived raw and
   parsed by parsers/launch_record.py; nothing is judged here) and execs the benchmark.

It binds because a rank spinning on a core of the other socket measures the CPU, not the rail; it records
so that the judges see what each rank ran with, not what the plan meant. Every failure to find a fact is
recorded as such (``null`` and a reason), never a reason not to run the benchmark.
"""

from __future__ import annotations

import json
import os
import sys

from clusteraccept import hostio
from clusteraccept.parsers._cpulist import parse_ids
from clusteraccept.parsers.launch_record import lines
from clusteraccept.probes.fingerprint import BOOT_ID

QUERY = ("nvidia-smi", "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader")
TIMEOUT_S = 30.0


def _cuda_index(env: dict[str, str]) -> tuple[int | None, str]:
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and "," not in visible and visible.isdecimal():
        return int(visible), "CUDA_VISIBLE_DEVICES"
    for name in ("NCCL_TESTS_DEVICE", "SLURM_LOCALID"):
        if env.get(name, "").strip().isdecimal():
            return int(env[name]), name
    return None, "no CUDA_VISIBLE_DEVICES, NCCL_TESTS_DEVICE or SLURM_LOCALID"


def _gpus() -> tuple[list[tuple[int, str]], str]:
    """(nvidia-smi index, bus id) of every GPU, and the raw answer (or why there is none)."""
    ev = hostio.run(QUERY, TIMEOUT_S, source="nvidia-smi-query")
    if ev.returncode != 0:
        return [], f"nvidia-smi exit {ev.returncode}: {(ev.stderr or ev.stdout).strip()[:200]}"
    out: list[tuple[int, str]] = []
    for line in ev.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 3 and cells[0].isdecimal():
            out.append((int(cells[0]), cells[-1]))
    return out, ev.stdout


def _sysfs_bdf(bus_id: str) -> str:
    """nvidia-smi's ``00000000:18:00.0`` as sysfs names it: ``0000:18:00.0`` (4-digit domain, lower case)."""
    domain, _, rest = bus_id.lower().partition(":")
    return f"{domain[-4:]}:{rest}"


def _read(path: str) -> str | None:
    ev = hostio.read(path)
    return ev.stdout.strip() if ev.returncode == 0 else None


def _cpulist(cpus: frozenset[int]) -> str:
    """Kernel cpulist syntax ("0-47,96-143") of a set of CPU ids."""
    ids, parts = sorted(cpus), []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def record(env: dict[str, str]) -> dict[str, object]:
    """Bind this rank to its GPU's CPUs and return the launch record (see the module docstring)."""
    index, index_from = _cuda_index(env)
    gpus, gpus_raw = _gpus()
    by_bus = sorted(bus for _, bus in gpus)  # CUDA_DEVICE_ORDER=PCI_BUS_ID: ascending bus id
    by_index = dict(gpus)
    rec: dict[str, object] = {
        "host": hostio.hostname(),
        "procid": env.get("SLURM_PROCID"),
        "localid": env.get("SLURM_LOCALID"),
        "step": f"{env.get('SLURM_JOB_ID', '')}.{env.get('SLURM_STEP_ID', '')}",
        "cuda_index": index,
        "cuda_index_from": index_from,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": env.get("CUDA_DEVICE_ORDER"),
        "gpus": [[i, bus] for i, bus in gpus] if gpus else gpus_raw,
        # the rail map's GPU k (nvidia-smi index k), and the one CUDA's device k is under PCI_BUS_ID
        "gpu_bus_id": by_index.get(index) if index is not None else None,
        "cuda_bus_id": by_bus[index] if index is not None and index < len(by_bus) else None,
    }
    allowed = hostio.cpu_affinity()
    rec["allowed"] = _cpulist(allowed)
    bus = rec["cuda_bus_id"] if env.get("CUDA_DEVICE_ORDER") == "PCI_BUS_ID" else rec["gpu_bus_id"]
    local: frozenset[int] = frozenset()
    if isinstance(bus, str):
        bdf = _sysfs_bdf(bus)
        rec["numa_node"] = _read(f"/sys/bus/pci/devices/{bdf}/numa_node")
        local_text = _read(f"/sys/bus/pci/devices/{bdf}/local_cpulist")
        rec["local_cpulist"] = local_text
        local = frozenset(parse_ids(local_text) or ()) if local_text is not None else frozenset()
    target = allowed & local
    if not target:
        rec["bound"] = rec["allowed"]
        rec["bind_error"] = (
            "no GPU bus id" if not isinstance(bus, str) else "none of the allowed CPUs is local to the GPU"
        )
    else:
        try:
            rec["bound"] = _cpulist(hostio.bind_cpus(target))
        except OSError as exc:
            rec["bound"], rec["bind_error"] = rec["allowed"], f"sched_setaffinity: {exc.strerror}"
    rec["nccl_env"] = {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}
    conf = [env["NCCL_CONF_FILE"]] if env.get("NCCL_CONF_FILE") else []
    conf += [os.path.expanduser("~/.nccl.conf"), "/etc/nccl.conf"]
    rec["nccl_conf"] = {path: _read(path) for path in conf}
    rec["node"] = identity()
    return rec


def identity() -> dict[str, object]:
    """The node as this boot of it is (see the module docstring, 6); a fact not found is ``null``."""
    nvidia = _read("/proc/driver/nvidia/version")
    hcas = hostio.listdir("/sys/class/infiniband")
    return {
        "boot_id": _read(BOOT_ID),
        "kernel": _read("/proc/sys/kernel/osrelease"),
        "nvidia": nvidia.splitlines()[0] if nvidia else None,
        "hca_fw": {hca: _read(f"/sys/class/infiniband/{hca}/fw_ver") for hca in sorted(hcas)},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m clusteraccept.probes.launch -- BINARY [ARGS...]\n")
        return 2
    try:
        rec = record(dict(os.environ))
    except Exception as exc:  # the record must never stop the measurement: say what failed, then run it
        rec = {"host": hostio.hostname(), "error": f"{type(exc).__name__}: {exc}"}
    # one write per line: srun forwards each whole, so the ranks' lines never interleave mid-line
    for line in lines(json.dumps(rec, separators=(",", ":")), f"{rec.get('host')}.{os.getpid()}"):
        os.write(1, line.encode())
    try:
        os.execvp(args[0], args)  # never returns
    except OSError as exc:
        sys.stderr.write(f"clusteraccept.probes.launch: cannot run {args[0]}: {exc.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main())
