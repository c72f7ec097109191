"""No secret reaches raw/, results.json, junit.xml, report.html or the history store.

End to end in-process: the real session (archive -> judge -> results.json) and the real reports, with only
the job layer replaced by one returning evidence that carries credentials everywhere evidence can hold an
environment: the launcher's ``env NAME=value`` argv, an nccl-tests ``-J`` JSON document (its ``env`` is the
whole environment; rendered by the simulated nccl-tests), NCCL INFO / shell lines on stderr, a step that
died printing its environment (whose stderr ends up in the verdict message), a probe's environment dump,
and a job message. Plus the real demo run, whose jobs get credentials from the site's env_file.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from harness import FakeSlurm

from clusteraccept import flow
from clusteraccept.evidence import Evidence
from clusteraccept.jobs.submit import JobOutcome
from clusteraccept.judge import record
from clusteraccept.plan.jobs import make_plan
from clusteraccept.report import write_reports
from clusteraccept.rundir import make_run_dir
from clusteraccept.sim.nccl_tests_options import parse_args
from clusteraccept.sim.nccl_tests_output import render_run
from clusteraccept.sim.prepare import fabric_of, simulate_step
from clusteraccept.site.load import load_site

from .conftest import REPO, SECRETS, DemoRun

LEAKS = {
    "HF_TOKEN": "hf_argvSecret_0001",
    "AWS_SECRET_ACCESS_KEY": "awsStderrSecret0002",
    "MY_API_KEY": "sk-live-diedSecret0003",
    "WANDB_API_KEY": "jsonEnvSecret0004",
    "GITHUB_TOKEN": "ghp_probeEnvSecret0005",
    "DB_PASSWORD": "jobMessageSecret0006",
}


def outputs(run: Path) -> dict[Path, bytes]:
    """Every output file's bytes (raw/'s bundles decompressed: a secret must not hide in them either)."""
    files = [p for p in (run / "raw").rglob("*") if p.is_file()]
    plain = {p: gzip.decompress(p.read_bytes()) for p in files if p.suffix == ".gz"}
    files = [p for p in files if p not in plain]
    files += [run / n for n in ("results.json", "verdicts.sqlite", "junit.xml", "report.html")]
    files += [run.parent / "history.sqlite"]
    return {**plain, **{p: p.read_bytes() for p in files}}


def leaked(files: dict[Path, bytes], values: list[str]) -> list[str]:
    return [f"{p}: {v}" for p, data in files.items() for v in values if v.encode() in data]


def evidence(site: Any) -> list[JobOutcome]:
    fabric = fabric_of(site)
    steps = [s for s in make_plan(site, families=(), nccl=True).steps() if s.kind == "pair"][:3]
    ok = simulate_step(fabric, steps[0])
    ok = replace(
        ok,
        argv=("env", f"HF_TOKEN={LEAKS['HF_TOKEN']}", *ok.argv),
        stderr="node1:42:42 [0] NCCL INFO NCCL_IB_HCA set by environment to =mlx5_0:1\n"
        f"export AWS_SECRET_ACCESS_KEY={LEAKS['AWS_SECRET_ACCESS_KEY']}\n",
    )
    js = simulate_step(fabric, steps[1])
    argv = list(steps[1].argv)
    opts = parse_args(argv[argv.index("-b") :])
    assert not isinstance(opts, str)
    env = {"NCCL_IB_HCA": "=mlx5_1:1", "WANDB_API_KEY": LEAKS["WANDB_API_KEY"], "PATH": "/usr/bin"}
    _, _, doc = render_run("sendrecv_perf", opts, fabric, list(steps[1].nodes), [1, 1], env, "/tmp/r.json")
    assert doc is not None and f"WANDB_API_KEY={LEAKS['WANDB_API_KEY']}" in doc["env"]
    js = replace(js, stdout=json.dumps(doc))
    died = replace(
        simulate_step(fabric, steps[2]),
        returncode=1,
        stdout="",
        stderr=f"srun: error: task 0 launch failed; environment: MY_API_KEY={LEAKS['MY_API_KEY']}\n",
    )
    probe_env = Evidence(
        "node1", "env", argv=("env",), stdout=f"GITHUB_TOKEN={LEAKS['GITHUB_TOKEN']}\nPATH=/usr/bin\n",
        meta={"check": "fingerprint"},
    )  # fmt: skip
    return [
        JobOutcome("probe-nodes", "1", "FINISHED", (probe_env,),
                   message=f"Slurm job 1 ended FINISHED (DB_PASSWORD={LEAKS['DB_PASSWORD']})"),
        JobOutcome("campaign-leaf1", "2", "FINISHED", (ok, js, died)),
    ]  # fmt: skip


def test_secrets_in_evidence_never_reach_the_outputs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_slurm: FakeSlurm
) -> None:
    site = replace(load_site("demo", REPO / "site-configs"), simulated=False)  # no sim files written
    fake_slurm.answer_idle(site.nodes)  # the run's preflight asks sinfo which nodes Slurm would run a job on
    # and, where the demo's slurm.conf exists (after ./tools/demo), scontrol for the job limits
    show_config = REPO / "tests/data/scontrol-config/slurm-22.05.8-vcluster.txt"
    fake_slurm.answer("scontrol", show_config.read_text())
    outcomes = evidence(site)

    class Layer:  # the job layer, as if the jobs had run and returned this evidence
        interrupted = None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def submit_probes(self, *args: Any) -> None:
            pass

        def submit_campaign(self, *args: Any) -> None:
            pass

        def wait(self) -> list[JobOutcome]:
            return outcomes

    monkeypatch.setattr(flow, "JobLayer", Layer)
    run = make_run_dir(tmp_path, "demo", "20261129T000000Z-0000")
    flow.execute(flow.Request(site, run, families=(), nccl=True))
    write_reports(run)
    results = record.load(run)

    files = outputs(run)
    assert leaked(files, list(LEAKS.values())) == []
    # ... because they were redacted, not because the evidence was dropped:
    raw = b"".join(data for p, data in files.items() if "raw" in p.parts)
    for name in LEAKS:
        if name != "DB_PASSWORD":  # that one was only in the job message
            assert f"{name}=<redacted>".encode() in raw, name
    messages = {v["subject"]: v["message"] for v in results["verdicts"]}
    died = next(m for s, m in messages.items() if s.endswith(":sendrecv") and "could not parse" in m)
    assert "MY_API_KEY=<redacted>" in died  # the stderr tail a verdict message quotes
    assert "DB_PASSWORD=<redacted>" in results["jobs"][0]["message"]
    assert any(k.startswith("nccl.busbw") for k in (v["check"] for v in results["verdicts"]))  # JSON judged


def test_the_demo_job_environment_secrets_reach_no_output(demo_run: DemoRun) -> None:
    """The credentials of the site's env_file reach no file of the run directory: the job scripts,
    submitit's pickles and logs, the spool, raw/'s bundles (decompressed), the record and the reports."""
    assert "env_file: credentials.env" in demo_run.site.read_text()
    every = [p for p in demo_run.run.rglob("*") if p.is_file() and not p.is_symlink()]
    assert any(p.suffix == ".pkl" for p in every) and any(p.suffix == ".sbatch" for p in every)
    files = {**{p: p.read_bytes() for p in every}, **outputs(demo_run.run)}
    files[demo_run.pytest_junit] = demo_run.pytest_junit.read_bytes()
    assert leaked(files, list(SECRETS.values())) == []
