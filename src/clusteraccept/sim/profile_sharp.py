"""Simulated SHARP host part: the site's ``sharp.hello`` command answered from REAL captures.

Sources (tests/data/sharp/SOURCES.md): sharp_hello-a100-cx6-passed.txt (a passing sharp_hello,
NVIDIA/nccl-tests#311) and, for the ``sharp_no_resource`` fault, synthetic-sharp_hello-failed-no-resource.txt
(the real libsharp and smx lines of a job refused with "No resource", from the same issue). The capture's host
name (gpu34) is replaced by the node's. A site without SHARP gets nothing (the probe runs nothing there).
"""

from __future__ import annotations

import glob
import shlex
from typing import Any

from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import Part
from clusteraccept.site.model import Site

DATA = REPO_ROOT / "tests" / "data" / "sharp"
PASSED = DATA / "sharp_hello-a100-cx6-passed.txt"
NO_RESOURCE = DATA / "synthetic-sharp_hello-failed-no-resource.txt"
CAPTURE_HOST = "gpu34"


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    part = Part()
    if not site.sharp.enabled:
        return part
    refused = any(f["kind"] == "sharp_no_resource" for f in faults)
    text = (NO_RESOURCE if refused else PASSED).read_text().replace(CAPTURE_HOST, node)
    # sharp_hello's exit status on failure is not documented; the judge reads the output, not the status.
    # glob.escape: hostio matches recorded commands with fnmatch, whose wildcards are glob's.
    part.commands.append((glob.escape(shlex.join(site.sharp.hello)), text, 1 if refused else 0))
    return part
