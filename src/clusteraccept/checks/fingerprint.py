"""The software/firmware fingerprint of each node, from the fingerprint probe's evidence (pure).

Recorded in results.json and the report; nodes that differ from the majority are listed as findings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from clusteraccept.evidence import Evidence


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def node_fingerprint(evidence: Sequence[Evidence]) -> dict[str, str]:
    fp: dict[str, str] = {}
    fw: list[str] = []
    for ev in evidence:
        if not ev.ok:
            continue
        if ev.source == "uname":
            fp["kernel"] = _first_line(ev.stdout)
        elif ev.source == "nvidia-smi-query":
            # "0, NVIDIA H100 80GB HBM3, 550.54.15, 00000000:18:00.0" per GPU
            rows = [[c.strip() for c in ln.split(",")] for ln in ev.stdout.splitlines() if ln.count(",") >= 3]
            if rows:
                fp["gpu_driver"] = ",".join(sorted({r[2] for r in rows}))
                fp["gpus"] = f"{len(rows)}x {rows[0][1]}"
        elif ev.source == "ofed_info":
            fp["ofed"] = _first_line(ev.stdout)
        elif ev.source == "hca-fw":
            fw.append(f"{ev.path.split('/')[4]}={_first_line(ev.stdout)}")
    if fw:
        fp["hca_fw"] = " ".join(sorted(fw))
    return fp


def fingerprints(evidence: Sequence[tuple[Evidence, str]]) -> dict[str, dict[str, str]]:
    by_host: dict[str, list[Evidence]] = {}
    for ev, _ in evidence:
        by_host.setdefault(ev.host, []).append(ev)
    return {host: node_fingerprint(evs) for host, evs in sorted(by_host.items())}


def differences(fps: dict[str, dict[str, str]]) -> list[str]:
    """One line per (field, node) that differs from the majority value of that field."""
    out: list[str] = []
    fields = sorted({k for fp in fps.values() for k in fp})
    for f in fields:
        values = Counter(fp.get(f, "(absent)") for fp in fps.values())
        if len(values) < 2:
            continue
        majority, count = values.most_common(1)[0]
        for host, fp in fps.items():
            value = fp.get(f, "(absent)")
            if value != majority:
                out.append(f"{host}: {f} is {value!r}, {count} of {len(fps)} nodes have {majority!r}")
    return out
