"""GPU/NIC topology of every node: inventory, GPU<->rail-NIC affinity, PCIe links, NIC ports.

One test per node, per GPU (``node:gpuK``) or per rail (``node:railK``): ``-k node07``, ``-k gpu3`` or
``-k rail3`` select. Judged by clusteraccept.checks.topology from the evidence of probes/topology.py.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("topology.gpu_inventory", family="topology", per="node")
def test_gpu_inventory(judged: Judged, subject: str) -> None:
    """GPU count and model as the node type says; every GPU on the PCIe bus visible to nvidia-smi."""
    judged.assert_accepted()


@check("topology.gpu_nic_affinity", family="topology", per="gpu")
def test_gpu_nic_affinity(judged: Judged, subject: str) -> None:
    """The GPU's rail NIC is its closest NIC (PIX/PXB) and on the same NUMA node (sysfs and nvidia-smi)."""
    judged.assert_accepted()


@check("topology.pcie_link", family="topology", per="gpu")
def test_gpu_pcie_link(judged: Judged, subject: str) -> None:
    """The GPU's PCIe link runs at its maximum speed and width."""
    judged.assert_accepted()


@check("topology.nic_pcie_link", family="topology", per="rail")
def test_nic_pcie_link(judged: Judged, subject: str) -> None:
    """The rail NIC's PCIe link runs at its maximum speed and width."""
    judged.assert_accepted()


@check("topology.nic_port", family="topology", per="rail")
def test_nic_port(judged: Judged, subject: str) -> None:
    """The rail port is Active/LinkUp at the rail's rate and the node type's link layer."""
    judged.assert_accepted()
