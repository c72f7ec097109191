"""Google Cloud GPUDirect-TCPX / TCPXO on this node: evidence only (judged by checks/tcpx.py).

On the nodes whose type is ``fabric: tcpx`` or ``tcpxo`` (``options["tcpx_nodes"]``: node -> its node
type; ``options["tcpx_env"]``: node type -> the variable names its jobs must get):
- each rail's GPU NIC, a plain network interface (A3 High: enp6s0, enp12s0, enp134s0, enp140s0;
  A3 Mega: eight, enp6s0 ... enp142s0: GoogleCloudPlatform/cluster-toolkit a3-highgpu-8g and
  a3-megagpu-8g run-nccl-tests.sh): its ``/sys/class/net/<netdev>/operstate`` and where its ``device``
  link leads (a PCI NIC; GPUDirect-TCPX receives into GPU memory through that NIC's queues);
- the job's environment, only the variables the site requires (the plugin's ``NCCL_GPUDIRECTTCPX_*`` /
  ``NCCL_FASTRAK_*`` settings, which the site's prolog or profile gives every job).
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import netdev_states, rail_netdevs


def collect(options: dict[str, object]) -> list[Evidence]:
    nodes = options.get("tcpx_nodes")
    me = hostio.hostname()
    if not isinstance(nodes, dict) or me not in nodes:
        return []
    out = netdev_states(rail_netdevs(options))
    env = options.get("tcpx_env")
    wanted = env.get(str(nodes[me]), []) if isinstance(env, dict) else []
    out.append(hostio.environ([str(n) for n in wanted]))
    return out
