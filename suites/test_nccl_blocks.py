"""Collectives across each block, across the whole node set, and inside each node (NVLink domain)."""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nccl.launch", family="nccl", per="intra_node")
def test_intra_node_launch(judged: Judged, subject: str) -> None:
    judged.assert_accepted()


@check("nccl.busbw", family="nccl", per="intra_node")
def test_intra_node_busbw(judged: Judged, subject: str) -> None:
    judged.assert_accepted()


@check("nccl.launch", family="nccl", per="block")
def test_block_launch(judged: Judged, subject: str) -> None:
    judged.assert_accepted()


@check("nccl.busbw", family="nccl", per="block")
def test_block_busbw(judged: Judged, subject: str) -> None:
    judged.assert_accepted()


@check("nccl.localization", family="nccl", per="block")
def test_block_uplink_not_blamed(judged: Judged, subject: str) -> None:
    """No leaf/uplink is convicted by its cross-block pairs."""
    judged.assert_accepted()
