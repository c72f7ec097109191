"""What actually ran (issue 18): each injected fault is caught by exactly its own verdict, and the numbers
it makes unjudgeable say "not judged: <the cause>".

A step is run as srun would run it, without Slurm: each rank is a process of its own with the variables
srun gives a task (SLURM_PROCID, SLURM_LOCALID, SLURMD_NODENAME, SLURM_STEP_*), running the planned
command after ``env`` (the launch record, then the simulated nccl-tests) against the simulated site's
host profiles. The ranks' outputs are concatenated, as srun merges them into the step's output.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept.checks import nccl
from clusteraccept.checks.launch import CHECKS, Finding, Findings, crowded_steps, fold, node_verdicts
from clusteraccept.errors import ParseError
from clusteraccept.evidence import Evidence
from clusteraccept.judge.verdicts import Outcome, Verdict
from clusteraccept.parsers import launch_record
from clusteraccept.plan.jobs import Step, make_plan
from clusteraccept.render import REPO_ROOT
from clusteraccept.sim.prepare import prepare
from clusteraccept.site.load import load_site
from clusteraccept.site.model import Site

CONFIGS = REPO_ROOT / "site-configs"


def _site(tmp: Path, faults: list[dict[str, Any]], **nccl: Any) -> Site:
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["env"] = {
        "CLUSTERACCEPT_HOST_PROFILE": str(tmp / "hosts"),
        "CLUSTERACCEPT_FABRIC": str(tmp / "fabric.json"),
    }
    data["tools"]["nccl_tests_bin"] = str(tmp / "nccl-tests")
    data["slurm"]["python"] = sys.executable
    data["sim"] = {"faults": faults}
    data["nccl"].update(nccl)
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    site = load_site(str(path), CONFIGS)
    prepare(site, sys.executable)
    return site


def _plain_site() -> Site:
    return load_site("demo", CONFIGS)


def _run(site: Site, step: Step) -> Evidence:
    argv = list(step.argv)
    per_node = next(int(a.split("=", 1)[1]) for a in argv if a.startswith("--ntasks-per-node="))
    i = argv.index("env") + 1
    env_words = {}
    while "=" in argv[i]:
        k, _, v = argv[i].partition("=")
        env_words[k] = v
        i += 1
    base = {**os.environ, **site.env, "CLUSTERACCEPT_SIM_MPI": "0", "PYTHONPATH": str(REPO_ROOT / "src")}
    procs = []
    for n, node in enumerate(step.nodes):
        for local in range(per_node):
            env = {
                **base,
                **env_words,
                "SLURM_PROCID": str(n * per_node + local),
                "SLURM_LOCALID": str(local),
                "SLURMD_NODENAME": node,
                "SLURM_STEP_NODELIST": ",".join(step.nodes),
                "SLURM_STEP_NUM_TASKS": str(per_node * len(step.nodes)),
                "SLURM_STEP_TASKS_PER_NODE": f"{per_node}(x{len(step.nodes)})",
            }
            procs.append(subprocess.Popen(argv[i:], env=env, stdout=subprocess.PIPE, text=True))
    out = "".join(p.communicate()[0] for p in procs)
    rc = max(p.returncode for p in procs)
    return Evidence(step.subject, step.tool, argv=step.argv, returncode=rc, stdout=out, meta=step.meta())


def _steps(site: Site) -> list[Step]:
    """node1's intra-node step, rails 1 and 5 of the pair node1-node2 (a GPU on each socket), leaf1's
    block all_reduce."""
    steps = [s for r in make_plan(site).campaign_jobs[0].rounds for s in r.steps]
    pick = [s for s in steps if s.kind == "node" and s.nodes == ("node1",)]
    pick += [s for s in steps if s.kind == "pair" and s.rail in (1, 5)]
    return pick + [
        s for s in steps if s.kind == "block" and s.collective == "all_reduce" and s.family == "nccl"
    ]


def _intra(site: Site, nodes: tuple[str, ...]) -> list[Step]:
    steps = [s for r in make_plan(site).campaign_jobs[1].rounds for s in r.steps]
    return [s for s in steps if s.kind == "node" and s.nodes[0] in nodes]


def _judge(site: Site, more: bool = False) -> tuple[list[Verdict], list[Verdict]]:
    """The node verdicts of the four launch checks, and every other verdict (checks/nccl.py's judge).
    ``more``: leaf2's intra-node steps too, so that one node of three runs another NCCL."""
    steps = _steps(site) + (_intra(site, ("node3", "node4")) if more else [])
    # one bundle per kind: the two rail steps ran in one round, as in a campaign's archive
    evidence = [(_run(site, s), f"raw/leaf1/r{s.kind}.jsonl.gz#nccl/{s.subject}") for s in steps]
    verdicts = nccl.judge(site, evidence, ["node1", "node2"])
    launch = [v for v in verdicts if v.check in CHECKS and v.subject in ("node1", "node2")]
    return launch, [v for v in verdicts if v not in launch]


def _failing(verdicts: list[Verdict]) -> set[tuple[str, str]]:
    return {(v.check, v.subject) for v in verdicts if v.outcome is Outcome.FAIL}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Verdict], list[Verdict]]:
    return _judge(_site(tmp_path_factory.mktemp("healthy"), []))


def test_healthy_nodes_pass_every_launch_check(healthy: tuple[list[Verdict], list[Verdict]]) -> None:
    node_vs, step_vs = healthy
    assert {(v.check, v.subject): v.outcome for v in node_vs} == {
        (c, n): Outcome.PASS
        for c in ("launch.binding", "launch.nic", "nccl.transport", "nccl.config")
        for n in ("node1", "node2")
    }
    busbw = [v for v in step_vs if v.check == "nccl.busbw"]
    assert busbw and not any(v.message.startswith("not judged") for v in busbw)


@pytest.mark.parametrize(
    ("fault", "check", "says"),
    [
        ({"kind": "cpu_pinned", "node": "node2"}, "launch.binding", "share 1 CPU(s) 0"),
        ({"kind": "gpu_order", "node": "node2"}, "launch.binding", "drove the GPU on bus"),
        ({"kind": "stray_nic", "node": "node2", "rail": 5, "hca": "mlx5_8"}, "launch.nic", "mlx5_8"),
        ({"kind": "shm_fallback", "node": "node2"}, "nccl.transport", "over SHM"),
        (
            {"kind": "nccl_conf", "node": "node2", "setting": "NCCL_ALGO=Ring"},
            "nccl.config",
            "NCCL_ALGO=Ring",
        ),
        (
            {"kind": "nccl_version", "node": "node2", "setting": "2.27.3+cuda12.4"},
            "nccl.config",
            "NCCL 2.27.3+cuda12.4 here, 2.28.9+cuda12.9 on",
        ),
    ],
)
def test_each_fault_fails_exactly_its_verdict(
    tmp_path: Path, fault: dict[str, Any], check: str, says: str
) -> None:
    node_vs, step_vs = _judge(_site(tmp_path, [fault]), more=fault["kind"] == "nccl_version")
    assert _failing(node_vs) == {(check, "node2")}
    (bad,) = [v for v in node_vs if v.outcome is Outcome.FAIL]
    assert says in bad.message and bad.evidence
    not_judged = [v for v in step_vs if v.check == "nccl.busbw" and v.message.startswith("not judged")]
    if check == "nccl.config":  # a tuning knob changes no hardware: the numbers are still judged
        assert not not_judged
    else:
        assert not_judged and all(v.outcome is Outcome.SKIP and check in v.message for v in not_judged)
    if fault["kind"] == "cpu_pinned":  # rail 1's GPU is on CPU 0's socket: judged alone it would pass,
        # but it ran beside rail 5 on that one CPU (the same round): its numbers are CPU contention
        rail1 = [v for v in step_vs if v.check == "nccl.busbw" and v.subject.startswith("node1-node2:rail1:")]
        assert rail1 and all("share 1 CPU(s) 0" in v.message for v in rail1)


def test_a_waived_knob_passes_and_says_why(tmp_path: Path) -> None:
    site = _site(
        tmp_path,
        [{"kind": "nccl_conf", "node": "node2", "setting": "NCCL_ALGO=Ring"}],
        accept_env={"NCCL_ALGO": "vendor's tuned ring for this fabric, ticket 123"},
    )
    node_vs, _ = _judge(site)
    (cfg,) = [v for v in node_vs if v.check == "nccl.config" and v.subject == "node2"]
    assert cfg.outcome is Outcome.PASS and "ticket 123" in cfg.message


def test_launch_record_garbage_is_refused_with_its_line() -> None:
    with pytest.raises(ParseError) as exc:
        launch_record.parse('# nccl-tests\nCLUSTERACCEPT-LAUNCH {"host": "n1", "allowed": \n')
    assert exc.value.line_no == 2
    with pytest.raises(ParseError) as exc:
        launch_record.parse('CLUSTERACCEPT-LAUNCH {"host": "n1", "allowed": "0-3", "bound": "x", '
                            '"nccl_env": {}, "nccl_conf": {}, "cuda_index": 0}\n')  # fmt: skip
    assert exc.value.line_no == 1 and "bound" in exc.value.expected
    with pytest.raises(ParseError):
        launch_record.parse("no record here\n")


def test_real_logs_judged_for_transport(tmp_path: Path) -> None:
    """Real NCCL INFO logs (tests/data/nccl-debug/SOURCES.md): an H800 node's GPUs over SHM, two H100 nodes
    over RoCE with GPUDirect off (transport fine: GDR is gpudirect.nccl_gdrdma's), on the NIC NCCL listed."""
    from clusteraccept.checks.launch import step_findings
    from clusteraccept.parsers import nccl_debug

    data = REPO_ROOT / "tests" / "data" / "nccl-debug"
    site = _site(tmp_path, [])
    h800 = nccl_debug.parse(
        (data / "h800-4rank-shm-direct-direct-connected-all-rings-nvidia-nccl1609.txt").read_text()
    )
    host = "tj5-sc-ai-h800r-dev01"
    meta = {"subject": host, "collective": "all_reduce", "nodes": host, "kind": "node", "rail": ""}
    (f,) = [f for f in step_findings(site, meta, (), (), h800, None) if f.check == "nccl.transport"]
    assert f.ok is False and "over SHM" in f.message
    # one host's log of a 2-node run (its host named node1 here, a node of the site), default
    # NCCL_DEBUG_SUBSYS: "via NET/IB/1" while the only device listed is [0]mlx5_5: NCCL 2.26 numbers
    # virtual devices, and without NET lines none says which HCA that is
    log = (data / "allreduce-2node-h100-roce-mlx5_5-gdr0.txt").read_text()
    roce = nccl_debug.parse(log.replace("MOC-R4PCC04U37", "node1"))
    assert roce.net_device_names("node1", 1) is None and roce.net_device_names("node1", 0) == ("mlx5_5",)
    meta = {"subject": "node1-node2:rail5", "collective": "all_reduce", "nodes": "node1,node2",
            "kind": "pair", "rail": "5"}  # fmt: skip
    found = {(f.check, f.node): f for f in step_findings(site, meta, (), (), roce, None)}
    assert found[("nccl.transport", "node1")].ok is True  # NET/IB; its missing GDR is gpudirect's
    nic = found[("launch.nic", "node1")]
    assert nic.ok is None and "NET device(s) [1]" in nic.message


def test_a_record_longer_than_srun_keeps_a_line_whole_is_written_in_parts_and_joined() -> None:
    """slurmstepd cuts a task's line of 1024 bytes or more into messages that interleave with the other
    ranks' (parsers/launch_record.py): a long record goes out as parts of under 1000 bytes, which come
    back whole between other ranks' lines; a cut-off record is an error at its first part, never dropped."""
    text = (REPO_ROOT / "tests" / "data" / "launch-record" / "h200-1gpu-vm-real.txt").read_text()
    real = next(ln for ln in text.splitlines() if ln.startswith(launch_record.MARK))
    doc = json.loads(real[len(launch_record.MARK) :])
    # a site's NCCL environment as long as real ones get (NCCL_IB_HCA of 8 rails, a topology file...)
    doc["nccl_env"] |= {f"NCCL_SETTING_{i}": "x" * 60 for i in range(30)}
    a = launch_record.lines(json.dumps({**doc, "host": "n1"}, separators=(",", ":")), "n1.101")
    b = launch_record.lines(json.dumps({**doc, "host": "n2"}, separators=(",", ":")), "n2.202")
    assert len(a) > 2 and all(len(line.encode()) <= launch_record.LINE_MAX for line in a + b)
    assert launch_record.lines(real[len(launch_record.MARK) :], "vm.1") == [real + "\n"]  # short: as is
    mixed = [x for pair in zip(a, b, strict=True) for x in pair] + ["# nccl-tests version 2.19.6\n"]
    got = launch_record.parse("".join(mixed)).records
    assert [(r.host, r.line_no, dict(r.nccl_env)) for r in got] == [
        ("n1", 1, doc["nccl_env"]),
        ("n2", 2, doc["nccl_env"]),
    ]
    with pytest.raises(ParseError) as exc:
        launch_record.records("".join(a[:-1] + b))
    assert exc.value.line_no == 1 and "parts of launch record n1.101" in exc.value.expected


def test_real_launch_records_of_an_h200_vm() -> None:
    """probes/launch.py on a real H200 host (tests/data/launch-record/SOURCES.md): the affinity it bound
    is what the exec'd process reported, within what it was allowed; a GPU that is not there is no bus id."""
    text = (REPO_ROOT / "tests" / "data" / "launch-record" / "h200-1gpu-vm-real.txt").read_text()
    whole, pinned, missing = launch_record.parse(text).records
    assert (whole.host, whole.gpu_bus_id, whole.numa_node) == ("vm", "00000000:00:06.0", -1)
    assert whole.local_cpus == tuple(range(16)) and whole.bound_cpus == tuple(range(16))
    assert (pinned.allowed_cpus, pinned.bound_cpus) == ((2, 3, 4, 5), (2, 3, 4, 5))
    assert "after exec: [2, 3, 4, 5]" in text
    assert missing.gpu_bus_id is None and missing.bind_error == "no GPU bus id" and missing.gpu_count == 1
    from clusteraccept.checks.launch import step_findings

    meta = {"subject": "vm", "collective": "all_reduce", "nodes": "vm", "kind": "node", "rail": ""}
    (ok,) = step_findings(_plain_site(), meta, (), (whole,), None, None)[:1]
    (bad,) = step_findings(_plain_site(), meta, (), (missing,), None, None)[:1]
    assert ok.ok is True and bad.ok is False and "no GPU 3 on this node (nvidia-smi lists 1)" in bad.message
    assert dict(whole.nccl_env) == {"NCCL_NVLS_ENABLE": "0", "NCCL_VERSION": "2.28.3-1"}


@pytest.mark.parametrize("nvls", [True, False])
def test_nvls_is_judged_against_nccl_expect_on_steps_over_every_gpu(tmp_path: Path, nvls: bool) -> None:
    """The simulated nodes never engage NVLS: ``nccl.expect.nvls: true`` fails the steps over every GPU
    (node1's intra-node and leaf1's block step; never a rail step), ``false`` passes."""
    node_vs, _ = _judge(_site(tmp_path, [], expect={"nvls": nvls}))
    transport = {v.subject: v for v in node_vs if v.check == "nccl.transport"}
    if nvls:
        assert {n: v.outcome for n, v in transport.items()} == {"node1": Outcome.FAIL, "node2": Outcome.FAIL}
        # one message, the steps that showed it
        assert (
            transport["node1"].message == "NVLS expected but not engaged [node1:all_reduce, leaf1:all_reduce]"
        )
        assert "rail" not in transport["node2"].message  # only its block step: [leaf1:all_reduce]
    else:
        assert {v.outcome for v in transport.values()} == {Outcome.PASS}


def test_a_node_verdict_says_each_message_once_with_its_steps_and_cites_what_it_quotes() -> None:
    """Five steps say one thing, six others six different things: the verdict quotes four messages,
    each once with up to four of its steps, counts the steps it left out, and cites what it quotes."""
    same = [Finding("nccl.transport", "n1", False, "plugin failed", f"s{k}") for k in range(5)]
    other = [Finding("nccl.transport", "n1", False, f"odd {k}", f"t{k}") for k in range(6)]
    evidence = {f.step: f"raw/{f.step}" for f in same + other}
    (v,) = node_verdicts(fold(same + other), ["n1"], evidence, {})
    assert v.outcome is Outcome.FAIL
    assert v.message == ("plugin failed [s0, s1, s2, s3]; odd 0 [t0]; odd 1 [t1]; odd 2 [t2] (+4 more steps)")
    assert v.evidence == ("raw/s0", "raw/s1", "raw/s2", "raw/s3")


def test_findings_folded_in_parts_and_merged_are_the_findings_folded_whole() -> None:
    """The step judging's workers each fold their own steps' findings and the parent merges the folds in
    step order (launch.Findings): whatever the cut, that is the fold of every finding at once, and so are
    the node verdicts made of it."""
    import random

    rng = random.Random(7)
    nodes = ["n1", "n2", "n3", "n4"]
    findings = []
    for k in range(400):
        node, check = rng.choice(nodes), rng.choice(CHECKS)
        # n1 fails now and then, n2 and n3 pass (n3 with a step that cannot be judged), n4 cannot be judged
        ok = {"n1": rng.random() > 0.1, "n2": True, "n3": rng.random() > 0.2 or None, "n4": None}[node]
        step = f"n1-n2:rail{k % 8}:sendrecv" if k % 3 else f"leaf{k % 2}:all_reduce"
        bound = check == "launch.binding"
        cpus = frozenset(rng.sample(range(8), rng.randint(0, 2))) if bound else frozenset()
        versions = (rng.choice(["2.28.9", "2.27.3"]),) if check == "nccl.config" and k % 5 == 0 else ()
        message = rng.choice(["a", "b", "c"]) if ok is False else f"m{k % 4}"
        findings.append(Finding(check, node, ok, message, f"{step}:{k // 7}", cpus, versions))
    whole = fold(findings)
    evidence = {f.step: f"raw/r{k % 4}.jsonl.gz#{f.step}" for k, f in enumerate(findings)}
    crowded = crowded_steps(whole.bound, evidence)
    expected = node_verdicts(whole, nodes, evidence, crowded)
    assert {v.outcome for v in expected} == {Outcome.PASS, Outcome.FAIL, Outcome.SKIP}
    assert crowded and len(whole.versions) > 2
    for cuts in ([0, 400], [0, 1, 400], [0, 133, 134, 400], sorted({0, 400, *rng.sample(range(1, 400), 9)})):
        merged = Findings()
        for a, b in itertools.pairwise(cuts):
            merged.merge(fold(findings[a:b]))
        assert merged == whole, cuts
        assert node_verdicts(merged, nodes, evidence, crowded) == expected
