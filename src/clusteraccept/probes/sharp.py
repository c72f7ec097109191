"""SHARP on this node: the site's SHARP check command (``sharp.hello``, default ``sharp_hello``).

NVIDIA SHARP documentation, "Testing NVIDIA SHARP Setup": sharp_hello creates a single SHARP job and sends
a barrier request; its output ends with "Test Passed." on success (parsers/sharp.py). It is run once per
node and judged per block by checks/sharp.py. Nothing runs when the site declares no SHARP (empty
``options["sharp_hello"]``).
"""

from __future__ import annotations

from dataclasses import replace

from clusteraccept import hostio
from clusteraccept.evidence import Evidence


def collect(options: dict[str, object]) -> list[Evidence]:
    hello = options.get("sharp_hello") or []
    assert isinstance(hello, list)
    if not hello:
        return []
    timeout_s = float(options.get("timeout_s", 60))  # type: ignore[arg-type]
    ev = hostio.run([str(a) for a in hello], timeout_s, source="sharp")
    return [replace(ev, meta={**ev.meta, "role": "hello"})]
