"""Parser for SHARP evidence: ``sharp_hello`` output and the SHARP / CollNet lines of an NCCL_DEBUG=INFO log.

One ``parse(text)`` takes either (or both concatenated). Sources of the strings matched:

sharp_hello (NVIDIA SHARP docs "Testing NVIDIA SHARP Setup": "sharp_hello test utility ... creates a single
SHARP job and sends a barrier request"): libsharp_coll log lines
``[host:rank:pid - file.c:line][date time] LEVEL message`` (older SHARP: no ``[date time]``, e.g.
``[thor001:0:15042 - context.c:581] INFO job ...``), smx lines
``[host][date][GENERAL][tid][warn ] - message``, and the final ``Test Passed.`` (NVIDIA/nccl-tests#311).
sharp_hello's source is not public: a run without ``Test Passed.`` counts as failed, and the reason is
taken from the libsharp ERROR lines, e.g.
``ERROR SHArP Job init error: No resource`` -> "No resource" (NVIDIA/nccl-tests#311, NVIDIA/nccl#1460).

NCCL core (github.com/NVIDIA/nccl, HEAD 5067397c and tags v2.6-v2.28):
  "NET/Plugin: Loaded collnet plugin %s (v%d)" (src/plugin/net/net_v*.cc), older
  "NET/Plugin: Loaded coll plugin %s (v%d)" (src/net.cc, 2.16-2.19)
  "CollNet %02d/%1d : %d [send|receive] via COLLNET/%s/%d%s%s" (src/transport/coll_net.cc; /GDRDMA, (PCI)),
  older "CollNet %02d : %d [send] via COLLNET/%s/%d%s" (2.12)
  "%d coll channels, %d collnet channels, %d nvls channels, ..." (src/init.cc)
  "NCCL_COLLNET_ENABLE set by environment to %d." (src/init.cc)
  WARN "Cannot initialize CollNet, using point-to-point network instead" (src/transport.cc, 2.12+), older
  "Cannot initialize CollNet, using %s instead" (src/init.cc, 2.6-2.8)
nccl-rdma-sharp-plugins (github.com/Mellanox/nccl-rdma-sharp-plugins, HEAD 2f5ac02e): src/p2p_plugin.c
  "NET/IB : Using [%d]%s:%d/%s%s ..." with "/SHARP" after each SHARP-capable port; src/sharp_plugin.c:
  INFO "SHARP rank %d/%d initialized on %s" (older "Sharp rank ..."), WARN "NET/IB : SHARP coll init error:
  %s(%d)", "SHARP group create: %s(%d)", "SHARP: unsupported data type",
  "SHARP: unsupported reduce operation", "SHARP int8,uint8,bfloat16 Datatypes not supported".
The CollNet connection lines and the NET/IB device listings are NCCL log lines like any other: this parser
finds them and parsers/nccl_debug.py reads them (its ``connections`` of the COLLNET family, its
``net_devices`` marked /SHARP), so both parsers agree on what such a line says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers import nccl_debug

# Launcher line prefixes: Open MPI mpirun --tag-output "[jobid,rank]<stdout>:" (mpirun(1)) and Slurm
# srun -l/--label "N: " (srun(1): "Prepend task number to lines of stdout/err").
_LAUNCHER_TAG_RE = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err|diag)>:|\d+: )\s*")
_SHARP_LOG_RE = re.compile(
    r"\[(?P<where>[^\]]+)\](?:\[[^\]]*\])?\s+(?P<level>INFO|ERROR|WARN|WARNING|DEBUG|TRACE)\s+(?P<msg>.*)$"
)
_SMX_RE = re.compile(r"\[[^\]]+\]\[[^\]]+\]\[[A-Z ]+\]\[\d+\]\[(?P<level>\w+)\s*\]\s+-\s+(?P<msg>.*)$")
_JOB_RE = re.compile(
    r"sharp_job_id:(?P<job>\d+)\s+(?:resv_key:\s*)?tree_type:(?P<type>\w+)\s+tree_idx:(?P<idx>\d+)\s+"
    r"treeID:(?P<tree>0x[0-9a-fA-F]+|\d+)"
)
_NCCL_RE = re.compile(r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
_PLUGIN_RE = re.compile(r"NET/Plugin ?: Loaded coll(?:net)? plugin (?P<name>.+) \((?P<api>v\d+)\)$")
_COLLNET_FORM = "'CollNet CC/I : RANK [send|receive] via COLLNET/PLUGIN/DEV[/GDRDMA]'"
_CHANNELS_RE = re.compile(r"\d+ coll channels, (?P<n>\d+) collnet channels")
_ENV_RE = re.compile(r"NCCL_COLLNET_ENABLE set by environment to (?P<v>-?\d+)\.?$")
_RANK_RE = re.compile(r"S(?:HARP|harp) rank (?P<rank>\d+)/(?P<n>\d+) initialized on (?P<dev>\S+)$")
_FALLBACK_RE = re.compile(r"Cannot initialize CollNet, using (?P<net>.+) instead$")


@dataclass(frozen=True)
class SharpTree:
    """A SHARP tree granted to a job (libsharp "sharp_job_id:N ... tree_type:LLT tree_idx:0 treeID:18")."""

    job_id: int
    tree_type: str  # "LLT" (low-latency) or "SAT" (streaming aggregation)
    tree_idx: int
    tree_id: int


@dataclass(frozen=True)
class CollNetConnection:
    """One NCCL "CollNet CC/I : R [send|receive] via COLLNET/<plugin>/<netdev index>[/GDRDMA]" line."""

    channel: int
    conn_index: int | None
    rank: int
    direction: str
    plugin: str
    net_dev: int
    gdr: bool


@dataclass(frozen=True)
class SharpRank:
    """nccl-rdma-sharp-plugins "SHARP rank R/N initialized on mlx5_0:1"."""

    rank: int
    nranks: int
    device: str


@dataclass(frozen=True)
class SharpReport:
    """SHARP facts found in the text.

    hello_passed: True if "Test Passed." is present; False for libsharp output without it and without
    NCCL lines (a failed sharp_hello); None otherwise (no sharp_hello output, or an NCCL log: parse
    sharp_hello output on its own).
    """

    hello_passed: bool | None
    hello_reason: str | None  # for a failed run: from the libsharp ERROR lines ("No resource")
    sharp_errors: tuple[str, ...]  # libsharp ERROR and smx error/warn messages, in order
    trees: tuple[SharpTree, ...]
    sharp_devices: tuple[str, ...]  # "mlx5_0:1" ports the plugin's "NET/IB : Using" line marks /SHARP
    collnet_plugin: str | None  # "SHARP" from "Loaded collnet plugin SHARP (v8)"
    collnet_plugin_api: str | None  # "v8"
    collnet_enable_env: int | None  # NCCL_COLLNET_ENABLE as NCCL echoed it
    collnet_channels: int | None  # max over "N coll channels, M collnet channels" lines
    collnet_connections: tuple[CollNetConnection, ...]
    sharp_ranks: tuple[SharpRank, ...]
    collnet_fallback: bool  # NCCL WARN "Cannot initialize CollNet, using ... instead"
    sharp_warnings: tuple[str, ...]  # NCCL WARN lines of the SHARP plugin / CollNet, deduplicated, in order
    unsupported_datatype: bool  # "SHARP: unsupported data type" or the int8/uint8/bfloat16 warning

    @property
    def collnet_active(self) -> bool:
        """CollNet connected through SHARP and NCCL did not fall back to point-to-point."""
        return (
            bool(self.collnet_connections)
            and not self.collnet_fallback
            and not any("init error" in w or "group create" in w for w in self.sharp_warnings)
        )


def _connections(lines: dict[int, str]) -> tuple[CollNetConnection, ...]:
    """The CollNet connection lines (line number -> message), read by nccl_debug at their line numbers."""
    if not lines:
        return ()
    numbered = "\n".join(f"NCCL INFO {lines[n]}" if n in lines else "" for n in range(1, max(lines) + 1))
    try:
        read = {c.line_no: c for c in nccl_debug.parse(numbered).connections}
    except ParseError as exc:
        raise ParseError(exc.line_no, _COLLNET_FORM, lines.get(exc.line_no, exc.got)) from None
    out: list[CollNetConnection] = []
    for no, msg in lines.items():
        c = read.get(no)  # None: not a connection line to nccl_debug (no " via ")
        if c is None or c.family != "COLLNET" or c.direction is None or c.net is None or c.net_dev is None:
            raise ParseError(no, _COLLNET_FORM, msg)
        out.append(
            CollNetConnection(c.channel, c.conn_index, c.src_rank, c.direction, c.net, c.net_dev, c.gdrdma)
        )
    return tuple(out)


def _sharp_ports(listings: list[str]) -> tuple[str, ...]:
    """The "mlx5_0:1" ports the NET/IB listings mark /SHARP, first seen first (nccl_debug's NET devices).

    A listing nccl_debug cannot read contributes none: the ports are informational, not judged."""
    ports: dict[str, None] = {}
    for msg in listings:
        try:
            devices = nccl_debug.parse(f"NCCL INFO {msg}").net_devices
        except ParseError:
            continue
        ports.update(dict.fromkeys(f"{d.device}:{d.port}" for d in devices if d.sharp))
    return tuple(ports)


def _tail(message: str) -> str:
    return message.rsplit(": ", 1)[-1].strip().rstrip(".")


def parse(text: str) -> SharpReport:
    """Parse sharp_hello output and/or an NCCL INFO log for SHARP / CollNet facts."""
    hello_seen = passed = fallback = unsupported = nccl_seen = False
    errors: list[str] = []
    trees: list[SharpTree] = []
    plugin: tuple[str, str] | None = None
    env: int | None = None
    channels: int | None = None
    collnet: dict[int, str] = {}  # line number -> CollNet connection message
    ranks: list[SharpRank] = []
    warnings: list[str] = []
    listings: list[str] = []  # NET/IB device listing messages
    recognised = False
    try:
        for no, raw in enumerate(text.splitlines(), 1):
            line = _LAUNCHER_TAG_RE.sub("", raw.strip(), count=1)
            if not line:
                continue
            if line == "Test Passed.":
                hello_seen = passed = recognised = True
                continue
            nccl = _NCCL_RE.search(line)
            sharp = None if nccl else (_SHARP_LOG_RE.match(line) or _SMX_RE.match(line))
            if sharp:
                hello_seen = recognised = True
                level, msg = sharp.group("level").upper(), sharp.group("msg").strip()
                if level.startswith(("ERROR", "WARN")):
                    errors.append(msg)
                job = _JOB_RE.search(msg)
                if job:
                    tree = job["tree"]
                    tree_id = int(tree, 16) if tree.startswith("0x") else int(tree)  # "18" or "0x40"
                    trees.append(SharpTree(int(job["job"]), job["type"], int(job["idx"]), tree_id))
                continue
            if not nccl:
                continue
            recognised = nccl_seen = True
            level, msg = nccl.group("level"), nccl.group("msg").strip()
            if msg.startswith("NET/IB : Using"):
                listings.append(msg)
            elif "Loaded coll" in msg:
                m = _PLUGIN_RE.search(msg)
                if not m:
                    raise ParseError(no, "'NET/Plugin: Loaded collnet plugin NAME (vN)'", msg)
                plugin = (m["name"], m["api"])
            elif re.match(r"CollNet \d", msg):
                collnet[no] = msg
            elif "collnet channels" in msg:
                m = _CHANNELS_RE.search(msg)
                if not m:
                    raise ParseError(no, "'N coll channels, M collnet channels, ...'", msg)
                channels = max(channels or 0, int(m["n"]))
            elif msg.startswith("NCCL_COLLNET_ENABLE set by environment"):
                m = _ENV_RE.match(msg)
                if not m:
                    raise ParseError(no, "'NCCL_COLLNET_ENABLE set by environment to N.'", msg)
                env = int(m["v"])
            elif re.search(r"S(?:HARP|harp) rank ", msg):
                m = _RANK_RE.search(msg)
                if not m:
                    raise ParseError(no, "'SHARP rank R/N initialized on DEV'", msg)
                ranks.append(SharpRank(int(m["rank"]), int(m["n"]), m["dev"]))
            elif level == "WARN" and _FALLBACK_RE.search(msg):
                fallback = True
            elif (
                level == "WARN" and "SHARP" in msg.upper() and "NVLS" not in msg and "NVLink SHARP" not in msg
            ):
                # NVLink SHARP (NVLS) is the NVSwitch feature, not the InfiniBand SHARP of this parser.
                unsupported |= "unsupported data type" in msg or "Datatypes not supported" in msg
                if msg not in warnings:
                    warnings.append(msg)
    except (ParseError, ValueError):
        _connections(collnet)  # a bad CollNet line before this one is the first error
        raise
    if not recognised:
        raise ParseError(0, "sharp_hello output or NCCL INFO/WARN lines", text[:80])
    # libsharp lines also appear inside NCCL logs (SHARP_COLL_LOG_LEVEL): without "Test Passed." they only
    # mean a failed sharp_hello when no NCCL line is around.
    hello: bool | None = True if passed else (False if hello_seen and not nccl_seen else None)
    reason = None
    if hello is False:
        init = [e for e in errors if "init error" in e]
        reason = _tail(init[0]) if init else (_tail(errors[-1]) if errors else None)
    return SharpReport(
        hello_passed=hello,
        hello_reason=reason,
        sharp_errors=tuple(errors),
        trees=tuple(trees),
        sharp_devices=_sharp_ports(listings),
        collnet_plugin=plugin[0] if plugin else None,
        collnet_plugin_api=plugin[1] if plugin else None,
        collnet_enable_env=env,
        collnet_channels=channels,
        collnet_connections=_connections(collnet),
        sharp_ranks=tuple(ranks),
        collnet_fallback=fallback,
        sharp_warnings=tuple(warnings),
        unsupported_datatype=unsupported,
    )
