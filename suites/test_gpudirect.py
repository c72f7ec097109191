"""GPUDirect RDMA on every node: peer-memory support, ACS, IOMMU mode, GPU-memory RDMA bandwidth, NCCL GDR.

One test per node, per GPU (``node:gpuK``) or per rail (``node:railK``). Judged by
clusteraccept.checks.gpudirect from the evidence of probes/gpudirect.py.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("gpudirect.peermem", family="gpudirect", per="node")
def test_peermem(judged: Judged, subject: str) -> None:
    """nvidia_peermem is loaded, or DMA-BUF is usable (open GPU kernel modules, Linux >= 5.12)."""
    judged.assert_accepted()


@check("gpudirect.acs", family="gpudirect", per="gpu")
def test_acs(judged: Judged, subject: str) -> None:
    """No PCIe bridge between the GPU and its rail NIC redirects peer-to-peer traffic (ACS off)."""
    judged.assert_accepted()


@check("gpudirect.iommu", family="gpudirect", per="node")
def test_iommu(judged: Judged, subject: str) -> None:
    """The IOMMU mode the site declares (skipped with the observed mode while the site declares none)."""
    judged.assert_accepted()


@check("gpudirect.write_bw", family="gpudirect", per="rail")
def test_write_bw(judged: Judged, subject: str) -> None:
    """Loopback ib_write_bw --use_cuda on the rail against gpudirect.write_bw.<node>.rail<k> (Gb/s)."""
    judged.assert_accepted()


@check("gpudirect.nccl_gdrdma", family="gpudirect", per="node")
def test_nccl_gdrdma(judged: Judged, subject: str) -> None:
    """A multi-node NCCL INFO log shows /GDRDMA on the node's NET channels."""
    judged.assert_accepted()
