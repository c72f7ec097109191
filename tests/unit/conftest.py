"""Fixtures every unit test shares (harness.py says what they stand for): ``fake_slurm`` (autouse: no
real Slurm client runs) and ``run_pytest`` (pytest runs of suites/ in this process).

This folder goes on sys.path, as the parser tests' conftest does for theirs, so that tests import the
harness as a plain module (``from harness import PytestRun``) whatever pytest's import mode."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from harness import FakeSlurm, PytestRunner, faked_slurm  # noqa: E402


@pytest.fixture(autouse=True)
def fake_slurm() -> Iterator[FakeSlurm]:
    with faked_slurm() as fake:
        yield fake
    assert not fake.unanswered, f"Slurm commands no test answered (fake_slurm.answer): {fake.unanswered}"


@pytest.fixture(scope="session")
def run_pytest(tmp_path_factory: pytest.TempPathFactory) -> PytestRunner:
    return PytestRunner(tmp_path_factory.mktemp("pytest-runs"))
