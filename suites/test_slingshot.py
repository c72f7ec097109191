"""HPE Slingshot on every node whose type is ``fabric: slingshot``. No items on a site without one.

One test per node. Judged by clusteraccept.checks.slingshot.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("slingshot", family="slingshot", per="node")
def test_slingshot(judged: Judged, subject: str) -> None:
    """slingshot.devices: libfabric (fi_info -p cxi) offers the node type's count of Slingshot NICs (4 on
    an Alps GH200 node), every NIC the rail map names among them, each rail's link (hsnK) up; a node
    short of one has its nccl steps not judged, this is the finding. slingshot.env: every job on the node
    gets the libfabric/NCCL settings the site requires (HPE's and the centre's, e.g. NCCL_NET="AWS
    Libfabric", FI_CXI_DISABLE_HOST_REGISTER=1), with their values."""
    judged.assert_accepted()
