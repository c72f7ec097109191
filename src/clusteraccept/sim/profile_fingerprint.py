"""Simulated host part for the node's identity (probes/fingerprint.py, probes/launch.py).

- ``/proc/sys/kernel/random/boot_id``: one UUID per simulated node and site (random(4): the real one is
  generated once per boot), so a node keeps it for as long as its profile is unchanged;
- ``/proc/sys/kernel/osrelease``: the kernel ``uname -r`` answers (sim/profile_gpudirect.py).

A test makes a node come back rebooted or re-imaged mid-run by rewriting these files in its profile.
"""

from __future__ import annotations

import uuid
from typing import Any

from clusteraccept.probes.fingerprint import BOOT_ID
from clusteraccept.sim.hosts import Part
from clusteraccept.sim.profile_gpudirect import KERNEL
from clusteraccept.site.model import Site

OSRELEASE = "/proc/sys/kernel/osrelease"


def contribute(node: str, site: Site, faults: list[dict[str, Any]]) -> Part:
    del faults  # no injected fault changes a node's identity: a test does, under a running run
    boot = uuid.uuid5(uuid.NAMESPACE_URL, f"clusteraccept-sim:{site.name}:{node}")
    return Part(files={BOOT_ID: f"{boot}\n", OSRELEASE: KERNEL})
