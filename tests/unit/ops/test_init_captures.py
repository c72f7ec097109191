"""``init`` on host profiles built from the real ``nvidia-smi topo -m`` captures (tests/data/nvidia-smi-topo/,
SOURCES.md there): the capture is what the node's nvidia-smi prints; its ``nvidia-smi --query-gpu`` and its
``ibstat`` (one port per NIC of the capture's legend: InfiniBand NDR, or Ethernet where the test says) are
SYNTHETIC, consistent with the capture, except Mooncake's, whose real ibstat of the same node is used. The
rail map written is the one a person reading the capture would write; where the capture does not decide, the
file asks (``# decide:``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from clusteraccept.__main__ import main
from clusteraccept.parsers import nvidia_smi_topo
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

DATA = Path(__file__).resolve().parents[2] / "data"
MOONCAKE_IBSTAT = DATA / "ibstat" / "h100-8xcx7-ndr400-ib-plus-cx6dx-eth-mooncake2039.txt"


def _ibstat(nics: tuple[str, ...], ethernet: tuple[str, ...]) -> str:
    """SYNTHETIC ibstat (infiniband-diags' layout, as in tests/data/ibstat/): one active port per NIC."""
    out = []
    for i, nic in enumerate(nics):
        eth = nic in ethernet
        out.append(
            f"CA '{nic}'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n"
            f"\tHardware version: 0\n\tNode GUID: 0x{i + 1:016x}\n\tSystem image GUID: 0x{i + 1:016x}\n"
            f"\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: {100 if eth else 400}\n"
            f"\t\tBase lid: {0 if eth else i + 1}\n\t\tLMC: 0\n\t\tSM lid: {0 if eth else 1}\n"
            f"\t\tCapability mask: 0x2651e848\n\t\tPort GUID: 0x{i + 1:016x}\n"
            f"\t\tLink layer: {'Ethernet' if eth else 'InfiniBand'}\n"
        )
    return "".join(out)


def _profile(
    root: Path, capture: str, ethernet: tuple[str, ...] = (), real_ibstat: Path | None = None
) -> None:
    """A host profile of node ``cap1`` (sim/hosts.py's layout: commands.json, out/, fs/)."""
    text = (DATA / "nvidia-smi-topo" / f"{capture}.txt").read_text()
    topo = nvidia_smi_topo.parse(text)
    node = root / "cap1"
    (node / "out").mkdir(parents=True)
    query = "".join(
        f"{k}, NVIDIA H100 80GB HBM3, 00000000:{0x18 + 0x10 * k:02X}:00.0\n" for k in range(len(topo.gpus))
    )
    answers = {
        "nvidia-smi topo -m": text,
        "nvidia-smi --query-gpu=index,name,pci.bus_id --format=csv,noheader": query,
        "ibstat": real_ibstat.read_text() if real_ibstat else _ibstat(topo.nics, ethernet),
    }
    index = []
    for i, (match, stdout) in enumerate(answers.items()):
        (node / "out" / f"{i}.txt").write_text(stdout)
        index.append({"match": match, "stdout": f"out/{i}.txt", "returncode": 0})
    (node / "commands.json").write_text(json.dumps(index))
    for nic in topo.nics:  # /sys/class/infiniband lists the RDMA devices
        (node / "fs" / "sys" / "class" / "infiniband" / nic).mkdir(parents=True)


def _init(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Site, str]:
    monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)
    out = tmp / "cap.yaml"
    argv = [
        "init",
        "--executor",
        "local",
        "--nodes",
        "cap1",
        "--out",
        str(out),
        "--reports-dir",
        str(tmp / "r"),
    ]
    assert main([*argv, "--env", f"CLUSTERACCEPT_HOST_PROFILE={tmp / 'hosts'}"]) == 0
    text = out.read_text()
    return parse_site(out, yaml.safe_load(text)), text


def _rails(site: Site) -> list[tuple[int, str, float | None]]:
    ((nt,),) = (site.node_types,)
    return [(r.gpu, r.hca, r.rate_Gbps) for r in nt.rails]


def test_eight_gpus_eight_nics_at_pix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path / "hosts", "h100-8nic-sglang30401")
    site, text = _init(tmp_path, monkeypatch)
    assert _rails(site) == [(k, f"mlx5_{k}", 400.0) for k in range(8)]
    assert site.node_types[0].link_layer == "InfiniBand" and "    # decide:" not in text


def test_storage_nics_beside_the_rails_are_no_rails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    storage = ("mlx5_3", "mlx5_4", "mlx5_9", "mlx5_10")
    _profile(tmp_path / "hosts", "h100-12nic-tabs-numaoff-slurmv4", ethernet=storage)
    site, text = _init(tmp_path, monkeypatch)
    assert [hca for _, hca, _ in _rails(site)] == [f"mlx5_{n}" for n in (0, 1, 2, 5, 6, 7, 8, 11)]
    assert (
        "    # not rails (closest to no GPU: storage, management): mlx5_3 (Ethernet), mlx5_4 (Ethernet), "
        "mlx5_9 (Ethernet), mlx5_10 (Ethernet)\n" in text
    )
    assert site.node_types[0].link_layer == "InfiniBand"


def test_three_nics_at_pix_from_one_gpu_are_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _profile(tmp_path / "hosts", "h100-12nic-cpulist-mooncake2039", real_ibstat=MOONCAKE_IBSTAT)
    site, text = _init(tmp_path, monkeypatch)
    assert [g for g, _, _ in _rails(site)] == [1, 2, 3, 5, 6, 7]
    assert (
        "    # decide: GPU0: 3 NICs at PIX (mlx5_0 (InfiniBand), mlx5_1 (Ethernet), mlx5_2 (Ethernet))"
        in text
    )
    assert (
        "    # decide: GPU4: 3 NICs at PIX (mlx5_6 (InfiniBand), mlx5_7 (Ethernet), mlx5_8 (Ethernet))"
        in text
    )


def test_a_nic_of_two_gpus_is_a_shared_rail_and_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _profile(tmp_path / "hosts", "dgx1-v100-mlx5cols-cpuaffinity-only")
    site, text = _init(tmp_path, monkeypatch)
    assert [hca for _, hca, _ in _rails(site)] == ["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_1", "mlx5_2", "mlx5_2",
                                                    "mlx5_3", "mlx5_3"]  # fmt: skip
    assert "      gpu0: {hca: mlx5_0, rate_Gbps: 400}  # PIX; shared with GPU1\n" in text
    assert "    # decide: mlx5_0 is the closest NIC of GPU0 and GPU1: a shared rail" in text
    ((nt,),) = (site.node_types,)
    assert nt.rail_line_Gbps(nt.rails[0]) == 200.0  # the loader halves a shared NIC's line per GPU


def test_no_nic_behind_any_gpus_switch_gives_no_rails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _profile(tmp_path / "hosts", "4x-rtx6000ada-2xcx7-4nic-asus")
    site, text = _init(tmp_path, monkeypatch)
    assert _rails(site) == [] and text.count("# decide: GPU") == 4
