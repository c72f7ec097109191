"""SHARP in-network reduction, per block (block names and "all"). No items where SHARP is not enabled."""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("sharp", family="sharp", per="block")
def test_sharp(judged: Judged, subject: str) -> None:
    """sharp.hello: the site's SHARP check command (sharp_hello) passes on every node of the block;
    sharp.collnet: an all_reduce across the block with SHARP shows CollNet/SHARP connections in its INFO log;
    sharp.uplift: busbw with SHARP over busbw without it reaches the site's uplift baseline."""
    judged.assert_accepted()
