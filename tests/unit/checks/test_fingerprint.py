"""The per-node fingerprint from real evidence: the lent GPU VM's probes, real nccl-tests and NCCL INFO
outputs; a node that differs from the others is a finding."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from clusteraccept.checks.fingerprint import (
    changed_mid_run,
    changed_verdicts,
    describe_change,
    differences,
    fingerprints,
    node_fingerprint,
)
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome
from clusteraccept.parsers import launch_record
from clusteraccept.parsers.launch_record import MARK

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


# --- the same node throughout the run (checks/fingerprint.changed_mid_run) ---------------------------
BOOT_A, BOOT_B = "6f1c2e0a-5b7d-4c1e-9a3f-0d2b8e4c6a11", "0b9e7d3c-1a2f-4e5d-8c6b-7a9f0e1d2c33"
NVRM_LINE = next(e for e in VM if e.source == "nvidia-driver").stdout.splitlines()[0]


def _probe(host: str, boot: str) -> list[tuple[Evidence, str]]:
    """The VM's real fingerprint evidence (kernel, NVIDIA module) as ``host``'s, with a boot id."""
    evs = [replace(e, host=host) for e in VM if e.meta.get("check") == "fingerprint"]
    evs.append(Evidence(host, "boot-id", path="/proc/sys/kernel/random/boot_id", stdout=boot + "\n"))
    return [(e, f"raw/probe-nodes/{host}.jsonl.gz#fingerprint/{host}/{e.source}.json") for e in evs]


def _step(job: str, hosts: list[str], ident: dict[str, dict[str, object]], bundle: str = "r001") -> Any:
    """A campaign step whose ranks printed launch records carrying ``ident[host]`` as the node."""
    base = {"allowed": "0-3", "bound": "0-3", "nccl_env": {}, "nccl_conf": {}, "cuda_index": 0}
    lines = [MARK + json.dumps({"host": h, **base, "node": ident[h]}) for h in hosts]
    out = "\n".join([*lines, "# nccl-tests"])
    ev = Evidence(hosts[0], "nccl-tests", argv=("all_reduce_perf",), stdout=out,
                  meta={"check": "nccl", "nodes": ",".join(hosts)})  # fmt: skip
    return ev, f"raw/{job}/{bundle}.jsonl.gz#nccl/{hosts[0]}/step.json"


def _node(boot: str, kernel: str = "6.18.44-fc-v657-gpu") -> dict[str, object]:
    return {"boot_id": boot, "kernel": kernel, "nvidia": NVRM_LINE, "hca_fw": {"mlx5_0": "28.39.1002"}}


def test_a_node_seen_the_same_in_every_job_has_not_changed() -> None:
    ident = {"n1": _node(BOOT_A), "n2": _node(BOOT_B)}
    campaign = [_step("campaign-leaf1", ["n1", "n2"], ident), _step("campaign-cross", ["n1", "n2"], ident)]
    assert changed_mid_run(_probe("n1", BOOT_A) + _probe("n2", BOOT_B), campaign) == {}


def test_a_node_back_rebooted_with_another_kernel_between_jobs_is_an_error_in_every_family() -> None:
    before = {"n1": _node(BOOT_A), "n2": _node(BOOT_B)}
    after = {"n1": _node("9d8c7b6a-0000-4000-8000-000000000001", "6.18.45-fc-v657-gpu"), "n2": before["n2"]}
    campaign = [_step("campaign-leaf1", ["n1", "n2"], before), _step("campaign-cross", ["n1", "n2"], after)]
    changed = changed_mid_run(_probe("n1", BOOT_A) + _probe("n2", BOOT_B), campaign)
    assert set(changed) == {"n1"}  # n2 kept its identity
    (old, new) = changed["n1"]
    assert old.jobs == ("probe-nodes", "campaign-leaf1") and new.jobs == ("campaign-cross",)
    assert dict(old.identity) == {"boot_id": BOOT_A, "kernel": "6.18.44-fc-v657-gpu"}  # what differs only
    assert describe_change("n1", changed["n1"]) == (
        "n1 was not the same node throughout the run: boot_id 6f1c2e0a, kernel '6.18.44-fc-v657-gpu' in "
        "probe-nodes, campaign-leaf1; boot_id 9d8c7b6a, kernel '6.18.45-fc-v657-gpu' in campaign-cross"
    )
    verdicts = changed_verdicts(changed, ("topology", "nccl"), ["n1", "n2"])
    assert [(v.check, v.subject, v.outcome) for v in verdicts] == [
        ("topology.same_node", "n1", Outcome.ERROR),
        ("nccl.same_node", "n1", Outcome.ERROR),
    ]
    assert verdicts[0].evidence == (old.ref, new.ref) and old.ref.startswith("raw/probe-nodes/n1")
    assert verdicts[0].labels == {"node_changed": "boot_id,kernel"}
    assert "--nodes n1" in verdicts[0].message
    assert changed_verdicts(changed, ("nccl",), ["n2"]) == []  # only the nodes the run judges


def test_a_resumed_job_is_another_sighting_and_a_fact_one_side_lacks_is_not_compared() -> None:
    first = {"n1": _node(BOOT_A)}
    again = {"n1": {"boot_id": BOOT_B, "kernel": "6.18.44-fc-v657-gpu", "nvidia": None, "hca_fw": {}}}
    campaign = [_step("campaign-leaf1", ["n1"], first), _step("campaign-leaf1", ["n1"], again, "r001.2")]
    changed = changed_mid_run([], campaign)
    assert [(s.jobs, dict(s.identity)) for s in changed["n1"]] == [
        (("campaign-leaf1",), {"boot_id": BOOT_A}),
        (("campaign-leaf1 (attempt 2)",), {"boot_id": BOOT_B}),
    ]  # the kernel is the same; the NVIDIA module and firmware the --resume's records lacked are not compared


def test_a_launch_record_without_the_node_has_no_identity_and_a_bad_one_is_refused() -> None:
    rec = '{"host": "n1", "allowed": "0-3", "bound": "0-3", "nccl_env": {}, "nccl_conf": {}, "cuda_index": 0'
    assert launch_record.parse(MARK + rec + "}\n").records[0].identity == ()  # a run from before it existed
    (got,) = launch_record.parse(
        MARK + rec + ', "node": {"boot_id": "x", "hca_fw": {"mlx5_0": "1"}}}\n'
    ).records
    assert got.identity == (("boot_id", "x"), ("hca_fw:mlx5_0", "1"))
    with pytest.raises(ParseError) as exc:
        launch_record.parse(MARK + rec + ', "node": {"hca_fw": "28.39"}}\n')
    assert exc.value.line_no == 1 and "hca_fw" in exc.value.expected


def test_real_the_lent_vm_two_days_apart_is_two_identities() -> None:
    """The lent H200 VM's fingerprint evidence of 2026-12-01 against its launch record of 2026-12-03
    (tests/data/launch-record/SOURCES.md): another boot and another kernel, the same NVIDIA module."""
    text = (DATA / "launch-record" / "h200-1gpu-vm-identity-real.txt").read_text()
    (rec,) = launch_record.parse(text).records
    files = text.split("\n")
    assert dict(rec.identity) == {
        "boot_id": files[files.index("# cat /proc/sys/kernel/random/boot_id") + 1],
        "kernel": "6.18.44-fc-v1252-gpu",
        "nvidia": NVRM_LINE.strip(),
    }
    probe = [(ev, "raw/probe-nodes/vm.jsonl.gz#fingerprint") for ev, _ in _probe("vm", "")[:-1]]  # no boot id
    step = Evidence("vm", "nccl-tests", stdout=text, meta={"check": "nccl", "nodes": "vm"})
    (old, new) = changed_mid_run(probe, [(step, "raw/campaign-vm/r001.jsonl.gz#nccl/vm/x.json")])["vm"]
    assert (old.jobs, dict(old.identity)) == (("probe-nodes",), {"kernel": "6.18.44-fc-v657-gpu"})
    assert (new.jobs, dict(new.identity)) == (("campaign-vm",), {"kernel": "6.18.44-fc-v1252-gpu"})
