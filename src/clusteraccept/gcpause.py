"""Python's cyclic collector paused over bulk work that makes millions of acyclic objects.

A plan (a Step per pair and rail: 1.1 million at 4,096 nodes), a run's evidence and verdicts, and the
reports' one pass over them (a chart row and a value per verdict: 2.5 million at 1,024 nodes) hold no
reference cycles, yet each full collection walks all of them again as the heap grows: ~25% of a 4,096-node
dry run's ``flow.execute``, 2.3 of the 6.8 s that reading a 256-node run's raw/ took. Reference counting
still frees everything; the collector is back on (if it was) when the work is done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
