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
- port counter snapshots before and after (probes/counters.py). No traffic test runs inside this probe: the
  pair brackets only the probe's own time, so it is labelled ``window=idle``; the campaign's snapshots
  around real traffic are judged instead when the run has them (checks/counters.py).
Per node: ``show_gids`` (mlnx-tools; the GID table of every port) and the names in ``/sys/class/net``.

Nothing runs when the site has no roce section; a port whose link layer does not read "Ethernet" (absent,
InfiniBand) is no RoCE port: it gets no further command, its link_layer evidence says why.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.parsers import roce_sysfs
from clusteraccept.probes import counters


def _tag(ev: Evidence, **meta: str) -> Evidence:
    return replace(ev, meta={**ev.meta, **meta})


def _rail_meta(rail: dict[str, Any], netdev: str | None) -> dict[str, str]:
    return {
        "rail": str(rail["gpu"]),
        "hca": str(rail["hca"]),
        "port": str(rail["port"]),
        "netdev": netdev or "",
    }


def _snapshot(rails: list[dict[str, Any]], timeout_s: float, seq: int) -> Evidence:
    meta = {"window": "idle", "campaign": "roce-probe", "seq": str(seq), "snapshot": f"roce-probe-s{seq:03d}"}
    return counters.snapshot(rails, timeout_s, meta)


def _netdev(rail: dict[str, Any], out: list[Evidence], meta: dict[str, str]) -> str | None:
    if rail.get("netdev"):
        return str(rail["netdev"])
    ev = hostio.read(f"/sys/class/infiniband/{rail['hca']}/ports/{rail['port']}/gid_attrs/ndevs/0")
    out.append(_tag(ev, **meta, role="ndev"))
    name = ev.stdout.strip()
    # A name for a path component only; anything else is left for the judge to report from the evidence.
    return name if ev.ok and name and "/" not in name and name not in (".", "..") else None


def _qos(netdev: str, timeout_s: float, meta: dict[str, str]) -> list[Evidence]:
    qos = _tag(hostio.run(["mlnx_qos", "-i", netdev], timeout_s, source="mlnx_qos"), **meta, role="qos")
    if qos.returncode != 127:  # 127: not installed (hostio's convention) -> iproute2 dcb instead
        return [qos]
    return [
        qos,
        *(
            _tag(
                hostio.run(["dcb", "-N", what, "show", "dev", netdev], timeout_s, source="dcb-pfc"),
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
    host = hostio.hostname()
    node_rails = options.get("node_rails") or {}
    assert isinstance(node_rails, dict)
    rails: list[dict[str, Any]] = list(node_rails.get(host, []))
    out: list[Evidence] = []
    net_names = hostio.listdir("/sys/class/net")
    out.append(
        Evidence(host, "sysfs", path="/sys/class/net", stdout="\n".join(net_names), meta={"role": "netdevs"})
    )
    roce: list[tuple[dict[str, str], str]] = []
    for rail in rails:
        meta = _rail_meta(rail, rail.get("netdev"))
        link = hostio.read(f"/sys/class/infiniband/{rail['hca']}/ports/{rail['port']}/link_layer")
        out.append(_tag(link, **meta, role="link_layer"))
        netdev = _netdev(rail, out, meta)
        if netdev is None or not link.ok or link.stdout.strip() != "Ethernet":
            continue  # no RoCE port here: its link_layer evidence says why, nothing else to ask
        roce.append((_rail_meta(rail, netdev), netdev))
    ports = [
        r for r in rails if any(m["hca"] == str(r["hca"]) and m["port"] == str(r["port"]) for m, _ in roce)
    ]
    before = [_snapshot(ports, timeout_s, 0)] if ports else []
    for meta, netdev in roce:
        out += _qos(netdev, timeout_s, meta)
        for path in roce_sysfs.all_paths(netdev, meta["hca"], int(meta["port"])):
            out.append(_tag(hostio.read(path, source="roce-sysfs"), **meta, role="sysfs"))
    if roce:
        out.append(_tag(hostio.run(["show_gids"], timeout_s, source="show_gids"), role="gids"))
    return out + before + ([_snapshot(ports, timeout_s, 1)] if ports else [])
