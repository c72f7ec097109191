"""Materialize a simulated site: host profiles, the fabric model and the drop-in nccl-tests bin dir.

The paths come from the site itself (``env.CLUSTERACCEPT_HOST_PROFILE``, ``env.CLUSTERACCEPT_FABRIC``,
``tools.nccl_tests_bin``), so the jobs find them exactly as they would find real ones. Also
:func:`simulate_step` runs one planned step in-process (property tests and benchmarks at 4,096 nodes).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clusteraccept.evidence import Evidence
from clusteraccept.plan.commands import env_words
from clusteraccept.plan.jobs import Step
from clusteraccept.sim.fabric import Fabric, fabric_from_dict
from clusteraccept.sim.hosts import build_profiles, write_atomic
from clusteraccept.sim.nccl_info import with_info
from clusteraccept.sim.nccl_tests import init_failure, install_bin_dir
from clusteraccept.sim.nccl_tests_options import parse_args
from clusteraccept.sim.nccl_tests_output import render
from clusteraccept.sim.profile_topology import layout, supported
from clusteraccept.site.model import Site
from clusteraccept.site.nodes import TCP_PLUGIN

FABRIC_KINDS = {
    "slow_rail",
    "slow_node",
    "bad_cable",
    "slow_uplink",
    "non_mpi",
    "wrong",
    "gpu_order",
    "stray_nic",
    "shm_fallback",
    "nccl_version",
    "straggler",  # {node, factor}: slow only with several ranks per node (block collectives)
}


def fabric_doc(
    site: Site,
    seed: int | None = None,
    *,
    spread: float | None = None,
    transient: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The fabric JSON of a simulated site: its nodes, rails and blocks (as leaves), plus its faults.
    ``spread``, ``transient`` ({probability, factor}): the fabric's run-to-run noise (sim/nccl_tests.py),
    left out of the document when None (the site file has no keys for them yet)."""
    nt = site.node_types[0]
    # Gb/s -> GB/s, per rail: every device of it (a p5's GPU has 4 EFA devices of 100 Gb/s)
    rate = next((line for r in nt.rails if (line := nt.rail_line_Gbps(r))), 400.0)
    rail_GBps = rate / 8
    leaves = [
        {
            "name": b,
            "nodes": ",".join(members),
            # non-blocking leaf: every rail of every node has its own uplink share
            "uplink_GBps": len(members) * max(1, len(nt.rails)) * rail_GBps,
        }
        for b, members in site.blocks.items()
    ]
    faults: dict[str, list[dict[str, Any]] | bool] = {}
    for f in site.sim_faults:
        kind = f["kind"]
        if kind == "sharp_no_resource":  # the aggregation manager refuses this node's jobs
            _append(faults, "no_sharp", {"node": f["node"]})
            continue
        if kind == "fabric_manager_down":  # the NVSwitch fabric never set up: CUDA does not start there
            _append(faults, "cuda_not_ready", {"node": f["node"]})
            continue
        if kind in ("wrong_clique", "imex_down"):  # multi-node NVLink cannot work there (NCCL fails init)
            _append(faults, "mnnvl_broken", {"node": f["node"]})
            continue
        if kind == "rxdm_down":  # FasTrak aborts every step of that node (sim/nccl_tcp.rxdm_abort)
            _append(faults, kind, {"node": f["node"]})
            continue
        if kind in ("ofi_no_provider", "ofi_plugin_missing", "net_plugin_missing"):
            # NCCL on TCP sockets on that node (no net plugin: the same on every fabric that needs one)
            _append(
                faults, "ofi_plugin_missing" if kind == "net_plugin_missing" else kind, {"node": f["node"]}
            )
            # model assumption, not a measurement: sockets over the node's TCP interface carry a tenth of
            # what its EFA devices do (its steps are not judged as hardware: nccl.transport is the finding)
            for r in nt.rails:
                _append(faults, "slow_rail", {"node": f["node"], "rail": r.index, "factor": 0.1})
            continue
        if kind in ("efa_device_missing", "cxi_device_missing", "tcpx_nic_down"):  # GPU k's NIC gone
            _append(faults, "slow_rail", {"node": f["node"], "rail": f["gpu"], "factor": 0.5})
            continue
        if kind == "peermem_missing":  # no GPUDirect RDMA on that node: NCCL's NET channels lose /GDRDMA
            _append(faults, "no_gdr", {"node": f["node"]})
            continue
        if kind not in FABRIC_KINDS:
            continue
        if kind == "non_mpi":
            faults["non_mpi"] = True
            continue
        entry = {k: v for k, v in f.items() if k != "kind"}
        if kind == "slow_uplink":
            # The site's factor is the share of a rail's bandwidth each flow through the leaf's uplinks
            # still gets; the fabric model divides the whole uplink among a run's rails, so scale it.
            uplink = next(float(str(lf["uplink_GBps"])) for lf in leaves if lf["name"] == f["leaf"])
            entry["factor"] = float(f["factor"]) * rail_GBps / uplink
        if kind == "bad_cable":
            a, b = entry.pop("nodes")
            entry.update(a=a, b=b)
        _append(faults, kind, entry)
    noise: dict[str, Any] = {"spread": spread} if spread is not None else {}
    if transient is not None:
        noise["transient"] = dict(transient)
    return {
        **noise,
        "seed": site.nccl.seed if seed is None else seed,
        "defaults": {
            "gpus": nt.gpus,
            "rails": [r.hca for r in nt.rails] or ["mlx5_0"],
            "rail_GBps": rail_GBps,
            # NVLink per GPU and direction: the node type's links x speed (H100: 18 x 25 GB/s data rate;
            # nvidia-smi prints 26.562, the signalling rate); 450 where the site declares none
            "nvlink_GBps": _nvlink_GBps(site),
            "gpu_name": nt.gpu_model or "NVIDIA H100 80GB HBM3",
            # the host profiles' GPU bus ids, as nccl-tests prints them ("0000:19:00"): the rank lines
            # and nvidia-smi on a simulated node agree, as on a real one
            "bus_ids": _bus_ids(site),
        },
        "leaves": leaves,
        "nvlink_domains": {name: ",".join(members) for name, members in site.nvlink_domains.items()},
        "net": "ofi" if nt.provider else (nt.fabric if nt.fabric in TCP_PLUGIN else "ib"),
        "provider": nt.provider or "efa",
        "faults": faults,
    }


def _append(faults: dict[str, list[dict[str, Any]] | bool], kind: str, entry: dict[str, Any]) -> None:
    cast = faults.setdefault(kind, [])
    assert isinstance(cast, list)
    cast.append(entry)


def _nvlink_GBps(site: Site) -> float:
    nv = site.node_types[0].nvlink_line_GBps
    return 450.0 if nv is None else nv  # 450: an H100's, where the site declares no NVLink


def _bus_ids(site: Site) -> list[str]:
    node = site.node_types[0].nodes[0]
    if not supported(site, node):
        return []
    slots = sorted(layout(node, site, []), key=lambda s: s.gpu)
    return [s.gpu_bdf.rsplit(".", 1)[0] for s in slots]


def prepare(site: Site, python: str | None = None) -> list[Path]:
    """Write what the simulated site's jobs read; returns the paths written."""
    written: list[Path] = []
    profiles = site.env.get("CLUSTERACCEPT_HOST_PROFILE")
    if profiles:
        written += build_profiles(site, Path(profiles))
    fabric = site.env.get("CLUSTERACCEPT_FABRIC")
    if fabric:
        path = Path(fabric)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(fabric_doc(site), indent=1))  # another run's steps may be reading it
        written.append(path)
    if site.tools.nccl_tests_bin:
        install_bin_dir(Path(site.tools.nccl_tests_bin), python or site.slurm.python or sys.executable)
        written.append(Path(site.tools.nccl_tests_bin))
    return written


def simulate_step(
    fabric: Fabric, step: Step, job_env: Mapping[str, str] | None = None, *, attempt: str = ""
) -> Evidence:
    """What one planned srun step would print on the simulated fabric, without Slurm or processes.
    ``job_env``: the batch job's exports under the step's own (an srun step inherits them: the site's
    ``env``, whose NCCL_DEBUG=INFO makes every multi-node step log). ``attempt``: which attempt of the
    step this is (a retest passes another one to draw new run-to-run noise, as a new srun step would)."""
    argv = list(step.argv)
    words, i = env_words(argv)
    env: dict[str, str] = {**(job_env or {}), **words}
    if "--" in argv[i:]:  # past the launch record (probes/launch.py -- BINARY ...)
        i = argv.index("--", i) + 1
    binary, flags = Path(argv[i]).name, argv[i + 1 :]
    per_node = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--ntasks-per-node="))
    opts = parse_args(flags)
    assert not isinstance(opts, str), opts
    hosts, tasks = list(step.nodes), [per_node] * len(step.nodes)
    failed = init_failure(fabric, hosts, tasks, env)
    if failed is not None:
        text, rc = failed
    else:
        text, rc = render(binary, opts, fabric, hosts, tasks, env, attempt=attempt)
        text = with_info(text, fabric, hosts, env, step.collective, tasks)
    meta = {**step.meta(), "simulated": "in-process"}
    return Evidence(step.subject, "nccl-tests", argv=step.argv, returncode=rc, stdout=text, meta=meta)


def fabric_of(
    site: Site,
    seed: int | None = None,
    *,
    spread: float | None = None,
    transient: Mapping[str, float] | None = None,
) -> Fabric:
    doc = fabric_doc(site, seed, spread=spread, transient=transient)
    return fabric_from_dict(doc, f"{site.file} (sim)")
