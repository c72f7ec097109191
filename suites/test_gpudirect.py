"""GPUDirect RDMA on every node: peer-memory support, ACS, IOMMU mode, GPU-memory RDMA bandwidth, NCCL GDR.

One test per node (its GPUs and rails are its parts: ``-k gpu3``, ``-k rail3``). Judged by
clusteraccept.checks.gpudirect from the evidence of probes/gpudirect.py.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("gpudirect", family="gpudirect", per="node", parts=("gpu", "rail"))
def test_gpudirect(judged: Judged, subject: str) -> None:
    """gpudirect.peermem: nvidia_peermem loaded, or DMA-BUF usable (open GPU kernel modules, Linux >= 5.12);
    gpudirect.acs: no PCIe bridge between a GPU and its rail NIC redirects peer-to-peer traffic (ACS off);
    gpudirect.iommu: the IOMMU mode the site declares (skipped with the observed mode when it declares none);
    gpudirect.write_bw: loopback ib_write_bw --use_cuda per rail against gpudirect.write_bw.<node>.rail<k>;
    gpudirect.nccl_gdrdma: a multi-node NCCL INFO log shows /GDRDMA on the node's NET channels."""
    judged.assert_accepted()
