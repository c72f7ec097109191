"""Node shapes and deviations (ops/shape.py) on the demo's simulated hosts: the node type ``init`` derives is
the one site-configs/demo.yaml writes by hand, and the deviations are exactly the demo's injected faults that
change a node's shape (the NIC on the wrong NUMA node, the x8 GPU link); peermem and ACS are node state, left
to the run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from clusteraccept import flow
from clusteraccept.checks.hostfacts import by_node
from clusteraccept.evidence import Evidence
from clusteraccept.jobs import node_entry
from clusteraccept.ops.shape import Deviation, NodeShape, deviations, majority, node_types, shape
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.hosts import build_profiles
from clusteraccept.site.load import load_site, parse_site


@pytest.fixture(scope="module")
def demo_evidence(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Evidence, str]]:
    site = load_site("demo", REPO_ROOT / "site-configs")
    hosts = tmp_path_factory.mktemp("init") / "hosts"
    build_profiles(site, hosts)
    evidence = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CLUSTERACCEPT_HOST_PROFILE", str(hosts))
        for node in site.nodes:
            mp.setenv("CLUSTERACCEPT_HOSTNAME", node)
            collected = node_entry.collect_node(("topology",), flow.probe_options(site))
            evidence += [(ev, "") for ev in collected if ev.meta["check"] == "topology"]  # as archived
    return evidence


def _shapes(evidence: list[tuple[Evidence, str]]) -> list[NodeShape]:
    return [shape(node, ne) for node, ne in sorted(by_node(evidence).items())]


@pytest.fixture(scope="module")
def demo_shapes(demo_evidence: list[tuple[Evidence, str]]) -> list[NodeShape]:
    return _shapes(demo_evidence)


def test_the_demo_is_one_node_type_with_the_rail_map_written_by_hand(demo_shapes: list[NodeShape]) -> None:
    site = load_site("demo", REPO_ROOT / "site-configs")
    ((kind, shapes),) = node_types(demo_shapes).items()
    assert kind == ("NVIDIA H100 80GB HBM3", "MT4129 InfiniBand")
    assert tuple(s.node for s in shapes) == tuple(site.nodes)
    common = majority(shapes)
    (nt,) = site.node_types
    assert {k: v for k, v in common.items() if k.startswith("rail.")} == {
        f"rail.gpu{r.gpu}": f"{r.hca} port {r.port}" for r in nt.rails
    }
    assert {common[f"{r.hca}.rate_Gbps"] for r in nt.rails} == {"400"}
    assert not any(s.problems for s in shapes)


def test_the_deviations_are_the_faults_that_change_a_nodes_shape(demo_shapes: list[NodeShape]) -> None:
    ((_, shapes),) = node_types(demo_shapes).items()
    found = deviations("h100", shapes)
    assert {(d.node, d.field) for d in found} == {
        ("node1", "gpu6.pcie"),  # pcie_x8 {node1, gpu6}
        ("node2", "mlx5_3.numa"),  # nic_wrong_numa {node2, gpu3}: GPU3's NIC on the other socket
        ("node2", "rail.gpu3"),  # ... so it is no longer behind GPU3's switch
    }, found
    x8 = next(d for d in found if d.field == "gpu6.pcie")
    assert x8 == Deviation("node1", "h100", "gpu6.pcie", x8.majority, x8.value)
    assert x8.value.startswith("x8 ") and x8.majority.startswith("x16 ")
    rail = next(d for d in found if d.field == "rail.gpu3")
    assert rail.majority == "mlx5_3 port 1"
    assert rail.value.startswith("none: GPU3: no NIC behind its PCIe switch (the closest, ")


def test_the_site_file_written_from_the_demo_loads_and_has_demo_yamls_node_type(
    demo_shapes: list[NodeShape], tmp_path: Path
) -> None:
    """ops/sitefile: the text validates with the project's own loader; its node type is the hand-written one
    (GPUs, model, link layer, every rail's hca, port and rate); the deviations are the file beside it."""
    from clusteraccept.ops.sitefile import deviation_table, drafts, render

    types = drafts(demo_shapes)
    text = render("demo-init", {"executor": "slurm", "partition": "gpu"}, types, "reports/demo-init/init-1")
    written = parse_site(tmp_path / "demo-init.yaml", yaml.safe_load(text))
    demo = load_site("demo", REPO_ROOT / "site-configs")
    ((got,), (want,)) = written.node_types, demo.node_types
    assert (got.name, got.gpus, got.gpu_model, got.link_layer, got.numa_expected) == (
        "h100",
        want.gpus,
        want.gpu_model,
        want.link_layer,
        True,
    )
    assert [(r.gpu, r.hca, r.port, r.netdev, r.rate_Gbps) for r in got.rails] == [
        (r.gpu, r.hca, r.port, r.netdev, r.rate_Gbps) for r in want.rails
    ]
    assert written.nodes == demo.nodes
    assert "    # 3 deviation(s) from this type's majority: the .deviations.txt\n" in text
    table = deviation_table(types).splitlines()
    assert table[0].split() == ["node", "node", "type", "field", "majority", "its", "value"]
    assert [line.split()[:3] for line in table[1:]] == [
        ["node1", "h100", "gpu6.pcie"],
        ["node2", "h100", "mlx5_3.numa"],
        ["node2", "h100", "rail.gpu3"],
    ]


def test_a_gpu_fallen_off_the_bus_and_a_nic_not_seen_are_deviations_not_a_node_type(
    demo_evidence: list[tuple[Evidence, str]],
) -> None:
    """node3 as nvidia-smi and sysfs would show it with GPU7 gone from the bus and mlx5_7 not probed: still an
    h100 node (its kind is its hardware's models), with the inventory and what hangs off it as deviations."""

    def broken(ev: Evidence) -> Evidence:
        if ev.host != "node3":
            return ev
        if ev.source == "nvidia-smi-query":
            return replace(ev, stdout="".join(ev.stdout.splitlines(True)[:7]))
        if ev.path == "/sys/class/infiniband":
            return replace(ev, stdout="\n".join(n for n in ev.stdout.split() if n != "mlx5_7"))
        return ev

    ((_, shapes),) = node_types(_shapes([(broken(ev), ref) for ev, ref in demo_evidence])).items()
    mine = {(d.field, d.majority, d.value) for d in deviations("h100", shapes) if d.node == "node3"}
    assert {("gpus", "8", "7"), ("nics", "8x InfiniBand", "7x InfiniBand")} <= mine
    assert {f for f, _, _ in mine} >= {"gpu7.numa", "gpu7.pcie", "mlx5_7.numa", "mlx5_7.rate_Gbps"}


def test_the_gpudirect_section_accepts_what_gpudirect_works_under_and_asks_about_a_translating_iommu() -> (
    None
):
    from clusteraccept.ops.sitefile import gpudirect_lines

    lines = gpudirect_lines({"n1": {"identity"}, "n2": {"identity"}, "n3": {"DMA-FQ"}})
    assert lines[:2] == [
        "gpudirect:",
        "  iommu: [none, identity]  # off or passthrough; observed: DMA-FQ on 1 node(s), "
        "identity on 2 node(s)",
    ]
    assert lines[2].startswith("# decide: gpudirect.iommu: n3 run the GPUs' IOMMU in mode DMA-FQ: ")
    assert yaml.safe_load("\n".join(lines)) == {"gpudirect": {"iommu": ["none", "identity"]}}


def test_the_type_takes_the_majoritys_rails_and_gpu_count_whatever_node_comes_first(
    demo_evidence: list[tuple[Evidence, str]],
) -> None:
    """node2 (its GPU3 NIC on the other socket) first, and node3 with GPU7 gone from the bus: the type is
    still 8 GPUs and 8 rails, mlx5_3 GPU3's, from a node that agrees with the majority."""
    from clusteraccept.ops.sitefile import drafts

    def gpu7_gone(ev: Evidence) -> Evidence:
        if ev.host == "node3" and ev.source == "nvidia-smi-query":
            return replace(ev, stdout="".join(ev.stdout.splitlines(True)[:7]))
        return ev

    shapes = {s.node: s for s in _shapes([(gpu7_gone(ev), ref) for ev, ref in demo_evidence])}
    (t,) = drafts([shapes["node2"], shapes["node3"], shapes["node1"], shapes["node4"]])
    assert t.gpus == 8 and [(r.gpu, r.hca) for r in t.rails] == [(k, f"mlx5_{k}") for k in range(8)]
    assert t.numa_expected


def test_a_node_whose_ibstat_failed_is_a_deviation_of_its_type(
    demo_evidence: list[tuple[Evidence, str]],
) -> None:
    kept = [(ev, ref) for ev, ref in demo_evidence if not (ev.host == "node4" and ev.source == "ibstat")]
    ((_, shapes),) = node_types(_shapes(kept)).items()
    mine = {(d.field, d.value) for d in deviations("h100", shapes) if d.node == "node4"}
    assert ("nics", "8x unknown link layer") in mine and ("mlx5_0.rate_Gbps", "absent") in mine


def test_hostile_names_and_a_link_layer_init_cannot_describe_still_load(tmp_path: Path) -> None:
    """A site named like a number, a GPU model with a quote, rails whose link layer reads Unspecified (an EFA
    device through ibverbs): the file loads; the rails are left commented with a question."""
    from clusteraccept.ops.railmap import DerivedRail, RailMap
    from clusteraccept.ops.shape import NodeShape
    from clusteraccept.ops.sitefile import NodeTypeDraft, render

    rails = tuple(DerivedRail(k, f"rdmap{k}s0", "PIX", link_layer="Unspecified") for k in range(2))
    node = NodeShape(
        "n1", ('GPU "X" 2000',), {"gpus": "2", "nics": "2x Unspecified"}, RailMap(rails, (), ()), ()
    )
    t = NodeTypeDraft("x2000", (node,), rails, (), (), (), False)
    text = render("2024", {"executor": "local"}, [t], "reports/2024/init-*")
    site = parse_site(tmp_path / "2024.yaml", yaml.safe_load(text))
    ((nt,),) = (site.node_types,)
    assert site.name == "2024" and nt.gpu_model == 'GPU "X" 2000' and nt.rails == ()
    assert "    # decide: the rail NICs' link layer reads Unspecified: not InfiniBand or RoCE;" in text
    assert "    #   gpu0: {hca: rdmap0s0}  # PIX" in text
