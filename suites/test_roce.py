"""RoCE lossless configuration of every node's rails. No items on a site without a ``roce:`` section.

One test per node (its rails are its parts: ``-k rail3``). Judged by clusteraccept.checks.roce.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("roce", family="roce", per="node", parts=("rail",))
def test_roce(judged: Judged, subject: str) -> None:
    """roce.netdevs: every site rail is an Ethernet (RoCE) port with its netdev present; per rail:
    roce.trust (the trust mode the site says, usually DSCP), roce.pfc (PFC on exactly the lossless
    priority), roce.dscp_map (the RoCE DSCP and default_roce_tos >> 2 map to it), roce.ecn (DCQCN reaction
    and notification points on it), roce.cnp (CNPs with the site's DSCP and 802.1p priority), roce.mtu,
    roce.gid (a RoCE v2 GID, at NCCL_IB_GID_INDEX when the site sets one), roce.counters (no pause frames
    off the lossless priority, no discards on it, between two counter snapshots)."""
    judged.assert_accepted()
