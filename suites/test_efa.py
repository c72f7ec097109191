"""AWS EFA on every node whose type is ``fabric: efa``. No items on a site without one.

One test per node. Judged by clusteraccept.checks.efa.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("efa", family="efa", per="node")
def test_efa(judged: Judged, subject: str) -> None:
    """efa.devices: libfabric (fi_info -p efa) offers the node type's count of EFA devices (32 on a
    p5.48xlarge), every device the rail map names among them, each port ACTIVE; a node short of one has
    its nccl steps not judged, this is the finding. efa.memlock: the job's locked-memory limit is
    unlimited (EFA pins the memory NCCL registers)."""
    judged.assert_accepted()
