"""Collectives across each block and across the whole node set ("all"), and each block's uplinks."""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nccl", family="nccl", per="block")
def test_nccl_block(judged: Judged, subject: str) -> None:
    """nccl.launch / nccl.busbw of the block collectives: launched as intended (every rank on the intended
    hosts, exit 0, no #wrong, busbw below the ceiling), busbw against the site's baseline; nccl.localization:
    no leaf uplink is convicted by its cross-block pairs."""
    judged.assert_accepted()
