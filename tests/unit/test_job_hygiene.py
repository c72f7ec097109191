"""Job hygiene (issue 18): no --wckey unless the site names one, --mem=0 with --exclusive, the site's own
srun options on every step (and never one the suite sets itself), the node's Slurm name as its identity."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clusteraccept import hostio
from clusteraccept.errors import SiteConfigError
from clusteraccept.jobs.submit import slurm_parameters
from clusteraccept.plan.jobs import make_plan
from clusteraccept.render import REPO_ROOT
from clusteraccept.site.load import load_site

CONFIGS = REPO_ROOT / "site-configs"


def _site(tmp: Path, **slurm: object):  # type: ignore[no-untyped-def]
    data = yaml.safe_load((CONFIGS / "demo.yaml").read_text())
    data["slurm"].update(slurm)
    path = tmp / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_site(str(path), CONFIGS)


def _params(site) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return slurm_parameters(site, name="probe", nodes=4, tasks_per_node=1, use_srun=True, time_min=10)


def test_no_wckey_unless_named_and_all_memory_when_exclusive(tmp_path: Path) -> None:
    params = _params(_site(tmp_path))
    assert params["wckey"] is None  # submitit drops None: no --wckey=submitit line
    assert params["additional_parameters"]["mem"] == "0"
    named = _params(_site(tmp_path, wckey="acceptance", sbatch_options={"mem": "500G"}))
    assert named["wckey"] == "acceptance" and named["additional_parameters"]["mem"] == "500G"
    shared = _params(_site(tmp_path, exclusive=False))
    assert "mem" not in shared["additional_parameters"]


def test_site_srun_options_reach_every_step(tmp_path: Path) -> None:
    site = _site(tmp_path, srun_options=["--gres-flags=disable-binding", "--network=sn_all"])
    steps = make_plan(site).steps()
    assert steps and all(
        s.argv[s.argv.index("--kill-on-bad-exit=1") + 1 : s.argv.index("env")]
        == ("--gres-flags=disable-binding", "--network=sn_all")
        for s in steps
    )


@pytest.mark.parametrize(
    ("opt", "says"), [("--cpu-bind=cores", "suite does not set"), ("-w node9", "one srun")]
)
def test_srun_options_the_suite_owns_are_refused(tmp_path: Path, opt: str, says: str) -> None:
    with pytest.raises(SiteConfigError) as exc:
        _site(tmp_path, srun_options=[opt])
    assert "slurm.srun_options[0]" in str(exc.value) and says in str(exc.value)


def test_node_identity_is_slurms_node_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLUSTERACCEPT_HOSTNAME", raising=False)
    monkeypatch.setenv("SLURMD_NODENAME", "gpu042")
    assert hostio.hostname() == "gpu042"


def test_a_timed_out_srun_is_interrupted_twice_to_end_its_step(tmp_path: Path) -> None:
    """srun(1): two SIGINTs within a second make srun terminate its step on the nodes; a SIGKILL to srun
    alone would leave the step running into the next round. A fake srun records the signals it got."""
    fake = tmp_path / "srun"
    # python, not bash: a shell started with SIGINT ignored (a background job of a non-interactive
    # shell, as under nohup in CI) cannot trap it; srun itself installs its own handlers
    fake.write_text(
        f"#!{sys.executable}\n"
        "import signal, sys, time\n"
        "n = 0\n"
        "def got(*_):\n"
        "    global n\n"
        "    n += 1\n"
        "    print('SIGINT', n, flush=True)\n"
        "    if n >= 2:\n"
        "        print('step terminated', flush=True)\n"
        "        sys.exit(130)\n"
        "signal.signal(signal.SIGINT, got)\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    time.sleep(0.05)\n"
    )
    fake.chmod(0o755)
    # 2 s: on a loaded machine the fake must have set its handler before the first SIGINT comes
    (ev,) = hostio.run_many([[str(fake)]], timeout_s=2.0)
    assert ev.returncode is None and "timed out after 2 s" in ev.stderr
    assert ev.stdout.splitlines() == ["ready", "SIGINT 1", "SIGINT 2", "step terminated"]
    assert "interrupted twice" in ev.stderr
    plain = tmp_path / "sleeper"
    plain.write_text("#!/bin/bash\ntrap 'echo SIGINT' INT\nsleep 30\n")
    plain.chmod(0o755)
    (other,) = hostio.run_many([[str(plain)]], timeout_s=0.3)
    assert other.returncode is None and "SIGINT" not in other.stdout and other.duration_s < 5


def test_with_accounting_down_a_jobs_final_state_is_the_controllers(fake_slurm: Any) -> None:
    """slurmdbd down: sacct cannot answer, and a job whose results came back would stay UNKNOWN (the run
    INCOMPLETE for nothing). The controller still holds the job: squeue --states=all (docs/faults.md)."""
    from clusteraccept.jobs.submit import _final_state

    class SlurmJob:  # submit._final_state asks Slurm only for a job of this type name
        job_id = "4242"

    fake_slurm.answer("sacct", "", 1, "sacct: error: Problem talking to the database: Connection refused")
    fake_slurm.answer("squeue", "COMPLETED\n")
    assert _final_state(SlurmJob(), settle_s=0.0) == "COMPLETED"
    asked = [argv for argv, _ in fake_slurm.calls]
    assert asked[-1] == ("squeue", "-h", "-j", "4242", "-t", "all", "-o", "%T")
    fake_slurm.answer("squeue", "", 1, "squeue: error: Unable to contact slurm controller")
    assert _final_state(SlurmJob(), settle_s=0.0) == "UNKNOWN (results back, final state not yet known)"
