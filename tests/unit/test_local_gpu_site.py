"""The single-host site (site-configs/local-gpu.yaml) end to end on this machine, with the 2x H200 VM's
recorded outputs (tests/data: nvidia-smi topo -m, the five nccl-tests runs) standing in for the GPUs:
the local executor, {hostname}, the intra-node plan of five collectives, skips without an HCA, the
baseline proposal, and the PyTorch NCCL fallback's wiring."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import yaml
from harness import PytestRun, PytestRunner

from clusteraccept.judge import record
from clusteraccept.plan.commands import tool_of
from clusteraccept.plan.jobs import make_plan
from clusteraccept.sim.hosts import Part, write_profile
from clusteraccept.site.load import load_site

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
FIVE = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv")
FIXTURE = {c: f"{c.replace('_', '')}-1node-2xh200-v2.19.6.txt" for c in FIVE}
HOST = socket.gethostname().split(".")[0]


def test_site_loads_with_this_host_and_five_intra_collectives() -> None:
    site = load_site("local-gpu", REPO / "site-configs")
    assert site.nodes == (HOST,) and site.slurm.executor == "local"
    assert site.node_type(HOST).rails == () and not site.node_type(HOST).numa_expected
    assert site.env["NCCL_NVLS_ENABLE"] == "0" and site.env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert site.env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    plan = make_plan(site)
    (job,) = plan.campaign_jobs
    assert [r.label for r in job.rounds] == [f"intra-node {c}" for c in FIVE]  # one collective a round
    steps = plan.steps()
    assert [s.collective for s in steps] == list(FIVE) and {s.subject for s in steps} == {HOST}
    assert steps[0].argv[-15:] == (
        f"{REPO}/third_party/nccl-tests/build/all_reduce_perf",
        *("-b", "8", "-e", str(8 << 30), "-f", "2", "-g", "1", "-n", "20", "-w", "5", "-c", "1"),
    )
    assert tool_of(site) == "nccl-tests" and site.tools.nccl_tests_build["MPI"] == "0"


def _profile(root: Path) -> None:
    """The VM as its real outputs show it: two GPUs on NVLink, sysfs numa_node -1, no RDMA device."""
    part = Part()
    part.commands += [
        ("nvidia-smi topo -m", (DATA / "nvidia-smi-topo" / "h200x2-vm-nv18-numa-na.txt").read_text(), 0),
        (
            "nvidia-smi --query-gpu=index,name,pci.bus_id *",
            "0, NVIDIA H200, 00000000:00:06.0\n1, NVIDIA H200, 00000000:00:07.0\n",
            0,
        ),
    ]
    for bdf in ("0000:00:06.0", "0000:00:07.0"):
        dev = f"/sys/devices/pci0000:00/{bdf}"
        part.links[f"/sys/bus/pci/drivers/nvidia/{bdf}"] = dev
        part.links[f"/sys/bus/pci/devices/{bdf}"] = dev
        attrs = {
            "class": "0x030200",
            "numa_node": "-1",
            "current_link_speed": "32.0 GT/s PCIe",
            "max_link_speed": "32.0 GT/s PCIe",
            "current_link_width": "16",
            "max_link_width": "16",
        }
        part.files.update({f"{dev}/{k}": v + "\n" for k, v in attrs.items()})
    write_profile(root, HOST, [part])


def _site(tmp_path: Path, **nccl: object) -> Path:
    """local-gpu.yaml with the recorded host and a stand-in nccl-tests that prints the real outputs."""
    bin_dir = tmp_path / "nccl-tests"
    bin_dir.mkdir()
    for c, name in FIXTURE.items():
        exe = bin_dir / f"{c}_perf"
        # the recorded host was called "vm": the ranks must be on this host, as the site's node is; and
        # the GPUs the step sees are recorded (submitit's local executor hides them unless told)
        exe.write_text(
            f'#!/bin/sh\necho "$CUDA_VISIBLE_DEVICES" > {tmp_path}/{c}.cuda_visible_devices\n'
            f"sed 's/ on  *vm device/ on {HOST} device/' {DATA / 'nccl-tests' / name}\n"
        )
        exe.chmod(0o755)
    data = yaml.safe_load((REPO / "site-configs" / "local-gpu.yaml").read_text())
    data["env"]["CLUSTERACCEPT_HOST_PROFILE"] = str(tmp_path / "hosts")
    data["tools"]["nccl_tests_bin"] = str(bin_dir)
    data["nccl"].update(nccl)
    (tmp_path / "local-gpu.baselines.yaml").write_text("{}\n")
    site = tmp_path / "local-gpu.yaml"
    site.write_text(yaml.safe_dump(data))
    _profile(tmp_path / "hosts")
    return site


def _pytest(run_pytest: PytestRunner, tmp_path: Path, site: Path, *args: str) -> PytestRun:
    return run_pytest(
        f"--site={site}",
        f"--reports-dir={tmp_path / 'reports'}",
        "suites/",
        *args,
        env={"CUDA_VISIBLE_DEVICES": None},
    )


def _results(tmp_path: Path) -> dict[str, object]:
    out: dict[str, object] = record.load(tmp_path / "reports" / "local-gpu" / "latest")
    return out


def test_suite_runs_on_one_host_then_against_its_proposed_baselines(
    run_pytest: PytestRunner, tmp_path: Path
) -> None:
    site = _site(tmp_path)
    proposal = tmp_path / "local-gpu.baselines.yaml"
    first = _pytest(run_pytest, tmp_path, site, f"--propose-baselines={proposal}")
    assert first.returncode == 0, first.stdout[-3000:]
    verdicts = _results(tmp_path)["verdicts"]
    assert isinstance(verdicts, list)
    by = {(v["check"], v["subject"]): v for v in verdicts}
    for c in FIVE:
        assert by[("nccl.launch", f"{HOST}:{c}")]["outcome"] == "pass", by[("nccl.launch", f"{HOST}:{c}")]
    assert by[("nccl.busbw", f"{HOST}:all_reduce:1GiB")]["value"] == 329.31  # the recorded run, out-of-place
    assert by[("topology.gpu_inventory", HOST)]["outcome"] == "pass", by[("topology.gpu_inventory", HOST)]
    skipped = {k: v["message"] for k, v in by.items() if v["family"] in ("gpudirect", "roce", "sharp")}
    assert skipped and all(by[k]["outcome"] == "skip" for k in skipped), skipped
    proposed = yaml.safe_load(proposal.read_text())
    assert proposed["nccl.busbw.sendrecv.intra_node.8GiB"]["ref"] == 366.12
    assert (
        len([k for k in proposed if k.startswith("nccl.busbw.alltoall.intra_node.")]) == 30
    )  # 8 B, 16 B: 0 B
    assert {(tmp_path / f"{c}.cuda_visible_devices").read_text() for c in FIVE} == {"0,1\n"}
    second = _pytest(run_pytest, tmp_path, site)  # the same outputs judged against the proposal: all pass
    assert second.returncode == 0, second.stdout[-3000:]
    outcomes = {v["outcome"] for v in _results(tmp_path)["verdicts"] if v["check"] == "nccl.busbw"}  # type: ignore[union-attr,index]
    assert outcomes == {"pass"}


def test_fallback_runs_the_torch_collector_and_says_so(run_pytest: PytestRunner, tmp_path: Path) -> None:
    site_file = _site(tmp_path)
    data = yaml.safe_load(site_file.read_text())
    del data["tools"]["nccl_tests_bin"]
    data["nccl"]["intra_collectives"] = ["all_reduce"]
    site_file.write_text(yaml.safe_dump(data))
    site = load_site(str(site_file), REPO / "site-configs")
    assert tool_of(site) == "torch-nccl"
    (step,) = make_plan(site).steps()
    assert step.tool == "torch-nccl"
    start = step.argv.index("--") + 1  # past the launch record; then the flags nccl-tests takes
    assert step.argv[start - 4 : start] == (sys.executable, "-m", "clusteraccept.probes.launch", "--")
    assert step.argv[start : start + 6] == (
        sys.executable,
        "-m",
        "clusteraccept.probes.torch_nccl",
        "--collective",
        "all_reduce",
        "-b",
    )
    proc = _pytest(run_pytest, tmp_path, site_file, "-m", "nccl")
    verdicts = _results(tmp_path)["verdicts"]
    assert isinstance(verdicts, list)
    (launch,) = [v for v in verdicts if v["check"] == "nccl.launch"]
    assert launch["outcome"] == ("fail" if _no_torch() else "pass"), (launch, proc.stdout[-2000:])
    if _no_torch():  # this machine has no PyTorch: the collector says so in its own format
        assert "PyTorch is not importable" in launch["message"]
        assert launch["message"].endswith("(PyTorch NCCL fallback)")


def _no_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is None
