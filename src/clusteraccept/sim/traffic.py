"""What a simulated traffic step does to the simulated nodes' port counters (profile_counters.py).

:func:`bump` adds one step's increments (the node profile's ``traffic.json``) to the counter files and to
the recorded ``ethtool -S`` output of each host and HCA the step used. A per-node lock serializes the
read-modify-write (concurrent campaigns of the local executor share nodes), and every file is replaced
atomically, so a snapshot never sees a counter go backwards or half a file.
"""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from clusteraccept.sim.hosts import write_atomic


def _add_lines(text: str, add: dict[str, int]) -> str:
    def one(m: re.Match[str]) -> str:
        return f"{m[1]}{int(m[2]) + add[m[1].strip().rstrip(':')]}"

    names = "|".join(re.escape(n) for n in add)
    return re.sub(rf"^(\s*(?:{names}):\s+)(\d+)$", one, text, flags=re.MULTILINE) if add else text


def _add_nvlink(text: str, add: list[list[Any]]) -> str:
    """``nvidia-smi nvlink -e`` with ``[gpu, link, counter, increment]`` added (its layout: GPU lines, then
    ``<TAB> Link L: <counter>: <value>`` lines under each)."""
    lines, gpu = text.splitlines(), -1
    for i, line in enumerate(lines):
        m = re.match(r"GPU (\d+): ", line)
        if m:
            gpu = int(m[1])
            continue
        for g, link, name, inc in add:
            m = re.fullmatch(rf"(\s+Link {int(link)}: {re.escape(name)}: )(\d+)", line)
            if m and g == gpu:
                lines[i] = f"{m[1]}{int(m[2]) + int(inc)}"
    return "\n".join(lines) + "\n"


def _bump_node(node_dir: Path, hcas: Iterable[str]) -> None:
    spec_file = node_dir / "traffic.json"
    if not spec_file.exists():
        return
    spec = json.loads(spec_file.read_text())
    commands = json.loads((node_dir / "commands.json").read_text())
    with (node_dir / "traffic.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for hca in hcas:
            if hca == NVLINK:
                nv = spec.get(NVLINK)
                out = nv and next((c["stdout"] for c in commands if c.get("match") == nv["match"]), None)
                if out:
                    write_atomic(node_dir / out, _add_nvlink((node_dir / out).read_text(), nv["add"]))
                continue
            rail = spec.get(hca)
            if rail is None:
                continue
            for port in rail.get("devices", [rail]):  # an EFA rail: each of its devices
                for sub in ("counters", "hw_counters"):
                    for name, inc in port.get(sub, {}).items():
                        f = node_dir / port["dir"] / sub / name
                        if f.exists():
                            write_atomic(f, f"{int(f.read_text()) + int(inc)}\n")
            if rail.get("ethtool"):
                match = f"ethtool -S {rail['netdev']}"
                out = next((c["stdout"] for c in commands if c.get("match") == match), None)
                if out is not None:
                    f = node_dir / out
                    write_atomic(f, _add_lines(f.read_text(), rail["ethtool"]))


NVLINK = "#nvlink"  # the NVLink counters' key in traffic.json (sim/profile_nvlink.py)


def bump(profile_root: Path, hosts: Iterable[str], hcas: Iterable[str]) -> None:
    """One traffic step over ``hcas`` on every host of ``hosts`` (those with a profile under the root);
    :data:`NVLINK` among them: the step ran several ranks on each of these hosts (NVLink traffic)."""
    wanted = list(hcas)
    for host in hosts:
        node_dir = profile_root / host
        if node_dir.is_dir():
            _bump_node(node_dir, wanted)
