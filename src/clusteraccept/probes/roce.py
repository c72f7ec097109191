"""RoCE lossless configuration of every site rail on this node: evidence only (judged by checks/roce.py).

Per rail (``options["node_rails"][<this host>]``: gpu, hca, port, netdev):
- ``/sys/class/infiniband/<hca>/ports/<port>/link_layer`` ("InfiniBand" or "Ethernet";
  Documentation/ABI/stable/sysfs-class-infiniband);
- the netdev: the site's, else ``.../gid_attrs/ndevs/0`` (same ABI file: "the net-device's name associated
  with the GID"; show_gids reads it the same way);
- QoS: ``mlnx_qos -i <netdev>`` (mlnx-tools); where mlnx_qos is not installed, iproute2's
  ``dcb -N pfc show dev <netdev>`` and ``dcb -N app show dev <netdev>`` (dcb(8) -N: numeric DSCP values;
  dcb-pfc(8), dcb-app(8));
- the files of :func:`roce_sysfs.all_paths` (ECN NP/RP enables, CNP DSCP / 802.1p priority, MTU, RDMA-CM
  default_roce_tos / default_roce_mode), each read as it is;
- counter snapshots before and after (``ethtool -S <netdev>`` and the mlx5 congestion hw_counters
  np_cnp_sent / rp_cnp_handled, see roce_sysfs.hw_counter_path). No traffic test runs inside this probe:
  the pair brackets only the probe's own time, so it is labelled ``window=idle`` and the judge says
  "no traffic test in this run" unless it shows a fault anyway.
Per node: ``show_gids`` (mlnx-tools; the GID table of every port) and the names in ``/sys/class/net``.

Nothing runs when the site has no roce section; a port whose link layer does not read "Ethernet" (absent,
InfiniBand) is no RoCE port: it gets no further command, its link_layer evidence says why.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from clusteraccept import runner
from clusteraccept.evidence import Evidence
from clusteraccept.parsers import roce_sysfs

CNP_COUNTERS = ("np_cnp_sent", "rp_cnp_handled")


def _tag(ev: Evidence, **meta: str) -> Evidence:
    return replace(ev, meta={**ev.meta, **meta})


def _rail_meta(rail: dict[str, Any], netdev: str | None) -> dict[str, str]:
    return {
        "rail": str(rail["gpu"]),
        "hca": str(rail["hca"]),
        "port": str(rail["port"]),
        "netdev": netdev or "",
    }


def _snapshot(rails: list[tuple[dict[str, str], str]], timeout_s: float, when: str) -> list[Evidence]:
    """ethtool -S and the CNP hw_counters of every RoCE netdev, labelled ``snapshot=<when>``."""
    out: list[Evidence] = []
    stamp = f"{time.monotonic():.3f}"
    for meta, netdev in rails:
        tags = {**meta, "role": "counters", "snapshot": when, "window": "idle", "t_s": stamp}
        out.append(_tag(runner.run(["ethtool", "-S", netdev], timeout_s, source="ethtool-stats"), **tags))
        for name in CNP_COUNTERS:
            path = roce_sysfs.hw_counter_path(meta["hca"], int(meta["port"]), name)
            out.append(_tag(runner.read(path, source="hw-counters"), **tags, counter=name))
    return out


def _netdev(rail: dict[str, Any], out: list[Evidence], meta: dict[str, str]) -> str | None:
    if rail.get("netdev"):
        return str(rail["netdev"])
    ev = runner.read(f"/sys/class/infiniband/{rail['hca']}/ports/{rail['port']}/gid_attrs/ndevs/0")
    out.append(_tag(ev, **meta, role="ndev"))
    name = ev.stdout.strip()
    # A name for a path component only; anything else is left for the judge to report from the evidence.
    return name if ev.ok and name and "/" not in name and name not in (".", "..") else None


def _qos(netdev: str, timeout_s: float, meta: dict[str, str]) -> list[Evidence]:
    qos = _tag(runner.run(["mlnx_qos", "-i", netdev], timeout_s, source="mlnx_qos"), **meta, role="qos")
    if qos.returncode != 127:  # 127: not installed (runner's convention) -> iproute2 dcb instead
        return [qos]
    return [
        qos,
        *(
            _tag(
                runner.run(["dcb", "-N", what, "show", "dev", netdev], timeout_s, source="dcb-pfc"),
                **meta,
                role=f"dcb-{what}",
            )
            for what in ("pfc", "app")
        ),
    ]


def collect(options: dict[str, object]) -> list[Evidence]:
    if not options.get("roce"):
        return []
    timeout_s = float(options.get("timeout_s", 60))  # type: ignore[arg-type]
    host = runner.hostname()
    node_rails = options.get("node_rails") or {}
    assert isinstance(node_rails, dict)
    rails: list[dict[str, Any]] = list(node_rails.get(host, []))
    out: list[Evidence] = []
    net_names = runner.listdir("/sys/class/net")
    out.append(
        Evidence(host, "sysfs", path="/sys/class/net", stdout="\n".join(net_names), meta={"role": "netdevs"})
    )
    roce: list[tuple[dict[str, str], str]] = []
    for rail in rails:
        meta = _rail_meta(rail, rail.get("netdev"))
        link = runner.read(f"/sys/class/infiniband/{rail['hca']}/ports/{rail['port']}/link_layer")
        out.append(_tag(link, **meta, role="link_layer"))
        netdev = _netdev(rail, out, meta)
        if netdev is None or not link.ok or link.stdout.strip() != "Ethernet":
            continue  # no RoCE port here: its link_layer evidence says why, nothing else to ask
        roce.append((_rail_meta(rail, netdev), netdev))
    before = _snapshot(roce, timeout_s, "before")
    for meta, netdev in roce:
        out += _qos(netdev, timeout_s, meta)
        for path in roce_sysfs.all_paths(netdev, meta["hca"], int(meta["port"])):
            out.append(_tag(runner.read(path, source="roce-sysfs"), **meta, role="sysfs"))
    if roce:
        out.append(_tag(runner.run(["show_gids"], timeout_s, source="show_gids"), role="gids"))
    return out + before + _snapshot(roce, timeout_s, "after")
