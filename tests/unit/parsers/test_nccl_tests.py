"""nccl-tests parser on real outputs (tests/data/nccl-tests/SOURCES.md) and its launch self-checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fuzzing import FUZZ, mutations, parses_or_parse_error, splices, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.checks.nccl_launch import launch_checks
from clusteraccept.errors import ParseError
from clusteraccept.parsers import get
from clusteraccept.parsers.nccl_tests import parse
from clusteraccept.parsers.nccl_tests_result import NcclTestsResult

DATA = Path(__file__).parents[2] / "data" / "nccl-tests"
FIXTURES = [p.read_text() for p in sorted(DATA.iterdir()) if p.suffix in (".txt", ".json")]
GiB = 1 << 30


def load(name: str) -> str:
    return (DATA / name).read_text()


def failed(result: NcclTestsResult, **kw: object) -> set[str]:
    return {f.name for f in launch_checks(result, **kw) if not f.ok}  # type: ignore[arg-type]


def test_allreduce_2xh200_v2_19() -> None:
    r = parse(load("allreduce-1node-2xh200-v2.19.6.txt"))
    assert (r.collective, r.version, r.nccl_version) == ("all_reduce", "2.19.6", "2.28.9")
    assert (r.nthreads, r.ngpus, r.nranks, r.ranks_elided, r.runs) == (1, 2, 2, False, 1)
    assert r.ranks[1].rank == 1 and r.ranks[1].group == 0 and r.ranks[1].pid == 1396
    assert (r.ranks[1].host, r.ranks[1].device, r.ranks[1].bus_id, r.ranks[1].gpu_name) == (
        "vm",
        1,
        "0000:00:07",
        "NVIDIA H200",
    )
    assert r.hosts == ("vm",) and len(r.rows) == 31
    big = r.row(8 * GiB)
    assert big is not None and big.out_of_place is not None and big.in_place is not None
    assert big.out_of_place.busbw_GBps == 346.16 and big.in_place.busbw_GBps == 348.47
    assert big.out_of_place.time_us == 24815.0 and big.in_place.algbw_GBps == 348.47
    assert (big.count, big.type, big.redop, big.root) == (2147483648, "float", "sum", -1)
    assert big.out_of_place.wrong == 0 and big.out_of_place.max_error is None
    assert (
        r.rows[0].size_B == 8
        and r.rows[0].out_of_place is not None
        and r.rows[0].out_of_place.time_us == 14.61
    )
    assert r.avg_busbw_GBps == 111.696 and r.avg_busbw_verdict is None
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.failure, r.env) == (0, True, None, ())
    assert r.peak_busbw_GBps == 348.47
    assert failed(r) == set()


@pytest.mark.parametrize(
    ("name", "coll", "gib1", "avg"),
    [
        ("allgather-1node-2xh200-v2.19.6.txt", "all_gather", (269.55, 287.49), 90.6643),
        ("reducescatter-1node-2xh200-v2.19.6.txt", "reduce_scatter", (273.56, 278.06), 89.2964),
        ("alltoall-1node-2xh200-v2.19.6.txt", "alltoall", (332.65, 354.80), 103.815),
        ("sendrecv-1node-2xh200-v2.19.6.txt", "sendrecv", (361.27, 360.18), 118.055),
    ],
)
def test_other_collectives_2xh200(name: str, coll: str, gib1: tuple[float, float], avg: float) -> None:
    r = parse(load(name))
    row = r.row(GiB)
    assert r.collective == coll and r.avg_busbw_GBps == avg and len(r.rows) == 31
    assert row is not None and row.out_of_place is not None and row.in_place is not None
    assert (row.out_of_place.busbw_GBps, row.in_place.busbw_GBps) == gib1
    # alltoall and sendrecv report no in-place data check: "N/A"
    assert row.in_place.wrong == (None if coll in ("alltoall", "sendrecv") else 0)
    if coll in ("all_gather", "alltoall"):
        assert row.redop == "none" and r.rows[0].size_B == 0 and r.rows[0].count == 0


def test_a100_oci_noise_before_no_version() -> None:
    r = parse(load("allreduce-2node-a100-oci-k8s-mpijob-8B-8G.txt"))
    assert r.version is None and r.nccl_version is None and r.nranks == 16
    assert r.hosts == ("nccl-allreduce-job0-mpiworker-0", "nccl-allreduce-job0-mpiworker-1")
    assert r.ranks[8].pid == 43 and r.ranks[8].bus_id == "0x0f" and r.ranks[15].device == 7
    assert r.collective == "all_reduce"  # inferred: busbw/algbw = 2*15/16
    big = r.row(8 * GiB)
    assert big is not None and big.out_of_place is not None and big.out_of_place.busbw_GBps == 237.94
    assert big.out_of_place.time_us == 67689.0 and r.avg_busbw_GBps == 66.4834
    assert (
        failed(
            r,
            expected_hosts=["nccl-allreduce-job0-mpiworker-0", "nccl-allreduce-job0-mpiworker-1"],
            expected_nranks=16,
        )
        == set()
    )


def test_gh200_wrong_and_out_of_bounds_failed() -> None:
    r = parse(load("allreduce-2node-gh200-slingshot-wrong-failed.txt"))
    assert (r.version, r.nccl_version, r.nranks, r.hosts) == ("2.17.8", "2.29.2", 2, ("gpu-1-1", "gpu-1-7"))
    assert r.ranks[1].pid == 2448661
    row = r.row(1 << 20)
    assert row is not None and row.out_of_place is not None and row.in_place is not None
    assert (row.out_of_place.wrong, row.in_place.wrong) == (96, 32)
    assert (r.out_of_bounds, r.out_of_bounds_ok, r.avg_busbw_GBps) == (4, False, 4.79995)
    assert r.failure == ".. gpu-1-1 pid 662195: Test failure common.cu:1189" and len(r.failures) == 2
    assert failed(r) == {"completed", "no_wrong", "out_of_bounds"}


def test_single_rank_rtx5090_busbw0() -> None:
    r = parse(load("alltoall-1gpu-rtx5090-busbw0-na.txt"))
    assert r.nranks == 1 and r.collective is None and len(r.rows) == 1
    m = r.rows[0].in_place
    assert m is not None and m.algbw_GBps == 43046.10 and m.busbw_GBps == 0.0 and m.wrong is None
    assert r.avg_busbw_GBps == 0.0
    checks = {f.name: f for f in launch_checks(r)}
    assert not checks["multi_rank"].ok and "single rank" in checks["multi_rank"].message
    assert "no_single_rank_group" not in checks  # nranks 1 is reported once, by multi_rank


def test_v2_0_era_error_column_and_info_line() -> None:
    r = parse(load("allreduce-1node-4xk80-azureml-v2.0era-error-column.txt"))
    assert r.version is None and r.nranks == 4 and r.ngpus == 1 and len(r.rows) == 7
    assert r.ranks[2].group is None and r.ranks[2].pid == 198 and r.ranks[2].bus_id == "0x00"
    assert r.collective == "all_reduce"  # 2.53/1.69 = 2*3/4
    m = r.rows[-1].out_of_place
    assert r.rows[-1].size_B == 2 * GiB and r.rows[-1].redop == "sum" and r.rows[-1].root is None
    assert m is not None and m.time_us == 1258554 and m.busbw_GBps == 2.56
    assert m.wrong is None and m.max_error == 2e-07
    assert r.avg_busbw_GBps == 2.54225 and r.out_of_bounds == 0


def test_v2_0_era_all_gather_without_redop() -> None:
    r = parse(load("allgather-synthetic-v2.0era-no-redop.txt"))
    assert [x.size_B for x in r.rows] == [1 << 20, 2 << 20, 4 << 20]
    assert r.rows[0].redop is None and r.rows[0].root is None and r.rows[0].count == 131072
    assert r.collective is None  # all_gather or alltoall: the columns cannot tell
    ip = r.rows[2].in_place
    assert ip is not None and ip.busbw_GBps == 21.96 and ip.max_error == 0.0


def test_captured_json_matches_text() -> None:
    text = parse(load("allreduce-1node-2xh200-g2-8B-128M-v2.19.6.txt"))
    js = parse(load("allreduce-1node-2xh200-g2-8B-128M-v2.19.6.json"))
    assert js.source_format == "json" and js.collective == "all_reduce" and js.nccl_version == "2.28.9"
    assert (js.nthreads, js.ngpus, js.nranks) == (1, 2, 2)
    assert len(js.ranks) == 1 and js.ranks_elided  # one device entry per process
    assert js.ranks[0].bus_id == "0000:00:06" and js.ranks[0].host == "vm"
    assert len(js.rows) == len(text.rows) == 13
    for a, b in zip(js.rows, text.rows, strict=True):
        assert (a.size_B, a.count, a.type, a.redop, a.root) == (b.size_B, b.count, b.type, b.redop, b.root)
        for x, y in ((a.out_of_place, b.out_of_place), (a.in_place, b.in_place)):
            assert x is not None and y is not None
            assert abs(x.busbw_GBps - y.busbw_GBps) <= 0.005 and x.wrong == y.wrong == 0
    assert js.avg_busbw_GBps == pytest.approx(text.avg_busbw_GBps, abs=1e-3)
    assert js.out_of_bounds == 0 and js.out_of_bounds_ok and js.avg_busbw_verdict is None
    assert dict(js.env)["NCCL_NVLS_ENABLE"] == "0"


def test_captured_mpi_json_lists_both_processes() -> None:
    js = parse(load("allreduce-1node-2xh200-mpi-np2-v2.19.6.json"))
    assert js.nranks == 2 and not js.ranks_elided and [r.pid for r in js.ranks] == [1408, 1409]
    row = js.row(64 << 20)
    assert row is not None and row.out_of_place is not None
    assert row.out_of_place.busbw_GBps == pytest.approx(270.359415)
    text = parse(load("allreduce-1node-2xh200-mpi-np2-v2.19.6.txt"))  # "# Writing JSON output to" first
    assert text.nranks == 2 and text.avg_busbw_GBps == 169.603 and len(text.rows) == 4


def test_json_env_is_redacted_and_kept_as_pairs() -> None:
    doc = json.loads(load("allreduce-1node-2xh200-mpi-np2-v2.19.6.json"))
    doc["env"] += ["HF_TOKEN=hf_abc", "EMPTY="]
    env = dict(parse(json.dumps(doc)).env)
    assert env["HF_TOKEN"] == "<redacted>" and env["EMPTY"] == "" and env["PATH"] == "/usr/bin:/bin"


def test_json_errors_and_nan() -> None:
    doc = json.loads(load("allreduce-1node-2xh200-g2-8B-128M-v2.19.6.json"))
    doc["errors"] = ["unhandled cuda error"]
    doc["results"][0]["out_of_place"]["bus_bw"] = "nan"
    doc["results"][0]["in_place"]["nwrong"] = None
    r = parse(json.dumps(doc))
    assert r.failure == "unhandled cuda error"
    m = r.rows[0].out_of_place
    assert m is not None and m.busbw_GBps != m.busbw_GBps and r.rows[0].in_place is not None
    assert r.rows[0].in_place.wrong is None


def test_failure_without_table() -> None:
    r = parse(load("allreduce-1node-2xh200-g3-invalid-gpus-fail-v2.19.6.txt"))
    assert r.ngpus == 3 and r.rows == () and r.ranks == () and r.nranks is None
    assert r.failure == ".. vm pid 1187: Test failure common.cu:1454"
    # it failed before it listed a rank: the failure is said once, not echoed as rank and bound checks
    assert failed(r, returncode=5) == {"exit_code", "completed"}


def test_cuda_nccl_failures_and_error_footer() -> None:
    base = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    text = "\n".join(
        [
            *base[:14],
            "vm: Test CUDA failure common.cu:891 'out of memory'",
            " .. vm pid 1396: Test failure common.cu:1454",
        ]
    )
    r = parse(text)
    assert r.failure == "vm: Test CUDA failure common.cu:891 'out of memory'" and len(r.rows) == 3
    assert r.out_of_bounds is None
    # A failure printed in the middle of a row (the preamble is already out) is a failure, not a row.
    r = parse(
        "\n".join([*base[:12], base[12][:60] + "vm: Test NCCL failure common.cu:1009 'internal error'"])
    )
    assert r.failure is not None and "Test NCCL failure" in r.failure and len(r.rows) == 1
    r = parse("\n".join([*base, "# error: NCCL WARN Cuda failure 'out of memory'"]))
    assert r.failure == "error: NCCL WARN Cuda failure 'out of memory'"


def test_nccl_info_noise_and_version_line() -> None:
    r = parse(load("allreduce-1node-2xh200-nccl-debug-info-v2.19.6.txt"))
    assert len(r.rows) == 3 and r.avg_busbw_GBps == 0.0100319 and r.nccl_version == "2.28.9"
    text = load("allreduce-2node-a100-oci-k8s-mpijob-8B-8G.txt").replace(
        "#\n#    ", "NCCL version 2.18.5+cuda12.2\nnode1:1:1 [0] NCCL INFO Using network IB\n#\n#    ", 1
    )
    assert parse(text).nccl_version == "2.18.5"


def test_per_iteration_and_timestamp_columns() -> None:
    r = parse(load("allreduce-1node-2xh200-periter-timestamps-v2.19.6.txt"))
    assert len(r.rows) == 3 and r.avg_busbw_GBps == 70.4666
    a, b = r.rows[0].out_of_place, r.rows[0].in_place
    assert (
        a is not None
        and b is not None
        and (a.time_us, a.busbw_GBps, b.time_us, b.busbw_GBps) == (31.37, 33.42, 29.66, 35.36)
    )


def test_split_mod2_group_of_one_rank_is_refused() -> None:
    r = parse(load("sendrecv-1node-2xh200-mpi-split-mod2-v2.19.6.txt"))
    assert [x.group for x in r.ranks] == [0, 1] and r.nranks == 2
    checks = {f.name: f for f in launch_checks(r)}
    assert not checks["no_single_rank_group"].ok and "[0, 1]" in checks["no_single_rank_group"].message


def test_stripped_hash_and_launcher_prefixes() -> None:
    ref = parse(load("allreduce-1node-2xh200-v2.19.6.txt"))
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    assert parse("\n".join(re.sub(r"^#", "", s) for s in lines)) == ref
    assert parse("\n".join(f"0: {s}" for s in lines)) == ref  # srun --label
    assert parse("\n".join(f"[1,0]<stdout>:{s}" for s in lines)) == ref  # mpirun --tag-output
    assert parse("\r\n".join(s.replace(" ", "\t", 1) + "  " for s in lines)).rows == ref.rows


def test_elided_rank_lists() -> None:
    lines = load("allreduce-2node-a100-oci-k8s-mpijob-8B-8G.txt").splitlines()
    cut = [*lines[:8], "#  ...", *lines[21:]]  # ranks 0..1 and 15 kept
    r = parse("\n".join(cut))
    assert r.nranks == 16 and r.ranks_elided and [x.rank for x in r.ranks] == [0, 1, 15]
    assert r.hosts == ("nccl-allreduce-job0-mpiworker-0", "nccl-allreduce-job0-mpiworker-1")
    assert (
        failed(
            r,
            expected_hosts=[
                "nccl-allreduce-job0-mpiworker-0.cluster.local",
                "nccl-allreduce-job0-mpiworker-1",
            ],
        )
        == set()
    )
    lines[10] = lines[10][:40] + "..."  # a device report cut at MAX_LINE
    assert parse("\n".join(lines)).ranks_elided


def test_two_independent_runs_in_one_output() -> None:
    one = load("alltoall-1gpu-rtx5090-busbw0-na.txt")
    r = parse(one + one)
    assert r.runs == 2 and len(r.rows) == 1
    assert "separate runs" in {f.name: f for f in launch_checks(r, mpi="pmix")}["multi_rank"].message
    # launched without a PMI: the singletons of an MPI build, and what to set
    assert "2 singleton processes" in {f.name: f for f in launch_checks(r)}["multi_rank"].message


def test_launch_checks_ceiling_hosts_nranks_returncode() -> None:
    r = parse(load("allreduce-1node-2xh200-v2.19.6.txt"))
    assert failed(r, ceiling_GBps=478.0, expected_hosts=["vm.example.org"], expected_nranks=2) == set()
    assert failed(r, ceiling_GBps=300.0) == {"busbw_ceiling"}
    assert failed(r, expected_hosts=["node1", "vm"]) == {"hosts"}
    assert failed(r, expected_nranks=16, returncode=1) == {"nranks", "exit_code"}
    msg = {f.name: f.message for f in launch_checks(r, ceiling_GBps=300.0)}["busbw_ceiling"]
    assert msg == "busbw 348.47 GB/s is above the physical ceiling 300.00 GB/s"


def test_registered_tool() -> None:
    assert get("nccl-tests") is parse


@pytest.mark.parametrize(
    "text",
    ["", "hello\nworld\n", "{}", "[1, 2]", '{"results": [1]}', '{"results": [{"size": "x"}]}', "{not json"],
)
def test_garbage_raises_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        parse(text)


def test_bad_row_names_its_line() -> None:
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    lines[20] = lines[20].rsplit(None, 2)[0]
    with pytest.raises(ParseError) as err:
        parse("\n".join(lines))
    assert err.value.line_no == 21 and "13 columns" in err.value.expected
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    lines[15] = lines[15].replace("float", "float x", 1)
    with pytest.raises(ParseError) as err:
        parse("\n".join(lines))
    assert err.value.line_no == 16


@FUZZ
@given(st.text(max_size=400))
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(
    truncations(FIXTURES),
    mutations(FIXTURES, max_cut=1, insert=st.text(max_size=8)),
    splices(FIXTURES),
)
def test_fuzz_mutated_fixtures(truncated: str, mutated: str, spliced: str) -> None:
    parses_or_parse_error(parse, truncated, mutated, spliced)


@pytest.mark.parametrize("tok", ["inf", "nan", "-3", "1.5", "x"])
def test_bad_wrong_counts(tok: str) -> None:
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    lines[14] = lines[14].rsplit(None, 1)[0] + "  " + tok
    with pytest.raises(ParseError) as err:
        parse("\n".join(lines))
    assert err.value.line_no == 15


def test_large_wrong_count_in_g_format() -> None:
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    lines[14] = lines[14].rsplit(None, 1)[0] + "  1.2e+06"
    row = parse("\n".join(lines)).rows[3]
    assert row.in_place is not None and row.in_place.wrong == 1200000


@pytest.mark.parametrize("value", ["abc", float("inf"), "9" * 5000, True, [1]])
def test_json_bad_numbers(value: object) -> None:
    doc = json.loads(load("allreduce-1node-2xh200-g2-8B-128M-v2.19.6.json"))
    doc["results"][0]["out_of_place"]["nwrong"] = value
    with pytest.raises(ParseError):
        parse(json.dumps(doc))


def test_collective_from_an_echoed_command_line() -> None:
    text = load("allgather-synthetic-v2.0era-no-redop.txt")
    assert parse(text).collective is None
    echoed = "Running: CUDA_VISIBLE_DEVICES=0,1 ./build/all_gather_perf -b 1M -e 4M -f 2 -g 2\n" + text
    assert parse(echoed).collective == "all_gather"


def test_rank_line_cut_mid_word_marks_the_list_elided() -> None:
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    lines[6] = lines[6][:30] + "..."
    r = parse("\n".join(lines))
    assert r.ranks_elided and [x.rank for x in r.ranks] == [0] and r.nranks == 2


def test_an_info_line_glued_to_a_result_row_is_not_taken_for_an_info_line() -> None:
    """An unbuffered launcher can glue NCCL's INFO line to a row: the row must not vanish silently (the
    INFO-line fast path takes whole INFO lines only)."""
    lines = load("allreduce-1node-2xh200-nccl-debug-info-v2.19.6.txt").splitlines()
    last = max(i for i, ln in enumerate(lines) if re.match(r"\s*\d+\s+\d+\s", ln))
    assert len(parse("\n".join(lines)).rows) > 1
    lines[last] += "vm:1396:1400 [0] NCCL INFO comm 0x55 rank 0 nranks 2 - Init COMPLETE"
    with pytest.raises(ParseError):
        parse("\n".join(lines))


def test_a_step_that_failed_at_init_still_convicts_its_pair_when_no_gating_finding_explains_it() -> None:
    """A run that failed before listing a rank says so once; with no launch, NIC or transport finding to name
    the cause, its pair row still counts as slow (localization finds a node that fails with everyone)."""
    from clusteraccept.checks.nccl import judge_step
    from clusteraccept.evidence import Evidence
    from clusteraccept.render import REPO_ROOT
    from clusteraccept.site.load import load_site

    s = load_site("demo", REPO_ROOT / "site-configs")
    a, b = s.nodes[0], s.nodes[1]
    meta = {"kind": "pair", "scope": "pair_in_block", "collective": "sendrecv", "nodes": f"{a},{b}"}
    meta.update(rail="0", subject=f"{a}-{b}:rail0", check="nccl")
    text = load("allreduce-1node-2xh200-g3-invalid-gpus-fail-v2.19.6.txt")
    ev = Evidence(a, "nccl-tests", argv=("sendrecv_perf",), returncode=5, stdout=text, meta=meta)
    verdicts, rows, _ = judge_step(s, ev, "raw/x#nccl/a/step.json")
    launch = next(v for v in verdicts if v.check == "nccl.launch")
    assert launch.message == "exit code 5; failed: .. vm pid 1187: Test failure common.cu:1454"
    assert [r["failed"] for r in rows] == ["fail"] and rows[0]["slow"] is True


def test_output_of_nothing_but_nccls_own_lines_ending_in_a_warn_is_a_failed_run() -> None:
    """A process that died in NCCL's init before nccl-tests' buffered stdout was flushed leaves only NCCL's
    lines (NCCL flushes each): the first WARN is the failure, whatever its location's form (NCCL's
    file:line, a plugin's __PRETTY_FUNCTION__:line) or a launcher's prefix; nothing at all is refused."""
    ib = "n1:9:9 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    ib += "n1:9:9 [0] net.cc:626 NCCL WARN Error: network X not found.\n"
    assert parse(ib).failure == "NCCL WARN Error: network X not found."
    tagged = (
        "0: n1:9:9 [0] tcpxResult_t tcpxInit(tcpxDebugLogger_t):675 NCCL WARN NET/GPUDirectTCPX register x\n"
    )
    assert parse(tagged).failure == "NCCL WARN NET/GPUDirectTCPX register x"
    with pytest.raises(ParseError):
        parse("n1:9:9 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\nsomething else\n")


@pytest.mark.parametrize(
    "glued",
    [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 111.696",
        "# Collective test concluded: all_reduce_perf",
    ],
)
def test_a_footer_glued_to_the_last_result_row_is_an_error_not_a_row_lost(glued: str) -> None:
    """A result row is read before the table's other rules: the footer glued to it by an unbuffered
    launcher no longer takes the row's place (it was dropped silently: one size fewer judged)."""
    lines = load("allreduce-1node-2xh200-v2.19.6.txt").splitlines()
    last = max(i for i, ln in enumerate(lines) if re.match(r"\s*\d+\s+\d+\s", ln))
    lines[last] += glued
    with pytest.raises(ParseError) as err:
        parse("\n".join(lines))
    assert err.value.line_no == last + 1 and "a result row of" in err.value.expected
