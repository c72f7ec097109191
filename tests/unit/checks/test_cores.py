"""Judging spread over the cores (checks/cores.py): forked workers give what a serial run gives, in order,
and the per-node judges of a large site use them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clusteraccept import checks
from clusteraccept.checks import cores
from clusteraccept.checks.nvlink import fabric_down
from clusteraccept.judge.verdicts import Outcome

from .test_topology import MY_FAULTS, collect, demo


def forking(monkeypatch: Any, min_n: int = 2) -> None:
    monkeypatch.setattr(cores, "cpus", lambda: 3)
    monkeypatch.setattr(cores, "may_fork", lambda: True)  # (an xdist worker has an I/O thread: serial)
    monkeypatch.setattr(cores, "NODES_MIN", min_n)


def test_in_order_forked_is_the_serial_result_in_its_order(monkeypatch: Any) -> None:
    parent = os.getpid()
    names = [f"n{i:03d}" for i in range(50)]  # a closure over the parent's data: the workers inherit it

    def one(i: int) -> list[tuple[str, int]]:
        return [(names[i], os.getpid())] * (i % 3)  # none, one or two results per index

    serial = cores.in_order(one, len(names), min_n=1000)
    assert {pid for _, pid in serial} == {parent}
    forking(monkeypatch)
    forked = cores.in_order(one, len(names), min_n=10)
    assert [n for n, _ in forked] == [n for n, _ in serial]
    assert parent not in {pid for _, pid in forked}  # judged in the workers
    assert cores.in_order(one, 0, min_n=0) == []


def test_a_worker_that_raises_raises_in_the_parent(monkeypatch: Any) -> None:
    forking(monkeypatch)

    def one(i: int) -> list[int]:
        if i == 17:
            raise ValueError("node 17 is odd")
        return [i]

    with pytest.raises(ValueError, match="node 17 is odd"):
        cores.in_order(one, 40, min_n=10)


def test_frozen_undoes_its_own_freeze_and_leaves_one_made_before_it() -> None:
    """In a fresh interpreter: this session's pytest plugin has frozen its own items already."""
    code = (
        "import gc\n"
        "from clusteraccept.checks import cores\n"
        "with cores.frozen():\n"
        "    inside = gc.get_freeze_count()\n"
        "print(inside > 0, gc.get_freeze_count())\n"
        "gc.freeze()\n"  # as the plugin does for its items, for the whole session
        "held = gc.get_freeze_count()\n"
        "with cores.frozen():\n"
        "    pass\n"
        "print(held > 0, gc.get_freeze_count() >= held)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "0", "True", "True"], out


def test_the_per_node_judges_over_the_cores_judge_as_one_process(tmp_path: Path, monkeypatch: Any) -> None:
    """topology, gpudirect and nvlink per node, and the nodes whose fabric is down, forked on a site taken
    for a large one: the same verdicts, in the same order, as serially; the demo's faults still fail."""
    mine = [f for f in demo().sim_faults if f["kind"] in MY_FAULTS]
    site = demo([*mine, {"kind": "fabric_manager_down", "node": "node3"}])
    families = ("topology", "gpudirect", "nvlink")
    evidence = collect(site, families, tmp_path)
    serial = {f: checks.judge(f, site, evidence[f], site.nodes) for f in families}
    down = fabric_down(site, evidence["nvlink"])
    forking(monkeypatch)
    for f in families:
        assert checks.judge(f, site, evidence[f], site.nodes) == serial[f], f
    assert fabric_down(site, evidence["nvlink"]) == down and set(down) == {"node3"}
    failed = {(v.check, v.subject) for vs in serial.values() for v in vs if v.outcome is Outcome.FAIL}
    assert {("topology.gpu_nic_affinity", "node2:gpu3"), ("topology.pcie_link", "node1:gpu6")} <= failed
    assert ("nvlink.fabric", "node3") in failed
