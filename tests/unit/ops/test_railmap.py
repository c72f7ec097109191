"""The rail map ``init`` derives from a node's own topology (ops/railmap.py), on real ``nvidia-smi topo -m``
captures (tests/data/nvidia-smi-topo/SOURCES.md). Where no real port listing of the same node exists, the
ports are SYNTHETIC, consistent with the capture's NIC legend (one port each, netdev named as ibdev2netdev
prints it on such nodes); the one real listing is Mooncake's ibstat of the same node."""

from __future__ import annotations

from pathlib import Path

from clusteraccept.ops.railmap import derive
from clusteraccept.parsers import ibstat, nvidia_smi_topo
from clusteraccept.parsers._ib import IbPort

DATA = Path(__file__).resolve().parents[2] / "data"


def _topo(name: str) -> nvidia_smi_topo.TopoMatrix:
    return nvidia_smi_topo.parse((DATA / "nvidia-smi-topo" / f"{name}.txt").read_text())


def _synthetic_ports(ib: range, eth: tuple[int, ...] = ()) -> tuple[IbPort, ...]:
    """SYNTHETIC: mlx5_N port 1, InfiniBand NDR (400) as ibpNs0 or Ethernet (100) as ethN."""
    ports = [IbPort(f"mlx5_{n}", 1, "ACTIVE", "LINK_UP", 400.0, "InfiniBand", netdev=f"ibp{n}s0") for n in ib]
    ports += [IbPort(f"mlx5_{n}", 1, "ACTIVE", "LINK_UP", 100.0, "Ethernet", netdev=f"eth{n}") for n in eth]
    return tuple(ports)


def test_one_nic_at_pix_per_gpu_is_the_rail_map_a_person_would_write() -> None:
    """sglang#30401's 8x H100 node: GPU k -> mlx5_k, each PIX, nothing left over, nothing to ask."""
    rm = derive(_topo("h100-8nic-sglang30401"), _synthetic_ports(range(8)))
    assert [(r.gpu, r.hca, r.link, r.port, r.netdev, r.rate_Gbps) for r in rm.rails] == [
        (k, f"mlx5_{k}", "PIX", 1, f"ibp{k}s0", 400.0) for k in range(8)
    ]
    assert rm.unused == () and rm.questions == ()


def test_storage_nics_beside_the_rails_are_listed_unused() -> None:
    """slurmv4's 12-NIC H100 node (numa=off): the rails skip mlx5_3, mlx5_4, mlx5_9, mlx5_10, two dual-port
    cards PIX to each other and to no GPU (storage): GPU3 -> mlx5_5, GPU7 -> mlx5_11."""
    rm = derive(_topo("h100-12nic-tabs-numaoff-slurmv4"), _synthetic_ports(range(0), (3, 4, 9, 10)))
    assert [r.hca for r in rm.rails] == [f"mlx5_{n}" for n in (0, 1, 2, 5, 6, 7, 8, 11)]
    assert {r.link for r in rm.rails} == {"PIX"} and rm.questions == ()
    assert rm.unused == ("mlx5_3 (Ethernet, eth3)", "mlx5_4 (Ethernet, eth4)", "mlx5_9 (Ethernet, eth9)",
                         "mlx5_10 (Ethernet, eth10)")  # fmt: skip


def test_several_nics_at_pix_from_one_gpu_is_asked_not_guessed() -> None:
    """Mooncake#2039's node, with its real ibstat: three NICs PIX to GPU0 (the InfiniBand rail mlx5_0 and two
    Ethernet ports) and to GPU4: no rail for either, one question each naming the candidates' link layers."""
    real = DATA / "ibstat" / "h100-8xcx7-ndr400-ib-plus-cx6dx-eth-mooncake2039.txt"
    ports = ibstat.parse(real.read_text())
    rm = derive(_topo("h100-12nic-cpulist-mooncake2039"), ports.ports())
    assert [(r.gpu, r.hca, r.link_layer, r.rate_Gbps) for r in rm.rails] == [
        (1, "mlx5_3", "InfiniBand", 400.0),
        (2, "mlx5_4", "InfiniBand", 400.0),
        (3, "mlx5_5", "InfiniBand", 400.0),
        (5, "mlx5_9", "InfiniBand", 400.0),
        (6, "mlx5_10", "InfiniBand", 400.0),
        (7, "mlx5_11", "InfiniBand", 400.0),
    ]
    assert rm.questions == (
        "GPU0: 3 NICs at PIX (mlx5_0 (InfiniBand), mlx5_1 (Ethernet), mlx5_2 (Ethernet)): which one is its "
        "rail? (the others are storage or management, or a rail of several NICs)",
        "GPU4: 3 NICs at PIX (mlx5_6 (InfiniBand), mlx5_7 (Ethernet), mlx5_8 (Ethernet)): which one is its "
        "rail? (the others are storage or management, or a rail of several NICs)",
    )
    assert rm.unused == ()  # every NIC is a rail or a candidate in a question


def test_a_nic_shared_by_two_gpus_is_a_rail_of_each_and_a_question() -> None:
    """The DGX-1 (old format: NIC columns named mlx5_N): four EDR NICs, each PIX to two GPUs."""
    rm = derive(_topo("dgx1-v100-mlx5cols-cpuaffinity-only"))
    assert [(r.gpu, r.hca, r.shared_with) for r in rm.rails] == [
        (0, "mlx5_0", (1,)), (1, "mlx5_0", (0,)), (2, "mlx5_1", (3,)), (3, "mlx5_1", (2,)),
        (4, "mlx5_2", (5,)), (5, "mlx5_2", (4,)), (6, "mlx5_3", (7,)), (7, "mlx5_3", (6,)),
    ]  # fmt: skip
    assert rm.questions[0] == (
        "mlx5_0 is the closest NIC of GPU0 and GPU1: a shared rail (each GPU gets 1/2 of its line); keep it "
        "if that is the design"
    )
    assert len(rm.questions) == 4 and rm.unused == ()
    assert rm.rails[0].netdev is None  # no port listing: the site file's netdev is left for the user


def test_a_gpu_with_no_nic_behind_its_switch_gets_no_rail() -> None:
    """The ASUS 4x RTX 6000 Ada box: every GPU-NIC link is NODE (through the CPU): no rail, asked per GPU."""
    topo = _topo("4x-rtx6000ada-2xcx7-4nic-asus")
    rm = derive(topo)
    assert rm.rails == () and len(rm.questions) == len(topo.gpus) == 4
    assert rm.questions[0].startswith("GPU0: no NIC behind its PCIe switch (the closest, NODE: ")
    assert rm.unused == ()  # the NODE NICs are named in the questions


def test_a_node_with_no_nic_says_so() -> None:
    rm = derive(_topo("h200x2-vm-nv18-numa-na"))
    assert rm.rails == () and rm.questions == ("GPU0: the node reports no NIC: no rail",
                                               "GPU1: the node reports no NIC: no rail")  # fmt: skip


def test_a_rail_nic_with_two_ports_takes_the_one_that_is_up_or_asks() -> None:
    """SYNTHETIC ports: a dual-port rail NIC (mlx5_0 ports 1 and 2) on sglang#30401's node."""
    topo = _topo("h100-8nic-sglang30401")
    down = IbPort("mlx5_0", 1, "DOWN", "DISABLED", None, "InfiniBand", netdev="ibp0s0")
    up = IbPort("mlx5_0", 2, "ACTIVE", "LINK_UP", 400.0, "InfiniBand", netdev="ibp0s0d1")
    rm = derive(topo, (down, up, *_synthetic_ports(range(1, 8))))
    assert (rm.rails[0].port, rm.rails[0].netdev, rm.questions) == (2, "ibp0s0d1", ())
    rm = derive(topo, (down, IbPort("mlx5_0", 2, "DOWN"), *_synthetic_ports(range(1, 8))))
    assert rm.rails[0].port == 1
    assert rm.questions == ("mlx5_0 has 2 ports (1, 2), not one up: port 1 written",)
