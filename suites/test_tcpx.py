"""Google Cloud GPUDirect-TCPX/TCPXO on every node whose type is ``fabric: tcpx`` or ``tcpxo``. No items on
a site without one.

One test per node. Judged by clusteraccept.checks.tcpx.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("tcpx", family="tcpx", per="node")
def test_tcpx(judged: Judged, subject: str) -> None:
    """tcpx.devices: every GPU NIC the rail map names (A3 High: 4, each serving two GPUs; A3 Mega: 8) is
    there, a PCI device, its link up; a node short of one has its nccl steps not judged, this is the
    finding. tcpx.env: every job on the node gets the plugin's settings the site requires (Google's
    NCCL_FASTRAK_* / NCCL_GPUDIRECTTCPX_* profile), with their values. What NCCL chose (the plugin, its
    version, the receive-datapath manager) is nccl.transport's."""
    judged.assert_accepted()
