"""``nvidia-imex-ctl -N``: the IMEX domain's status as one node's IMEX daemon sees it.

IMEX (the NVIDIA Internode Memory Exchange service, systemd unit ``nvidia-imex``) lets the GPUs of a
multi-node NVLink domain import each other's memory; NCCL's multi-node NVLink needs "a fully configured and
operational IMEX domain for all the nodes that form the NVLink domain" (NCCL env docs, NCCL_MNNVL_ENABLE).
``-N`` "gets the full status of the entire IMEX domain" (IMEX guide, docs.nvidia.com/multi-node-nvlink-
systems/imex-guide/cmdservice.html). Layout (real captures in tests/data/nvidia-imex-ctl/):

    Connectivity Table Legend:            the legend: I, N, R, D, A, !V!, !M!, C (newer versions add !V! !M!)
    ...
    3/25/2025 10:42:08.082                a timestamp
    Nodes:
    Node #0   - 10.136.206.47   - READY                - Version: 570.172     (Version: newer versions)
    ...
     Nodes From\\To  0  1                  the connectivity matrix: row i, column j = i's link to j
           0        C  C
    Domain State: UP

A node's status is ``READY`` when it has joined (``UNAVAILABLE`` when it is down: NCCL's troubleshooting
guide); a matrix cell ``C`` is "Connected - Ready for operation", anything else a link that is not.
Lines before the legend (a wrapper's own ``READY``) and after the domain state are passed over. Refused: no
``Domain State`` line, no node, a node or matrix line that is not one, a matrix not square over the nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_NODE = re.compile(
    r"Node #(?P<index>\d+)\s+-\s+(?P<address>\S+)\s+-\s+(?P<status>[A-Z_]+)"
    r"(?:\s+-\s+Version:\s*(?P<version>\S+))?"
)
_HEADER = re.compile(r"Nodes From\\To((?:\s+\d+)+)")
_ROW = re.compile(r"(?P<index>\d+)\s+(?P<cells>.+)")
_CELL = re.compile(r"C|I|N|R|D|A|!V!|!M!")
_STATE = re.compile(r"Domain State:\s*(?P<state>\S+)")
CONNECTED = "C"


@dataclass(frozen=True)
class ImexNode:
    index: int
    address: str  # the IP the domain's nodes_config.cfg lists
    status: str  # READY | UNAVAILABLE | ... as printed
    version: str | None  # "570.172"; None where this IMEX version prints no Version column


@dataclass(frozen=True)
class ImexDomain:
    nodes: tuple[ImexNode, ...]
    # matrix[i][j]: node i's connection to node j ("C" connected); empty where no matrix was printed
    matrix: tuple[tuple[str, ...], ...]
    state: str  # "UP", "DEGRADED", ... as printed

    def not_connected(self) -> list[tuple[int, int, str]]:
        """Every (from, to, code) whose cell is not C."""
        return [(i, j, c) for i, row in enumerate(self.matrix) for j, c in enumerate(row) if c != CONNECTED]


def parse(text: str) -> ImexDomain:
    nodes: list[ImexNode] = []
    columns: list[int] | None = None
    matrix: list[tuple[str, ...]] = []
    state: str | None = None
    for line_no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if state is not None or not line:
            continue
        if line.startswith("Node #"):
            m = _NODE.fullmatch(line)
            if m is None:
                raise ParseError(line_no, "'Node #<i> - <ip> - <STATUS> [- Version: <v>]'", raw)
            nodes.append(ImexNode(int(m["index"]), m["address"], m["status"], m["version"]))
            continue
        if (h := _HEADER.fullmatch(line)) is not None:
            columns = [int(c) for c in h[1].split()]
            if columns != [n.index for n in nodes]:
                raise ParseError(line_no, f"matrix columns for nodes {[n.index for n in nodes]}", raw)
            continue
        if (s := _STATE.fullmatch(line)) is not None:
            state = s["state"]
            continue
        if columns is not None:
            m = _ROW.fullmatch(line)
            cells = m["cells"].split() if m else []
            if (
                m is None
                or int(m["index"]) != len(matrix)
                or len(cells) != len(columns)
                or not all(_CELL.fullmatch(c) for c in cells)
            ):
                raise ParseError(
                    line_no, f"matrix row {len(matrix)}: {len(columns)} cells of C/I/N/R/D/A/!V!/!M!", raw
                )
            matrix.append(tuple(cells))
    if state is None:
        raise ParseError(0, "a 'Domain State: <state>' line (nvidia-imex-ctl -N)", "none")
    if not nodes:
        raise ParseError(0, "'Node #<i> - <ip> - <STATUS>' lines", "none")
    if columns is not None and len(matrix) != len(columns):
        raise ParseError(0, f"{len(columns)} matrix rows", str(len(matrix)))
    return ImexDomain(tuple(nodes), tuple(matrix), state)
