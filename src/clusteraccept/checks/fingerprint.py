"""The software/firmware fingerprint of each node, from the evidence already gathered (pure).

Recorded in results.json and the report; nodes that differ from the majority are listed as findings.
Fields (each only where its evidence exists on that node):
- ``kernel`` (``uname -r``); ``gpu_driver`` and ``gpus`` (``nvidia-smi --query-gpu``, else the NVIDIA kernel
  module version from ``/proc/driver/nvidia/version``);
- ``ofed`` (``ofed_info -s``); ``hca_fw`` (``/sys/class/infiniband/<hca>/fw_ver``, else the "Firmware version"
  of each CA in the topology probe's ``ibstat``);
- ``nccl``, ``nccl_tests`` and ``cuda`` from the nccl campaign's own output: the nccl-tests v2.18+ header
  ``# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809`` and NCCL's INFO line
  ``NCCL version 2.28.9+cuda13.0`` (see parsers/nccl_tests.py and parsers/nccl_debug.py for the formats).
  Only the head of each output is scanned: cheap at 4,096 nodes, where there are 10^5 steps.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.parsers import ibstat
from clusteraccept.parsers.nccl_tests_result import nccl_version_of

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.133.20  Wed Mar 12 ..." and
# "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ..."
_NVRM = re.compile(r"NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)\s")
_NCCL_TESTS = re.compile(r"nccl-tests version (\S+) nccl-headers=\d+ nccl-library=(\d+)")
_NCCL_INFO = re.compile(r"NCCL version (\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")
_HEAD_CHARS = 4096  # the version lines come first in nccl-tests output and NCCL INFO logs


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def node_fingerprint(evidence: Sequence[Evidence]) -> dict[str, str]:
    fp: dict[str, str] = {}
    fw: list[str] = []
    ibstat_fw: list[str] = []
    for ev in evidence:
        if not ev.ok:
            continue
        if ev.source == "uname":
            fp["kernel"] = _first_line(ev.stdout)
        elif ev.source == "nvidia-smi-query":
            # "0, NVIDIA H100 80GB HBM3, 550.54.15, 00000000:18:00.0" per GPU (the fingerprint probe's query)
            rows = [[c.strip() for c in ln.split(",")] for ln in ev.stdout.splitlines() if ln.count(",") >= 3]
            if rows:
                fp["gpu_driver"] = ",".join(sorted({r[2] for r in rows}))
                fp["gpus"] = f"{len(rows)}x {rows[0][1]}"
        elif ev.source == "nvidia-driver" and (m := _NVRM.search(ev.stdout)):
            fp.setdefault("gpu_driver", m.group(1))
        elif ev.source == "ofed_info":
            fp["ofed"] = _first_line(ev.stdout)
        elif ev.source == "hca-fw":
            fw.append(f"{ev.path.split('/')[4]}={_first_line(ev.stdout)}")
        elif ev.source == "ibstat":
            try:
                cas = ibstat.parse(ev.stdout).cas
            except ParseError:
                continue  # the topology check reports the unparsable output; the fingerprint omits it
            ibstat_fw += [f"{ca.name}={ca.fw_version}" for ca in cas if ca.fw_version]
    if fw or ibstat_fw:
        fp["hca_fw"] = " ".join(sorted(fw or ibstat_fw))
    return fp


def _campaign_versions(evidence: Iterable[Evidence]) -> dict[str, dict[str, set[str]]]:
    """node -> field -> versions seen in the nccl steps that ran on it."""
    out: dict[str, dict[str, set[str]]] = {}
    for ev in evidence:
        nodes = ev.meta.get("nodes")
        if not nodes or not ev.stdout:
            continue
        head = ev.stdout[:_HEAD_CHARS] + "\n" + ev.stderr[:_HEAD_CHARS]
        found: dict[str, str] = {}
        if m := _NCCL_TESTS.search(head):
            found["nccl_tests"] = m.group(1)
            found["nccl"] = nccl_version_of(int(m.group(2)))
        if m := _NCCL_INFO.search(head):
            found.setdefault("nccl", m.group(1))
            if m.group(2):
                found["cuda"] = m.group(2)
        for node in nodes.split(","):
            per = out.setdefault(node, {})
            for k, v in found.items():
                per.setdefault(k, set()).add(v)
    return out


def fingerprints(
    evidence: Sequence[tuple[Evidence, str]], campaign: Sequence[tuple[Evidence, str]] = ()
) -> dict[str, dict[str, str]]:
    """Per node: its fingerprint from the per-node ``evidence``, plus versions from the ``campaign`` steps."""
    by_host: dict[str, list[Evidence]] = {}
    for ev, _ in evidence:
        by_host.setdefault(ev.host, []).append(ev)
    fps = {host: node_fingerprint(evs) for host, evs in sorted(by_host.items())}
    for node, fields in sorted(_campaign_versions(ev for ev, _ in campaign).items()):
        fp = fps.setdefault(node, {})
        for k, values in fields.items():
            fp[k] = ",".join(sorted(values))  # two values on one node is itself a finding
    return fps


def differences(fps: dict[str, dict[str, str]]) -> list[str]:
    """One line per (field, node) that differs from the majority value of that field."""
    out: list[str] = []
    fields = sorted({k for fp in fps.values() for k in fp})
    for f in fields:
        values = Counter(fp.get(f, "(absent)") for fp in fps.values())
        if len(values) < 2:
            continue
        majority, count = values.most_common(1)[0]
        for host, fp in fps.items():
            value = fp.get(f, "(absent)")
            if value != majority:
                out.append(f"{host}: {f} is {value!r}, {count} of {len(fps)} nodes have {majority!r}")
    return out
