"""What the unit tests stand on (their fixtures are in conftest.py): a fake Slurm, and pytest runs of
suites/ made in this process.

Slurm. The submit host's Slurm clients (sinfo, sacct, scontrol, ...; jobs/slurm_clients.py) run through
the one process seam, ``clusteraccept.hostio.run``. No unit test runs them for real: on a machine without
a cluster they fail or hang (``sinfo`` with a missing slurm.conf retries for 60 s), on one with a cluster
they would ask it. ``FakeSlurm`` stands behind the seam (as submitit's own tests mock subprocess): a test
that expects a Slurm command records its answer (``fake_slurm.answer("sinfo", ...)``); a Slurm command
nobody answered fails the test that ran it. pytest runs get the same guard in this process and, for the
processes they start (submitit's local jobs, xdist workers), executables of those names first on PATH
that log the call and fail.

pytest runs. ``PytestRunner(...)(*args)`` is ``cd <repo> && python -m pytest -q -p no:randomly
-p no:cacheprovider --basetemp=<a directory of its own> ARGS``, made in this process with ``pytest.main``
(as pytester's ``runpytest_inprocess`` does): the interpreter, pytest, the plugin and the package are
already imported and assertion-rewritten, which is most of what a new process spends. The run sees the
modules a new process would: this session's own test modules and conftests are out of sys.modules while
it runs (tests/unit/parsers/test_sharp.py is ``test_sharp``, as suites/test_sharp.py is). Whatever the run
changes outside its own config is put back afterwards: the working directory, os.environ (the plugin sets
SLURM_CONF), sys.path, sys.meta_path and sys.modules, less the library modules it imported (one copy of
each, as in any process). What a run starts is real: submitit's local jobs, and with ``-n`` the xdist
workers, are processes of their own. ``own_process=True`` makes the run itself one; so does
CLUSTERACCEPT_TEST_SUBPROCESS=1 for every run, to compare the two ways.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from clusteraccept import hostio
from clusteraccept.evidence import Evidence

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
# The Slurm clients the submit host runs (srun runs on the nodes, where a host profile may record it).
SLURM_CLIENTS = frozenset({"sacct", "sbatch", "scancel", "scontrol", "sinfo", "squeue"})
# First on PATH for the processes a pytest run starts: srun too (a local job has no allocation for it).
GUARDED_ON_PATH = (*sorted(SLURM_CLIENTS), "salloc", "srun")
SUBPROCESS_ENV = "CLUSTERACCEPT_TEST_SUBPROCESS"


@dataclass
class FakeSlurm:
    """The Slurm clients behind ``hostio.run``: recorded answers by command name; every other command
    runs as it would (``real``)."""

    real: Callable[..., Evidence]
    answers: dict[str, tuple[str, int, str]] = field(default_factory=dict)
    calls: list[tuple[tuple[str, ...], dict[str, str] | None]] = field(default_factory=list)
    unanswered: list[str] = field(default_factory=list)

    def answer(self, command: str, stdout: str = "", returncode: int = 0, stderr: str = "") -> None:
        assert command in SLURM_CLIENTS, command
        self.answers[command] = (stdout, returncode, stderr)

    def answer_idle(self, nodes: tuple[str, ...]) -> None:
        """``sinfo -N -h -o '%N|%T|%E'`` where every node is idle (the format of tests/data/sinfo)."""
        self.answer("sinfo", "".join(f"{n}|idle|none\n" for n in nodes))

    def run(
        self,
        argv: list[str] | tuple[str, ...],
        timeout_s: float,
        source: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Evidence:
        argv_t = tuple(str(a) for a in argv)
        name = Path(argv_t[0]).name
        if name not in SLURM_CLIENTS:
            return self.real(argv, timeout_s, source, env)
        self.calls.append((argv_t, env))
        stdout, returncode, stderr = self.answers.get(name, ("", 127, ""))
        if name not in self.answers:
            self.unanswered.append(shlex.join(argv_t))
            stderr = f"{name}: not run: a unit test runs no real Slurm client (answer it with fake_slurm)"
        return Evidence(
            hostio.hostname(),
            source or name,
            argv=argv_t,
            returncode=returncode,
            stdout=stdout,
            stderr=stderr,
        )


@contextlib.contextmanager
def faked_slurm() -> Iterator[FakeSlurm]:
    fake = FakeSlurm(hostio.run)
    hostio.run = fake.run  # type: ignore[assignment]
    try:
        yield fake
    finally:
        hostio.run = fake.real  # type: ignore[assignment]


@dataclass(frozen=True)
class PytestRun:
    """What a pytest run gave, named as subprocess.CompletedProcess names it."""

    returncode: int
    stdout: str
    stderr: str


class PytestRunner:
    """``runner(*args, env={NAME: value, or None to unset}, own_process=False, timeout=600)``: see the
    module docstring (``timeout``: a run in its own process only). ``root``: where the Slurm-client
    stand-ins for PATH, their call log and each run's --basetemp go."""

    def __init__(self, root: Path) -> None:
        self.root, self.runs = root, 0
        self.bin_dir, self.log = root / "bin", root / "slurm-calls.log"
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        for name in GUARDED_ON_PATH:
            exe = self.bin_dir / name
            exe.write_text(
                f'#!/bin/sh\necho "{name} $*" >> {shlex.quote(str(self.log))}\n'
                f'echo "{name}: not run: a unit test runs no real Slurm client" >&2\nexit 127\n'
            )
            exe.chmod(0o755)

    def __call__(
        self,
        *args: str,
        env: dict[str, str | None] | None = None,
        own_process: bool = False,
        timeout: int = 600,
    ) -> PytestRun:
        # --basetemp, as pytester gives its runs: a run's own numbered pytest-N directory under the system
        # temp dir would make pytest delete the oldest one there, another session's, at the run's end.
        self.runs += 1
        basetemp = self.root / f"basetemp-{self.runs}"
        argv = ["-q", "-p", "no:randomly", "-p", "no:cacheprovider", f"--basetemp={basetemp}", *args]
        env = {**(env or {}), "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.log.unlink(missing_ok=True)
        if own_process or os.environ.get(SUBPROCESS_ENV) == "1":
            result = in_subprocess(argv, env, timeout)
        else:
            with faked_slurm() as fake:
                result = in_process(argv, env)
            assert not fake.unanswered, f"a pytest run asked Slurm, unanswered: {fake.unanswered}"
        ran = self.log.read_text().splitlines() if self.log.exists() else []
        assert not ran, f"processes of a pytest run called Slurm clients (stand-ins on PATH): {ran}"
        return result


def _library(module: Any) -> bool:
    """Not a module of the checkout outside src/ (a suite, a conftest): kept after a run, one copy of each
    library module as in any process (numpy's cannot even be imported twice)."""
    path = getattr(module, "__file__", None) or ""
    ours = path.startswith(str(REPO) + os.sep) and not path.startswith(sys.prefix + os.sep)
    return not ours or path.startswith(str(SRC) + os.sep)


class _InProcess:
    """What pytester adds to the runs it makes in its process."""

    @staticmethod
    def pytest_configure(config: pytest.Config) -> None:
        # At its end a run collects garbage (unraisable exceptions) a few times: long in this big
        # process, pointless for a run that will not exit. pytester sets the same for its inline runs.
        with contextlib.suppress(ImportError):  # a private name of pytest's
            from _pytest.unraisableexception import gc_collect_iterations_key

            config.stash[gc_collect_iterations_key] = 0


def in_process(argv: list[str], env: dict[str, str | None]) -> PytestRun:
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_path, saved_meta, saved_modules = list(sys.path), list(sys.meta_path), dict(sys.modules)
    out, err = io.StringIO(), io.StringIO()
    importlib.invalidate_caches()  # as pytester does before its inline runs
    try:
        for name in [k for k, m in saved_modules.items() if not _library(m)]:
            del sys.modules[name]  # this session's test modules: the run imports its own (test_sharp)
        os.chdir(REPO)
        for k, v in env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = pytest.main(argv, plugins=[_InProcess()])
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:], sys.meta_path[:] = saved_path, saved_meta
        kept = {k: m for k, m in sys.modules.items() if k not in saved_modules and _library(m)}
        sys.modules.clear()
        sys.modules.update({**saved_modules, **kept})
    return PytestRun(int(code), out.getvalue(), err.getvalue())


def in_subprocess(argv: list[str], env: dict[str, str | None], timeout: int) -> PytestRun:
    full = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", *argv],
        capture_output=True, text=True, cwd=REPO, env=full, timeout=timeout, check=False,
    )  # fmt: skip
    return PytestRun(proc.returncode, proc.stdout, proc.stderr)
