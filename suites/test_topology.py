"""GPU/NIC topology of every node: inventory, GPU<->rail-NIC affinity, PCIe links, NIC ports.

One test per node (its GPUs and rails are its parts: ``-k node07``, ``-k gpu3``, ``-k rail3`` select, and
judge only what they name). Judged by clusteraccept.checks.topology from the evidence of probes/topology.py.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("topology", family="topology", per="node", parts=("gpu", "rail"))
def test_topology(judged: Judged, subject: str) -> None:
    """topology.gpu_inventory: GPU count and model as the node type says, every GPU visible to nvidia-smi;
    topology.gpu_nic_affinity: each GPU's rail NIC is its closest NIC (PIX/PXB) on the same NUMA node;
    topology.pcie_link / nic_pcie_link: every GPU and rail NIC link at its maximum speed and width;
    topology.nic_port: each rail port Active/LinkUp at the rail's rate and the node type's link layer."""
    judged.assert_accepted()
