"""Port counter snapshots of every site rail on this node: evidence only (judged by checks/counters.py).

Taken around traffic by the campaign driver (before the first round and after every round, so the delta
of one interval belongs to the steps each node was in: one per rail in a pair round) and around the RoCE
probe's idle window.

Per rail (``rails``: gpu, hca, port, netdev, as flow.probe_options' ``node_rails``):
- ``/sys/class/infiniband/<hca>/ports/<port>/link_layer`` (Documentation/ABI/stable/sysfs-class-infiniband);
- the port's PMA counters ``/sys/class/infiniband/<hca>/ports/<port>/counters/<name>`` (same ABI file,
  "counters/"; names from drivers/infiniband/core/sysfs.c ``PORT_PMA_ATTR``): the error counters of
  :data:`IB_ERRORS` and ``port_xmit_data``/``port_rcv_data`` (IBTA PortXmitData: units of 4 octets);
- on an Ethernet (RoCE) port also ``ethtool -S <netdev>`` and the mlx5 congestion counters of
  ``.../hw_counters/`` (roce_sysfs.hw_counter_path).

One Evidence per node and snapshot (source ``counters``), so a 4,096-node campaign archives one file per
node and round, not one per counter. Its stdout is each tool's text as printed, in sections::

    ## rail 0 hca mlx5_0 port 1 netdev eth0
    ### link_layer
    Ethernet
    ### ib-counters /sys/class/infiniband/mlx5_0/ports/1/counters
    symbol_error: 0
    ### ethtool-stats rc=0
    NIC statistics:
         rx_prio3_pause: 0
    ### hw-counters /sys/class/infiniband/mlx5_0/ports/1/hw_counters
    np_cnp_sent: 12

A file that cannot be read is listed in an ``### unreadable`` section with the reason (parsers/counters.py).

Where the site declares NVLink (``--nvlink``), the snapshot ends with the node's NVLink error counters,
``nvidia-smi nvlink -e`` as printed (nvidia-smi(1), "NVLINK": ``-e, --errorcounters``), so the delta
around an intra-node round is the errors the NVLinks took under that traffic::

    ## nvlink rc=0
    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)
    \t Link 0: Replay Errors: 0

``python -m clusteraccept.probes.counters --rails FILE --out DIR --label L [--after ROUND]`` writes this
node's snapshot to ``DIR/<label>-<host>.json`` (the campaign driver runs it on every node through srun).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from clusteraccept import hostio
from clusteraccept.evidence import Evidence, slug
from clusteraccept.parsers import roce_sysfs

IB_ERRORS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
IB_DATA = ("port_xmit_data", "port_rcv_data")
# PMA PortCounters widths (drivers/infiniband/core/sysfs.c PORT_PMA_ATTR, IBTA PortCounters): these counters
# stop at their maximum instead of wrapping, so a counter sitting there can no longer show a rise.
IB_WIDTH_BITS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_xmit_discards": 16,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "port_xmit_data": 32,  # 64 where the kernel reads PortCountersExtended instead
    "port_rcv_data": 32,
}
CNP_COUNTERS = ("np_cnp_sent", "rp_cnp_handled")
# An EFA device's port statistics (Linux drivers/infiniband/hw/efa/efa_verbs.c, the port stats in
# .../ports/1/hw_counters/): errors that must not rise under traffic (awsome-distributed-training's EFA
# loopback check reads rx_drops and retrans_timeout_events) and the bytes that show traffic crossed it.
# Kernels before ~6.2 lack the retrans/remote counters: only those present are read.
EFA_ERRORS = (
    "rx_drops",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
EFA_DATA = ("tx_bytes", "rx_bytes")


def _files(title: str, paths: dict[str, str], unreadable: list[str]) -> list[str]:
    """``### title`` then ``name: value`` for each readable file; the others go to ``unreadable``."""
    lines = [f"### {title}"]
    for name, path in paths.items():
        ev = hostio.read(path)
        value = ev.stdout.strip()
        if ev.ok and value.isdigit():
            lines.append(f"{name}: {value}")
        else:
            unreadable.append(f"{path}: {(ev.stderr or value or 'empty').strip().splitlines()[0][:160]}")
    return lines


def _rail_section(rail: dict[str, Any], timeout_s: float) -> list[str]:
    hca, port = str(rail["hca"]), int(rail["port"])
    base = f"/sys/class/infiniband/{hca}/ports/{port}"
    if rail.get("fabric") == "efa":
        return _efa_section(rail)
    if rail.get("fabric") in ("slingshot", "tcpx", "tcpxo"):  # no IB counters; their own are not read yet
        return []
    link = hostio.read(f"{base}/link_layer")
    netdev = rail.get("netdev") or ""
    if not netdev and link.ok and link.stdout.strip() == "Ethernet":
        ndev = hostio.read(f"{base}/gid_attrs/ndevs/0")  # the GID's net device (same ABI file)
        netdev = ndev.stdout.strip() if ndev.ok and "/" not in ndev.stdout else ""
    out = [f"## rail {rail['gpu']} hca {hca} port {port} netdev {netdev or '-'}"]
    unreadable: list[str] = []
    if not link.ok:
        return [*out, "### unreadable", f"{base}/link_layer: {(link.stderr or 'unreadable').strip()[:160]}"]
    out += ["### link_layer", link.stdout.strip()]
    names = (*IB_ERRORS, *IB_DATA)
    out += _files(f"ib-counters {base}/counters", {n: f"{base}/counters/{n}" for n in names}, unreadable)
    if link.stdout.strip() == "Ethernet" and netdev:
        stats = hostio.run(["ethtool", "-S", netdev], timeout_s, source="ethtool-stats")
        if stats.ok:
            out += [f"### ethtool-stats rc={stats.returncode}", stats.stdout.rstrip("\n")]
        else:
            unreadable.append(f"ethtool -S {netdev}: rc {stats.returncode}: {stats.stderr.strip()[:160]}")
        hw = {n: roce_sysfs.hw_counter_path(hca, port, n) for n in CNP_COUNTERS}
        out += _files(f"hw-counters {base}/hw_counters", hw, unreadable)
    if unreadable:
        out += ["### unreadable", *unreadable]
    return out


def _efa_section(rail: dict[str, Any]) -> list[str]:
    """An EFA rail: the hw_counters of each of its devices (no PMA counters, no link layer to speak of)."""
    out = [f"## rail {rail['gpu']} hca {rail['hca']} port {rail['port']} netdev -"]
    unreadable: list[str] = []
    for nic in rail.get("nics") or [rail["hca"]]:
        base = f"/sys/class/infiniband/{nic}/ports/{rail['port']}/hw_counters"
        present = set(hostio.listdir(base))
        names = [n for n in (*EFA_ERRORS, *EFA_DATA) if n in present or n in EFA_DATA]
        out += _files(f"efa-counters {nic} {base}", {n: f"{base}/{n}" for n in names}, unreadable)
    return out + (["### unreadable", *unreadable] if unreadable else [])


NVLINK_ERRORS = ("nvidia-smi", "nvlink", "-e")


def snapshot(
    rails: list[dict[str, Any]], timeout_s: float, meta: dict[str, str], nvlink: bool = False
) -> Evidence:
    """This node's counters of every rail now, as one Evidence (``meta`` labels the snapshot)."""
    t0 = time.monotonic()
    lines: list[str] = []
    for rail in rails:
        lines += _rail_section(rail, timeout_s)
    if nvlink:
        ev = hostio.run(list(NVLINK_ERRORS), timeout_s, source="nvidia-smi-nvlink")
        lines += [
            f"## nvlink rc={ev.returncode}",
            *(ev.stdout if ev.ok else ev.stderr).rstrip("\n").splitlines(),
        ]
    return Evidence(
        hostio.hostname(),
        "counters",
        path="/sys/class/infiniband",
        returncode=0,
        stdout="\n".join(lines) + "\n",
        duration_s=time.monotonic() - t0,
        meta={**meta, "role": "counters", "t_s": f"{time.time():.3f}"},
    )


def snapshot_to(
    out_dir: Path, rails_file: Path, label: str, meta: dict[str, str], nvlink: bool = False
) -> Path:
    """Take this node's snapshot and write it to ``out_dir/<label>-<host>.json`` (shared filesystem)."""
    from clusteraccept.redact import redact_evidence

    node_rails = json.loads(rails_file.read_text())
    # 10 s per ethtool: 8 rails stay inside the driver's 110 s for the whole snapshot step
    ev = snapshot(list(node_rails.get(hostio.hostname(), [])), 10.0, {**meta, "snapshot": label}, nvlink)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{slug(label)}-{slug(ev.host)}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(redact_evidence(ev).to_dict()))
    tmp.replace(path)  # the driver never reads half a file
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m clusteraccept.probes.counters")
    ap.add_argument("--rails", required=True, type=Path, help="JSON: node -> rails (probe_options)")
    ap.add_argument("--out", required=True, type=Path, help="directory on the shared filesystem")
    ap.add_argument("--label", required=True, help="snapshot label, e.g. s003")
    ap.add_argument("--meta", default="{}", help="JSON object of labels for the evidence")
    ap.add_argument(
        "--nvlink", action="store_true", help="also the NVLink error counters (nvidia-smi nvlink -e)"
    )
    args = ap.parse_args(argv)
    meta = {str(k): str(v) for k, v in json.loads(args.meta).items()}
    snapshot_to(args.out, args.rails, args.label, meta, args.nvlink)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
