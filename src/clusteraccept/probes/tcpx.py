"""Google Cloud GPUDirect-TCPX / TCPXO on this node: evidence only (judged by checks/tcpx.py).

On the nodes whose type is ``fabric: tcpx`` or ``tcpxo`` (``options["tcpx_nodes"]``: node -> its node
type; ``options["tcpx_env"]``: node type -> the variable names its jobs must get):
- each rail's GPU NIC, a plain network interface (A3 High: enp6s0, enp12s0, enp134s0, enp140s0;
  A3 Mega: eight, enp6s0 ... enp142s0: GoogleCloudPlatform/cluster-toolkit a3-highgpu-8g and
  a3-megagpu-8g run-nccl-tests.sh): its ``/sys/class/net/<netdev>/operstate`` and where its ``device``
  link leads (a PCI NIC; GPUDirect-TCPX receives into GPU memory through that NIC's queues);
- the job's environment, only the variables the site requires (the plugin's ``NCCL_GPUDIRECTTCPX_*`` /
  ``NCCL_FASTRAK_*`` settings, which the site's prolog or profile gives every job), and the job's node
  count (``SLURM_JOB_NUM_NODES``: slurm-gcp's prologs start the RxDM only for jobs of more than one node);
- the receive-datapath manager's sockets (RxDM: the container slurm-gcp's prolog starts per job). TCPXO's
  listens on the abstract unix socket ``rxdm_uds_nic_mapping`` (tcpxo buffer_mgmt_daemon/common/
  uds_helpers.cc; the plugin's readiness probe connects to it), which ``/proc/net/unix`` lists with a
  path that starts with '@' (proc(5)): only the lines naming it are kept (``grep -a``; exit 1: none).
  TCPX's are files in the directory the job's ``NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX`` names (default
  /tmp, tcpx src/flags.cc; slurm-gcp: /run/tcpx-<job id>), ``rx_rule_manager`` among them (google/
  tcpgpudmarxd): that directory's listing.
"""

from __future__ import annotations

from clusteraccept import hostio
from clusteraccept.evidence import Evidence
from clusteraccept.probes.topology import listing, netdev_states, rail_netdevs, timeout_of

PROC_NET_UNIX = "/proc/net/unix"
RXDM_SOCKET = "rxdm_uds_nic_mapping"  # TCPXO's RxDM (abstract: "@rxdm_uds_nic_mapping" in /proc/net/unix)
TCPX_PREFIX = "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"
TCPX_DEFAULT_PREFIX = "/tmp"  # tcpx src/flags.cc: defaultUnixClientPrefix
JOB_NODES = "SLURM_JOB_NUM_NODES"


def collect(options: dict[str, object]) -> list[Evidence]:
    nodes = options.get("tcpx_nodes")
    me = hostio.hostname()
    if not isinstance(nodes, dict) or me not in nodes:
        return []
    out = netdev_states(rail_netdevs(options))
    env = options.get("tcpx_env")
    wanted = env.get(str(nodes[me]), []) if isinstance(env, dict) else []
    job = hostio.environ(list(dict.fromkeys([*(str(n) for n in wanted), JOB_NODES, TCPX_PREFIX])))
    out.append(job)
    fabrics = options.get("tcpx_fabric")
    fabric = fabrics.get(str(nodes[me])) if isinstance(fabrics, dict) else None
    if fabric == "tcpxo":
        grep = ["grep", "-a", "-F", RXDM_SOCKET, PROC_NET_UNIX]
        out.append(hostio.run(grep, timeout_of(options), source="rxdm-socket"))
    elif fabric == "tcpx":
        given = dict(line.split("=", 1) for line in job.stdout.splitlines() if "=" in line)
        out.append(listing(given.get(TCPX_PREFIX) or TCPX_DEFAULT_PREFIX)[0])
    return out
