"""RoCE lossless configuration, per RoCE netdev of the site's rails (``node:railK``) and per node."""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("roce.netdevs", family="roce", per="node")
def test_roce_netdevs(judged: Judged, subject: str) -> None:
    """Every site rail is an Ethernet (RoCE) port with its netdev present."""
    judged.assert_accepted()


@check("roce.trust", family="roce", per="rail")
def test_trust(judged: Judged, subject: str) -> None:
    """The netdev trusts what the site says (usually DSCP)."""
    judged.assert_accepted()


@check("roce.pfc", family="roce", per="rail")
def test_pfc(judged: Judged, subject: str) -> None:
    """PFC is enabled on exactly the lossless priority."""
    judged.assert_accepted()


@check("roce.dscp_map", family="roce", per="rail")
def test_dscp_map(judged: Judged, subject: str) -> None:
    """The RoCE DSCP (and RDMA-CM default_roce_tos >> 2) maps to the lossless priority."""
    judged.assert_accepted()


@check("roce.ecn", family="roce", per="rail")
def test_ecn(judged: Judged, subject: str) -> None:
    """ECN (DCQCN) reaction and notification points are enabled on the lossless priority."""
    judged.assert_accepted()


@check("roce.cnp", family="roce", per="rail")
def test_cnp(judged: Judged, subject: str) -> None:
    """CNPs go out with the site's DSCP and 802.1p priority."""
    judged.assert_accepted()


@check("roce.mtu", family="roce", per="rail")
def test_mtu(judged: Judged, subject: str) -> None:
    judged.assert_accepted()


@check("roce.gid", family="roce", per="rail")
def test_gid(judged: Judged, subject: str) -> None:
    """A RoCE v2 GID exists on the port (at the site's NCCL_IB_GID_INDEX when it sets one)."""
    judged.assert_accepted()


@check("roce.counters", family="roce", per="rail")
def test_counters(judged: Judged, subject: str) -> None:
    """No pause frames off the lossless priority, no discards on it, between two counter snapshots."""
    judged.assert_accepted()
