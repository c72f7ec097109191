"""NVLink/NVSwitch inside every node. No items on a site that declares no NVLink (node_types.<t>.nvlink).

One test per node (its GPUs are its parts: ``-k gpu3``). Judged by clusteraccept.checks.nvlink from the
evidence of probes/nvlink.py and the campaign's counter snapshots around traffic.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nvlink", family="nvlink", per="node", parts=("gpu",))
def test_nvlink(judged: Judged, subject: str) -> None:
    """nvlink.fabric: with an NVSwitch fabric, every GPU's fabric State Completed, Status Success (the
    fabric manager has trained it; until then CUDA cannot use the GPUs), its health not unhealthy;
    nvlink.links: each GPU's links all active at the speed the node type declares; nvlink.errors: no
    NVLink error counter (replay, recovery, CRC) rose while the campaign's collectives ran."""
    judged.assert_accepted()
