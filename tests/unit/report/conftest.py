"""One real demo run (submitit's local executor, simulated hardware, the demo's injected faults) shared by
the report tests, made with credentials in the environment its jobs get (the site's env_file), a sign-off
and pytest's own --junitxml beside ours, made once per test session (in this process: ``run_pytest``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness import PytestRunner

from clusteraccept.judge import record

REPO = Path(__file__).resolve().parents[3]
ARTIFACTS = REPO / "test-artifacts"
SECRETS = {"HF_TOKEN": "hf_DemoSecretValue1234567890", "DB_PASSWORD": "Hunter2-demo-password"}
SIGNER = ("Ada Lovelace", "acceptance engineer")


@dataclass(frozen=True)
class DemoRun:
    run: Path  # reports/demo/<run id>
    reports: Path
    site: Path
    pytest_junit: Path
    stdout: str

    @property
    def results(self) -> dict[str, Any]:
        data: dict[str, Any] = record.load(self.run)
        return data


def demo_site(dest: Path, secrets: dict[str, str]) -> Path:
    """site-configs/demo.yaml with ``secrets`` in the credentials file it names (env_file, mode 0600: the
    site file refuses them), and its simulated hosts, fabric and nccl-tests under ``dest``'s directory:
    parallel test workers running the demo must not rewrite each other's (sim.prepare rewrites them at the
    start of every run)."""
    text = (REPO / "site-configs" / "demo.yaml").read_text()
    assert "{repo}/.vcluster/sim/demo" in text
    text = text.replace("{repo}/.vcluster/sim/demo", str(dest.parent / "sim"))
    creds = dest.parent / "credentials.env"
    creds.write_text("".join(f"{k}={v}\n" for k, v in secrets.items()))
    creds.chmod(0o600)
    dest.write_text(text + f"env_file: {creds.name}\n")
    return dest


def make_demo_run(run_pytest: PytestRunner, base: Path) -> str:
    site = demo_site(base / "demo.yaml", SECRETS)
    proc = run_pytest(
        "suites/", f"--site={site}", "--executor=local", f"--reports-dir={base / 'reports'}",
        f"--signoff-name={SIGNER[0]}", f"--signoff-role={SIGNER[1]}",
        f"--junitxml={base / 'pytest-junit.xml'}",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the demo's faults fail
    return proc.stdout


@pytest.fixture(scope="session")
def demo_run(run_pytest: PytestRunner, tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    base = tmp_path_factory.mktemp("demo-run")
    stdout = make_demo_run(run_pytest, base)
    (run,) = [p for p in (base / "reports" / "demo").iterdir() if p.is_dir() and p.name != "latest"]
    return DemoRun(run, base / "reports", base / "demo.yaml", base / "pytest-junit.xml", stdout)
