"""NVLink domains that span nodes (GB200/GB300 NVL72 racks, the site's ``nvlink_domains``): one test per
domain. No items on a site whose NVLink domains end at the node (HGX). Judged by
clusteraccept.checks.nvlink_domain from the nodes' probes and the campaign's domain collective.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nvlink", family="nvlink", per="domain")
def test_nvlink_domain(judged: Judged, subject: str) -> None:
    """nvlink.clique: every GPU of the domain in one clique of one cluster UUID (a tray in another clique
    is named); nvlink.imex: the IMEX service active on every node and each node's view of the domain UP;
    nvlink.mnnvl: the domain-wide all_reduce ran over multi-node NVLink (P2P/MNNVL, never NET) at the
    baseline's busbw, or with none above what the network could carry."""
    judged.assert_accepted()
