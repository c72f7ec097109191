"""NVLink/NVSwitch evidence of this node: every GPU's links and the NVSwitch fabric's state.

Commands (nvidia-smi(1), "NVLINK" and "-q"), only on nodes whose type declares NVLink
(``options["nvlink_nodes"]``, flow.probe_options):
- ``nvidia-smi nvlink --status``: each GPU's links, their speed or ``<inactive>``;
- ``nvidia-smi -q``: per GPU its ``Fabric`` section (State, Status; CliqueId, ClusterUUID and Health on
  newer drivers), which says whether the NVSwitch fabric was set up for it.
- ``systemctl is-active nvidia-fabricmanager`` where the node has an NVSwitch fabric of its own (HGX; an
  NVL72 tray's fabric is managed on the rack's NVLink switch trays, so not there) (the service
  name and unit: NVIDIA Fabric Manager user guide; systemctl(1): prints the unit's state, exits 0 only
  when it is active), which names the cause when the fabric is not up.
- where the node is in a multi-node NVLink domain (an NVL72 rack): ``systemctl is-active nvidia-imex`` and
  ``nvidia-imex-ctl -N``, the IMEX service and its view of the domain (IMEX guide, docs.nvidia.com/
  multi-node-nvlink-systems/imex-guide/: the service ``nvidia-imex``; ``-N`` "gets the full status of the
  entire IMEX domain"; NCCL's multi-node NVLink needs the domain up, NCCL env docs NCCL_MNNVL_ENABLE).
The link error counters are not read here: they are read around traffic by the campaign's counter
snapshots (probes/counters.py, ``--nvlink``), where a rise means errors under load.
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import timeout_of

STATUS = ("nvidia-smi", "nvlink", "--status")
QUERY = ("nvidia-smi", "-q")
FABRIC_MANAGER = ("systemctl", "is-active", "nvidia-fabricmanager")
IMEX_SERVICE = ("systemctl", "is-active", "nvidia-imex")
IMEX_DOMAIN = ("nvidia-imex-ctl", "-N")


def collect(options: dict[str, object]) -> list[Evidence]:
    nodes = options.get("nvlink_nodes")
    if not isinstance(nodes, dict) or hostio.hostname() not in nodes:
        return []
    timeout_s = timeout_of(options)
    out = [
        hostio.run(list(STATUS), timeout_s, source="nvidia-smi-nvlink"),
        hostio.run(list(QUERY), timeout_s, source="nvidia-smi-q"),
    ]
    if nodes[hostio.hostname()].get("nvswitch"):
        out.append(hostio.run(list(FABRIC_MANAGER), timeout_s, source="systemctl"))
    if nodes[hostio.hostname()].get("imex"):
        out.append(hostio.run(list(IMEX_SERVICE), timeout_s, source="systemctl"))
        out.append(hostio.run(list(IMEX_DOMAIN), timeout_s, source="nvidia-imex-ctl"))
    return out
