"""Counter deltas around traffic, end to end in-process: simulated host profiles -> a traffic step bumps
their counters (sim/traffic.py) -> probes/counters.py snapshots -> checks/counters.py verdicts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept.checks import counters, nccl
from clusteraccept.evidence import Evidence
from clusteraccept.flow import probe_options
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.probes import counters as probe
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.sim.traffic import bump
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

CONFIGS = REPO_ROOT / "site-configs"
Archived = tuple[Evidence, str]


def site(name: str, faults: list[dict[str, Any]]) -> Site:
    data = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    data["sim"] = {"faults": faults}
    return parse_site(CONFIGS / f"{name}.yaml", data)


class Nodes:
    """The site's simulated nodes under ``tmp``: snapshot them, run traffic between them."""

    def __init__(self, s: Site, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.site, self.root, self.mp = s, tmp / "hosts", monkeypatch
        build_profiles(s, self.root)
        monkeypatch.setenv("CLUSTERACCEPT_HOST_PROFILE", str(self.root))
        self.rails = probe_options(s)["node_rails"]
        self.seq = 0
        self.snaps: list[Archived] = []

    def snapshot(self, after: str = "", during: dict[str, str] | None = None) -> None:
        assert isinstance(self.rails, dict)
        for node in self.site.nodes:
            self.mp.setenv("CLUSTERACCEPT_HOSTNAME", node)
            meta = {"window": "traffic", "campaign": "c", "seq": str(self.seq), "after_round": after}
            ev = probe.snapshot(self.rails[node], 10.0, {**meta, "during": (during or {}).get(node, "")})
            self.snaps.append((ev, f"raw/nccl/{node}/counters_c-s{self.seq:03d}.json"))
        self.seq += 1

    def pair_round(self, a: str, b: str, rails: list[int], label: str) -> None:
        hcas = [r.hca for r in self.site.node_type(a).rails if r.index in rails]
        bump(self.root, [a, b], hcas)
        during = "|".join(f"sendrecv:{a}-{b}:rail{k}" for k in rails)
        self.snapshot(label, {a: during, b: during})

    def of(self, node: str) -> list[Archived]:
        return [x for x in self.snaps if x[0].host == node]


def one(verdicts: list[Verdict], subject: str) -> Verdict:
    return next(v for v in verdicts if v.subject == subject)


def test_link_errors_fail_only_the_faulty_rail_and_name_the_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site("demo", [{"kind": "link_errors", "node": "node2", "rail": 1, "count": 25}])
    n = Nodes(s, tmp_path, monkeypatch)
    n.snapshot()
    n.pair_round("node1", "node2", list(range(8)), "sendrecv pairs 1")
    n.pair_round("node2", "node3", [1], "sendrecv pairs 2")
    verdicts = nccl.link_error_verdicts(s, n.snaps, s.nodes)
    bad = [v for v in verdicts if v.outcome not in (Outcome.PASS, Outcome.SKIP)]
    assert [v.subject for v in bad] == ["node2:rail1"]
    # rails no traffic crossed (node3's and node4's but rail1 of node3) are not passed: nothing was tested
    idle = one(verdicts, "node4:rail0")
    assert idle.outcome is Outcome.SKIP and idle.message == (
        "node4 rail0 (mlx5_0 port 1): no traffic crossed this port while the campaign ran (its data "
        "counters did not move)"
    )
    assert one(verdicts, "node3:rail1").outcome is Outcome.PASS
    assert bad[0].outcome is Outcome.FAIL and bad[0].value == 2 * (25 + 5)
    assert bad[0].message.startswith(
        "node2 rail1 (mlx5_1 port 1): error counters rose while traffic ran, in 2 of 2 intervals: "
        "symbol_error +25, "
        "port_rcv_errors +5 during sendrecv:node1-node2:rail1 (round 'sendrecv pairs 1'); "
        "symbol_error +25, port_rcv_errors +5 during sendrecv:node2-node3:rail1 (round 'sendrecv pairs 2'); "
        "whatever the bandwidth"
    )
    # the partner's end of the same cable counts nothing: the errors are on node2's receive side
    assert one(verdicts, "node1:rail1").outcome is Outcome.PASS
    assert one(verdicts, "node1:rail1").message == (
        "node1 rail1 (mlx5_1 port 1): no error counter rose over 2 traffic intervals (137.4 GB moved)"
    )


def test_link_errors_skip_error_and_gaps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = site("demo", [])
    n = Nodes(s, tmp_path, monkeypatch)
    none = nccl.link_error_verdicts(s, [], s.nodes)
    assert {v.outcome for v in none} == {Outcome.SKIP}
    assert none[0].message == "no traffic test with counter snapshots in this run"
    n.snapshot()
    n.pair_round("node1", "node2", [0], "r1")
    # a counter reset between two snapshots is no evidence either way: ERROR, named
    ev, path = n.of("node1")[1]
    back = ev.stdout.replace("symbol_error: 0", "symbol_error: 7")
    older = (ev.__class__(**{**n.of("node1")[0][0].to_dict(), "stdout": back}), n.of("node1")[0][1])
    v = one(nccl.link_error_verdicts(s, [older, (ev, path)], ["node1"]), "node1:rail0")
    assert v.outcome is Outcome.ERROR and "went backwards between snapshots (symbol_error)" in v.message
    # snapshot 1 missing: the interval 0..2 is not judged (its rounds are named as unjudged)
    n.pair_round("node1", "node2", [0], "r2")
    ivs, problems = counters.intervals([n.of("node1")[0], n.of("node1")[2]])
    assert problems == ["c: snapshots 1..1 missing (rounds merged)"]
    assert (
        len(ivs) == 1
        and ivs[0].merged == 2
        and ivs[0].steps_on(0).endswith("(the 2 rounds up to 'r2': snapshots in between missing)")
    )
    garbage = (Evidence("node1", "counters", stdout="nonsense\n", meta={"seq": "0"}), "raw/x.json")
    _, problems = counters.intervals([garbage])
    assert problems == [
        "could not parse counter snapshot raw/x.json: line 1: expected '## rail ...' before any counter, "
        "got 'nonsense'"
    ]
    v = one(nccl.link_error_verdicts(s, [garbage], ["node1"]), "node1:rail0")
    assert v.outcome is Outcome.ERROR and v.message.startswith("could not parse counter snapshot raw/x.json")


def test_roce_traffic_on_the_wrong_priority_and_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = site(
        "demo-roce", [{"kind": "trust_pcp", "node": "node1"}, {"kind": "pfc_wrong_prio", "node": "node3"}]
    )
    assert s.roce is not None
    n = Nodes(s, tmp_path, monkeypatch)
    n.snapshot()
    n.pair_round("node1", "node2", list(range(8)), "pairs 1")
    n.pair_round("node3", "node4", list(range(8)), "pairs 2")

    def judge(node: str) -> Verdict:
        found = counters.intervals(n.of(node))
        return counters.roce_counters(s.roce, f"{node} rail0", 0, f"{node}:rail0", found)  # type: ignore[arg-type]

    v = judge("node1")
    assert v.outcome is Outcome.FAIL and v.message.startswith(
        "node1 rail0: only 0% of the port's bytes travelled on the lossless priority 3 while the campaign "
        "ran (RoCE classified onto another priority: trust/DSCP map) | rx_discards_phy (the port dropped "
        "for lack of buffers): +37 in 1 of 2 intervals, first during sendrecv:node1-node2:rail0 "
        "(round 'pairs 1')"
    )
    v = judge("node3")  # PFC on 4, traffic on 3: drops, and no pause on the (unused) priority 4
    assert v.outcome is Outcome.FAIL and "only" not in v.message and "rx_discards_phy" in v.message
    healthy = judge("node2")
    assert healthy.outcome is Outcome.PASS and healthy.message.startswith(
        "node2 rail0: no pause frames off priority 3, no discards over 2 traffic intervals, 100% of bytes on "
        "priority 3 (pause on priority 3: +270, np_cnp_sent +40, rp_cnp_handled +38)"
    )


def test_ports_without_pma_counters() -> None:
    def snap(seq: int, layer: str) -> Archived:
        text = f"## rail 0 hca mlx5_0 port 1 netdev eth0\n### link_layer\n{layer}\n### ib-counters /x\n"
        meta = {"campaign": "c", "seq": str(seq), "window": "traffic"}
        return Evidence("node1", "counters", stdout=text, meta=meta), f"raw/s{seq}.json"

    for layer, outcome, start in (
        ("Ethernet", Outcome.SKIP, "node1 rail0: no IB PMA error counters on this RoCE port"),
        ("InfiniBand", Outcome.ERROR, "node1 rail0: no IB port counter readable in the snapshots"),
    ):
        ivs, problems = counters.intervals([snap(0, layer), snap(1, layer)])
        v = counters.link_errors("node1 rail0", 0, "node1:rail0", ivs, problems)
        assert v.outcome is outcome and v.message.startswith(start), v


def test_a_counter_stuck_at_its_maximum_cannot_pass() -> None:
    """PMA error counters stop at their maximum (symbol_error: 16 bits): a port there shows no rise."""

    def snap(seq: int, symbol_errors: int) -> Archived:
        text = (
            "## rail 0 hca mlx5_0 port 1 netdev -\n### link_layer\nInfiniBand\n### ib-counters /x\n"
            f"symbol_error: {symbol_errors}\nport_rcv_errors: 0\nport_xmit_data: {seq * 1000}\n"
            f"port_rcv_data: {seq * 1000}\n"
        )
        meta = {"campaign": "c", "seq": str(seq), "window": "traffic", "of": "3"}
        return Evidence("node1", "counters", stdout=text, meta=meta), f"raw/s{seq}.json"

    ivs, problems = counters.intervals([snap(0, 65535), snap(1, 65535), snap(2, 65535)])
    v = counters.link_errors("node1 rail0", 0, "node1:rail0", ivs, problems)
    assert v.outcome is Outcome.ERROR and v.message.startswith(
        "node1 rail0: symbol_error sit at their maximum (PMA counters stop there)"
    )
    # the last snapshot missing: what was covered passes, and the message says what was not
    ivs, problems = counters.intervals([snap(0, 3), snap(1, 3)])
    v = counters.link_errors("node1 rail0", 0, "node1:rail0", ivs, problems)
    assert v.outcome is Outcome.PASS and v.message.endswith(
        "; but c: snapshots after 1 missing (its last rounds not covered)"
    )


@pytest.mark.parametrize(
    ("rising", "says"),
    [
        ({"symbol_error": 7}, "(physical errors on this link: reseat or replace its cable/transceiver"),
        (
            {"port_rcv_remote_physical_errors": 3},
            "(packets corrupted upstream (EBP-marked): look for the bad",
        ),
        ({"port_xmit_discards": 9}, "(outbound packets discarded: the port was down or congested)"),
    ],
)
def test_the_message_points_where_the_counter_points(rising: dict[str, int], says: str) -> None:
    """A receive error marked upstream is not this cable's fault; a transmit discard is congestion or a
    down port: the FAIL says which (sysfs-class-infiniband PortCounters descriptions)."""

    def snap(seq: int) -> Archived:
        values = {"symbol_error": 0, "port_rcv_remote_physical_errors": 0, "port_xmit_discards": 0}
        values |= {n: v * seq for n, v in rising.items()}
        lines = "".join(f"{n}: {v}\n" for n, v in values.items())
        text = (
            "## rail 0 hca mlx5_0 port 1 netdev -\n### link_layer\nInfiniBand\n### ib-counters /x\n"
            f"{lines}port_xmit_data: {seq * 1000}\nport_rcv_data: {seq * 1000}\n"
        )
        meta = {"campaign": "c", "seq": str(seq), "window": "traffic", "of": "2"}
        return Evidence("node1", "counters", stdout=text, meta=meta), f"raw/s{seq}.json"

    ivs, problems = counters.intervals([snap(0), snap(1)])
    v = counters.link_errors("node1 rail0", 0, "node1:rail0", ivs, problems)
    assert v.outcome is Outcome.FAIL and says in v.message, v.message
    advice = ("physical errors on this link", "corrupted upstream", "outbound packets discarded")
    assert sum(a in v.message for a in advice) == 1  # the one that applies, not a list of guesses
    assert " during ;" not in v.message  # no step known for the interval: none named


def test_a_roce_node_reads_its_counter_snapshots_once_for_all_its_rails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every rail of a node shares the node's snapshots: they were parsed again per rail (8x on 8 rails)."""
    from clusteraccept.checks.roce_evidence import rails_of
    from clusteraccept.parsers import counters as pc

    s = site("demo-roce", [])
    n = Nodes(s, tmp_path, monkeypatch)
    n.snapshot()
    n.pair_round("node1", "node2", list(range(8)), "pairs 1")
    snaps = n.of("node1")
    alone = counters.intervals(snaps, nvlink=False)
    reads: list[str] = []
    real = pc.parse

    def counted(text: str, **parts: bool) -> Any:
        reads.append(text)
        return real(text, **parts)

    monkeypatch.setattr(pc, "parse", counted)
    rails = rails_of("node1", s.node_type("node1").rails, snaps)
    assert len(rails) == 8 and all(r.counters() == alone for r in rails)
    assert len(snaps) == 2 and len(reads) == 2  # each snapshot once, not once per rail


def _snap(seq: str, nic_part: str, nvlink_part: str) -> Archived:
    text = f"## rail 0 hca mlx5_0 port 1 netdev -\n### link_layer\nInfiniBand\n{nic_part}{nvlink_part}"
    meta = {"window": "traffic", "campaign": "c", "seq": seq, "t_s": seq}
    return Evidence("node1", "counters", path="/sys/class/infiniband", stdout=text, meta=meta), f"raw/{seq}"


def test_a_part_of_a_snapshot_that_does_not_parse_is_an_error_of_its_own_judge_only() -> None:
    """nvlink.errors reads the NVLink section, nccl.link_errors and roce.counters the NICs': garbage in
    one part is its judge's ERROR, and no longer makes the other part's counters unreadable."""
    nics = "### ib-counters\nsymbol_error: 0\n"
    links = "## nvlink rc=0\nGPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n\t Link 0: CRC Errors: {}\n"
    bad_links = [_snap("0", nics, links.format(0)), _snap("1", nics, links.format("x"))]
    ivs, problems = counters.intervals(bad_links, nvlink=False)
    assert problems == [] and len(ivs) == 1 and 0 in ivs[0].rails
    ivs, problems = counters.intervals(bad_links, nics=False)
    assert ivs == [] and problems[0].startswith("could not parse counter snapshot raw/1: line 8")
    bad_nics = [_snap("0", nics, links.format(0)), _snap("1", "### bogus\n", links.format(3))]
    ivs, problems = counters.intervals(bad_nics, nvlink=False)
    assert ivs == [] and "could not parse counter snapshot raw/1: line 4" in problems[0]
    ivs, problems = counters.intervals(bad_nics, nics=False)
    assert problems == [] and ivs[0].nvlink == {(0, 0): {"CRC Errors": 3}}


def test_link_errors_judged_beside_the_steps_in_forked_workers_are_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nodes' link errors go through the step judging's process pool (nccl.judge_steps): each worker
    takes ranges of steps and of nodes from one queue. The verdicts are those of the serial judging."""
    from clusteraccept.plan.jobs import make_plan
    from clusteraccept.sim.prepare import fabric_of, simulate_step

    s = site("demo", [{"kind": "link_errors", "node": "node2", "rail": 1, "count": 25}])
    n = Nodes(s, tmp_path, monkeypatch)
    n.snapshot()
    n.pair_round("node1", "node2", list(range(8)), "sendrecv pairs 1")
    n.pair_round("node2", "node3", [1], "sendrecv pairs 2")
    fabric = fabric_of(s)
    steps = [(simulate_step(fabric, st), f"raw/nccl/{i}.json") for i, st in enumerate(make_plan(s).steps())]
    links = nccl.link_work(s, n.snaps, s.nodes)
    serial = nccl.judge_steps(s, steps, {}, links)
    assert serial[1] == nccl.link_error_verdicts(s, n.snaps, s.nodes)
    assert [v.subject for v in serial[1] if v.outcome is Outcome.FAIL] == ["node2:rail1"]
    monkeypatch.setattr(nccl, "PARALLEL_MIN", 8)
    monkeypatch.setattr(nccl, "cpus", lambda: 3)
    monkeypatch.setattr(nccl, "may_fork", lambda: True)
    assert len(steps) >= nccl.PARALLEL_MIN and len(links[0]) > 1  # forked, several ranges of each
    assert nccl.judge_steps(s, steps, {}, links) == serial
