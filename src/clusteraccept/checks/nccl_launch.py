"""Launch self-checks of an nccl-tests run (judged as ``nccl.launch`` by :mod:`clusteraccept.checks.nccl`).

Before a busbw number is judged, the run must have measured what was meant: more than one rank (a binary
built without MPI, launched as N tasks, runs N independent 1-rank tests with busbw 0), no group of a single
rank (NCCL_TESTS_SPLIT), no impossible busbw, the intended hosts, no #wrong, exit code 0, out of bounds OK.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clusteraccept.parsers.nccl_tests_result import NcclTestsResult


@dataclass(frozen=True)
class LaunchFinding:
    name: str
    ok: bool
    message: str


def launch_checks(
    result: NcclTestsResult,
    *,
    expected_hosts: tuple[str, ...] | list[str] | None = None,
    expected_nranks: int | None = None,
    ceiling_GBps: float | None = None,
    returncode: int = 0,
    mpi: str | None = None,
) -> tuple[LaunchFinding, ...]:
    """Self-checks of an nccl-tests launch: did it measure what was meant, before judging numbers.

    ``mpi``: the ``--mpi=`` the step was launched with (the site's slurm.mpi), None where none was given."""
    out: list[LaunchFinding] = []

    def check(name: str, ok: bool, bad: str, good: str) -> None:
        out.append(LaunchFinding(name, ok, good if ok else bad))

    check("exit_code", returncode == 0, f"exit code {returncode}", "exit code 0")
    check(
        "completed",
        result.failure is None and bool(result.rows),
        f"failed: {result.failure}" if result.failure else "no result rows",
        f"{len(result.rows)} rows",
    )
    if result.failure is not None and not result.ranks and not result.rows:
        return tuple(out)  # it failed before it listed a rank (at init): the checks below would only echo it
    n = result.nranks
    check(
        "multi_rank",
        n is not None and n > 1 and result.runs == 1,
        _separate_runs(result.runs, expected_nranks, mpi)
        if result.runs > 1
        else f"nranks={n}: a single rank measures no communication (busbw 0)",
        f"nranks={n}",
    )
    if expected_nranks is not None:
        check("nranks", n == expected_nranks, f"nranks={n}, expected {expected_nranks}", f"nranks={n}")
    groups: dict[int, int] = {}
    for r in result.ranks:
        if r.group is not None:
            groups[r.group] = groups.get(r.group, 0) + 1
    lonely = sorted(g for g, k in groups.items() if k == 1)
    if groups and not result.ranks_elided and n is not None and n > 1:
        # NCCL_TESTS_SPLIT / NCCL_TESTS_SPLIT_MASK (src/common.cu run()) split ranks into groups; a group
        # of one rank copies to itself and reports impossible bandwidth.
        check(
            "no_single_rank_group",
            not lonely,
            f"group(s) {lonely} hold a single rank (NCCL_TESTS_SPLIT?): its busbw is a local copy",
            f"{len(groups)} group(s), none of a single rank",
        )
    if ceiling_GBps is not None and result.rows:
        peak = result.peak_busbw_GBps or 0.0
        check(
            "busbw_ceiling",
            peak <= ceiling_GBps,
            f"busbw {peak:.2f} GB/s is above the physical ceiling {ceiling_GBps:.2f} GB/s",
            f"peak busbw {peak:.2f} <= {ceiling_GBps:.2f} GB/s",
        )
    if expected_hosts is not None:
        want = {h.split(".", 1)[0] for h in expected_hosts}  # nccl-tests prints the name up to the first '.'
        got = set(result.hosts)
        stray, missing = sorted(got - want), sorted(want - got)
        if result.ranks_elided:
            missing = []  # the hosts of elided ranks are unknown
        check(
            "hosts",
            bool(got) and not stray and not missing,
            f"ranks on {sorted(got)}; unexpected {stray}, missing {missing}",
            f"ranks on {sorted(got)}",
        )
    wrong = [
        (r.size_B, m.wrong)
        for r in result.rows
        for m in (r.out_of_place, r.in_place)
        if m is not None and m.wrong
    ]
    check("no_wrong", not wrong, f"#wrong > 0 at (size_B, #wrong) {wrong[:4]}", "#wrong 0 everywhere")
    check(
        "out_of_bounds",
        result.out_of_bounds_ok is True,
        "no 'Out of bounds values' line (the run did not finish)"
        if result.out_of_bounds is None
        else f"Out of bounds values: {result.out_of_bounds} FAILED",
        "Out of bounds values: 0 OK",
    )
    return tuple(out)


def _separate_runs(runs: int, expected: int | None, mpi: str | None) -> str:
    """Why N tasks printed N runs of their own, by how they were launched.

    An MPI build started by srun without a PMI (no --mpi and MpiDefault=none, or --mpi=none) finds no
    process manager, so MPI_Init makes each process a singleton: N one-rank runs, busbw 0 (seen on the
    24.11 virtual cluster: docs/vcluster.md). With a PMI given, the same output means the binary has no
    MPI at all (built with MPI=0; nccl-tests README: build with MPI=1 for multi-process runs).
    """
    job = f"one {expected}-rank job" if expected else "one job"
    if mpi == "none":
        return (
            f"srun --mpi=none started {runs} singleton processes instead of {job}: set slurm.mpi "
            "(see `srun --mpi=list`)"
        )
    if mpi is None:  # the cluster's MpiDefault chose; the site does not say which
        return (
            f"srun started {runs} singleton processes instead of {job}: set slurm.mpi (see `srun "
            "--mpi=list`); if the cluster's MpiDefault already names a PMI, nccl-tests was built without MPI"
        )
    return (
        f"{runs} separate runs in one output with --mpi={mpi}: each task ran alone (nccl-tests built "
        f"without MPI, or an MPI that does not speak {mpi}?)"
    )
