"""Simulated hosts (DESIGN.md, Simulation): per-node host profiles that ``hostio`` resolves to.

A profile is ``<root>/<node>/commands.json`` + ``<root>/<node>/fs/...`` (see hostio.py). Each check family
contributes its part through a module ``clusteraccept.sim.profile_<family>`` exposing

    contribute(node: str, site: Site, faults: list[dict]) -> Part

built from REAL captured outputs (tests/data/...) with the node's injected faults applied. Probe code never
knows it is simulated.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clusteraccept.evidence import slug
from clusteraccept.families import ALWAYS_PROBED, NODE_FAMILIES

if TYPE_CHECKING:  # only a type here: every simulated traffic step imports write_atomic (sim/traffic.py)
    from clusteraccept.site.model import Site

# a part per probe family, the port counters, and what a step's ranks start with (probes/launch.py)
PARTS = (*ALWAYS_PROBED, *NODE_FAMILIES, "counters", "launch")


@dataclass
class Part:
    """Recorded commands (fnmatch pattern on the shell-joined argv -> stdout, returncode) and files."""

    commands: list[tuple[str, str, int]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # path -> target path (both node paths)
    traffic: dict[str, Any] = field(default_factory=dict)  # HCA -> one step's increments (sim/traffic.py)
    profile_files: dict[str, str] = field(default_factory=dict)  # files of the profile itself (not fs/)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one rename: a reader sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # two runs of a site may write it at once
    tmp.write_text(text)
    tmp.replace(path)


def faults_for(site: Site, node: str) -> list[dict[str, Any]]:
    return [f for f in site.sim_faults if f.get("node") == node or node in f.get("nodes", [])]


PROFILE_LAYOUT = 2  # how write_profile lays a profile out (2: relative links); a change rewrites them


def write_profile(root: Path, node: str, parts: list[Part]) -> Path:
    """The node's profile under ``root/node``. Two runs of one simulated site at once (the nightly and a
    manual one) must not pull the profile from under each other's jobs: an unchanged profile is left as
    it is, a changed one is written beside it and swapped in."""
    final = root / node
    parts_doc = {"layout": PROFILE_LAYOUT, "parts": [asdict(p) for p in parts]}
    digest = hashlib.sha256(json.dumps(parts_doc, sort_keys=True).encode()).hexdigest()
    stamp = final / ".parts.sha256"
    if stamp.exists() and stamp.read_text() == digest:
        return final
    d = root / f".{node}.{os.getpid()}.new"
    if d.exists():
        shutil.rmtree(d)
    _fill_profile(d, parts)
    (d / ".parts.sha256").write_text(digest)
    old = root / f".{node}.{os.getpid()}.old"
    if final.exists():
        final.rename(old)
    d.rename(final)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
    return final


def _fill_profile(d: Path, parts: list[Part]) -> None:
    fs = d / "fs"
    (d / "out").mkdir(parents=True)
    index = []
    traffic: dict[str, Any] = {}
    for i, part in enumerate(parts):
        traffic |= part.traffic
        for j, (pattern, stdout, rc) in enumerate(part.commands):
            out = f"out/{i:02d}_{j:03d}_{slug(pattern)[:60]}.txt"
            (d / out).write_text(stdout)
            index.append({"match": pattern, "stdout": out, "returncode": rc})
        for name, content in part.profile_files.items():
            (d / name).write_text(content)
        for path, content in part.files.items():
            target = fs / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        for path, dest in part.links.items():
            link = fs / path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            (fs / dest.lstrip("/")).mkdir(parents=True, exist_ok=True)
            # relative, as sysfs's own links are: the profile is built beside its place and moved in
            link.symlink_to(os.path.relpath(fs / dest.lstrip("/"), link.parent))
    # The launcher really runs on a simulated node (it starts the simulated nccl-tests of the site), and
    # so do the campaign driver's questions to the controller before a relaunch (jobs/node_entry
    # _controller_back, _steps_ended): the node is real.
    real = ("srun *", "env *", "scontrol ping", "squeue -h -s -j * -o %i")
    index += [{"match": pattern, "passthrough": True} for pattern in real]
    (d / "commands.json").write_text(json.dumps(index, indent=1))
    if traffic:
        (d / "traffic.json").write_text(json.dumps(traffic, indent=1))


def build_profiles(site: Site, root: Path) -> list[Path]:
    """Write one host profile per node of ``site`` under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    out = []
    for node in site.nodes:
        faults = faults_for(site, node)
        parts: list[Part] = []
        for family in PARTS:
            try:
                module = importlib.import_module(f"clusteraccept.sim.profile_{family}")
            except ModuleNotFoundError:
                continue
            parts.append(module.contribute(node, site, faults))
        out.append(write_profile(root, node, parts))
    return out
