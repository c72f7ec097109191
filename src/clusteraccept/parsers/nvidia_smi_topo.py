"""``nvidia-smi topo -m``: the GPU/NIC link matrix, CPU and NUMA affinity, NIC legend.

Formats seen in real outputs (tests/data/nvidia-smi-topo/):

- new drivers: NIC columns ``NIC0..NICn`` resolved by a trailing ``NIC Legend:`` block
  (``  NIC10: mlx5_10``); affinity columns ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID``;
- old drivers: NIC columns named after the device (``mlx5_0``), only ``CPU Affinity``; the oldest
  legend has ``SOC`` where newer ones say ``SYS`` (same meaning: across the SMP interconnect);
- tab-separated (as nvidia-smi writes it, `` X `` cells, a header underlined with ANSI escapes on a
  terminal, empty trailing cells on NIC rows) or space-aligned (copied from a terminal);
- ``N/A`` affinity values (VMs), CPU affinity as ranges (``0-47,96-143``) or lists (``4,6,8``).

Link classes, best to worst: X (self) < NV# (bonded NVLinks) < PIX < PXB < PHB < NODE < SYS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusteraccept.errors import ParseError
from clusteraccept.parsers._cpulist import parse_ids

# Rank of each link class (legend printed by nvidia-smi, quoted in every fixture). Only the order
# matters: lower is closer.
_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6, "SOC": 6}
_LINK = re.compile(r"X|NV[0-9]+|PIX|PXB|PHB|NODE|SYS|SOC")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU = re.compile(r"GPU([0-9]+)")
_NIC = re.compile(r"NIC([0-9]+)")
_LABEL = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_LEGEND_NIC = re.compile(r"(NIC[0-9]+):\s*(\S+)")
_AFFINITY = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_INT = re.compile(r"-?[0-9]+")


def link_rank(link: str) -> int:
    """Closeness rank of a link class: X=0, NV#=1, PIX=2, PXB=3, PHB=4, NODE=5, SYS/SOC=6."""
    if link.startswith("NV") and link[2:].isascii() and link[2:].isdigit():
        return _RANK["NV"]
    if link not in _RANK:
        raise ValueError(f"not a link class: {link!r}")
    return _RANK[link]


@dataclass(frozen=True)
class TopoMatrix:
    """The parsed matrix. Per-GPU tuples are indexed like ``gpus``; ``links`` like ``labels``."""

    gpus: tuple[str, ...]  # ("GPU0", "GPU1", ...)
    nic_labels: tuple[str, ...]  # NIC column names as printed: ("NIC0", ...) or ("mlx5_0", ...)
    nics: tuple[str, ...]  # NIC device names, same order ("mlx5_0", ...), legend resolved
    links: tuple[tuple[str, ...], ...]  # square, rows and columns in ``labels`` order
    columns: tuple[str, ...]  # affinity columns present: "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
    cpu_affinity: tuple[str | None, ...]  # per GPU, as printed ("0-47,96-143"); None: N/A or absent
    numa_affinity: tuple[str | None, ...]  # per GPU, as printed ("0"); None: N/A or absent
    gpu_numa_id: tuple[int | None, ...]  # per GPU; None: N/A or absent (set where GPU memory is a NUMA node)

    @property
    def labels(self) -> tuple[str, ...]:
        """All matrix labels, GPUs first: the row/column order of ``links``."""
        return self.gpus + self.nic_labels

    def _index(self, name: str | int) -> int:
        if isinstance(name, int):
            name = f"GPU{name}"
        labels = self.labels
        if name in labels:
            return labels.index(name)
        if name in self.nics:
            return len(self.gpus) + self.nics.index(name)
        raise KeyError(f"no device {name!r} in the matrix (known: {', '.join(labels + self.nics)})")

    def _gpu(self, gpu: str | int) -> int:
        i = self._index(gpu)
        if i >= len(self.gpus):
            raise KeyError(f"{gpu!r} is not a GPU")
        return i

    def link(self, a: str | int, b: str | int) -> str:
        """Link class between two devices ("GPU0"/0, "NIC3" or "mlx5_3"): "X", "NV18", "PIX", ..."""
        return self.links[self._index(a)][self._index(b)]

    def nvlinks(self, a: str | int, b: str | int) -> int:
        """Number of bonded NVLinks between two devices (0 when the link is not NV#)."""
        link = self.link(a, b)
        return int(link[2:]) if link.startswith("NV") else 0

    def nic_device(self, label: str) -> str:
        """Device name of a NIC column label ("NIC3" -> "mlx5_3"); device names map to themselves."""
        i = self._index(label) - len(self.gpus)
        if i < 0:
            raise KeyError(f"{label!r} is not a NIC")
        return self.nics[i]

    def closest_nics(self, gpu: str | int) -> tuple[str, ...]:
        """NIC device names sharing the GPU's best link class (X < NV# < PIX < ... < SYS), column order."""
        row = self.links[self._gpu(gpu)]
        cells = row[len(self.gpus) :]
        if not cells:
            return ()
        best = min(link_rank(c) for c in cells)
        return tuple(nic for nic, c in zip(self.nics, cells, strict=True) if link_rank(c) == best)

    def cpus(self, gpu: str | int) -> frozenset[int]:
        """CPU ids of the GPU's CPU affinity, ranges expanded (empty when N/A or absent)."""
        text = self.cpu_affinity[self._gpu(gpu)]
        return frozenset(parse_ids(text) or ()) if text else frozenset()

    def numa(self, gpu: str | int) -> int | None:
        """The GPU's NUMA Affinity node, None when N/A, absent, or more than one node."""
        nodes = self.numa_nodes(gpu)
        return next(iter(nodes)) if len(nodes) == 1 else None

    def numa_nodes(self, gpu: str | int) -> frozenset[int]:
        """All nodes of the GPU's NUMA Affinity (empty when N/A or absent)."""
        text = self.numa_affinity[self._gpu(gpu)]
        return frozenset(parse_ids(text) or ()) if text else frozenset()


def _is_header(tokens: list[str]) -> bool:
    return len(tokens) >= 1 and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X")


def _parse_header(tokens: list[str], no: int) -> tuple[list[str], list[str], list[str]]:
    """Split header tokens into device labels and affinity column names."""
    labels: list[str] = []
    columns: list[str] = []
    i = 0
    while i < len(tokens):
        for words in _AFFINITY:
            if tuple(tokens[i : i + len(words)]) == words:
                name = " ".join(words)
                if name in columns:
                    raise ParseError(no, "each affinity column once", name)
                columns.append(name)
                i += len(words)
                break
        else:
            tok = tokens[i]
            if columns or not _LABEL.fullmatch(tok):
                raise ParseError(no, "device labels then CPU Affinity / NUMA Affinity / GPU NUMA ID", tok)
            labels.append(tok)
            i += 1
    if len(set(labels)) != len(labels):
        raise ParseError(no, "distinct column labels", " ".join(labels))
    gpus = [t for t in labels if _GPU.fullmatch(t)]
    if labels[: len(gpus)] != [f"GPU{k}" for k in range(len(gpus))]:
        raise ParseError(no, "columns GPU0..GPUn first, then NICs", " ".join(labels))
    return labels[: len(gpus)], labels[len(gpus) :], columns


def parse(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` output (noise lines before the header are skipped)."""
    lines = [_ANSI.sub("", ln).rstrip("\r") for ln in text.split("\n")]
    start = next((i for i, ln in enumerate(lines) if _is_header(ln.split())), None)
    if start is None:
        raise ParseError(0, "a header line starting with GPU0", text[:80])
    gpus, nic_labels, columns = _parse_header(lines[start].split(), start + 1)
    labels = gpus + nic_labels
    n = len(labels)

    rows: dict[str, tuple[list[str], list[str], int]] = {}
    i = start + 1
    while len(rows) < n:
        if i >= len(lines):
            raise ParseError(
                len(lines), f"matrix rows for {', '.join(x for x in labels if x not in rows)}", "end of input"
            )
        tokens = lines[i].split()
        no = i + 1
        i += 1
        if not tokens:
            raise ParseError(
                no,
                f"a matrix row for one of {', '.join(x for x in labels if x not in rows)}",
                "an empty line",
            )
        label = tokens[0]
        if label not in labels or label in rows:
            raise ParseError(
                no,
                f"a matrix row for one of {', '.join(x for x in labels if x not in rows)}",
                lines[no - 1].strip(),
            )
        cells, rest = tokens[1 : 1 + n], tokens[1 + n :]
        if len(cells) < n:
            raise ParseError(no, f"{n} link cells after {label}", lines[no - 1].strip())
        for col, cell in zip(labels, cells, strict=True):
            if not _LINK.fullmatch(cell) or (cell == "X") != (col == label):
                want = "X" if col == label else "a link class (NV#, PIX, PXB, PHB, NODE, SYS)"
                raise ParseError(no, f"{want} in column {col} of row {label}", cell)
        is_gpu = label in gpus
        if (is_gpu and len(rest) != len(columns)) or (not is_gpu and rest):
            count = len(columns) if is_gpu else 0
            raise ParseError(
                no, f"{count} affinity values in row {label} ({', '.join(columns)})", " ".join(rest) or "none"
            )
        rows[label] = (cells, rest, no)

    cpu, numa, gnid = _affinities(gpus, rows, columns)
    nics = _resolve_nics(nic_labels, lines, i)
    return TopoMatrix(
        gpus=tuple(gpus),
        nic_labels=tuple(nic_labels),
        nics=nics,
        links=tuple(tuple(rows[label][0]) for label in labels),
        columns=tuple(columns),
        cpu_affinity=cpu,
        numa_affinity=numa,
        gpu_numa_id=gnid,
    )


def _affinities(
    gpus: list[str], rows: dict[str, tuple[list[str], list[str], int]], columns: list[str]
) -> tuple[tuple[str | None, ...], tuple[str | None, ...], tuple[int | None, ...]]:
    cpu: list[str | None] = []
    numa: list[str | None] = []
    gnid: list[int | None] = []
    for gpu in gpus:
        _, rest, no = rows[gpu]
        values = dict(zip(columns, rest, strict=True))
        c = values.get("CPU Affinity")
        m = values.get("NUMA Affinity")
        g = values.get("GPU NUMA ID")
        if c is not None and c != "N/A" and parse_ids(c) is None:
            raise ParseError(no, f"a CPU list like 0-47,96-143 or N/A for {gpu}", c)
        if m is not None and m != "N/A" and parse_ids(m) is None:
            raise ParseError(no, f"a NUMA node or N/A for {gpu}", m)
        if g is not None and g != "N/A" and not _INT.fullmatch(g):
            raise ParseError(no, f"a GPU NUMA ID or N/A for {gpu}", g)
        cpu.append(None if c in (None, "N/A") else c)
        numa.append(None if m in (None, "N/A") else m)
        gnid.append(None if g is None or g == "N/A" else int(g))
    return tuple(cpu), tuple(numa), tuple(gnid)


def _resolve_nics(nic_labels: list[str], lines: list[str], i: int) -> tuple[str, ...]:
    """NIC device names: from the ``NIC Legend:`` block when columns are NICn, else the labels."""
    numbered = [lab for lab in nic_labels if _NIC.fullmatch(lab)]
    if not numbered:
        return tuple(nic_labels)
    if len(numbered) != len(nic_labels) or numbered != [f"NIC{k}" for k in range(len(numbered))]:
        raise ParseError(0, "NIC columns either all NIC0..NICn or all device names", " ".join(nic_labels))
    legend: dict[str, str] = {}
    in_legend = False
    for j in range(i, len(lines)):
        s = lines[j].strip()
        if s == "NIC Legend:":
            in_legend = True
            continue
        if not in_legend or not s:
            continue
        m = _LEGEND_NIC.fullmatch(s)
        if m is None:
            break  # noise after the legend
        if m.group(1) in legend:
            raise ParseError(j + 1, f"{m.group(1)} once in the NIC Legend", s)
        legend[m.group(1)] = m.group(2)
    missing = [lab for lab in nic_labels if lab not in legend]
    if missing:
        raise ParseError(len(lines), f"NIC Legend entries for {', '.join(missing)}", "end of input")
    return tuple(legend[lab] for lab in nic_labels)
