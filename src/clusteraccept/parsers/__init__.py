"""Pure parsers, one module per tool: ``parse(text: str) -> frozen dataclass``; ParseError on nonsense.

TOOLS maps the tool name used on the command line (``python -m clusteraccept.parsers TOOL FILE``) to its
module in this package. Every module exposes ``parse(text: str)``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

TOOLS: dict[str, str] = {
    # issue 4: topology and GPUDirect
    "nvidia-smi-topo": "nvidia_smi_topo",
    "ibstat": "ibstat",
    "ibv_devinfo": "ibv_devinfo",
    "ibdev2netdev": "ibdev2netdev",
    "rdma-link": "rdma_link",
    "lsmod": "lsmod",
    "perftest": "perftest",
    "numactl": "numactl",
    "lscpu": "lscpu",
    "nccl-debug": "nccl_debug",
    "lspci": "lspci",
    # issue 5: RoCE and SHARP
    "mlnx_qos": "mlnx_qos",
    "dcb-pfc": "dcb",
    "show_gids": "show_gids",
    "ethtool-stats": "ethtool_stats",
    "sharp": "sharp",
    # issue 6: nccl-tests and Slurm topology
    "nccl-tests": "nccl_tests",
    "scontrol-topology": "scontrol_topology",
    # issue 16: the cluster's limits on a job (plan/limits.py)
    "scontrol-config": "scontrol_config",
    # issue 8: the PyTorch NCCL fallback collector (probes/torch_nccl.py, its own JSON-lines format)
    "torch-nccl": "torch_nccl",
    # issue 5/9: port counter snapshots around traffic (probes/counters.py's sectioned text)
    "counters": "counters",
    # issue 18: what each rank of a step ran with (probes/launch.py)
    "launch-record": "launch_record",
    # issue 21: NVLink/NVSwitch (probes/nvlink.py; nvlink -e in the counter snapshots)
    "nvidia-smi-nvlink": "nvidia_smi_nvlink",
    "nvidia-smi-q": "nvidia_smi_q",
    "nvidia-imex-ctl": "nvidia_imex_ctl",
    # issue 22: fabrics beyond IB/RoCE (libfabric providers: EFA, Slingshot cxi)
    "fi_info": "fi_info",
    "proc-limits": "proc_limits",
}


def get(tool: str) -> Callable[[str], Any]:
    """The ``parse`` function of ``tool``; KeyError names the known tools."""
    if tool not in TOOLS:
        raise KeyError(f"unknown tool {tool!r}; known: {', '.join(sorted(TOOLS))}")
    module = importlib.import_module(f"clusteraccept.parsers.{TOOLS[tool]}")
    fn: Callable[[str], Any] = module.parse
    return fn
