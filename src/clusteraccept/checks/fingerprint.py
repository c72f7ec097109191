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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import ibstat, launch_record
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


# --- The same node throughout the run ------------------------------------------------------------------
# A node rebooted or re-imaged between the jobs of a run (an admin's rolling update, a repair before a
# --resume) is another node: PCIe links train again at boot, a new driver or firmware measures differently.
# Its identity is seen once per job (and per --resume attempt): in the probe job's fingerprint evidence
# and in the first launch record each campaign job's steps printed on it. A node cannot change inside one
# job: a node that reboots leaves its allocation (its job ends NODE_FAIL, or goes on without it).

IDENTITY_FIELDS = ("boot_id", "kernel", "nvidia")  # and hca_fw:<hca>
_PROBE_FIELD = {"boot-id": "boot_id", "uname": "kernel", "nvidia-driver": "nvidia"}


@dataclass(frozen=True)
class Seen:
    """One identity of a node and where it was seen (job names, the first evidence of it)."""

    identity: tuple[tuple[str, str], ...]
    jobs: tuple[str, ...]
    ref: str


def _job_of(ref: str) -> str:
    """``raw/campaign-leaf1/r003.2.jsonl.gz#...`` -> ``campaign-leaf1 (attempt 2)``: a --resume reruns
    a job under its name into bundles numbered .2, .3 (jobs/archive.py)."""
    parts = ref.split("#", 1)[0].split("/")
    job = parts[1] if len(parts) > 2 else parts[0]
    bundle = parts[-1].split(".")
    attempt = bundle[1] if len(bundle) > 3 and bundle[1].isdecimal() else ""
    return f"{job} (attempt {attempt})" if attempt else job


def _observations(
    per_node: Sequence[tuple[Evidence, str]], campaign: Sequence[tuple[Evidence, str]]
) -> dict[str, dict[str, tuple[dict[str, str], str]]]:
    """node -> job -> (identity fields, first evidence ref)."""
    out: dict[str, dict[str, tuple[dict[str, str], str]]] = {}
    for ev, ref in per_node:
        name = _PROBE_FIELD.get(ev.source)
        if ev.source == "hca-fw" and ev.ok:
            name = f"hca_fw:{ev.path.split('/')[4]}"
        if name is None or not ev.ok:
            continue
        fields, _ = out.setdefault(ev.host, {}).setdefault(_job_of(ref), ({}, ref))
        fields[name] = _first_line(ev.stdout)
    for ev, ref in campaign:
        hosts = ev.meta.get("nodes", "").split(",") if ev.meta.get("nodes") else []
        job = _job_of(ref)
        if not hosts or all(job in out.get(h, {}) for h in hosts) or launch_record.MARK not in ev.stdout:
            continue  # one launch record per node and job is enough
        try:
            recs = launch_record.records(ev.stdout)
        except ParseError:
            continue  # the launch check reports the garbled record
        for rec in recs:  # a record without the identity (a run from before it) is seen, with no facts
            out.setdefault(rec.host, {}).setdefault(job, (dict(rec.identity), ref))
    return out


def changed_mid_run(
    per_node: Sequence[tuple[Evidence, str]], campaign: Sequence[tuple[Evidence, str]]
) -> dict[str, tuple[Seen, ...]]:
    """The nodes seen with more than one identity during the run: node -> each identity, with the fields
    that differ only (a fact one side did not record is not compared)."""
    changed: dict[str, tuple[Seen, ...]] = {}
    for node, jobs in sorted(_observations(per_node, campaign).items()):
        values: dict[str, set[str]] = {}
        for fields, _ in jobs.values():
            for k, v in fields.items():
                values.setdefault(k, set()).add(v)
        differ = sorted(k for k, vs in values.items() if len(vs) > 1)
        if not differ:
            continue
        groups: dict[tuple[tuple[str, str], ...], list[tuple[str, str]]] = {}
        for job, (fields, ref) in jobs.items():
            key = tuple((k, fields[k]) for k in differ if k in fields)
            groups.setdefault(key, []).append((job, ref))
        changed[node] = tuple(
            Seen(key, tuple(j for j, _ in seen), seen[0][1]) for key, seen in groups.items() if key
        )
    return changed


def _shown(field: str, value: str) -> str:
    return f"{field} {value[:8]}" if field == "boot_id" else f"{field} {value!r}"


def describe_change(node: str, seen: Sequence[Seen]) -> str:
    """``node3 was not the same node throughout the run: boot_id 6f1c..., kernel '5.15.0-131-generic'
    in campaign-leaf2; boot_id 0b9e..., kernel '5.15.0-140-generic' in campaign-cross``."""
    parts = []
    for s in seen:
        jobs = ", ".join(s.jobs[:3]) + (f" and {len(s.jobs) - 3} more jobs" if len(s.jobs) > 3 else "")
        parts.append(", ".join(_shown(k, v) for k, v in s.identity) + f" in {jobs}")
    return f"{node} was not the same node throughout the run: {'; '.join(parts)}"


def changed_verdicts(
    changed: Mapping[str, Sequence[Seen]], families: Sequence[str], nodes: Sequence[str]
) -> list[Verdict]:
    """An ERROR in each of the run's families for a node that changed: its results mix two nodes, so none
    of them is accepted (INCOMPLETE), and none is a hardware failure to drain on. It is tested again in a
    run of its own (``--nodes NODE``): a --resume would add a third identity to the same run."""
    out = []
    for node in nodes:
        if node not in changed:
            continue
        fields = sorted({k for s in changed[node] for k, _ in s.identity})
        message = (
            f"not tested as one node: {describe_change(node, changed[node])} (rebooted or re-imaged "
            f"between the jobs of the run); its results mix them: test it again in a run of its own "
            f"(--nodes {node})"
        )
        for family in families:
            out.append(
                Verdict(
                    check=f"{family}.same_node",
                    family=family,
                    subject=node,
                    outcome=Outcome.ERROR,
                    message=message,
                    evidence=tuple(s.ref for s in changed[node]),
                    labels={"node_changed": ",".join(fields)},
                )
            )
    return out
