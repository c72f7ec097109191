"""Node-side collectors (DESIGN.md §4): gather evidence only; no parsing, no thresholds.

Each family module exposes ``collect(options) -> list[Evidence]``; every command goes through
``hostio.run`` and every file read through ``hostio.read``.
"""

from __future__ import annotations

import importlib

from clusteraccept.evidence import Evidence
from clusteraccept.families import PROBED


def collect(family: str, options: dict[str, object]) -> list[Evidence]:
    if family not in PROBED:
        raise ValueError(f"unknown probe family {family!r}")
    module = importlib.import_module(f"clusteraccept.probes.{family}")
    result: list[Evidence] = module.collect(options)
    return result
