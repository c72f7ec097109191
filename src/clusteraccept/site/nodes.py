"""The site's nodes: ``nodes`` (hostlists), ``blocks`` and ``node_types`` with their rails, validated.

Part of the site description (load.py); every error is ONE line naming the file, the key path, what was
expected and what was found.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

import hostlist

from clusteraccept.errors import SiteConfigError
from clusteraccept.site.schema import ENV_NAME, Section, describe

_HCA = r"[A-Za-z0-9_]+"
# A network interface name as the kernel allows it (net/core/dev.c dev_valid_name(): 1 to IFNAMSIZ-1 = 15
# characters, not "." or "..", no '/', ':' or whitespace), and not starting with '-' (it would read as an
# option of ethtool, ip or mlnx_qos).
_NETDEV = r"(?!\.{1,2}$)[^-/:\s][^/:\s]{0,14}"
# A node name as Slurm and DNS take it: letters, digits, '-', '_', '.', starting with a letter or digit.
_NODE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
NAME_RULE = "letters, digits, '-', '_' and '.', at most 64"
_NAME_MAX = 64  # block and node type names become parts of job names and file names (NAME_MAX 255)


@dataclass(frozen=True)
class Rail:
    index: int
    gpu: int
    hca: str  # the rail's (first) RDMA device: the HCA an InfiniBand/RoCE rail pins (NCCL_IB_HCA)
    port: int = 1
    netdev: str | None = None
    rate_Gbps: float | None = None  # per device
    # every device of the rail: (hca,) on InfiniBand/RoCE; on EFA the devices nearest GPU k, several on p5
    # (32 EFA devices for 8 GPUs), one shared by two GPUs on p4d (4 for 8); on Slingshot its cxi NIC
    nics: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        return self.nics or (self.hca,)


# node_types.<t>.fabric: what carries the traffic between nodes. infiniband and roce are ibverbs HCAs NCCL
# drives itself (NET/IB); efa is AWS's Elastic Fabric Adapter, reached through libfabric and the
# aws-ofi-nccl net plugin (NET/OFI), whose devices ibverbs reports with link layer "Unspecified";
# slingshot is HPE Slingshot 11, its Cassini NICs (cxi0, cxi1, ...: /sys/class/cxi, netdevs hsn0, ...)
# reached through libfabric's cxi provider and the same aws-ofi-nccl plugin (HPE shs-ccl-docs, CSCS docs).
# tcpx and tcpxo are Google Cloud's GPUDirect-TCPX (A3 High) and -TCPXO (A3 Mega): GPU NICs that are
# plain netdevs (no RDMA device), driven by Google's NCCL net plugins with a receive-datapath manager
# (RxDM) beside them (google/nccl-plugin-gpudirecttcpx, google/nccl-plugin-gpudirect-tcpxo).
FABRICS = ("infiniband", "roce", "efa", "slingshot", "tcpx", "tcpxo", "none")
_FABRIC_OF_LAYER = {"InfiniBand": "infiniband", "Ethernet": "roce", "none": "none"}
# The libfabric provider aws-ofi-nccl must select on a fabric it carries: fi_info -p <provider> lists its
# devices, and the plugin logs "Selected provider is <provider>" (aws-ofi-nccl src/nccl_ofi_net.cpp)
LIBFABRIC_PROVIDER = {"efa": "efa", "slingshot": "cxi"}
# The name Google's net plugins give themselves (their ncclNet_v7 .name): what NCCL_NET matches, what NCCL
# prints in "Using network %s" and in a channel's "via NET/%s/<dev>" (tcpx src/nccl_plugin.cc; tcpxo
# tcpdirect_plugin/fastrak_offload/fastrak_plugin.cc; nccl src/init.cc, src/transport/net.cc)
TCP_PLUGIN = {"tcpx": "GPUDirectTCPX_v7", "tcpxo": "FasTrak"}
# The fabrics whose rail NICs are no ibverbs devices: Slingshot's cxi NICs, TCPX(O)'s plain netdevs
NOT_VERBS_FABRICS = ("slingshot", "tcpx", "tcpxo")


@dataclass(frozen=True)
class Efa:
    """``node_types.<t>.efa``: what an EFA node must offer (judged by checks/efa.py)."""

    # EFA devices fi_info -p efa must list: AWS's table of network cards per instance type (EC2 user
    # guide, "Elastic Fabric Adapter", supported instance types): p4d.24xlarge 4, p5.48xlarge 32
    devices: int


@dataclass(frozen=True)
class Slingshot:
    """``node_types.<t>.slingshot``: what a Slingshot node must offer (judged by checks/slingshot.py)."""

    # cxi devices fi_info -p cxi must list: the node's Slingshot NICs (CSCS Alps GH200 and MI300A nodes:
    # 4, "one per GPU", eth-cscs/cscs-docs docs/alps/hardware.md)
    devices: int
    # The variables every job on the node must get, name -> value: HPE's and the centre's recommended
    # libfabric/NCCL settings for the cxi provider (HPE shs-ccl-docs ccl_env.sh, CSCS nccl docs), set by
    # the site's modules or container hook, not by the suite; judged as the probe job finds them
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class GpuDirectTcp:
    """``node_types.<t>.tcpx`` / ``.tcpxo``: what a GPUDirect-TCPX(O) node must offer (checks/tcpx.py).
    Its GPU NICs are the rails' netdevs (A3 High: 4, each serving two GPUs; A3 Mega: 8, one per GPU)."""

    # The variables every job must get, name -> value: the plugin's settings (Google's
    # nccl-env-profile.sh for TCPXO; cluster-toolkit's run-nccl-tests.sh for TCPX), given by the site's
    # prolog or profile, not by the suite; judged as the probe job finds them
    env: tuple[tuple[str, str], ...] = ()
    # The plugin version its init line must print (TCPX "NET/GPUDirectTCPX ver. 3.1.9.", TCPXO "NET/FasTrak
    # ...: Initializing network FasTrak, version: 1.0.17"); None: any version, only reported
    plugin_version: str | None = None


@dataclass(frozen=True)
class NvLink:
    """What a node type's NVLink looks like (``node_types.<t>.nvlink``), judged by checks/nvlink.py."""

    links_per_gpu: int  # active links every GPU has (H100/H200 SXM: 18; nvidia-smi nvlink --status)
    link_GBps: float  # each link's speed as nvidia-smi prints it (H100/H200 SXM: 26.562 GB/s)
    # NVSwitch fabric: the GPUs' nvidia-smi -q Fabric must be State Completed, Status Success (HGX: set
    # up by the fabric manager); false for GPUs linked directly (2-GPU boards, NVLink bridges)
    nvswitch: bool = True
    # Nodes in one NVLink domain: 1 for HGX (the domain ends at the node); GB200/GB300 NVL72: 18 compute
    # trays share one NVSwitch domain across the rack (their nodes are listed in ``nvlink_domains``)
    domain_nodes: int = 1

    @property
    def gpu_GBps(self) -> float:
        """NVLink bandwidth per GPU and direction: the links x each link's data rate, 25 GB/s on NVLink4
        (nvidia-smi prints 26.562, the signalling rate) and 50 GB/s on NVLink5 (printed 50 or 53.125):
        NVIDIA's 900 GB/s per H100 and 1.8 TB/s per GB200 GPU count both directions."""
        return self.links_per_gpu * (50.0 if self.link_GBps >= 50 else 25.0)


@dataclass(frozen=True)
class NodeType:
    name: str
    nodes: tuple[str, ...]
    gpus: int
    gpu_model: str | None
    link_layer: str  # InfiniBand | Ethernet | none
    numa_expected: bool
    rails: tuple[Rail, ...]
    # NVLink bandwidth per GPU and direction (GB/s): the intra-node line rate busbw is judged against on a
    # first run with no baselines (checks/peers.py); None: the site does not say
    nvlink_GBps: float | None = None
    nvlink: NvLink | None = None  # None: the site declares no NVLink for this type (nvlink checks SKIP)
    # The nvidia-smi topo -m classes a GPU's rail NIC may be at (topology.gpu_nic_affinity). HGX: a PCIe
    # switch joins them (PIX, or PXB through two). Grace (GB200/GB300 trays): the GPU hangs off the CPU by
    # NVLink-C2C, the NIC off the CPU's root ports, so the closest a NIC can be is NODE (NVIDIA's own
    # GPU/NIC test added --allow_gpu_node_relation for GB200 + CX-7: Mellanox/ngc_multinode_perf#129)
    gpu_nic_path: tuple[str, ...] = ("PIX", "PXB")
    fabric: str = "infiniband"  # one of FABRICS
    efa: Efa | None = None  # fabric efa only
    slingshot: Slingshot | None = None  # fabric slingshot only
    tcp: GpuDirectTcp | None = None  # fabric tcpx or tcpxo only

    @property
    def provider(self) -> str | None:
        """The libfabric provider aws-ofi-nccl must select here (None: not a libfabric fabric)."""
        return LIBFABRIC_PROVIDER.get(self.fabric)

    @property
    def family(self) -> str | None:
        """The check family that judges this fabric's own devices (``<family>.devices``), or None."""
        if self.fabric in TCP_PLUGIN:
            return "tcpx"
        return self.fabric if self.fabric in LIBFABRIC_PROVIDER else None

    @property
    def nic_noun(self) -> str:
        """What a person calls one of this type's rail NICs."""
        nouns = {"efa": "EFA device", "slingshot": "Slingshot NIC", "tcpx": "GPU NIC", "tcpxo": "GPU NIC"}
        return nouns.get(self.fabric, "RDMA device")

    @property
    def verbs(self) -> bool:
        """Whether the rail NICs are ibverbs devices (ibstat, perftest, nvidia_peermem apply): all but
        Slingshot's and TCPX(O)'s (``fabric: none`` with rails keeps the checks it always had)."""
        return self.fabric not in NOT_VERBS_FABRICS

    def rail_line_Gbps(self, rail: Rail) -> float | None:
        """What one rail carries when every rail runs at once (a pair round): each of its devices' rate,
        shared with the other rails that name the device (p4d: two GPUs per EFA device); None where the
        site gives no rate."""
        if rail.rate_Gbps is None:
            return None
        users = {n: sum(n in r.devices for r in self.rails) for n in rail.devices}
        return sum(rail.rate_Gbps / users[n] for n in rail.devices)

    @property
    def nvlink_line_GBps(self) -> float | None:
        """NVLink per GPU and direction: the site's ``nvlink_GBps`` where it says, else what its ``nvlink``
        section implies (links x data rate); None where the site says neither."""
        if self.nvlink_GBps is not None:
            return self.nvlink_GBps
        return self.nvlink.gpu_GBps if self.nvlink is not None else None


def _check_name(file: str, section: str, name: object, expected: str) -> None:
    """A block or node type name: it becomes part of job names, file names and pytest item ids."""
    if not _NODE.fullmatch(str(name)) or len(str(name)) > _NAME_MAX:
        raise SiteConfigError(file, f"{section}.{name!r}", f"{expected} ({NAME_RULE})", describe(name))


def expand_hostlist(sec: Section, key: str) -> tuple[str, ...]:
    """``node[01-04,07]`` -> names, through python-hostlist (the same syntax as Slurm's)."""
    value = sec.raw(key)
    items = value if isinstance(value, list) else [value]
    # "{hostname}": this machine (single-host sites run with the local executor, e.g. local-gpu.yaml)
    items = [
        i.replace("{hostname}", socket.gethostname().split(".")[0]) if isinstance(i, str) else i
        for i in items
    ]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise sec.error(key, "a hostlist string like 'node[001-128]'", item)
        try:
            out.extend(hostlist.expand_hostlist(item))
        except hostlist.BadHostlist as exc:
            raise SiteConfigError(
                sec.file, sec.key(key), "a hostlist like 'node[001-128]'", describe(item), str(exc)
            ) from None
    if not out:
        raise sec.error(key, "at least one node", value)
    bad = next((n for n in out if not _NODE.fullmatch(n)), None)
    if bad is not None:
        raise SiteConfigError(
            sec.file, sec.key(key), "node names of letters, digits, '-', '_' and '.'", describe(bad)
        )
    if len(set(out)) != len(out):
        dup = next(n for n in out if out.count(n) > 1)
        raise SiteConfigError(sec.file, sec.key(key), "each node once", f"{dup!r} twice")
    return tuple(out)


# how a rail's libfabric devices are named, per fabric: EFA by rdma-core's udev rule (rdmap<bus>s<slot>),
# Slingshot by the cxi driver (cxi0, cxi1, ...: /sys/class/cxi, HewlettPackard/shs-libcxi)
_NIC_EXAMPLE = {"efa": "rdmap79s0", "slingshot": "cxi0"}


def _rail_nics(r: Section, fabric: str) -> tuple[str, ...]:
    """A rail's devices: ``hca`` (one HCA) on InfiniBand/RoCE, ``nics`` (a list) on EFA and Slingshot,
    the ``netdev`` itself on TCPX/TCPXO (a GPU NIC there is a plain network interface)."""
    if fabric in TCP_PLUGIN:
        for key in ("hca", "nics", "port"):
            if r.has(key):
                raise r.error(
                    key, f"no '{key}' on a {fabric} rail: its GPU NIC as netdev: enp6s0", r.raw(key)
                )
        if not r.has("netdev"):
            raise r.error("netdev", "the GPU NIC's network interface, like enp6s0", None)
        return (
            r.string("netdev", "a network interface name like 'enp6s0' (<= 15 characters)", None, _NETDEV),
        )
    if fabric in LIBFABRIC_PROVIDER:
        ex, what = _NIC_EXAMPLE[fabric], "EFA" if fabric == "efa" else "Slingshot (cxi)"
        if r.has("hca"):
            rail = "an EFA rail" if fabric == "efa" else "a Slingshot rail"
            raise r.error("hca", f"no 'hca' on {rail}: its devices as nics: [{ex}, ...]", r.raw("hca"))
        nics = r.str_list("nics", f"a list of {what} device names like [{ex}]")
        bad = [n for n in nics if not re.fullmatch(_HCA, n)]
        if bad or not nics or len(set(nics)) != len(nics):
            raise r.error("nics", f"a non-empty list of distinct device names like {ex}", r.raw("nics"))
        return nics
    if r.has("nics"):
        raise r.error("nics", f"no 'nics' on a {fabric} rail: its HCA as hca: mlx5_3", r.raw("nics"))
    return (r.string("hca", "a string like 'mlx5_3'", pattern=_HCA),)


def _rails(sec: Section, fabric: str) -> tuple[Rail, ...]:
    rails = []
    for name, r in sec.sections("rails", ["hca", "nics", "port", "netdev", "rate_Gbps"]).items():
        m = re.fullmatch(r"gpu(\d+)", name)
        if not m:
            raise SiteConfigError(
                sec.file, sec.key(f"rails.{name}"), "a key like 'gpu3' (the GPU index)", repr(name)
            )
        gpu = int(m[1])
        nics = _rail_nics(r, fabric)
        if fabric == "slingshot" and not r.has("netdev"):  # its link is judged on the netdev
            raise r.error("netdev", "the NIC's network device, like hsn0 (cxi_stat: 'Network device')", None)
        rails.append(
            Rail(
                index=gpu,
                gpu=gpu,
                hca=nics[0],
                nics=nics if fabric in LIBFABRIC_PROVIDER or fabric in TCP_PLUGIN else (),
                port=r.integer("port", "a port number >= 1", default=1, minimum=1),
                netdev=r.string(
                    "netdev", "a network interface name like 'ibp26s0' (<= 15 characters)", None, _NETDEV
                ),
                rate_Gbps=r.number("rate_Gbps", "a link rate in Gb/s like 400", default=None, minimum=1),
            )
        )
    return tuple(sorted(rails, key=lambda r: r.index))


def _nvlink(sec: Section) -> NvLink | None:
    if not sec.has("nvlink"):
        return None
    nv = sec.section("nvlink", ["links_per_gpu", "link_GBps", "nvswitch", "domain_nodes"])
    return NvLink(
        links_per_gpu=nv.integer("links_per_gpu", "a link count per GPU >= 1, like 18", minimum=1),
        link_GBps=nv.number(
            "link_GBps", "a link speed in GB/s as nvidia-smi prints it, like 26.562", minimum=0.001
        ),
        nvswitch=nv.flag("nvswitch", default=True),
        domain_nodes=nv.integer(
            "domain_nodes", "the nodes in one NVLink domain (1: HGX; 18: an NVL72 rack)", default=1, minimum=1
        ),
    )


REST_BLOCK = "rest"  # the block jobs/slurm_clients.slurm_blocks gives the nodes in none of Slurm's

# nvidia-smi topo -m's link classes between PCIe devices, closest first (its legend)
PCIE_CLASSES = ("PIX", "PXB", "PHB", "NODE", "SYS")


def _gpu_nic_path(sec: Section) -> tuple[str, ...]:
    """``gpu_nic_path``: the link classes accepted between a GPU and its rail NIC (non-empty)."""
    path = sec.str_list("gpu_nic_path", f"a list of {', '.join(PCIE_CLASSES)}", default=("PIX", "PXB"))
    bad = [c for c in path if c not in PCIE_CLASSES]
    if bad or not path:
        raise sec.error(
            "gpu_nic_path", f"a non-empty list of {', '.join(PCIE_CLASSES)}", bad[0] if bad else []
        )
    return path


def _fabric(sec: Section) -> tuple[str, str]:
    """``fabric`` and ``link_layer``: (fabric, link layer); either implies the other, both must agree."""
    fabric = sec.choice("fabric", FABRICS, default=None)
    layers = ["InfiniBand", "Ethernet", "none"]
    if fabric in LIBFABRIC_PROVIDER or fabric in TCP_PLUGIN:
        # ibverbs says "Unspecified" for an EFA device; a cxi NIC or a TCPX GPU NIC is no ibverbs device
        if sec.has("link_layer"):
            raise sec.error("link_layer", f"no link_layer with fabric: {fabric}", sec.raw("link_layer"))
        return str(fabric), "none"
    default = {"infiniband": "InfiniBand", "roce": "Ethernet", "none": "none"}.get(fabric or "")
    has_rails = bool(sec.raw("rails", {}))
    layer = sec.choice("link_layer", layers, default=default or ("InfiniBand" if has_rails else "none"))
    if fabric is not None and _FABRIC_OF_LAYER[layer] != fabric:
        raise sec.error("link_layer", f"the link layer of fabric {fabric} ({default})", layer)
    return fabric or _FABRIC_OF_LAYER[layer], layer


def _efa(sec: Section, fabric: str, rails: tuple[Rail, ...]) -> Efa | None:
    if fabric != "efa":
        if sec.has("efa"):
            raise sec.error("efa", "no efa section unless fabric: efa", sec.raw("efa"))
        return None
    e = sec.section("efa", ["devices"])
    devices = e.integer("devices", "the EFA devices per node (p4d.24xlarge: 4, p5.48xlarge: 32)", minimum=1)
    named = {n for r in rails for n in r.devices}
    if len(named) > devices:
        raise e.error("devices", f"at least the {len(named)} EFA devices the rails name", devices)
    return Efa(devices)


def _slingshot(sec: Section, fabric: str, rails: tuple[Rail, ...]) -> Slingshot | None:
    if fabric != "slingshot":
        if sec.has("slingshot"):
            raise sec.error(
                "slingshot", "no slingshot section unless fabric: slingshot", sec.raw("slingshot")
            )
        return None
    s = sec.section("slingshot", ["devices", "env"])
    devices = s.integer("devices", "the Slingshot NICs (cxi devices) per node, like 4", minimum=1)
    named = {n for r in rails for n in r.devices}
    if len(named) > devices:
        raise s.error("devices", f"at least the {len(named)} cxi devices the rails name", devices)
    return Slingshot(devices, _env(s, "FI_CXI_RX_MATCH_MODE: hybrid"))


def _env(s: Section, example: str) -> tuple[tuple[str, str], ...]:
    """A fabric section's ``env``: the variables every job must get, name -> value."""
    env = s.raw("env", {})
    if not isinstance(env, dict) or not all(
        re.fullmatch(ENV_NAME, str(k)) and isinstance(v, str | int | float) and not isinstance(v, bool)
        for k, v in env.items()
    ):
        raise s.error("env", f"a mapping of variable names to values, like {{{example}}}", env)
    return tuple((str(k), str(v)) for k, v in env.items())


def _tcp(sec: Section, fabric: str) -> GpuDirectTcp | None:
    for other in TCP_PLUGIN:
        if other != fabric and sec.has(other):
            raise sec.error(other, f"no {other} section unless fabric: {other}", sec.raw(other))
    if fabric not in TCP_PLUGIN:
        return None
    if not sec.has(fabric):
        return GpuDirectTcp()
    s = sec.section(fabric, ["env", "plugin_version"])
    version = s.string("plugin_version", "the plugin version its init line prints, like '1.0.17'", None)
    if version is not None and not re.fullmatch(r"\d+(\.\d+)*", version):
        raise s.error("plugin_version", "a version like '1.0.17'", version)
    return GpuDirectTcp(_env(s, "NCCL_FASTRAK_CTRL_DEV: enp0s12"), version)


def parse_node_types(top: Section, all_nodes: tuple[str, ...]) -> tuple[NodeType, ...]:
    """``node_types``: every node of ``all_nodes`` in exactly one type (a single type may omit ``nodes``)."""
    allowed = [
        "nodes",
        "gpus",
        "gpu_model",
        "link_layer",
        "fabric",
        "efa",
        "slingshot",
        *TCP_PLUGIN,
        "numa_expected",
        "gpu_nic_path",
        "rails",
        "nvlink_GBps",
        "nvlink",
    ]
    types = top.sections("node_types", allowed)
    if not types:
        raise SiteConfigError(top.file, "node_types", "at least one node type (gpus, rails...)", "nothing")
    out: list[NodeType] = []
    owner: dict[str, str] = {}
    known = set(all_nodes)  # a tuple's `in` made this quadratic: ~2 s at 16,384 nodes
    for name, sec in types.items():
        _check_name(top.file, "node_types", name, "a node type name like 'h100'")
        nodes = expand_hostlist(sec, "nodes") if sec.has("nodes") or len(types) > 1 else all_nodes
        for n in nodes:
            if n not in known:
                raise SiteConfigError(sec.file, sec.key("nodes"), "nodes listed in 'nodes'", repr(n))
            if n in owner:
                raise SiteConfigError(
                    sec.file, sec.key("nodes"), "each node in one node type", f"{n!r} also in {owner[n]!r}"
                )
            owner[n] = name
        gpus = sec.integer("gpus", "a GPU count >= 1", minimum=1)
        fabric, link_layer = _fabric(sec)
        rails = _rails(sec, fabric)
        for r in rails:
            if r.gpu >= gpus:
                raise SiteConfigError(
                    sec.file, sec.key(f"rails.gpu{r.gpu}"), f"a GPU index below gpus={gpus}", str(r.gpu)
                )
        out.append(
            NodeType(
                name=name,
                nodes=nodes,
                gpus=gpus,
                gpu_model=sec.string("gpu_model", default=None),
                link_layer=link_layer,
                fabric=fabric,
                efa=_efa(sec, fabric, rails),
                slingshot=_slingshot(sec, fabric, rails),
                tcp=_tcp(sec, fabric),
                numa_expected=sec.flag("numa_expected", default=True),
                gpu_nic_path=_gpu_nic_path(sec),
                rails=rails,
                nvlink_GBps=sec.number("nvlink_GBps", "a bandwidth in GB/s", default=None, minimum=0.001),
                nvlink=_nvlink(sec),
            )
        )
    missing = [n for n in all_nodes if n not in owner]
    if missing:
        raise SiteConfigError(top.file, "node_types", "every node in a node type", f"{missing[0]!r} in none")
    return tuple(out)


def parse_blocks(top: Section, all_nodes: tuple[str, ...]) -> tuple[dict[str, tuple[str, ...]], bool]:
    """``blocks``: name -> nodes (each node in one block), and whether Slurm is to say (``blocks: slurm``)."""
    value = top.raw("blocks", None)
    if value is None:
        return {"all": all_nodes}, False
    if value == "slurm":
        return {}, True  # read from `scontrol show topology` when the campaign is planned
    blocks_sec = Section(
        top.file, "blocks", value, [str(k) for k in value] if isinstance(value, dict) else []
    )
    blocks: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    names = set(all_nodes)
    for name in blocks_sec.data:
        _check_name(top.file, "blocks", name, "a block name like 'leaf1'")
        if str(name) in names:  # a block's verdicts would be taken for the node's (judge/items.py)
            raise SiteConfigError(top.file, f"blocks.{name}", "a block name that is not a node's", repr(name))
        members = expand_hostlist(blocks_sec, name)
        for n in members:
            if n not in names:
                raise SiteConfigError(top.file, f"blocks.{name}", "nodes listed in 'nodes'", repr(n))
            if n in seen:
                raise SiteConfigError(
                    top.file, f"blocks.{name}", "each node in one block", f"{n!r} also in {seen[n]!r}"
                )
            seen[n] = name
        blocks[name] = members
    return blocks, False


def parse_nvlink_domains(
    top: Section,
    types: tuple[NodeType, ...],
    blocks: dict[str, tuple[str, ...]],
    blocks_from_slurm: bool,
) -> dict[str, tuple[str, ...]]:
    """``nvlink_domains``: the NVLink domains that span nodes (an NVL72 rack), name -> nodes; or
    ``blocks``: each of the site's blocks is one (Slurm topology/block with a block per rack). Every node
    of a type whose ``nvlink.domain_nodes`` is over 1 is in exactly one, of at most that many nodes of
    that one type; a domain lies inside one block, whose campaign runs its collective. Nodes of other
    types are each their own domain and are not listed."""
    value = top.raw("nvlink_domains", None)
    multi = _multi(types)
    if value is None:
        if multi:
            node = next(iter(multi))
            expected = "the NVLink domains of nodes whose type has nvlink.domain_nodes > 1 (or 'blocks')"
            raise SiteConfigError(top.file, "nvlink_domains", expected, f"none for {node!r}")
        return {}
    if value == "blocks":
        if blocks_from_slurm:
            return {}  # Slurm's blocks, once read (Site.with_slurm_blocks -> domains_of_slurm_blocks)
        domains = dict(blocks)
    else:
        sec = Section(
            top.file, "nvlink_domains", value, [str(k) for k in value] if isinstance(value, dict) else []
        )
        if not isinstance(value, dict):
            raise sec.error("", "'blocks' or a mapping of domain names to hostlists", value)
        domains = {}
        for name in sec.data:
            _check_name(top.file, "nvlink_domains", name, "an NVLink domain name like 'rack01'")
            domains[str(name)] = expand_hostlist(sec, name)
    return _checked_domains(top.file, domains, types, blocks)


def domains_of_slurm_blocks(
    file: str, types: tuple[NodeType, ...], blocks: dict[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """``nvlink_domains: blocks`` with ``blocks: slurm``: each block ``scontrol show topology`` lists holding
    multi-node NVLink nodes is one domain (topology/block with a block per rack), checked as a site's own
    domains are; a tray in none of Slurm's blocks (jobs/slurm_clients.slurm_blocks puts it in "rest") has
    no known rack, which is refused rather than guessed."""
    multi = _multi(types)
    where = "nvlink_domains (blocks from scontrol show topology)"
    lost = [n for n in blocks.get(REST_BLOCK, ()) if n in multi]
    if lost:
        raise SiteConfigError(file, where, "every multi-node NVLink node in a block", f"{lost[0]!r} in none")
    domains = {b: members for b, members in blocks.items() if any(n in multi for n in members)}
    return _checked_domains(file, domains, types, blocks, where)


def domains_in_blocks(
    file: str,
    types: tuple[NodeType, ...],
    domains: dict[str, tuple[str, ...]],
    blocks: dict[str, tuple[str, ...]],
) -> dict[str, tuple[str, ...]]:
    """The site's named racks checked again once ``blocks: slurm`` is read: each inside one block (its
    block's campaign runs the rack's collective)."""
    return _checked_domains(file, domains, types, blocks, "nvlink_domains")


def _multi(types: tuple[NodeType, ...]) -> dict[str, NodeType]:
    """The nodes whose type has an NVLink domain wider than the node, and that type."""
    return {n: nt for nt in types if nt.nvlink and nt.nvlink.domain_nodes > 1 for n in nt.nodes}


def _checked_domains(
    file: str,
    domains: dict[str, tuple[str, ...]],
    types: tuple[NodeType, ...],
    blocks: dict[str, tuple[str, ...]],
    where: str = "nvlink_domains",
) -> dict[str, tuple[str, ...]]:
    multi = _multi(types)
    seen: dict[str, str] = {}
    block_of = {n: b for b, members in blocks.items() for n in members}
    every_node = {n for nt in types for n in nt.nodes}
    for name, members in domains.items():
        key = f"{where}.{name}" if where == "nvlink_domains" else f"{where}: {name}"
        if name in every_node:  # a domain's verdicts would be taken for the node's (judge/items.py)
            raise SiteConfigError(file, key, "a domain name that is not a node's", repr(name))
        for n in members:
            nt = multi.get(n)
            if nt is None or nt.nvlink is None:
                raise SiteConfigError(
                    file,
                    key,
                    "nodes whose type has nvlink.domain_nodes > 1",
                    f"{n!r} (a 1-node NVLink domain)",
                )
            if n in seen:
                raise SiteConfigError(
                    file, key, "each node in one NVLink domain", f"{n!r} also in {seen[n]!r}"
                )
            seen[n] = name
            if nt.name != multi[members[0]].name:
                raise SiteConfigError(file, key, "nodes of one node type", f"{members[0]!r} and {n!r}")
        size = multi[members[0]].nvlink.domain_nodes  # type: ignore[union-attr]
        if len(members) > size:
            raise SiteConfigError(file, key, f"at most nvlink.domain_nodes={size} nodes", str(len(members)))
        homes = {block_of.get(n) for n in members}
        if blocks and len(homes) > 1:
            raise SiteConfigError(
                file,
                key,
                "nodes of one block (its campaign runs the domain's collective)",
                ", ".join(sorted(str(h) for h in homes)),
            )
    missing = next((n for n in multi if n not in seen), None)
    if missing is not None:
        raise SiteConfigError(file, where, "every node of a multi-node NVLink type", f"{missing!r} in none")
    return domains
