"""The check families: the one list every stage reads (what the probe job collects, what the judges judge,
which pytest markers and JUnit testsuites exist). A new family is added here, then in probes/, checks/ and
suites/ (CONTRIBUTING.md says how); tests/unit/report/test_families.py holds the suites' declared checks
against the ones the judges emit.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    probed: bool  # probes/<name>.py collects node-side evidence in the per-node probe job
    judged: bool  # checks/<name>.py judges it; suites/ tests select it with ``-m <name>`` (a pytest marker)
    junit_suites: tuple[str, ...]  # its testsuites in junit.xml (nccl: pair and block campaigns apart)
    about: str


FAMILIES = (
    # Versions (driver, CUDA, NCCL, OFED, firmware): collected first on every node, so a node that ran at
    # all returns something; recorded in results.json "fingerprint", not judged into verdicts.
    Family("fingerprint", probed=True, judged=False, junit_suites=(), about="software and firmware versions"),
    Family("topology", probed=True, judged=True, junit_suites=("topology",), about="GPU/NIC affinity checks"),
    # NVLink/NVSwitch inside the node: links, the NVSwitch fabric, link errors under the intra-node traffic
    Family("nvlink", probed=True, judged=True, junit_suites=("nvlink",), about="NVLink/NVSwitch checks"),
    Family("gpudirect", probed=True, judged=True, junit_suites=("gpudirect",), about="GPUDirect RDMA checks"),
    Family("roce", probed=True, judged=True, junit_suites=("roce",), about="RoCE lossless configuration"),
    # AWS EFA (fabric: efa): the devices libfabric offers, their ports, the job's locked-memory limit
    Family("efa", probed=True, judged=True, junit_suites=("efa",), about="AWS EFA devices and limits"),
    # HPE Slingshot (fabric: slingshot): the cxi NICs libfabric offers, their links, the job's environment
    Family(
        "slingshot", probed=True, judged=True, junit_suites=("slingshot",), about="HPE Slingshot NICs and env"
    ),
    # Google Cloud GPUDirect-TCPX/TCPXO (fabric: tcpx, tcpxo): the GPU NICs, their links, the job's env
    Family("tcpx", probed=True, judged=True, junit_suites=("tcpx",), about="GPUDirect-TCPX(O) NICs and env"),
    # SHARP: sharp_hello on the nodes, and the SHARP on/off all_reduce rounds of the campaigns.
    Family("sharp", probed=True, judged=True, junit_suites=("sharp",), about="SHARP checks"),
    # Measured by the campaigns' srun steps (plan/), not by the probe job.
    Family("nccl", probed=False, judged=True, junit_suites=("nccl-nodes", "nccl-blocks"), about="nccl-tests"),
)

PROBED = tuple(f.name for f in FAMILIES if f.probed)  # what a probe job may collect (fingerprint first)
JUDGED = tuple(f.name for f in FAMILIES if f.judged)  # judges, markers, results.json "families"
NODE_FAMILIES = tuple(f.name for f in FAMILIES if f.probed and f.judged)  # selectable for the probe job
ALWAYS_PROBED = tuple(f.name for f in FAMILIES if f.probed and not f.judged)  # collected by every probe job
JUNIT_SUITES = tuple(s for f in FAMILIES for s in f.junit_suites)
