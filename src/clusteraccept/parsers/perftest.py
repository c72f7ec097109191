"""perftest bandwidth tests (``ib_write_bw``, ``ib_read_bw``, ``ib_send_bw``): settings and results.

Output layout, from linux-rdma/perftest (src/perftest_parameters.c ``ctx_print_test_info()``,
``print_full_bw_report()``; src/perftest_parameters.h RESULT_LINE/RESULT_FMT*/REPORT_FMT*;
src/cuda_memory.c ``init_gpu()``/``cuda_memory_init()``)::

    initializing CUDA                                   (--use_cuda only, before the header)
    Picking device No. 0                                ("Picking GPU number N" with --use_cuda_bus_id;
    [pid = 29, dev = 0] device name = [NVIDIA H200]      "There are 4 devices supporting CUDA,
    using DMA-BUF for GPU buffer address at ...           picking first..." in 2018 versions)
    ---------------------------------------------------------------------------------------
                        RDMA_Write BW Test              (testsStr + [Bidirectional] [Post List] BW)
     Dual-port       : OFF\t\tDevice         : mlx5_5   (two "key : value" pairs per line at most)
     Number of qps   : 4\t\tTransport type : IB
     Mtu             : 4096[B]
     Link type       : Ethernet                         (link_layer_str: "IB" | "Ethernet")
     GID index       : 3                                (only when -x was given)
     Max inline data : 0[B]                             ("Outstand reads" for RDMA_Read)
     rdma_cm QPs\t : ON
     Data ex. method : rdma_cm \tTOS    : 41            ("Ethernet" = TCP socket exchange)
    ---------------------------------------------------------------------------------------
     local address: LID 0000 QPN 0x0093 PSN 0xbf9bfe    (one per QP, then the remote side)
     GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:224:04:233
    ---------------------------------------------------------------------------------------
     #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
     65536      20000            98.01              98.01  \t\t   0.186932
    ---------------------------------------------------------------------------------------

Units: "Gb/sec" (--report_gbits, 10^9 bit/s), "MiB/sec" (default since 2024) or "MB/sec" (older
default, the same 2^20-byte unit: ``format_factor`` is 0x100000 for both). All bandwidths are
normalised to Gb/s here. A run that fails prints error lines instead of (or after some) rows and no
closing line; it parses with ``completed=False`` and the lines in ``errors``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError

_RULE = re.compile(r"-{20,}")
_TITLE = re.compile(r"(Send_imm|Send|RDMA_Write_imm|RDMA_Write|RDMA_Read|Atomic)\b(.*)\bTest")
_PAIR = re.compile(r"([A-Za-z][A-Za-z0-9_.*\-]*(?: [A-Za-z0-9_.*\-]+)*)\s*:\s*(\S+)")
_RESULT_HEAD = re.compile(
    r"#bytes\s+(#sl\s+)?#iterations\s+BW peak\[(Gb/sec|MiB/sec|MB/sec)\]\s+BW average\[\2\]"
    r"\s+MsgRate\[Mpps\](.*)"
)
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
# "#bytes #iterations peak average msgrate", then per-port or CPU_Util columns (ignored); with --raw_qos
# a "#sl" column follows #bytes.
_ROW = re.compile(rf"([0-9]+)\s+([0-9]+)\s+{_NUM}\s+{_NUM}\s+{_NUM}(?:\s+{_NUM})*")
_ROW_QOS = re.compile(rf"([0-9]+)\s+[0-9]+\s+([0-9]+)\s+{_NUM}\s+{_NUM}\s+{_NUM}")
_ADDRESS = re.compile(r"(local|remote) address:.*")
_GID = re.compile(r"GID:\s*(\S+)")
# Messages ctx_print_test_info() prints inside the settings block without a "key : value" shape.
_SETTINGS_TEXT = (
    "WARNING",
    "Test with events",
    "MultiCast runs on UD",
    "Waiting for client",
    "Please run the same command",
)
# get_cpu_mhz() warnings perftest prints between result lines; they do not end the table.
_ROW_NOISE = ("Conflicting CPU frequency values detected", "WARNING")
_CUDA_DEVICE = re.compile(r"Picking (?:device No\.|GPU number) ([0-9]+)")
_CUDA_FIRST = re.compile(r"There are [0-9]+ devices supporting CUDA, picking first")
_CUDA_NAME = re.compile(r"\[pid = [0-9]+, dev = [0-9]+\] device name = \[(.*)\]")
_MIB_TO_GBIT = 1048576 * 8 / 1e9


@dataclass(frozen=True)
class BwRow:
    """One result row; bandwidths in Gb/s whatever unit perftest printed."""

    size_B: int
    iterations: int
    bw_peak_Gbps: float
    bw_avg_Gbps: float
    msg_rate_Mpps: float


@dataclass(frozen=True)
class PerftestBw:
    """One side (client or server) of a perftest BW run. None: the tool did not print the field."""

    test: str  # title as printed: "RDMA_Write BW Test"
    verb: str  # "RDMA_Write" | "RDMA_Read" | "Send" | ...
    bidirectional: bool  # -b
    device: str | None  # "mlx5_5"
    link_type: str | None  # "IB" | "Ethernet" (RoCE)
    gid_index: int | None  # printed only when -x was given
    mtu_B: int | None
    num_qps: int | None  # -q
    connection: str | None  # "RC" | "UC" | "UD" | ...
    transport: str | None  # "IB" (verbs transport type, also on RoCE)
    tx_depth: int | None  # client / duplex only
    cq_moderation: int | None
    max_inline_B: int | None  # write/send tests
    outstand_reads: int | None  # read tests
    rdma_cm: bool | None  # "rdma_cm QPs : ON" (-R)
    data_exchange: str | None  # "rdma_cm" | "Ethernet" (TCP socket)
    tos: int | None  # -T, printed with rdma_cm only
    use_cuda: bool  # CUDA init lines seen (--use_cuda / --use_cuda_bus_id)
    cuda_device: int | None  # "Picking device No. N"
    cuda_device_name: str | None  # "NVIDIA H200"
    cuda_dmabuf: bool  # --use_cuda_dmabuf ("using DMA-BUF for GPU buffer")
    unit: str | None  # unit printed in the result header: "Gb/sec" | "MiB/sec" | "MB/sec"
    rows: tuple[BwRow, ...]
    completed: bool  # result rows followed by the closing dashed line, no error lines
    errors: tuple[str, ...]  # lines where rows or the closing line were expected
    local_gids: tuple[str, ...]  # GID of each local QP (RoCE / GRH), as printed
    remote_gids: tuple[str, ...]
    settings: tuple[tuple[str, str], ...]  # every "key : value" of the settings block, as printed

    @property
    def is_roce(self) -> bool:
        return self.link_type == "Ethernet"

    def row(self, size_B: int) -> BwRow | None:
        """The row for one message size (-a runs have one per power of two)."""
        return next((r for r in self.rows if r.size_B == size_B), None)

    def max_avg_Gbps(self) -> float | None:
        """Highest average bandwidth over all rows (None without rows)."""
        return max((r.bw_avg_Gbps for r in self.rows), default=None)

    def setting(self, key: str) -> str | None:
        return next((v for k, v in self.settings if k == key), None)


def _int(value: str | None, key: str, no: int) -> int | None:
    if value is None:
        return None
    m = re.fullmatch(r"([0-9]+)(?:\[B\])?", value)
    if m is None:
        raise ParseError(no, f"a number after '{key} :'", value)
    return int(m.group(1))


def _onoff(value: str | None, key: str, no: int) -> bool | None:
    if value is None:
        return None
    if value not in ("ON", "OFF"):
        raise ParseError(no, f"ON or OFF after '{key} :'", value)
    return value == "ON"


def parse(text: str) -> PerftestBw:
    """Parse one side's output of a perftest BW test (stdout, or stdout and stderr together)."""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    cuda = {"use": False, "dmabuf": False}
    cuda_device: int | None = None
    cuda_name: str | None = None
    title: tuple[str, str, str, int] | None = None
    settings: list[tuple[str, str, int]] = []
    gids: dict[str, list[str]] = {"local": [], "remote": []}
    side = "local"
    head: re.Match[str] | None = None
    rows: list[BwRow] = []
    errors: list[str] = []
    qos, unit_factor = False, 1.0
    state = "pre"  # pre -> settings -> exchange -> rows -> done
    for no, raw in enumerate(lines, start=1):
        s = raw.strip()
        if s == "initializing CUDA":
            cuda["use"] = True
        if s.startswith("using DMA-BUF for GPU buffer"):
            cuda["dmabuf"] = True
        if (m := _CUDA_DEVICE.fullmatch(s)) is not None:
            cuda_device = int(m.group(1))
        elif _CUDA_FIRST.match(s):
            cuda_device = 0
        if (m := _CUDA_NAME.fullmatch(s)) is not None:
            cuda_name = m.group(1)
        if state == "pre":
            if (m := _TITLE.fullmatch(s)) is not None:
                if "BW" not in m.group(2).split():
                    raise ParseError(no, "a bandwidth test title ('... BW Test')", s)
                title = (s, m.group(1), m.group(2), no)
                state = "settings"
        elif state == "settings":
            if _RULE.fullmatch(s):
                state = "exchange"
            elif s and not s.startswith(_SETTINGS_TEXT):
                pairs = _PAIR.findall(s)
                # Everything on the line must be consumed by the pairs (no stray words).
                if not pairs or _PAIR.sub("", s).strip():
                    raise ParseError(no, "'key : value' settings lines", s)
                settings.extend((k, v, no) for k, v in pairs)
        elif state == "exchange":
            if (m := _RESULT_HEAD.fullmatch(s)) is not None:
                head, state = m, "rows"
                qos = m.group(1) is not None
                unit_factor = 1.0 if m.group(2) == "Gb/sec" else _MIB_TO_GBIT
            elif (m := _ADDRESS.fullmatch(s)) is not None:
                side = m.group(1)
            elif (m := _GID.fullmatch(s)) is not None:
                gids[side].append(m.group(1))
            elif (pairs := _PAIR.findall(s)) and not _PAIR.sub("", s).strip():
                settings.extend((k, v, no) for k, v in pairs)  # " NUMA node : 0" after rdma_cm wait
            elif s and not _RULE.fullmatch(s) and not s.startswith(_SETTINGS_TEXT):
                errors.append(s)
        elif state == "rows":
            if _RULE.fullmatch(s):
                state = "done"
            elif (m := (_ROW_QOS if qos else _ROW).fullmatch(s)) is not None and not errors:
                rows.append(_row(m, unit_factor))
            elif s and not s.startswith(_ROW_NOISE):
                errors.append(s)
    if title is None:
        raise ParseError(0, "a perftest title line like 'RDMA_Write BW Test'", text[:80])
    if state == "done" and not rows:
        raise ParseError(len(lines), "result rows under the result header", "none")
    if state == "settings" or (state in ("exchange", "rows") and not errors):
        want = {
            "settings": "the dashed line ending the settings",
            "exchange": "the result header '#bytes #iterations BW peak[...] ...'",
            "rows": "result rows and the closing dashed line",
        }[state]
        raise ParseError(len(lines), want, "end of input")
    return _build(
        title,
        settings,
        head,
        rows,
        errors,
        state == "done" and not errors,
        gids,
        cuda,
        cuda_device,
        cuda_name,
    )


def _row(m: re.Match[str], factor: float) -> BwRow:
    return BwRow(
        size_B=int(m.group(1)),
        iterations=int(m.group(2)),
        bw_peak_Gbps=float(m.group(3)) * factor,
        bw_avg_Gbps=float(m.group(4)) * factor,
        msg_rate_Mpps=float(m.group(5)),
    )


def _build(
    title: tuple[str, str, str, int],
    settings: list[tuple[str, str, int]],
    head: re.Match[str] | None,
    rows: list[BwRow],
    errors: list[str],
    completed: bool,
    gids: dict[str, list[str]],
    cuda: dict[str, bool],
    cuda_device: int | None,
    cuda_name: str | None,
) -> PerftestBw:
    got: dict[str, tuple[str, int]] = {}
    for k, v, no in settings:
        got.setdefault(k, (v, no))

    def val(key: str) -> str | None:
        return got[key][0] if key in got else None

    def num(key: str) -> int | None:
        return _int(val(key), key, got[key][1]) if key in got else None

    link = val("Link type")
    if link is not None and link not in ("IB", "Ethernet", "Unknown"):
        raise ParseError(got["Link type"][1], "Link type IB, Ethernet or Unknown", link)
    return PerftestBw(
        test=title[0],
        verb=title[1],
        bidirectional="Bidirectional" in title[2].split(),
        device=val("Device"),
        link_type=link,
        gid_index=num("GID index"),
        mtu_B=num("Mtu"),
        num_qps=num("Number of qps"),
        connection=val("Connection type"),
        transport=val("Transport type"),
        tx_depth=num("TX depth"),
        cq_moderation=num("CQ Moderation"),
        max_inline_B=num("Max inline data"),
        outstand_reads=num("Outstand reads"),
        rdma_cm=_onoff(val("rdma_cm QPs"), "rdma_cm QPs", got["rdma_cm QPs"][1])
        if "rdma_cm QPs" in got
        else None,
        data_exchange=val("Data ex. method"),
        tos=num("TOS"),
        use_cuda=cuda["use"] or cuda_device is not None,
        cuda_device=cuda_device,
        cuda_device_name=cuda_name,
        cuda_dmabuf=cuda["dmabuf"],
        unit=head.group(2) if head else None,
        rows=tuple(rows),
        completed=completed,
        errors=tuple(errors),
        local_gids=tuple(gids["local"]),
        remote_gids=tuple(gids["remote"]),
        settings=tuple((k, v) for k, v, _ in settings),
    )
