"""Per-rail nccl-tests between node pairs: in-block pairs (perfect matchings) and sampled cross-block pairs.

One test per (pair, rail): ``-k rail3`` or ``-k node07`` selects, and only the selected steps are submitted.
"""

from clusteraccept.outcome import Judged
from clusteraccept.plugin import check


@check("nccl.launch", family="nccl", per="pair_rail")
def test_pair_launch(judged: Judged, subject: str) -> None:
    """The step ran as intended: 2 ranks on the intended hosts, exit 0, no #wrong, busbw below the ceiling."""
    judged.assert_accepted()


@check("nccl.busbw", family="nccl", per="pair_rail")
def test_pair_busbw(judged: Judged, subject: str) -> None:
    """busbw of each pair collective and size against the site's baseline for its scope and rail."""
    judged.assert_accepted()


@check("nccl.localization", family="nccl", per="node")
def test_node_not_blamed(judged: Judged, subject: str) -> None:
    """No slow result is attributed to this node, one of its rails or one of its cables."""
    judged.assert_accepted()


@check("nccl.link_errors", family="nccl", per="rail")
def test_link_errors(judged: Judged, subject: str) -> None:
    """No error counter of the rail's port (symbol errors, link downs, receive errors, discards) rose while
    the campaign's traffic ran: a link that passes busbw while taking errors is a finding, not a pass."""
    judged.assert_accepted()
