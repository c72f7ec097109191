"""SHARP in-network reduction, per block (block names and "all")."""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("sharp.hello", family="sharp", per="block")
def test_sharp_hello(judged: Judged, subject: str) -> None:
    """The site's SHARP check command (sharp_hello) passes on every node of the block."""
    judged.assert_accepted()


@check("sharp.collnet", family="sharp", per="block")
def test_sharp_collnet(judged: Judged, subject: str) -> None:
    """An all_reduce across the block with SHARP shows CollNet/SHARP connections in its INFO log."""
    judged.assert_accepted()


@check("sharp.uplift", family="sharp", per="block")
def test_sharp_uplift(judged: Judged, subject: str) -> None:
    """busbw with SHARP over busbw without it reaches the site's uplift baseline."""
    judged.assert_accepted()
