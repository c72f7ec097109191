"""GPUDirect checks end to end in-process: simulated hosts (real captures) -> probe -> archive -> judge.

The demo site's peermem_missing (node4) and acs_on (node4 gpu1) faults must fail exactly their check and
subject; healthy nodes pass; what a host lacks (HCA, perftest, root for lspci) is a SKIP or ERROR with
the reason, never a pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from clusteraccept import flow
from clusteraccept.checks.gpudirect import driver_flavor
from clusteraccept.errors import SiteConfigError
from clusteraccept.evidence import Evidence
from clusteraccept.jobs import node_entry
from clusteraccept.jobs.archive import read
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers.lspci import parse as parse_lspci
from clusteraccept.probes import gpudirect as probe_gpudirect
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import parse_site
from clusteraccept.site.model import Site

from .test_topology import (
    CONFIGS,
    Archived,
    assert_complete,
    collect,
    edited,
    failing,
    file_is,
    judged,
    one,
    stdout,
    vm_evidence,
    vm_site,
)
from .test_topology import PER as TOPO_PER

DATA = REPO_ROOT / "tests" / "data"
PER = {
    "gpudirect.peermem": "node",
    "gpudirect.iommu": "node",
    "gpudirect.nccl_gdrdma": "node",
    "gpudirect.acs": "gpu",
    "gpudirect.write_bw": "rail",
}
BASELINE = {"gpudirect.write_bw.*": {"ref": 390.0, "lower": -0.05, "unit": "Gb/s"}}
Run = tuple[Site, Path, list[Archived]]


def with_baseline() -> Site:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["baselines"] = {**data["baselines"], **BASELINE}
    return parse_site(CONFIGS / "demo.yaml", data)


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    site, tmp = with_baseline(), tmp_path_factory.mktemp("gpudirect")
    return site, tmp, collect(site, ("gpudirect",), tmp)["gpudirect"]


def gd(site: Site, archived: list[Archived]) -> list[Verdict]:
    return judged(site, archived, "gpudirect")


def client_of(hca: str) -> Callable[[Evidence], bool]:
    return lambda ev: ev.meta.get("role") == "client" and ev.meta.get("hca") == hca


def test_demo_faults_fail_exactly_their_check(demo_run: Run) -> None:
    site, tmp, archived = demo_run
    verdicts = gd(site, archived)
    assert_complete(site, verdicts, PER)
    assert failing(verdicts) == {("gpudirect.peermem", "node4"), ("gpudirect.acs", "node4:gpu1")}
    peer = one(verdicts, "gpudirect.peermem", "node4")
    assert peer.message.startswith(
        "node4: nvidia_peermem is not loaded and DMA-BUF is not usable (NVIDIA "
        "kernel module 570.133.20 is the proprietary flavor;"
    )
    assert peer.message.endswith("run `modprobe nvidia-peermem`")
    assert one(verdicts, "gpudirect.peermem", "node1").message == (
        "node1: nvidia_peermem loaded (GPU memory can be registered with the HCA)"
    )
    acs = one(verdicts, "gpudirect.acs", "node4:gpu1")
    assert acs.message.startswith(
        "node4 gpu1: ACS is on at bridge 0000:27:01.0 (Downstream Port, ACSCtl "
        "SrcValid+ ReqRedir+ CmpltRedir+); 0000:27:00.0 (Downstream Port,"
    )
    assert "between GPU1 and mlx5_1: peer-to-peer traffic is redirected to the root complex" in acs.message
    assert one(verdicts, "gpudirect.acs", "node4:gpu2").outcome is Outcome.PASS
    assert one(verdicts, "gpudirect.acs", "node1:gpu0").message == (
        "node1 gpu0: ACS off on the 3 bridge(s) between GPU0 and mlx5_0 "
        "(0000:17:01.0, 0000:17:00.0, 0000:16:00.0)"
    )
    bw = one(verdicts, "gpudirect.write_bw", "node2:rail3")
    assert bw.outcome is Outcome.PASS and bw.value == pytest.approx(391.24) and bw.unit == "Gb/s"
    assert bw.labels["key"] == "gpudirect.write_bw.node2.rail3"
    nccl = one(verdicts, "gpudirect.nccl_gdrdma", "node1")
    assert nccl.outcome is Outcome.SKIP and nccl.message == "needs the pair campaign's NCCL INFO log"
    iommu = one(verdicts, "gpudirect.iommu", "node1")  # demo.yaml accepts [none, identity]
    assert iommu.outcome is Outcome.PASS and iommu.message == (
        "node1: IOMMU off (no IOMMU group) on GPU 0, 1, 2, 3, 4, 5, 6, 7, as the site accepts"
    )
    for v in verdicts:
        if v.outcome in (Outcome.PASS, Outcome.FAIL):
            assert v.evidence and all(read(tmp, p) for p in v.evidence), v.test_id


def test_without_baseline_write_bw_is_skipped_with_the_key(demo_run: Run) -> None:
    _, _, archived = demo_run
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["baselines"] = {k: v for k, v in data["baselines"].items() if not k.startswith("gpudirect.")}
    site = parse_site(CONFIGS / "demo.yaml", data)
    v = one(gd(site, archived), "gpudirect.write_bw", "node1:rail0")
    assert v.outcome is Outcome.SKIP and v.message.startswith("write_bw_Gbps=391: no baseline for this key")


def test_dmabuf_replaces_peermem_on_open_modules_and_new_kernels(demo_run: Run) -> None:
    site, _, archived = demo_run
    version = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  "
        "(nixbld@)  \n"
    )  # the real 2x H200 VM's line
    assert driver_flavor(version) == ("open", "580.159.04")
    new = edited(archived, "node4", file_is("/proc/driver/nvidia/version"), stdout(version))
    new = edited(new, "node4", lambda ev: ev.source == "uname", stdout("6.8.0-45-generic\n"))
    v = one(gd(site, new), "gpudirect.peermem", "node4")
    assert v.outcome is Outcome.PASS and v.message == (
        "node4: nvidia_peermem not loaded, DMA-BUF usable instead (open NVIDIA kernel module 580.159.04, "
        "Linux 6.8.0-45-generic)"
    )
    old = edited(new, "node4", lambda ev: ev.source == "uname", stdout("5.4.0-150-generic\n"))
    v = one(gd(site, old), "gpudirect.peermem", "node4")
    assert v.outcome is Outcome.FAIL and "Linux 5.4.0-150-generic is older than 5.12" in v.message


def test_lspci_without_root_is_an_error_not_a_pass(demo_run: Run) -> None:
    site, _, archived = demo_run
    denied = (DATA / "lspci" / "lspci-vvv-s-amd-matisse-dsp-access-denied-kvm2023.txt").read_text()
    text = denied.replace("03:05.0 PCI bridge", "0000:5b:01.0 PCI bridge")
    assert parse_lspci(text).device("0000:5b:01.0") is not None
    new = edited(
        archived, "node2", lambda ev: ev.source == "lspci" and ev.argv[-1] == "0000:5b:01.0", stdout(text)
    )
    v = one(gd(site, new), "gpudirect.acs", "node2:gpu3")
    assert v.outcome is Outcome.ERROR and v.message == (
        "node2 gpu3: lspci could not read the capabilities of bridge 0000:5b:01.0 (<access denied>): "
        "run the probe job as root to read ACS"
    )


def test_nic_on_another_root_complex_checks_every_bridge(demo_run: Run) -> None:
    site, _, archived = demo_run
    v = one(gd(site, archived), "gpudirect.acs", "node2:gpu3")  # nic_wrong_numa: no common switch
    assert v.outcome is Outcome.PASS
    assert v.message == (
        "node2 gpu3: ACS off on the 4 bridge(s) between GPU3 and mlx5_3 "
        "(0000:59:01.0, 0000:5a:00.0, 0000:5b:01.0, 0000:d0:01.0)"
    )


def test_write_bw_absent_failed_slow(demo_run: Run) -> None:
    site, _, archived = demo_run
    missing = Evidence(
        "node2",
        "perftest",
        argv=("ib_write_bw", "-d", "mlx5_0"),
        returncode=127,
        stderr="ib_write_bw: command not found",
        meta={"check": "gpudirect", "role": "server", "hca": "mlx5_0", "gpu": "0"},
    )
    new = [(e, p) for e, p in archived if not (e.host == "node2" and e.source == "perftest")]
    new.append((missing, "raw/gpudirect/node2/perftest.json"))
    failed = (DATA / "perftest" / "ib_write_bw-roce-gke-h200-a-gbits-failed-status10-dranet.txt").read_text()
    new = edited(new, "node3", client_of("mlx5_4"), stdout(failed, 1))
    slow = next(e for e, _ in archived if e.host == "node3" and client_of("mlx5_2")(e))
    new = edited(
        new,
        "node3",
        client_of("mlx5_2"),
        stdout(slow.stdout.replace("392.14", "201.20").replace("391.24", "200.11")),
    )
    verdicts = gd(site, new)
    skipped = one(verdicts, "gpudirect.write_bw", "node2:rail5")
    assert skipped.outcome is Outcome.SKIP and skipped.message.startswith(
        "node2 rail5 mlx5_5<->GPU5: ib_write_bw not found on this node (perftest not installed; "
        "tools.perftest_bin)"
    )
    f = one(verdicts, "gpudirect.write_bw", "node3:rail4")
    assert f.outcome is Outcome.FAIL and f.message.startswith(
        "node3 rail4 mlx5_4<->GPU4: ib_write_bw --use_cuda failed: Completion with error at client"
    )
    s = one(verdicts, "gpudirect.write_bw", "node3:rail2")
    assert s.outcome is Outcome.FAIL
    assert s.message.startswith("write_bw_Gbps=200 Gb/s is below 370 (ref 390, -49%)")
    assert "node3 rail2 mlx5_2<->GPU2 loopback, 1 MiB, GPU memory" in s.message


def test_real_h200_vm_everything_skipped_with_reasons() -> None:
    site = vm_site()
    verdicts = gd(site, vm_evidence("gpudirect"))
    assert_complete(site, verdicts, PER)
    assert {v.outcome for v in verdicts} == {Outcome.SKIP}
    assert all(v.evidence for v in verdicts)
    peer = one(verdicts, "gpudirect.peermem", "vm1")
    assert peer.message == (
        "vm1: no RDMA device on this host (/sys/class/infiniband is empty): GPUDirect RDMA does not apply "
        "(observed: no peer-memory module loaded, DMA-BUF usable (open NVIDIA kernel module 580.159.04, "
        "Linux 6.18.44-fc-v657-gpu))"
    )
    bw = one(verdicts, "gpudirect.write_bw", "vm1:rail0")
    assert bw.message.startswith("vm1: no RDMA device on this host")


def test_nccl_info_log_gdrdma_per_node() -> None:
    node_type = {"gpus": 8, "rails": {"gpu0": {"hca": "mlx5_0"}}}
    for name, host, ok in (
        ("excerpt-nccl2.7-busid-gdrdma-nccl707.txt", "10-90-43-152", True),
        ("allreduce-2node-h100-roce-mlx5_5-gdr0.txt", "MOC-R4PCC04U37", False),
    ):
        site = parse_site(Path("x.yaml"), {"name": "x", "nodes": host, "node_types": {"t": node_type}})
        text = (DATA / "nccl-debug" / name).read_text()
        log = Evidence(host, "nccl-debug", argv=("all_reduce_perf",), stdout=text)
        v = one(gd(site, [(log, f"raw/nccl/{name}.json")]), "gpudirect.nccl_gdrdma", host)
        assert v.outcome is (Outcome.PASS if ok else Outcome.FAIL), v.message
        assert v.evidence == (f"raw/nccl/{name}.json",)
        assert ("NET channels use /GDRDMA" in v.message) and (ok or "via NET/IB/" in v.message)


def test_iommu_mode_against_the_site(tmp_path: Path) -> None:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["sim"]["faults"] = [{"kind": "iommu_translated", "node": "node2"}]
    site = parse_site(CONFIGS / "demo.yaml", data)
    verdicts = gd(site, collect(site, ("gpudirect",), tmp_path)["gpudirect"])
    bad = one(verdicts, "gpudirect.iommu", "node2")
    assert bad.outcome is Outcome.FAIL and bad.message.startswith(
        "node2: IOMMU DMA-FQ on GPU 0, 1, 2, 3, 4, 5, 6, 7; the site accepts none, identity (a translating "
        "IOMMU on the GPUs breaks or slows GPUDirect peer-to-peer"
    )
    assert bad.value == "DMA-FQ" and len(bad.evidence) == 16  # per GPU: the type and the group listing
    assert one(verdicts, "gpudirect.iommu", "node1").outcome is Outcome.PASS
    del data["gpudirect"]
    unset = parse_site(CONFIGS / "demo.yaml", data)
    evidence = collect(unset, ("gpudirect",), tmp_path / "u")["gpudirect"]
    v = one(gd(unset, evidence), "gpudirect.iommu", "node2")
    assert v.outcome is Outcome.SKIP and v.message == (
        "node2: the site declares no IOMMU mode to check (gpudirect.iommu); observed: DMA-FQ on GPU 0, 1, 2, "
        "3, 4, 5, 6, 7"
    )
    data["gpudirect"] = {"iommu": ["pt"]}
    with pytest.raises(SiteConfigError) as err:
        parse_site(CONFIGS / "demo.yaml", data)
    assert str(err.value).endswith(
        "gpudirect.iommu[0]: expected one of none, identity, DMA, DMA-FQ, got 'pt'"
    ), str(err.value)


def test_demo_yaml_lists_one_fault_of_each_kind_off_node3() -> None:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    mine = [
        f
        for f in data["sim"]["faults"]
        if f["kind"] in ("nic_wrong_numa", "pcie_x8", "peermem_missing", "acs_on")
    ]
    assert sorted(f["kind"] for f in mine) == ["acs_on", "nic_wrong_numa", "pcie_x8", "peermem_missing"]
    assert all(f["node"] != "node3" for f in mine)


def test_client_retries_until_the_server_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, ...]] = []
    refused = iter([True, True, False])
    real_sleep = time.sleep

    def fake_run(
        argv: list[str], timeout_s: float, source: str | None = None, env: dict[str, str] | None = None
    ) -> Evidence:
        calls.append(tuple(argv))
        assert env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"} and source == "perftest"
        if argv[-1] != "localhost":  # the server: alive until the client got through
            while len(calls) < 4:
                real_sleep(0.01)
            return Evidence("n1", "perftest", argv=tuple(argv), stdout="server done")
        if next(refused):
            return Evidence(
                "n1",
                "perftest",
                argv=tuple(argv),
                returncode=1,
                stderr="Couldn't connect to localhost:18518\n",
            )
        return Evidence("n1", "perftest", argv=tuple(argv), stdout="client done")

    monkeypatch.setattr("clusteraccept.hostio.run", fake_run)
    monkeypatch.setattr("time.sleep", lambda s: None)
    rail = {"gpu": 3, "hca": "mlx5_3", "port": 1}
    evs = probe_gpudirect.loopback_write_bw("/opt/perftest/ib_write_bw", rail, 60)
    assert [e.meta["role"] for e in evs] == ["server", "client"]
    assert evs[1].stdout == "client done" and evs[1].meta["attempts"] == "3"
    assert calls[0][:8] == (
        "/opt/perftest/ib_write_bw",
        "-d",
        "mlx5_3",
        "-i",
        "1",
        "-p",
        "18518",
        "--use_cuda=3",
    )


def test_probes_on_this_real_host_never_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    # No host profile: the probes read this machine (no GPU driver, no HCA here) through the one seam.
    monkeypatch.delenv("CLUSTERACCEPT_HOST_PROFILE", raising=False)
    monkeypatch.setenv("CLUSTERACCEPT_HOSTNAME", "vm1")
    site = vm_site()
    for family, per in (("gpudirect", PER), ("topology", TOPO_PER)):
        evs = node_entry.collect_node((family,), flow.probe_options(site))
        archived = [(e, f"raw/{family}/vm1/{i}.json") for i, e in enumerate(evs) if e.meta["check"] == family]
        verdicts = judged(site, archived, family)
        assert_complete(site, verdicts, per)
        assert all(v.message for v in verdicts)
