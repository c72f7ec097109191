"""What a running cluster left in its state dir (slot, size, processes); the machine lock; the event log."""

from __future__ import annotations

import json
import os
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from clusteraccept.rundir import exclusive_lock
from clusteraccept.vcluster.config import Layout
from clusteraccept.vcluster.daemons import Proc

STATE_DIR_ENV = "CLUSTERACCEPT_VCLUSTER_DIR"
# One lock for the whole machine: slots (bridges, subnets, namespaces) are machine-wide.
LOCK_FILE = Path("/run/lock/clusteraccept-vcluster.lock")


@dataclass(frozen=True)
class Record:
    slot: int
    n_nodes: int
    gpus_per_node: int
    procs: tuple[Proc, ...]
    slurm: str = "22.05"  # which Slurm runs: "22.05" (the host's packages) or "24.11" (the Debian 13 root)
    topology: str = "tree"
    mpi_default: str = "none"
    root_built: str = ""  # the 24.11 root's build stamp (its manifest's "built"): rebuilt since, not ours

    def save(self, lay: Layout) -> None:
        lay.record.parent.mkdir(parents=True, exist_ok=True)
        tmp = lay.record.with_suffix(".tmp")
        data = {
            "slot": self.slot,
            "n_nodes": self.n_nodes,
            "gpus_per_node": self.gpus_per_node,
            "procs": [p.to_json() for p in self.procs],
            "slurm": self.slurm,
            "topology": self.topology,
            "mpi_default": self.mpi_default,
            "root_built": self.root_built,
        }
        tmp.write_text(json.dumps(data, indent=1))
        os.replace(tmp, lay.record)


def load(lay: Layout) -> Record | None:
    try:
        data = json.loads(lay.record.read_text())
        return Record(
            int(data["slot"]),
            int(data["n_nodes"]),
            int(data["gpus_per_node"]),
            tuple(Proc.from_json(p) for p in data["procs"]),
            str(data.get("slurm", "22.05")),  # records written before 24.11 existed
            str(data.get("topology", "tree")),
            str(data.get("mpi_default", "none")),
            str(data.get("root_built", "")),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def default_state_dir() -> Path:
    """$CLUSTERACCEPT_VCLUSTER_DIR, else `<repo>/.vcluster` (the repo holding this source tree)."""
    env = os.environ.get(STATE_DIR_ENV)
    if env:
        return Path(env)
    return repo_root() / ".vcluster"


def repo_root() -> Path:
    """The checkout holding this source tree (the folder with pyproject.toml), else the working directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def machine_lock() -> AbstractContextManager[None]:
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    return exclusive_lock(LOCK_FILE)


def event(lay: Layout, message: str) -> None:
    """One line in logs/vcluster.log: what up/down did and when, for post-mortems."""
    lay.logs.mkdir(parents=True, exist_ok=True)
    with (lay.logs / "vcluster.log").open("a") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {message}\n")
