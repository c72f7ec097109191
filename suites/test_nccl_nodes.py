"""nccl-tests as every node sees them: its per-rail pair results (in-block perfect matchings and sampled
cross-block partners), its rails' error counters under that traffic, and its intra-node collectives.

One test per node, never per pair: the pair x rail results are the evidence of the localization, which
names the culprit (node, rail, cable); a healthy node does not fail because its partner is bad. Its rails
are its parts: ``-k rail3`` or ``-k "node07 and rail3"`` select, and only the selected steps are submitted.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nccl", family="nccl", per="node", parts=("rail",))
def test_nccl_node(judged: Judged, subject: str) -> None:
    """nccl.localization: no slow or failing pair result is attributed to this node, one of its rails or
    one of its cables; nccl.link_errors: no error counter of a rail's port (symbol errors, link downs,
    receive errors, discards) rose while the campaign's traffic ran; nccl.launch / nccl.busbw of the
    intra-node collectives (NVLink domain): launched as intended, busbw against the site's baseline;
    what actually ran on it, from every step's launch records and NCCL INFO lines (checks/launch.py):
    launch.binding (each rank on its GPU's CPUs and on the rail's GPU, no shared cores), launch.nic (its
    rail's HCA, never a storage port), nccl.transport (no NET/Socket, no SHM in the node, NVLS/CollNet as
    nccl.expect says), nccl.config (no NCCL tuning knob set by the site or the node unless accepted)."""
    judged.assert_accepted()
