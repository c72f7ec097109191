"""perftest BW parser on real captured outputs (tests/data/perftest/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuzzing import FUZZ, assert_parse_error_at, mutations, parses_or_parse_error, truncations
from hypothesis import given
from hypothesis import strategies as st

from clusteraccept.errors import ParseError
from clusteraccept.parsers.perftest import parse

DATA = Path(__file__).parents[2] / "data" / "perftest"
FIXTURES = [p.read_text() for p in sorted(DATA.glob("*.txt"))]
RULE = "-" * 87


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_oci_roce_rdma_cm_tos41_4qps_client() -> None:
    r = parse(load("ib_write_bw-roce-oci-rdmacm-tos41-4qp.txt"))
    assert (r.test, r.verb, r.bidirectional) == ("RDMA_Write BW Test", "RDMA_Write", False)
    assert r.device == "mlx5_5" and r.link_type == "Ethernet" and r.is_roce
    assert (r.gid_index, r.mtu_B, r.num_qps, r.tos) == (3, 4096, 4, 41)
    assert r.rdma_cm is True and r.data_exchange == "rdma_cm"
    assert (r.connection, r.transport, r.tx_depth) == ("RC", "IB", 128)
    assert (r.cq_moderation, r.max_inline_B) == (100, 0)
    assert not r.use_cuda and r.cuda_device is None
    assert r.unit == "Gb/sec" and r.completed and r.errors == ()
    assert len(r.rows) == 1
    row = r.rows[0]
    assert (row.size_B, row.iterations, row.bw_peak_Gbps, row.bw_avg_Gbps) == (65536, 20000, 98.01, 98.01)
    assert row.msg_rate_Mpps == pytest.approx(0.186932)
    assert len(r.local_gids) == 4 and r.local_gids[0].endswith("255:255:10:224:04:233")
    assert r.remote_gids[3].endswith("10:224:05:57")
    assert r.setting("Dual-port") == "OFF" and r.setting("Using SRQ") == "OFF"


def test_gke_h200_use_cuda_dmabuf_all_sizes() -> None:
    r = parse(load("ib_write_bw-roce-gke-h200-cuda-dmabuf-a-gbits-dranet.txt"))
    assert r.use_cuda and r.cuda_device == 0 and r.cuda_device_name == "NVIDIA H200" and r.cuda_dmabuf
    assert r.device == "mlx5_3" and r.gid_index == 3 and r.rdma_cm is False and r.data_exchange == "Ethernet"
    assert [x.size_B for x in r.rows] == [2**k for k in range(1, 24)]
    assert r.rows[0].bw_peak_Gbps == pytest.approx(0.057240)  # 6-decimal format below 0.1 Gb/s
    big = r.row(8388608)
    assert big is not None and (big.bw_peak_Gbps, big.bw_avg_Gbps) == (140.55, 140.40)
    assert r.max_avg_Gbps() == 140.95 and r.completed


def test_gke_failed_run_keeps_rows_and_errors() -> None:
    r = parse(load("ib_write_bw-roce-gke-h200-a-gbits-failed-status10-dranet.txt"))
    assert not r.completed and len(r.rows) == 16 and r.rows[-1].size_B == 65536
    assert r.rows[-1].bw_avg_Gbps == 381.41
    assert r.errors[0] == "Completion with error at client"
    assert "Failed status 10: wr_id 0 syndrom 0x88" in r.errors
    assert r.errors[-1] == "Failed to complete run_iter_bw function successfully"


def test_rtx4080_ib_server_mib_per_sec_normalised() -> None:
    r = parse(load("ib_write_bw-ib-rtx4080-cuda-mibps-server.txt"))
    assert r.link_type == "IB" and not r.is_roce and r.gid_index is None and r.tx_depth is None
    assert r.cuda_device_name == "NVIDIA GeForce RTX 4080" and not r.cuda_dmabuf
    assert r.unit == "MiB/sec" and r.cq_moderation == 1 and r.setting("CQE Poll Batch") == "Dynamic"
    row = r.rows[0]
    # perftest format_factor: MiB = 2^20 bytes; Gb = 10^9 bits.
    assert row.bw_peak_Gbps == pytest.approx(14954.91 * 2**20 * 8 / 1e9)
    assert row.bw_avg_Gbps == pytest.approx(125.3985, abs=1e-3)


def test_dgx_cpu_frequency_warning_between_rows() -> None:
    r = parse(load("ib_write_bw-roce-dgx-cx5-rdmacm-cpufreq-warning-deepops.txt"))
    assert r.completed and len(r.rows) == 1 and r.rows[0].bw_avg_Gbps == 92.40
    assert r.rdma_cm and r.tos is None and r.cq_moderation == 1


def _doc(head: str, rows: str, tail: str = RULE) -> str:
    # Layout of ctx_print_test_info()/RESULT_FMT in perftest_parameters.{c,h}.
    return (
        f"{RULE}\n                    RDMA_Read Bidirectional BW Test\n"
        " Dual-port       : OFF\t\tDevice         : mlx5_0\n"
        " Number of qps   : 1\t\tTransport type : IB\n"
        " Mtu             : 4096[B]\n Link type       : IB\n Outstand reads  : 16\n"
        " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet\n"
        f"{RULE}\n local address: LID 0x03 QPN 0x3371a PSN 0xe5e87\n"
        f" remote address: LID 0x0a QPN 0x2aa3e PSN 0x5eab46\n{RULE}\n{head}\n{rows}\n{tail}\n"
    )


def test_read_bidirectional_old_mb_per_sec_header() -> None:
    # RESULT_FMT before perftest commit 1d202bb (2024) said MB/sec for the same 2^20-byte unit.
    r = parse(
        _doc(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
            " 65536      1000             1000.00            500.00             0.008000",
        )
    )
    assert r.verb == "RDMA_Read" and r.bidirectional and r.outstand_reads == 16 and r.max_inline_B is None
    assert r.unit == "MB/sec" and r.rows[0].bw_avg_Gbps == pytest.approx(500 * 2**20 * 8 / 1e9)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("", 0),
        ("no perftest here\n", 0),
        (f"{RULE}\n                    RDMA_Write BW Test\n Dual-port       : OFF\n", 4),  # truncated
        (f"{RULE}\n                    RDMA_Write BW Test\n garbage line here\n", 3),
        (f"{RULE}\n                    RDMA_Write Latency Test\n", 2),
        (
            f"{RULE}\n                    RDMA_Write BW Test\n Mtu             : big\n{RULE}\n"
            " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 2 5 1.0 1.0 1.0\n"
            f"{RULE}\n",
            3,
        ),
        (
            f"{RULE}\n                    RDMA_Write BW Test\n Link type       : Infiniband\n{RULE}\n"
            " #bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]\n 2 5 1.0 1.0 1.0\n"
            f"{RULE}\n",
            3,
        ),
    ],
)
def test_nonsense_raises_with_line(text: str, line: int) -> None:
    assert_parse_error_at(parse, text, line)


def test_truncated_after_rows_raises() -> None:
    text = load("ib_write_bw-roce-gke-h200-cuda-dmabuf-a-gbits-dranet.txt")
    cut = text[: text.index(" 8192       5000")]
    with pytest.raises(ParseError) as exc:
        parse(cut)
    assert exc.value.line_no == len(cut.split("\n"))


@FUZZ
@given(st.text())
def test_fuzz_random_text(text: str) -> None:
    parses_or_parse_error(parse, text)


@FUZZ
@given(truncations(FIXTURES), mutations(FIXTURES))
def test_fuzz_truncated_and_mutated_real_outputs(truncated: str, mutated: str) -> None:
    parses_or_parse_error(parse, truncated, mutated)
