"""The per-node fingerprint from real evidence: the lent GPU VM's probes, real nccl-tests and NCCL INFO
outputs; a node that differs from the others is a finding."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from clusteraccept.checks.fingerprint import differences, fingerprints, node_fingerprint
from clusteraccept.evidence import Evidence

DATA = Path(__file__).resolve().parents[2] / "data"
VM_FILE = DATA / "evidence" / "h200x2-vm-topology-gpudirect-fingerprint.json"
VM = [Evidence.from_dict(d) for d in json.loads(VM_FILE.read_text())]


def test_the_vm_fingerprint() -> None:
    fp = node_fingerprint([e for e in VM if e.meta.get("check") == "fingerprint"])
    assert fp == {"kernel": "6.18.44-fc-v657-gpu", "gpu_driver": "580.159.04", "gpus": "2x NVIDIA H200"}
    # without nvidia-smi, the kernel module's version line (open flavour) still gives the driver
    nvrm_only = [e for e in VM if e.source == "nvidia-driver"]
    assert node_fingerprint(nvrm_only) == {"gpu_driver": "580.159.04"}


def test_versions_from_the_campaign_output() -> None:
    tests_out = (DATA / "nccl-tests" / "allgather-1node-2xh200-v2.19.6.txt").read_text()
    info = (DATA / "nccl-debug" / "allreduce-1node-2xh200-p2p-socket-noib.txt").read_text()
    step = Evidence("vm", "nccl-tests", argv=("all_gather_perf",), stdout=tests_out, stderr=info,
                    meta={"check": "nccl", "nodes": "vm"})  # fmt: skip
    fps = fingerprints([], [(step, "raw/nccl/vm/x.json")])
    assert fps == {"vm": {"nccl_tests": "2.19.6", "nccl": "2.28.9", "cuda": "13.0"}}


def test_a_node_that_differs_is_a_finding() -> None:
    probe = [e for e in VM if e.meta.get("check") == "fingerprint"]
    other = [replace(e, host="vm2") for e in probe]
    other = [
        replace(e, stdout=e.stdout.replace("6.18.44", "6.18.45")) if e.source == "uname" else e for e in other
    ]
    third = [replace(e, host="vm3") for e in probe]
    fps = fingerprints([(e, "") for e in probe + other + third])
    assert differences(fps) == [
        "vm2: kernel is '6.18.45-fc-v657-gpu', 2 of 3 nodes have '6.18.44-fc-v657-gpu'"
    ]
